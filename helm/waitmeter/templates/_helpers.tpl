{{/*
Names and labels.
*/}}
{{- define "waitmeter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "waitmeter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "waitmeter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "waitmeter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "waitmeter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "waitmeter.labels" -}}
helm.sh/chart: {{ include "waitmeter.chart" . }}
{{ include "waitmeter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: {{ .Values.mode }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels that select the pods carrying the agent: the chart's own, or with your own workload
(sidecar.deployment.enabled: false) sidecar.selector.
*/}}
{{- define "waitmeter.podSelector" -}}
{{- if and (eq .Values.mode "sidecar") (not .Values.sidecar.deployment.enabled) }}
{{- toYaml .Values.sidecar.selector }}
{{- else }}
{{- include "waitmeter.selectorLabels" . }}
{{- end }}
{{- end }}

{{/*
The scrape endpoint of the ServiceMonitor and the PodMonitor (without its `port`), from
their values: include "waitmeter.scrapeEndpoint" (dict "ctx" . "monitor" .Values.serviceMonitor)
*/}}
{{- define "waitmeter.scrapeEndpoint" -}}
{{- $m := .monitor -}}
path: /metrics
scheme: http
interval: {{ $m.interval }}
scrapeTimeout: {{ $m.scrapeTimeout }}
# waitmeter exports no node label (house style): the scrape adds it
relabelings:
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
    action: replace
  {{- with $m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "waitmeter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "waitmeter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository@digest when image.digest is set (the tag is then ignored), else repository:tag */}}
{{- define "waitmeter.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The annotations of the chart's own pod templates: podAnnotations, and on clusters older than
1.30 (no appArmorProfile field) securityContext.appArmorProfile as the beta annotation.
Renders a YAML map or nothing.
*/}}
{{- define "waitmeter.podAnnotations" -}}
{{- $a := deepCopy .Values.podAnnotations }}
{{- $aa := .Values.securityContext.appArmorProfile }}
{{- if and $aa (semverCompare "<1.30.0-0" .Capabilities.KubeVersion.Version) }}
{{- $profile := dict "RuntimeDefault" "runtime/default" "Unconfined" "unconfined" "Localhost" (printf "localhost/%s" ($aa.localhostProfile | default "")) }}
{{- $_ := set $a "container.apparmor.security.beta.kubernetes.io/waitmeter" (get $profile $aa.type) }}
{{- end }}
{{- with $a }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/*
Whether the host's /sys/fs/cgroup is mounted: hostCgroup.mount, or by default only in
daemonset mode. Usage: include "waitmeter.hostCgroup" (dict "ctx" . "sidecar" true)
Renders "true" or nothing.
*/}}
{{- define "waitmeter.hostCgroup" -}}
{{- $v := .ctx.Values.hostCgroup.mount }}
{{- if kindIs "invalid" $v }}{{ if not .sidecar }}true{{ end }}{{ else if $v }}true{{ end }}
{{- end }}

{{/*
Refuse combinations that would deploy something that cannot work.
*/}}
{{- define "waitmeter.validate" -}}
{{- $v := .Values }}
{{- if and (eq $v.mode "daemonset") $v.age.socket.enabled }}
{{- fail "age.socket needs the application's PID namespace (waitmeter_client sends the PIDs it sees): use mode=sidecar" }}
{{- end }}
{{- if eq $v.mode "sidecar" }}
{{- if and $v.sidecar.deployment.enabled (not $v.sidecar.deployment.app.image) }}
{{- fail "mode=sidecar renders a Deployment of your application: set sidecar.deployment.app.image, or set sidecar.deployment.enabled=false and add the container to your own workload (docs/deployment.md)" }}
{{- end }}
{{- if and (not $v.sidecar.deployment.enabled) (or $v.service.enabled $v.podMonitor.enabled $v.networkPolicy.enabled) (not $v.sidecar.selector) }}
{{- fail "sidecar.deployment.enabled=false: set sidecar.selector to the labels of your pods that carry the waitmeter container (the Service, PodMonitor and NetworkPolicy select them), or service.enabled=false" }}
{{- end }}
{{- end }}
{{- if and $v.serviceMonitor.enabled $v.podMonitor.enabled }}
{{- fail "serviceMonitor.enabled and podMonitor.enabled: both would scrape the same pods (every series twice); enable one" }}
{{- end }}
{{- if and $v.networkPolicy.enabled (not $v.networkPolicy.from) }}
{{- fail "networkPolicy.enabled: list in networkPolicy.from who may reach the metrics port (e.g. your Prometheus' namespace and pods); [{namespaceSelector: {}}] allows every pod of the cluster" }}
{{- end }}
{{- end }}

{{/*
The agent's command line.
*/}}
{{- define "waitmeter.args" -}}
{{- $a := .Values.agent }}
{{- $listen := ternary (printf "[%s]" $a.listenAddress) $a.listenAddress (contains ":" $a.listenAddress) -}}
- run
- --all
- --listen={{ $listen }}:{{ $a.port }}
- --max-threads={{ int64 $a.maxThreads }}
- --max-processes={{ int64 $a.maxProcesses }}
- --max-thread-labels={{ int64 $a.maxThreadLabels }}
- --gil-probe={{ $a.gilProbe }}
{{- if $a.tidLabels }}
- --tid-labels
{{- end }}
{{- if gt (int $a.verbosity) 0 }}
- -{{ repeat (int $a.verbosity) "v" }}
{{- end }}
{{- if $a.btf }}
- --btf={{ $a.btf }}
{{- end }}
{{- if .Values.age.socket.enabled }}
- --age-socket=/run/waitmeter/age.sock
{{- end }}
{{- range $a.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The agent container (one list item). Usage:
  include "waitmeter.container" (dict "ctx" $scope "sidecar" true|false)
where $scope has .Values, .Chart and .Release of this chart (`.` here, or
`.Subcharts.waitmeter` from a parent chart).
*/}}
{{- define "waitmeter.container" -}}
{{- $ctx := .ctx }}
{{- $v := $ctx.Values -}}
- name: waitmeter
  image: {{ include "waitmeter.image" $ctx | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  command:
    {{- toYaml $v.image.command | nindent 4 }}
  args:
    {{- include "waitmeter.args" $ctx | nindent 4 }}
  ports:
    - name: metrics
      containerPort: {{ $v.agent.port }}
      protocol: TCP
  {{- with $v.extraEnv }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    # BPF: load programs and create maps; PERFMON: attach tracepoints and uprobes;
    # SYS_PTRACE: /proc/PID/root, /proc/PID/task/TID/syscall and process_vm_readv of
    # other users' processes. The agent must run as uid 0: a non-root user would get these
    # only in its bounding set (no ambient or file capabilities with allowPrivilegeEscalation
    # false), so the effective set would be empty.
    runAsUser: 0
    runAsGroup: 0
    runAsNonRoot: false
    privileged: {{ $v.securityContext.privileged }}
    allowPrivilegeEscalation: {{ $v.securityContext.privileged }}
    readOnlyRootFilesystem: true
    capabilities:
      drop:
        - ALL
      add:
        - BPF
        - PERFMON
        - SYS_PTRACE
        {{- range $v.securityContext.extraCapabilities }}
        - {{ . }}
        {{- end }}
    {{- with $v.securityContext.seccompProfile }}
    seccompProfile:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- /* a field since Kubernetes 1.30; older clusters get the annotation (waitmeter.podAnnotations) */}}
    {{- if and $v.securityContext.appArmorProfile (semverCompare ">=1.30.0-0" $ctx.Capabilities.KubeVersion.Version) }}
    appArmorProfile:
      {{- toYaml $v.securityContext.appArmorProfile | nindent 6 }}
    {{- end }}
  {{- with $v.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.livenessProbe }}
  livenessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.readinessProbe }}
  readinessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- $mounts := list }}
  {{- if include "waitmeter.hostCgroup" (dict "ctx" $ctx "sidecar" .sidecar) }}
  {{- $cg := dict "name" "host-cgroup" "mountPath" "/sys/fs/cgroup" "readOnly" true }}
  {{- /* recursiveReadOnly: a field since Kubernetes 1.30; older API servers do not know it */}}
  {{- if semverCompare ">=1.30.0-0" $ctx.Capabilities.KubeVersion.Version }}
  {{- $_ := set $cg "recursiveReadOnly" "IfPossible" }}
  {{- end }}
  {{- $mounts = append $mounts $cg }}
  {{- end }}
  {{- if and .sidecar $v.age.socket.enabled }}
  {{- $mounts = append $mounts (dict "name" "waitmeter-run" "mountPath" "/run/waitmeter") }}
  {{- end }}
  {{- $mounts = concat $mounts $v.extraVolumeMounts }}
  {{- with $mounts }}
  volumeMounts:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
The pod volumes the agent container needs (list items; may be empty). Same argument as
waitmeter.container.
*/}}
{{- define "waitmeter.volumes" -}}
{{- $v := .ctx.Values -}}
{{- if include "waitmeter.hostCgroup" . }}
- name: host-cgroup
  hostPath:
    path: /sys/fs/cgroup
    type: Directory
{{- end }}
{{- if and .sidecar $v.age.socket.enabled }}
- name: waitmeter-run
  emptyDir:
    sizeLimit: 1Mi
{{- end }}
{{- with $v.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Public helpers for adding the sidecar to your own workload (chart dependency; pass
.Subcharts.waitmeter, see docs/deployment.md). Each renders list items.
*/}}
{{- define "waitmeter.sidecar.container" -}}
{{- include "waitmeter.container" (dict "ctx" . "sidecar" true) }}
{{- end }}

{{- define "waitmeter.sidecar.volumes" -}}
{{- include "waitmeter.volumes" (dict "ctx" . "sidecar" true) }}
{{- end }}

{{/* volumeMounts items for the application container (the age socket's directory). */}}
{{- define "waitmeter.sidecar.appVolumeMounts" -}}
{{- if .Values.age.socket.enabled -}}
- name: waitmeter-run
  mountPath: /run/waitmeter
{{- end }}
{{- end }}

{{/* env items for the application container (where waitmeter_client sends its samples). */}}
{{- define "waitmeter.sidecar.appEnv" -}}
{{- if .Values.age.socket.enabled -}}
- name: WAITMETER_SOCKET
  value: /run/waitmeter/age.sock
{{- end }}
{{- end }}
