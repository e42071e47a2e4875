{{/* The gateway Service clients bootstrap from. */}}
{{- define "kafkapy.bootstrap" -}}
{{- $gw := .Values.gateway -}}
{{- if and (eq $gw.service.mode "LoadBalancer") $gw.service.advertisedHost -}}
{{- with $gw.security.listeners -}}
{{- /* the INTERNAL port is not on the balancer: the first security listener is */}}
{{- $l := first . -}}
{{- printf "%s:%d" ($l.advertisedHost | default $gw.service.advertisedHost) (int ($l.advertisedPort | default $l.port)) -}}
{{- else -}}
{{- printf "%s:%d" $gw.service.advertisedHost (int $gw.port) -}}
{{- end -}}
{{- else -}}
{{- printf "%s.%s.svc.%s:%d" (include "kafkapy.name" (dict "ctx" . "component" "gateway")) .Release.Namespace .Values.global.clusterDomain (int $gw.port) -}}
{{- end -}}
{{- end -}}

{{/* The gateway Service by its in-cluster name (the INTERNAL listener): helm test and hooks. */}}
{{- define "kafkapy.internalBootstrap" -}}
{{- $gw := .Values.gateway -}}
{{- $suffix := ternary "-internal" "" (and (eq $gw.service.mode "LoadBalancer") (not (empty $gw.security.listeners))) -}}
{{- printf "%s%s.%s.svc.%s:%d" (include "kafkapy.name" (dict "ctx" . "component" "gateway")) $suffix .Release.Namespace .Values.global.clusterDomain (int $gw.port) -}}
{{- end -}}
