{{/*
The gateway units: one (all zones) or one per zone (service.mode perZone). Each unit is a
Deployment, its Service and its HPA; `labels` tells them apart.
*/}}
{{- define "gateway.units" -}}
{{- $units := list -}}
{{- if eq .Values.service.mode "perZone" -}}
{{- range .Values.zones -}}
{{- $units = append $units (dict "suffix" (printf "-%s" .) "zone" . "labels" (dict "kafka-py.io/zone" .)) -}}
{{- end -}}
{{- else -}}
{{- $units = append $units (dict "suffix" "" "zone" "" "labels" dict) -}}
{{- end -}}
{{- toJson $units -}}
{{- end -}}

{{/* The host a unit advertises (internal: the in-cluster Service name even behind a LoadBalancer). */}}
{{- define "gateway.serviceHost" -}}
{{- $name := printf "%s%s" (include "kafkapy.name" (dict "ctx" .ctx "component" "gateway")) .unit.suffix -}}
{{- if and (eq .ctx.Values.service.mode "LoadBalancer") .ctx.Values.service.advertisedHost (not .internal) -}}
{{- .ctx.Values.service.advertisedHost -}}
{{- else -}}
{{- if and .internal (include "gateway.splitInternal" .ctx) }}{{ $name = printf "%s-internal" $name }}{{ end -}}
{{- printf "%s.%s.svc.%s" $name .ctx.Release.Namespace .ctx.Values.global.clusterDomain -}}
{{- end -}}
{{- end -}}

{{/*
"true" when the INTERNAL (PLAINTEXT) listener must not be on the LoadBalancer: security
listeners behind a LoadBalancer; INTERNAL then has its own ClusterIP Service "<gateway>-internal".
*/}}
{{- define "gateway.splitInternal" -}}
{{- if and (eq .Values.service.mode "LoadBalancer") .Values.security.listeners }}true{{ end -}}
{{- end -}}
