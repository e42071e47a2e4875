{{/*
Client-facing security (values.security, issue 17): extra listeners next to the in-cluster
PLAINTEXT one on `port` (then named INTERNAL), TLS from a Secret mounted read-only, PLAIN users
from a Secret (env, never args or ConfigMaps), ACL settings. Non-secret settings go to the
gateway's ConfigMap as Kafka property names; secrets only as secretKeyRef env.
*/}}
{{- define "gateway.tlsDir" -}}/etc/kafka-py/tls{{- end -}}

{{- define "gateway.tlsProtocols" -}}{{ toJson (list "SSL" "SASL_SSL") }}{{- end -}}

{{/* Refuse combinations the schema cannot express (one line each, as `helm install` shows). */}}
{{- define "gateway.securityChecks" -}}
{{- $sec := .Values.security -}}
{{- $names := list "INTERNAL" -}}
{{- $ports := list (int .Values.port) -}}
{{- range $sec.listeners -}}
{{- if has .name $names }}{{ fail (printf "gateway.security.listeners: listener name %s is used twice (INTERNAL is the one on gateway.port)" .name) }}{{ end -}}
{{- if has (int .port) $ports }}{{ fail (printf "gateway.security.listeners: port %d is used twice" (int .port)) }}{{ end -}}
{{- $names = append $names .name -}}
{{- $ports = append $ports (int .port) -}}
{{- if and (has .protocol (include "gateway.tlsProtocols" . | fromJsonArray)) (not $sec.tls.secretName) -}}
{{- fail (printf "gateway.security.listeners: %s uses %s and needs gateway.security.tls.secretName" .name .protocol) -}}
{{- end -}}
{{- if and (hasPrefix "SASL_" .protocol) (has "PLAIN" (.saslMechanisms | default (list "SCRAM-SHA-512"))) (not $sec.sasl.plainUsersSecret.name) -}}
{{- fail (printf "gateway.security.listeners: %s enables PLAIN and needs gateway.security.sasl.plainUsersSecret.name" .name) -}}
{{- end -}}
{{- if and (ne (.sslClientAuth | default "none") "none") (not $sec.tls.truststoreKey) -}}
{{- fail (printf "gateway.security.listeners: %s has sslClientAuth %s and needs gateway.security.tls.truststoreKey" .name .sslClientAuth) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Settings (Kafka property names) the security values give the ConfigMap. */}}
{{- define "gateway.securityConfig" -}}
{{- $sec := .Values.security -}}
{{- $c := dict -}}
{{- if $sec.listeners -}}
{{- $map := list "INTERNAL:PLAINTEXT" -}}
{{- range $sec.listeners -}}
{{- $map = append $map (printf "%s:%s" .name .protocol) -}}
{{- $l := lower .name -}}
{{- if has .protocol (include "gateway.tlsProtocols" . | fromJsonArray) -}}
{{- $_ := set $c (printf "listener.name.%s.ssl.client.auth" $l) (.sslClientAuth | default "none") -}}
{{- end -}}
{{- if hasPrefix "SASL_" .protocol -}}
{{- $_ := set $c (printf "listener.name.%s.sasl.enabled.mechanisms" $l) (join "," (.saslMechanisms | default (list "SCRAM-SHA-512"))) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $c "listener.security.protocol.map" (join "," $map) -}}
{{- end -}}
{{- if $sec.tls.secretName -}}
{{- $_ := set $c "ssl.keystore.location" (printf "%s/%s" (include "gateway.tlsDir" .) $sec.tls.keystoreKey) -}}
{{- if $sec.tls.truststoreKey -}}
{{- $_ := set $c "ssl.truststore.location" (printf "%s/%s" (include "gateway.tlsDir" .) $sec.tls.truststoreKey) -}}
{{- end -}}
{{- end -}}
{{- if $sec.sasl.connectionsMaxReauthMs -}}
{{- $_ := set $c "connections.max.reauth.ms" (printf "%d" (int64 $sec.sasl.connectionsMaxReauthMs)) -}}
{{- end -}}
{{- with $sec.authorizer -}}
{{- if .className -}}
{{- $_ := set $c "authorizer.class.name" .className -}}
{{- $_ := set $c "super.users" (join ";" .superUsers) -}}
{{- $_ := set $c "allow.everyone.if.no.acl.found" (toString .allowEveryoneIfNoAclFound) -}}
{{- end -}}
{{- end -}}
{{- toJson $c -}}
{{- end -}}

{{/* Secrets as env (secretKeyRef): PLAIN users per SASL listener, the key's password. */}}
{{- define "gateway.securityEnv" -}}
{{- $sec := .Values.security -}}
{{- $env := list -}}
{{- range $sec.listeners -}}
{{- if and (hasPrefix "SASL_" .protocol) (has "PLAIN" (.saslMechanisms | default (list "SCRAM-SHA-512"))) -}}
{{- $ref := dict "name" $sec.sasl.plainUsersSecret.name "key" $sec.sasl.plainUsersSecret.key -}}
{{- $env = append $env (dict "name" (printf "KAFKAPY_LISTENER_NAME_%s_PLAIN_SASL_JAAS_CONFIG" .name) "valueFrom" (dict "secretKeyRef" $ref)) -}}
{{- end -}}
{{- end -}}
{{- if and $sec.tls.secretName $sec.tls.keyPasswordKey -}}
{{- $ref := dict "name" $sec.tls.secretName "key" $sec.tls.keyPasswordKey -}}
{{- $env = append $env (dict "name" "KAFKAPY_SSL_KEY_PASSWORD" "valueFrom" (dict "secretKeyRef" $ref)) -}}
{{- end -}}
{{- toJson $env -}}
{{- end -}}

{{/* The TLS Secret, mounted read-only (files replaced by the kubelet are reloaded live). */}}
{{- define "gateway.securityVolumes" -}}
{{- $sec := .Values.security -}}
{{- if $sec.tls.secretName -}}
{{- toJson (list (dict "name" "tls" "secret" (dict "secretName" $sec.tls.secretName "defaultMode" 288))) -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{- define "gateway.securityMounts" -}}
{{- if .Values.security.tls.secretName -}}
{{- toJson (list (dict "name" "tls" "mountPath" (include "gateway.tlsDir" .) "readOnly" true)) -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{/* Container/Service port of a security listener (≤ 15 characters). */}}
{{- define "gateway.listenerPort" -}}{{ printf "kafka-%d" (int .port) }}{{- end -}}
