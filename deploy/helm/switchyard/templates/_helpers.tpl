{{/* Names, labels and the pieces every pod shares. */}}

{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name: <release>-<chart>, or <release> when it holds the chart name. */}}
{{- define "switchyard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "switchyard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object; call with (dict "ctx" $ "component" "gateway"). */}}
{{- define "switchyard.labels" -}}
helm.sh/chart: {{ include "switchyard.chart" .ctx }}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: switchyard
{{- end }}

{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{- define "switchyard.gatewayName" -}}
{{ include "switchyard.fullname" . }}-gateway
{{- end }}

{{/* The headless Service pylons discover gateway replicas through; pylons expect this name
in the gateways' certificates. */}}
{{- define "switchyard.gatewayHeadlessName" -}}
{{ include "switchyard.fullname" . }}-gateway-headless
{{- end }}

{{- define "switchyard.engineName" -}}
{{ include "switchyard.fullname" . }}-engine
{{- end }}

{{/* The pylons' headless Service, and the name gateways expect in pylons' certificates. */}}
{{- define "switchyard.pylonName" -}}
{{ include "switchyard.fullname" . }}-pylon
{{- end }}

{{- define "switchyard.pylonServerName" -}}
{{ default (include "switchyard.pylonName" .) .Values.tls.pylon.serverName }}
{{- end }}

{{- define "switchyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "switchyard.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/* Secret names: an existing Secret, or the one this chart creates. */}}
{{- define "switchyard.controlSecretName" -}}
{{ default (printf "%s-control" (include "switchyard.fullname" .)) .Values.controlToken.existingSecret }}
{{- end }}

{{- define "switchyard.gatewayTLSSecretName" -}}
{{- if .Values.tls.gateway.existingSecret }}
{{- .Values.tls.gateway.existingSecret }}
{{- else if .Values.tls.gateway.cert }}
{{- include "switchyard.fullname" . }}-gateway-tls
{{- else }}
{{- fail "tls.enabled needs tls.gateway.existingSecret, or tls.gateway.cert, key and ca" }}
{{- end }}
{{- end }}

{{- define "switchyard.pylonTLSSecretName" -}}
{{- if .Values.tls.pylon.existingSecret }}
{{- .Values.tls.pylon.existingSecret }}
{{- else if .Values.tls.pylon.cert }}
{{- include "switchyard.fullname" . }}-pylon-tls
{{- else }}
{{- fail "tls.enabled needs tls.pylon.existingSecret, or tls.pylon.cert, key and ca" }}
{{- end }}
{{- end }}

{{/* http or https, for URLs and probes. */}}
{{- define "switchyard.scheme" -}}
{{ ternary "https" "http" .Values.tls.enabled }}
{{- end }}

{{/* A probe of one of our binaries: HTTPS when TLS is on, unless the probe names a scheme.
Call with (dict "ctx" $ "probe" .Values.gateway.readinessProbe). */}}
{{- define "switchyard.probe" -}}
{{- $probe := deepCopy .probe }}
{{- if and .ctx.Values.tls.enabled $probe.httpGet }}
{{- if not $probe.httpGet.scheme }}
{{- $_ := set $probe.httpGet "scheme" "HTTPS" }}
{{- end }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/* Topology spread constraints, each selecting the component's pods unless it says
otherwise. Call with (dict "ctx" $ "component" "gateway" "constraints" list). */}}
{{- define "switchyard.topologySpread" -}}
{{- $out := list }}
{{- range .constraints }}
{{- $c := deepCopy . }}
{{- if not $c.labelSelector }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "switchyard.selectorLabels" $ | fromYaml)) }}
{{- end }}
{{- $out = append $out $c }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* The restricted container securityContext, with overrides merged over it. */}}
{{- define "switchyard.containerSecurityContext" -}}
{{- toYaml (mergeOverwrite (deepCopy .ctx.Values.containerSecurityContext) (deepCopy (default dict .override))) }}
{{- end }}

{{/* Volumes and mounts of the control token and a TLS Secret. */}}
{{- define "switchyard.secretVolumes" -}}
- name: control
  secret:
    secretName: {{ include "switchyard.controlSecretName" .ctx }}
    items:
      - {key: {{ .ctx.Values.controlToken.key }}, path: token}
{{- if .ctx.Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .tlsSecret }}
{{- end }}
{{- end }}

{{- define "switchyard.secretMounts" -}}
- {name: control, mountPath: /etc/switchyard/control, readOnly: true}
{{- if .Values.tls.enabled }}
- {name: tls, mountPath: /etc/switchyard/tls, readOnly: true}
{{- end }}
{{- end }}

{{/* A HorizontalPodAutoscaler; call with (dict "ctx" $ "component" "gateway" "name" ... "autoscaling" ...). */}}
{{- define "switchyard.hpa" -}}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ .name }}
  labels:
    {{- include "switchyard.labels" . | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ .name }}
  minReplicas: {{ .autoscaling.minReplicas }}
  maxReplicas: {{ .autoscaling.maxReplicas }}
  metrics:
    {{- toYaml .autoscaling.metrics | nindent 4 }}
  {{- with .autoscaling.behavior }}
  behavior:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* A PodDisruptionBudget. Pods that are not ready may always be evicted: a gateway is not
ready until a backend is routable, which must not block a node drain. */}}
{{- define "switchyard.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  labels:
    {{- include "switchyard.labels" . | nindent 4 }}
spec:
  {{- if hasKey .pdb "minAvailable" }}
  minAvailable: {{ .pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ .pdb.maxUnavailable }}
  {{- end }}
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- include "switchyard.selectorLabels" . | nindent 6 }}
{{- end }}
