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
scheme: {{ ternary "https" "http" .ctx.Values.web.tls.enabled }}
{{- with $m.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
interval: {{ $m.interval }}
scrapeTimeout: {{ $m.scrapeTimeout }}
{{- if eq .ctx.Values.mode "daemonset" }}
# the node agent's waitmeter_process_info names each process' namespace, pod and container: they
# win over the target labels of the agent's own pod (as kube-state-metrics' are scraped)
honorLabels: true
{{- end }}
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
{{- fail "age.socket is a socket on an emptyDir of the application's pod, shared with the agent: use mode=sidecar" }}
{{- end }}
{{- if eq $v.mode "sidecar" }}
{{- if and $v.sidecar.deployment.enabled (not $v.sidecar.deployment.app.image) }}
{{- fail "mode=sidecar renders a Deployment of your application: set sidecar.deployment.app.image, or set sidecar.deployment.enabled=false and add the container to your own workload (docs/deployment.md)" }}
{{- end }}
{{- if and (not $v.sidecar.deployment.enabled) (or $v.service.enabled $v.podMonitor.enabled $v.networkPolicy.enabled) (not $v.sidecar.selector) }}
{{- fail "sidecar.deployment.enabled=false: set sidecar.selector to the labels of your pods that carry the waitmeter container (the Service, PodMonitor and NetworkPolicy select them), or service.enabled=false" }}
{{- end }}
{{- end }}
{{- $w := $v.web }}
{{- if and $w.tls.enabled (not $w.tls.secretName) }}
{{- fail "web.tls.enabled: set web.tls.secretName to a kubernetes.io/tls Secret (tls.crt, tls.key) in the release's namespace, e.g. from cert-manager" }}
{{- end }}
{{- if and (not $w.tls.enabled) (or $w.tls.secretName $w.tls.clientCA.secretName $w.tls.clientAuthType) }}
{{- fail "web.tls.secretName, clientCA or clientAuthType is set but web.tls.enabled is false: the endpoint would serve plain HTTP; set web.tls.enabled=true" }}
{{- end }}
{{- if and $w.tls.clientAuthType (not $w.tls.clientCA.secretName) }}
{{- fail (printf "web.tls.clientAuthType %s verifies client certificates: set web.tls.clientCA.secretName to the Secret holding the CA that signs them" $w.tls.clientAuthType) }}
{{- end }}
{{- if and (eq $w.tls.minVersion "TLS13") (eq $w.tls.maxVersion "TLS12") }}
{{- fail "web.tls.minVersion TLS13 is above web.tls.maxVersion TLS12" }}
{{- end }}
{{- if and $w.existingSecret (or $w.basicAuth.users $w.headers) }}
{{- fail "web.existingSecret holds the whole web-config file: put the basic-auth users and headers in it, not in web.basicAuth.users / web.headers" }}
{{- end }}
{{- range $name := list "serviceMonitor" "podMonitor" }}
{{- $m := get $v $name }}
{{- if $m.enabled }}
{{- if and $w.tls.enabled (not $m.tlsConfig) }}
{{- fail (printf "web.tls.enabled serves https: set %s.tlsConfig (ca: the CA that signed web.tls.secretName's certificate, serverName: a name in it) or, knowingly, %s.tlsConfig.insecureSkipVerify=true" $name $name) }}
{{- end }}
{{- if and (eq (include "waitmeter.web.clientAuthType" $) "RequireAndVerifyClientCert") (not (and $m.tlsConfig.cert $m.tlsConfig.keySecret)) }}
{{- fail (printf "web.tls.clientAuthType RequireAndVerifyClientCert: set %s.tlsConfig.cert and keySecret (a client certificate signed by web.tls.clientCA) or Prometheus cannot connect" $name) }}
{{- end }}
{{- if and $w.basicAuth.users (not $m.basicAuth) }}
{{- fail (printf "web.basicAuth.users protects /metrics: set %s.basicAuth (username and password Secret keys of one of the users) or every scrape gets 401" $name) }}
{{- end }}
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
Endpoint security: `waitmeter run --web.config.file`, a file in the Prometheus exporter
toolkit's web-config format, rendered into a Secret (or web.existingSecret) mounted at
/etc/waitmeter/web; the TLS Secret at /etc/waitmeter/tls, the client CA at
/etc/waitmeter/client-ca. "waitmeter.web.enabled" renders "true" or nothing.
*/}}
{{- define "waitmeter.web.enabled" -}}
{{- $w := .Values.web }}
{{- if or $w.existingSecret $w.tls.enabled $w.basicAuth.users $w.headers }}true{{ end }}
{{- end }}

{{- define "waitmeter.web.configFile" -}}
/etc/waitmeter/web/web-config.yml
{{- end }}

{{- define "waitmeter.web.secretName" -}}
{{- .Values.web.existingSecret | default (printf "%s-web-config" (include "waitmeter.fullname" .)) }}
{{- end }}

{{/* The client_auth_type in force: "" without client certificates. */}}
{{- define "waitmeter.web.clientAuthType" -}}
{{- if and .Values.web.tls.enabled .Values.web.tls.clientCA.secretName }}
{{- .Values.web.tls.clientAuthType | default "RequireAndVerifyClientCert" }}
{{- end }}
{{- end }}

{{/* The web-config file the chart renders (not with web.existingSecret). */}}
{{- define "waitmeter.web.config" -}}
{{- $w := .Values.web }}
{{- $cfg := dict }}
{{- if $w.tls.enabled }}
{{- $tls := dict "cert_file" "/etc/waitmeter/tls/tls.crt" "key_file" "/etc/waitmeter/tls/tls.key" }}
{{- with include "waitmeter.web.clientAuthType" . }}
{{- $_ := set $tls "client_auth_type" . }}
{{- $_ := set $tls "client_ca_file" "/etc/waitmeter/client-ca/ca.crt" }}
{{- end }}
{{- with $w.tls.minVersion }}{{ $_ := set $tls "min_version" . }}{{ end }}
{{- with $w.tls.maxVersion }}{{ $_ := set $tls "max_version" . }}{{ end }}
{{- $_ := set $cfg "tls_server_config" $tls }}
{{- end }}
{{- with $w.basicAuth.users }}
{{- $_ := set $cfg "basic_auth_users" . }}
{{- end }}
{{- with $w.headers }}
{{- $_ := set $cfg "http_server_config" (dict "headers" .) }}
{{- end -}}
# waitmeter run --web.config.file: the Prometheus exporter toolkit's web-config format
{{ toYaml $cfg }}
{{- end }}

{{/*
A probe from livenessProbe/readinessProbe: over HTTPS when web.tls is on; with client
certificates required (the kubelet has none to present) a TCP check of the same port.
Usage: include "waitmeter.probe" (dict "ctx" $ctx "probe" $probe)
*/}}
{{- define "waitmeter.probe" -}}
{{- $p := deepCopy .probe }}
{{- $v := .ctx.Values }}
{{- if and $p.httpGet $v.web.tls.enabled }}
{{- if eq (include "waitmeter.web.clientAuthType" .ctx) "RequireAndVerifyClientCert" }}
{{- $_ := set $p "tcpSocket" (dict "port" $p.httpGet.port) }}
{{- $_ := unset $p "httpGet" }}
{{- else if not $p.httpGet.scheme }}
{{- $_ := set $p.httpGet "scheme" "HTTPS" }}
{{- end }}
{{- end }}
{{- toYaml $p }}
{{- end }}

{{/*
The agent's command line.
*/}}
{{- define "waitmeter.args" -}}
{{- $v := .ctx.Values }}
{{- $a := $v.agent }}
{{- $listen := ternary (printf "[%s]" $a.listenAddress) $a.listenAddress (contains ":" $a.listenAddress) -}}
- run
- --all
- --listen={{ $listen }}:{{ $a.port }}
- --max-threads={{ int64 $a.maxThreads }}
- --max-processes={{ int64 $a.maxProcesses }}
- --exit-buffer-kib={{ int64 $a.exitBufferKib }}
- --max-thread-labels={{ int64 $a.maxThreadLabels }}
- --gil-probe={{ $a.gilProbe }}
{{- /* pod names: the node agent lists its node's pods (auto: with the NODE_NAME and the token
the pod gets); a sidecar's processes are its own pod's, and it has neither: auto is off */}}
{{- if not .sidecar }}
{{- if $v.podNames.enabled }}
- --pods=auto
- --pods-refresh={{ int64 $v.podNames.refreshSeconds }}
{{- else }}
- --pods=off
{{- end }}
{{- end }}
{{- if ne $a.stacks "all" }}
- --stacks={{ $a.stacks }}
{{- end }}
{{- if $a.syscalls }}
- --syscalls=on
{{- end }}
{{- if $a.tidLabels }}
- --tid-labels
{{- end }}
{{- if gt (int $a.verbosity) 0 }}
- -{{ repeat (int $a.verbosity) "v" }}
{{- end }}
{{- if $a.btf }}
- --btf={{ $a.btf }}
{{- end }}
{{- with $v.age.socket }}
{{- if .enabled }}
- --age-socket=/run/waitmeter/age.sock
- --age-socket-mode={{ .mode }}
{{- if not (kindIs "invalid" .group) }}
- --age-socket-group={{ int64 .group }}
{{- end }}
{{- end }}
{{- end }}
{{- with $v.pyroscope }}
{{- if .url }}
- --pyroscope-url={{ .url }}
- --pyroscope-interval={{ int64 .interval }}
{{- with .serviceName }}
- --pyroscope-service={{ . }}
{{- end }}
{{- with .tenant }}
- --pyroscope-tenant={{ . }}
{{- end }}
{{- range $k, $v := .labels }}
- {{ printf "--pyroscope-label=%s=%s" $k (toString $v) | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if include "waitmeter.web.enabled" .ctx }}
- --web.config.file={{ include "waitmeter.web.configFile" .ctx }}
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
    {{- include "waitmeter.args" . | nindent 4 }}
  ports:
    - name: metrics
      containerPort: {{ $v.agent.port }}
      protocol: TCP
  {{- $podNames := and (not .sidecar) $v.podNames.enabled }}
  {{- if or $podNames $v.extraEnv }}
  env:
    {{- if $podNames }}
    # the node whose pods --pods api lists
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    {{- end }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
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
    {{- include "waitmeter.probe" (dict "ctx" $ctx "probe" .) | nindent 4 }}
  {{- end }}
  {{- with $v.readinessProbe }}
  readinessProbe:
    {{- include "waitmeter.probe" (dict "ctx" $ctx "probe" .) | nindent 4 }}
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
  {{- if include "waitmeter.web.enabled" $ctx }}
  {{- $mounts = append $mounts (dict "name" "waitmeter-web-config" "mountPath" "/etc/waitmeter/web" "readOnly" true) }}
  {{- end }}
  {{- if $v.web.tls.enabled }}
  {{- $mounts = append $mounts (dict "name" "waitmeter-web-tls" "mountPath" "/etc/waitmeter/tls" "readOnly" true) }}
  {{- if $v.web.tls.clientCA.secretName }}
  {{- $mounts = append $mounts (dict "name" "waitmeter-web-client-ca" "mountPath" "/etc/waitmeter/client-ca" "readOnly" true) }}
  {{- end }}
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
{{- if include "waitmeter.web.enabled" .ctx }}
- name: waitmeter-web-config
  secret:
    secretName: {{ include "waitmeter.web.secretName" .ctx }}
    defaultMode: 0400
    items:
      - key: web-config.yml
        path: web-config.yml
{{- end }}
{{- if $v.web.tls.enabled }}
- name: waitmeter-web-tls
  secret:
    secretName: {{ $v.web.tls.secretName }}
    defaultMode: 0400
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- if $v.web.tls.clientCA.secretName }}
- name: waitmeter-web-client-ca
  secret:
    secretName: {{ $v.web.tls.clientCA.secretName }}
    defaultMode: 0400
    items:
      - key: {{ $v.web.tls.clientCA.key }}
        path: ca.crt
{{- end }}
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
