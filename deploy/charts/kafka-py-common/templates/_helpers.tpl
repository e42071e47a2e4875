{{/*
Names. Every subchart derives its objects' names from the release, so the parts of one release
agree without passing names around: "<release>" when the release name contains "kafka-py",
else "<release>-kafka-py"; each component appends its own name.
*/}}
{{- define "kafkapy.base" -}}
{{- if contains "kafka-py" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kafka-py" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kafkapy.name" -}}
{{- printf "%s-%s" (include "kafkapy.base" .ctx) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kafkapy.selectorLabels" -}}
app.kubernetes.io/name: kafka-py
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kafkapy.labels" -}}
{{ include "kafkapy.selectorLabels" . }}
app.kubernetes.io/part-of: kafka-py
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The controller's own ServiceAccount (the only one the autoscaler's Role is bound to). */}}
{{- define "kafkapy.controllerServiceAccount" -}}
{{- .Values.global.controllerServiceAccountName | default (printf "%s-controller" (include "kafkapy.base" .)) -}}
{{- end -}}

{{/* The kafka-py image: global.image, tag defaulting to the chart's appVersion. */}}
{{- define "kafkapy.image" -}}
{{- $img := .Values.global.image -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) -}}
{{- end -}}

{{- define "kafkapy.zookeeperConnect" -}}
{{- if .Values.global.zookeeper.connect -}}
{{- .Values.global.zookeeper.connect -}}
{{- else -}}
{{- $svc := include "kafkapy.name" (dict "ctx" . "component" "zookeeper") -}}
{{- $port := int (include "kafkapy.zookeeperClientPort" .) -}}
{{- $hosts := list -}}
{{- range $i := until (int .Values.global.zookeeper.replicas) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s-headless.%s.svc.%s:%d" $svc $i $svc $.Release.Namespace $.Values.global.clusterDomain $port) -}}
{{- end -}}
{{- join "," $hosts -}}{{ .Values.global.zookeeper.chroot }}
{{- end -}}
{{- end -}}

{{/* The port ZooKeeper serves clients on: its secureClientPort with global.zookeeper.tls. */}}
{{- define "kafkapy.zookeeperClientPort" -}}
{{- $zk := .Values.global.zookeeper -}}
{{- if $zk.tls.enabled }}{{ $zk.tls.port }}{{ else }}{{ $zk.port }}{{ end -}}
{{- end -}}

{{- define "kafkapy.podSecurityContext" -}}
{{ toYaml .Values.global.podSecurityContext }}
{{- end -}}

{{- define "kafkapy.containerSecurityContext" -}}
{{ toYaml .Values.global.containerSecurityContext }}
{{- end -}}

{{/* Downward API env every kafka-py container gets (pod identity, node for the zone). */}}
{{- define "kafkapy.downwardEnv" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
- name: NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
{{- end -}}

{{/*
Settings shared by every service, as the KAFKAPY_* environment its settings loader reads
(services/common/settings.py): ZooKeeper, the admin server, logs, zone discovery. Per-service
`config` entries (Kafka property names) come after and win.
*/}}
{{- define "kafkapy.settingsData" -}}
{{- $g := .ctx.Values.global -}}
{{- $s := dict "zookeeper.connect" (include "kafkapy.zookeeperConnect" .ctx) "admin.host" "0.0.0.0" "admin.port" (toString $g.ports.admin) "log.format" "json" "log.level" $g.logLevel -}}
{{- with $g.zookeeper.acl -}}
{{- if .enabled -}}
{{- $_ := set $s "zookeeper.set.acl" "true" -}}
{{- $_ := set $s "zookeeper.digest.auth.file" (printf "%s/%s" (include "kafkapy.zkDigestDir" .) .digestSecret.key) -}}
{{- end -}}
{{- end -}}
{{- with $g.zookeeper.tls -}}
{{- if .enabled -}}
{{- $dir := include "kafkapy.zkTlsDir" . -}}
{{- $_ := set $s "zookeeper.ssl.client.enable" "true" -}}
{{- $_ := set $s "zookeeper.clientCnxnSocket" "org.apache.zookeeper.ClientCnxnSocketNetty" -}}
{{- $_ := set $s "zookeeper.ssl.keystore.location" (printf "%s/zookeeper-client-keystore.pem" $dir) -}}
{{- $_ := set $s "zookeeper.ssl.keystore.type" "PEM" -}}
{{- $_ := set $s "zookeeper.ssl.truststore.location" (printf "%s/ca.pem" $dir) -}}
{{- $_ := set $s "zookeeper.ssl.truststore.type" "PEM" -}}
{{- $_ := set $s "zookeeper.ssl.endpoint.identification.algorithm" (ternary "HTTPS" "" .endpointIdentification) -}}
{{- end -}}
{{- end -}}
{{- if include "kafkapy.internalTlsOn" . -}}
{{- $dir := include "kafkapy.internalTlsDir" . -}}
{{- $_ := set $s "internal.ssl.enabled" "true" -}}
{{- $_ := set $s "internal.ssl.keystore.location" (printf "%s/%s.pem" $dir .component) -}}
{{- $_ := set $s "internal.ssl.key.location" (printf "%s/%s-key.pem" $dir .component) -}}
{{- $_ := set $s "internal.ssl.truststore.location" (printf "%s/ca.pem" $dir) -}}
{{- end -}}
{{- if .zoned -}}
{{- if $g.zones.discovery -}}
{{- $_ := set $s "kafkapy.rack.discovery" "kubernetes" -}}
{{- $_ := set $s "kafkapy.rack.node.label" $g.zones.nodeLabel -}}
{{- if $g.zones.fallback }}{{- $_ := set $s "kafkapy.rack.fallback" $g.zones.fallback -}}{{- end -}}
{{- if $g.zones.apiUrl }}{{- $_ := set $s "kafkapy.kubernetes.api.url" $g.zones.apiUrl -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := .config -}}
{{- /* values arrive as float64: whole numbers as integers, never 6.048e+08 */}}
{{- if and (kindIs "float64" $v) (eq $v (floor $v)) -}}
{{- $_ := set $s $k (printf "%.0f" $v) -}}
{{- else -}}
{{- $_ := set $s $k (toString $v) -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := $s }}
{{ printf "KAFKAPY_%s" ($k | upper | replace "." "_" | replace "-" "_") }}: {{ $v | quote }}
{{- end -}}
{{- end -}}

{{/* The settings ConfigMap of one component (ctx, component, config, zoned). */}}
{{- define "kafkapy.settingsConfigMap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "kafkapy.name" . }}-settings
  labels:
    {{- include "kafkapy.labels" . | nindent 4 }}
data:
  {{- include "kafkapy.settingsData" . | trim | nindent 2 }}
{{- end -}}

{{- define "kafkapy.probes" -}}
{{- $p := .Values.global.probes -}}
startupProbe:
  httpGet: {path: /healthz, port: admin}
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
livenessProbe:
  httpGet: {path: /healthz, port: admin}
  periodSeconds: {{ $p.liveness.periodSeconds }}
  timeoutSeconds: {{ $p.liveness.timeoutSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
readinessProbe:
  httpGet: {path: /readyz, port: admin}
  periodSeconds: {{ $p.readiness.periodSeconds }}
  timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
{{- end -}}

{{- define "kafkapy.scrapeAnnotations" -}}
{{- if .Values.global.metrics.scrapeAnnotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.global.ports.admin | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{/* Spread over zones (and hosts) and keep replicas of a component apart. */}}
{{- define "kafkapy.placement" -}}
{{- $g := .ctx.Values.global -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: {{ $g.zones.nodeLabel }}
    whenUnsatisfiable: {{ $g.zones.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "kafkapy.selectorLabels" . | nindent 8 }}
affinity:
  podAntiAffinity:
    {{- if eq $g.antiAffinity "hard" }}
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "kafkapy.selectorLabels" . | nindent 12 }}
    {{- else }}
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "kafkapy.selectorLabels" . | nindent 14 }}
    {{- end }}
  {{- with .nodeAffinity }}
  nodeAffinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/*
Pod-level fields shared by every kafka-py pod (ctx, zoned, api, serviceAccount): the service
account token is mounted only where the Kubernetes API is read (zone discovery, the
autoscaler). serviceAccount: this pod's own ServiceAccount (the controller's); default: the
shared one that may only get nodes (global.serviceAccountName, else "<base>").
*/}}
{{- define "kafkapy.podCommon" -}}
{{- $g := .ctx.Values.global -}}
serviceAccountName: {{ .serviceAccount | default $g.serviceAccountName | default (include "kafkapy.base" .ctx) }}
automountServiceAccountToken: {{ or (and .zoned $g.zones.discovery) .api | default false }}
enableServiceLinks: false
securityContext:
  {{- include "kafkapy.podSecurityContext" .ctx | nindent 2 }}
{{- with $g.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $g.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $g.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A PodDisruptionBudget (ctx, component, pdb). */}}
{{- define "kafkapy.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "kafkapy.name" . }}
  labels:
    {{- include "kafkapy.labels" . | nindent 4 }}
spec:
  {{- if hasKey .pdb "minAvailable" }}
  minAvailable: {{ .pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ .pdb.maxUnavailable | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "kafkapy.selectorLabels" . | nindent 6 }}
{{- end -}}

{{/*
ZooKeeper digest authentication and znode ACLs (global.zookeeper.acl: zookeeper.set.acl,
zookeeper.digest.auth.file): the Secret holding user:password, mounted read-only into every
kafka-py service (the file, never the password, is in the ConfigMap).
*/}}
{{- define "kafkapy.zkDigestDir" -}}/etc/kafka-py/zookeeper{{- end -}}
{{- define "kafkapy.zkDigestVolume" -}}
{{- with .Values.global.zookeeper.acl }}{{ if .enabled -}}
- name: zookeeper-digest
  secret:
    secretName: {{ .digestSecret.name }}
    defaultMode: 288
{{- end }}{{ end }}
{{- end -}}
{{/*
TLS to ZooKeeper (global.zookeeper.tls): the Secret's CA and client keystore, mounted read-only
into every kafka-py service (never the ensemble's own key).
*/}}
{{- define "kafkapy.zkTlsDir" -}}/etc/kafka-py/zookeeper-tls{{- end -}}
{{- define "kafkapy.zkTlsSecret" -}}
{{- .Values.global.zookeeper.tls.secretName | default (printf "%s-zookeeper-tls" (include "kafkapy.base" .)) -}}
{{- end -}}
{{- define "kafkapy.zkTlsVolume" -}}
{{- if .Values.global.zookeeper.tls.enabled -}}
- name: zookeeper-tls
  secret:
    secretName: {{ include "kafkapy.zkTlsSecret" . }}
    defaultMode: 288
    items:
      - {key: ca.pem, path: ca.pem}
      - {key: zookeeper-client-keystore.pem, path: zookeeper-client-keystore.pem}
{{- end -}}
{{- end -}}
{{- define "kafkapy.zkTlsMount" -}}
{{- if .Values.global.zookeeper.tls.enabled -}}
- name: zookeeper-tls
  mountPath: {{ include "kafkapy.zkTlsDir" . }}
  readOnly: true
{{- end -}}
{{- end -}}
{{- define "kafkapy.zkDigestMount" -}}
{{- with .Values.global.zookeeper.acl }}{{ if .enabled -}}
- name: zookeeper-digest
  mountPath: {{ include "kafkapy.zkDigestDir" . }}
  readOnly: true
{{- end }}{{ end }}
{{- end -}}

{{/* Scratch space for a read-only root filesystem. */}}
{{- define "kafkapy.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end -}}
{{- define "kafkapy.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/*
The container of one service (ctx, component, command, args, ports, resources, zoned,
lifecycle): `kafka-py <command> <args>`, settings from its ConfigMap, probes on the admin port.
*/}}
{{- define "kafkapy.container" -}}
{{- $g := .ctx.Values.global -}}
- name: {{ .command }}
  image: {{ include "kafkapy.image" .ctx }}
  imagePullPolicy: {{ $g.image.pullPolicy }}
  args:
    - {{ .command }}
    {{- range .args }}
    - {{ . | quote }}
    {{- end }}
  env:
    {{- include "kafkapy.downwardEnv" . | nindent 4 }}
    {{- with .extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  envFrom:
    - configMapRef:
        name: {{ include "kafkapy.name" . }}-settings
  ports:
    {{- range .ports }}
    - name: {{ .name }}
      containerPort: {{ .port }}
      protocol: TCP
    {{- end }}
    - name: admin
      containerPort: {{ $g.ports.admin }}
      protocol: TCP
  {{- include "kafkapy.probes" .ctx | nindent 2 }}
  resources:
    {{- toYaml .resources | nindent 4 }}
  securityContext:
    {{- include "kafkapy.containerSecurityContext" .ctx | nindent 4 }}
  {{- with .lifecycle }}
  lifecycle:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    {{- include "kafkapy.tmpMount" . | nindent 4 }}
    {{- include "kafkapy.zkDigestMount" .ctx | nindent 4 }}
    {{- include "kafkapy.zkTlsMount" .ctx | nindent 4 }}
    {{- include "kafkapy.internalTlsMount" . | nindent 4 }}
    {{- with .mounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/*
A Deployment of one service with a generated node id (ctx, component, command, values, port,
idFlag, zoned, extraArgs, nodeAffinity, nameSuffix, labels; optional: listeners and advertised
(default: one listener on port, advertised as the pod IP; a gRPC server with internal TLS is a
StatefulSet advertising its pod DNS name instead), extraPorts, extraEnv, mounts,
volumes, serviceAccount, config (the settings, for the checksum)). Without idFlag: no node id
and no listener flags (a client of the cluster, such as the console). Replicas are omitted when an HPA owns them (values.autoscaling.enabled).
*/}}
{{- define "kafkapy.deployment" -}}
{{- $v := .values -}}
{{- $name := printf "%s%s" (include "kafkapy.name" .) (.nameSuffix | default "") -}}
{{- $named := and .idFlag (include "kafkapy.internalTlsOn" .) (has .component (include "kafkapy.grpcServers" . | fromJsonArray)) -}}
{{- $advertised := .advertised | default (printf "$(POD_IP):%d" (int .port.port)) -}}
{{- if $named -}}
{{- $advertised = printf "%s:%d" (include "kafkapy.podDnsName" .) (int .port.port) -}}
{{- end -}}
apiVersion: apps/v1
kind: {{ ternary "StatefulSet" "Deployment" (not (not $named)) }}
metadata:
  name: {{ $name }}
  labels:
    {{- include "kafkapy.labels" . | nindent 4 }}
    {{- with .labels }}{{ toYaml . | nindent 4 }}{{ end }}
spec:
  {{- if not (and $v.autoscaling $v.autoscaling.enabled) }}
  replicas: {{ $v.replicas }}
  {{- end }}
  revisionHistoryLimit: 3
  {{- if $named }}
  # a StatefulSet only for its pods' DNS names (<pod>.<headless Service>), which the internal
  # TLS certificates cover; it has no volumes and its ids are still generated
  serviceName: {{ $name }}-headless
  podManagementPolicy: Parallel
  updateStrategy:
    type: RollingUpdate
  {{- end }}
  selector:
    matchLabels:
      {{- include "kafkapy.selectorLabels" . | nindent 6 }}
      {{- with .labels }}{{ toYaml . | nindent 6 }}{{ end }}
  template:
    metadata:
      labels:
        {{- include "kafkapy.labels" . | nindent 8 }}
        {{- with .labels }}{{ toYaml . | nindent 8 }}{{ end }}
      annotations:
        checksum/settings: {{ include "kafkapy.settingsData" . | sha256sum }}
        {{- include "kafkapy.scrapeAnnotations" .ctx | nindent 8 }}
    spec:
      {{- include "kafkapy.podCommon" (dict "ctx" .ctx "zoned" .zoned "api" .api "serviceAccount" .serviceAccount) | nindent 6 }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      {{- include "kafkapy.placement" . | nindent 6 }}
      containers:
        {{- $args := list -}}
        {{- if .idFlag -}}
        {{- $args = list .idFlag "-1" "--listeners" (.listeners | default (printf "0.0.0.0:%d" (int .port.port))) "--advertised.listeners" $advertised -}}
        {{- end -}}
        {{- $args = concat $args (.extraArgs | default list) -}}
        {{- $ports := concat (list .port) (.extraPorts | default list) -}}
        {{- include "kafkapy.container" (dict "ctx" .ctx "component" .component "command" .command "args" $args "ports" $ports "resources" $v.resources "lifecycle" .lifecycle "extraEnv" .extraEnv "mounts" .mounts) | nindent 8 }}
      volumes:
        {{- include "kafkapy.tmpVolume" . | nindent 8 }}
        {{- include "kafkapy.zkDigestVolume" .ctx | nindent 8 }}
        {{- include "kafkapy.zkTlsVolume" .ctx | nindent 8 }}
        {{- include "kafkapy.internalTlsVolume" . | nindent 8 }}
        {{- with .volumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end -}}

{{/*
Internal mutual TLS (global.internalTls, `kafka-py certs init --kubernetes`): every kafka-py
service that serves or calls gRPC gets the internal.ssl.* settings and its own files of the
Secret (ca.pem, <component>.pem, <component>-key.pem; never another component's key), mounted
read-only (the kubelet's updates of the Secret are picked up as rotations). Channels check the
server's certificate against the address dialled, so every gRPC server then advertises its
pod's DNS name under its headless Service, which the certificates' wildcard SANs cover.
*/}}
{{- define "kafkapy.grpcServers" -}}{{ toJson (list "storage" "controller" "group-coordinator" "transaction-coordinator") }}{{- end -}}
{{- define "kafkapy.internalTlsComponents" -}}{{ toJson (list "storage" "controller" "gateway" "group-coordinator" "transaction-coordinator") }}{{- end -}}
{{- define "kafkapy.internalTlsDir" -}}/etc/kafka-py/internal-tls{{- end -}}
{{/* "true" when the component of (ctx, component) runs with internal TLS. */}}
{{- define "kafkapy.internalTlsOn" -}}
{{- if and .ctx.Values.global.internalTls.enabled (has .component (include "kafkapy.internalTlsComponents" . | fromJsonArray)) }}true{{ end -}}
{{- end -}}
{{- define "kafkapy.internalTlsSecret" -}}
{{- .ctx.Values.global.internalTls.secretName | default (printf "%s-internal-tls" (include "kafkapy.base" .ctx)) -}}
{{- end -}}
{{- define "kafkapy.internalTlsVolume" -}}
{{- if include "kafkapy.internalTlsOn" . -}}
- name: internal-tls
  secret:
    secretName: {{ include "kafkapy.internalTlsSecret" . }}
    defaultMode: 288
    items:
      - {key: ca.pem, path: ca.pem}
      - {key: {{ .component }}.pem, path: {{ .component }}.pem}
      - {key: {{ .component }}-key.pem, path: {{ .component }}-key.pem}
{{- end -}}
{{- end -}}
{{- define "kafkapy.internalTlsMount" -}}
{{- if include "kafkapy.internalTlsOn" . -}}
- name: internal-tls
  mountPath: {{ include "kafkapy.internalTlsDir" . }}
  readOnly: true
{{- end -}}
{{- end -}}
{{/* The pod's DNS name under the component's headless Service (kube DNS for StatefulSet pods). */}}
{{- define "kafkapy.podDnsName" -}}
{{- printf "$(POD_NAME).%s-headless.$(POD_NAMESPACE).svc.%s" (include "kafkapy.name" .) .ctx.Values.global.clusterDomain -}}
{{- end -}}
{{/*
The headless Service of a gRPC server (ctx, component, port): its pods' DNS names, published
before they are ready (peers find a restarting node by name).
*/}}
{{- define "kafkapy.headlessService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "kafkapy.name" . }}-headless
  labels:
    {{- include "kafkapy.labels" . | nindent 4 }}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector:
    {{- include "kafkapy.selectorLabels" . | nindent 4 }}
  ports:
    - name: grpc
      port: {{ .port }}
      targetPort: grpc
    - name: admin
      port: {{ .ctx.Values.global.ports.admin }}
      targetPort: admin
{{- end -}}
