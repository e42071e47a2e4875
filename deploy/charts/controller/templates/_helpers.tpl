{{/* The controller's settings (its config, plus the storage autoscaler's Kubernetes
provisioner when on), as JSON: the ConfigMap holds them, the Deployment's checksum hashes them. */}}
{{- define "controller.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.autoscaler.enabled -}}
{{- /* the storage autoscaler's Kubernetes provisioner (services/controller/elastic_settings.py) */ -}}
{{- $storage := include "kafkapy.name" (dict "ctx" . "component" "storage") -}}
{{- $_ := set $config "kafkapy.autoscaler.enable" "true" -}}
{{- $_ := set $config "kafkapy.autoscaler.provisioner" "kubernetes" -}}
{{- $_ := set $config "kafkapy.autoscaler.min.nodes" (toString .Values.autoscaler.minReplicas) -}}
{{- $_ := set $config "kafkapy.autoscaler.max.nodes" (toString .Values.autoscaler.maxReplicas) -}}
{{- $_ := set $config "kafkapy.kubernetes.namespace" .Release.Namespace -}}
{{- $_ := set $config "kafkapy.kubernetes.statefulset" $storage -}}
{{- $_ := set $config "kafkapy.kubernetes.pod.selector" (printf "app.kubernetes.io/instance=%s,app.kubernetes.io/component=storage" .Release.Name) -}}
{{- $_ := set $config "kafkapy.kubernetes.zone.label" .Values.global.zones.nodeLabel -}}
{{- /* an explicit API server (default: in-cluster), the one zone discovery uses */ -}}
{{- with .Values.global.zones.apiUrl }}{{- $_ := set $config "kafkapy.kubernetes.api.url" . -}}{{- end -}}
{{- end -}}
{{- toJson $config -}}
{{- end -}}
