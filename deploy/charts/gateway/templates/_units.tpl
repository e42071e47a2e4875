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

{{- define "gateway.serviceHost" -}}
{{- $name := printf "%s%s" (include "kafkapy.name" (dict "ctx" .ctx "component" "gateway")) .unit.suffix -}}
{{- if and (eq .ctx.Values.service.mode "LoadBalancer") .ctx.Values.service.advertisedHost -}}
{{- .ctx.Values.service.advertisedHost -}}
{{- else -}}
{{- printf "%s.%s.svc.%s" $name .ctx.Release.Namespace .ctx.Values.global.clusterDomain -}}
{{- end -}}
{{- end -}}
