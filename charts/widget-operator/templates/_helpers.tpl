{{/* Chart name. */}}
{{- define "widget-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Base of every generated name: the release name when it contains the chart name (the default
release widget-operator gives Deployment widget-operator, as the runbooks assume).
*/}}
{{- define "widget-operator.fullname" -}}
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

{{/* Chart label value. */}}
{{- define "widget-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of the manager's pods. */}}
{{- define "widget-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "widget-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end }}

{{/* Labels of every object. */}}
{{- define "widget-operator.labels" -}}
helm.sh/chart: {{ include "widget-operator.chart" . }}
app.kubernetes.io/name: {{ include "widget-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: widget-operator
{{- end }}

{{/* Image reference. */}}
{{- define "widget-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | default "dev") }}
{{- end }}

{{/* Names of the generated objects. */}}
{{- define "widget-operator.webhookServiceName" -}}
{{- printf "%s-webhook" (include "widget-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "widget-operator.metricsServiceName" -}}
{{- printf "%s-metrics" (include "widget-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "widget-operator.servingCertificateName" -}}
{{- printf "%s-serving" (include "widget-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "widget-operator.servingSecretName" -}}
{{- printf "%s-serving-cert" (include "widget-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "widget-operator.hooksName" -}}
{{- printf "%s-hooks" (include "widget-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* cert-manager's cainjector annotation: the serving Certificate's CA goes into caBundle. */}}
{{- define "widget-operator.injectCAFrom" -}}
cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "widget-operator.servingCertificateName" .) }}
{{- end }}

{{/* Pod and container security context of Pod Security "restricted". */}}
{{- define "widget-operator.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- define "widget-operator.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
Annotations of the hook Jobs' RBAC: created before the Jobs (lower weight) in every phase that
runs a hook, deleted once the phase's hooks succeeded and kept when one failed (for logs).
*/}}
{{- define "widget-operator.hookRBACAnnotations" -}}
helm.sh/hook: pre-install,pre-upgrade,pre-rollback,post-install,post-upgrade,pre-delete,test
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/* The stage, validated (values.schema.json has the same enum). */}}
{{- define "widget-operator.stage" -}}
{{- $stages := list "initial" "add-version" "flip-storage" "migrate" "unserve" "remove" }}
{{- if not (has .Values.apiUpgrade.stage $stages) }}
{{- fail (printf "apiUpgrade.stage %q is not a stage; the stages are %s" .Values.apiUpgrade.stage (join ", " $stages)) }}
{{- end }}
{{- .Values.apiUpgrade.stage }}
{{- end }}

{{/* The next stage forward, or "" at remove. */}}
{{- define "widget-operator.nextStage" -}}
{{- $next := dict "initial" "add-version" "add-version" "flip-storage" "flip-storage" "migrate" "migrate" "unserve" "unserve" "remove" "remove" "" }}
{{- get $next (include "widget-operator.stage" .) }}
{{- end }}

{{/*
Pod spec of a hook Job or the test pod running widgetctl from the manager's image.
Arguments: dict "root" $ "name" container-name "args" (list of widgetctl arguments).
*/}}
{{- define "widget-operator.widgetctlPodSpec" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "widget-operator.hooksName" $root }}
automountServiceAccountToken: true
# The preflight reaches the webhook Service by its ClusterIP from the service link variables,
# as the apiserver does (no cluster DNS needed).
enableServiceLinks: true
restartPolicy: Never
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- include "widget-operator.podSecurityContext" $root | nindent 2 }}
containers:
  - name: {{ .name }}
    image: {{ include "widget-operator.image" $root }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    command: ["/widgetctl"]
    args:
      {{- range .args }}
      - {{ . | quote }}
      {{- end }}
    env:
      - name: POD_NAMESPACE
        valueFrom:
          fieldRef:
            fieldPath: metadata.namespace
    resources:
      {{- toYaml $root.Values.hookResources | nindent 6 }}
    securityContext:
      {{- include "widget-operator.containerSecurityContext" $root | nindent 6 }}
    volumeMounts:
      - name: tmp
        mountPath: /tmp
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 16Mi
{{- end }}

{{/*
Spec of a hook Job: few retries, a deadline, and no retry of a refusal (widgetctl exits 1).
Arguments as widget-operator.widgetctlPodSpec.
*/}}
{{- define "widget-operator.hookJobSpec" -}}
backoffLimit: {{ .root.Values.apiUpgrade.backoffLimit }}
activeDeadlineSeconds: {{ .root.Values.apiUpgrade.activeDeadlineSeconds }}
podFailurePolicy:
  rules:
    # Exit code 1 is a refusal: retrying cannot change it.
    - action: FailJob
      onExitCodes:
        containerName: {{ .name }}
        operator: In
        values: [1]
template:
  metadata:
    labels:
      {{- include "widget-operator.labels" .root | nindent 6 }}
      app.kubernetes.io/component: hooks
  spec:
    {{- include "widget-operator.widgetctlPodSpec" . | nindent 4 }}
{{- end }}

{{/*
The conversion webhook's URL for the preflight's probe: the webhook Service's ClusterIP from
its service link variable, expanded by the kubelet ($(VAR) in args). The probe still verifies
the certificate for <svc>.<ns>.svc against the CRD's caBundle, and the apiserver, too, calls
the Service without DNS. Before the Service exists (a first install) there is no CRD to probe.
*/}}
{{- define "widget-operator.webhookProbeURL" -}}
{{- $var := include "widget-operator.webhookServiceName" . | upper | replace "-" "_" | replace "." "_" -}}
https://$({{ $var }}_SERVICE_HOST):443/convert
{{- end }}
