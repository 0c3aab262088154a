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

{{/* Labels every pod of the release's two planes carries. */}}
{{- define "widget-operator.instanceLabels" -}}
app.kubernetes.io/name: {{ include "widget-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Selector labels of one plane's pods; dict "root" and "plane": webhook (conversion and
admission, every replica serving) or controller (the Widget controller, leader-elected, and the
CA bundle's writer). The single-Deployment layout before the planes was component "manager".
*/}}
{{- define "widget-operator.selectorLabels" -}}
{{ include "widget-operator.instanceLabels" .root }}
app.kubernetes.io/component: {{ .plane }}
{{- end }}

{{/*
What the webhook Service (and the webhook plane's metrics Service) select: the webhook plane's
pods, and during the handover from the single-Deployment layout the old pods too, which
widgetctl handover prepare labels so (a Deployment's selector cannot change, a label beside it
can).
*/}}
{{- define "widget-operator.servingLabels" -}}
{{ include "widget-operator.instanceLabels" . }}
widgetry.io/serves-webhooks: "true"
{{- end }}

{{/* The Deployment of the single-Deployment layout (chart versions before the planes). */}}
{{- define "widget-operator.legacyDeploymentName" -}}
{{ include "widget-operator.fullname" . }}
{{- end }}

{{/*
"true" on an upgrade of a release whose single-Deployment layout's Deployment still exists: only
then are the handover hooks and their permissions rendered (helm template and a client-side dry
run cannot look, and render neither).
*/}}
{{- define "widget-operator.handover" -}}
{{- if .Release.IsUpgrade }}
{{- with lookup "apps/v1" "Deployment" .Release.Namespace (include "widget-operator.legacyDeploymentName" .) }}
{{- if eq (dig "spec" "selector" "matchLabels" "app.kubernetes.io/component" "" .) "manager" }}true{{ end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "widget-operator.labels" -}}
helm.sh/chart: {{ include "widget-operator.chart" . }}
app.kubernetes.io/name: {{ include "widget-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: widget-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
commonAnnotations as entries of an annotations map, each on a new line indented by "indent"
(nothing when there are none): the first thing under an object's own "annotations:".
Arguments: dict "root" $ "indent" N.
*/}}
{{- define "widget-operator.commonAnnotations" -}}
{{- with .root.Values.commonAnnotations }}
{{- toYaml . | nindent $.indent }}
{{- end }}
{{- end }}

{{/*
metadata.annotations of an object with none of its own: commonAnnotations, if any, on a new
line indented by "indent". Arguments: dict "root" $ "indent" N.
*/}}
{{- define "widget-operator.annotations" -}}
{{- with .root.Values.commonAnnotations }}
{{- "annotations:" | nindent $.indent }}
{{- toYaml . | nindent (add $.indent 2 | int) }}
{{- end }}
{{- end }}

{{/* Image reference: [registry/]repository, then @digest or :tag. */}}
{{- define "widget-operator.image" -}}
{{- $repo := .Values.image.repository }}
{{- with .Values.image.registry }}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion | default "dev") }}
{{- end }}
{{- end }}

{{/* The webhook plane's ServiceAccount (the name the single-Deployment layout's manager had). */}}
{{- define "widget-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- .Values.serviceAccount.name | default (include "widget-operator.fullname" .) }}
{{- else if .Values.serviceAccount.name }}
{{- .Values.serviceAccount.name }}
{{- else }}
{{- fail "serviceAccount.create=false needs serviceAccount.name and controller.serviceAccountName: the existing ServiceAccounts the webhook and controller planes run as" }}
{{- end }}
{{- end }}

{{/*
The controller plane's ServiceAccount: controller.serviceAccountName, else (serviceAccount.create)
the release's full name with -controller.
*/}}
{{- define "widget-operator.controllerServiceAccountName" -}}
{{- if .Values.controller.serviceAccountName }}
{{- .Values.controller.serviceAccountName }}
{{- else if .Values.serviceAccount.create }}
{{- printf "%s-controller" (include "widget-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- fail "serviceAccount.create=false needs serviceAccount.name and controller.serviceAccountName: the existing ServiceAccounts the webhook and controller planes run as" }}
{{- end }}
{{- end }}

{{/* Names of the generated objects. */}}
{{- define "widget-operator.webhookDeploymentName" -}}
{{- printf "%s-webhook" (include "widget-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "widget-operator.controllerName" -}}
{{- printf "%s-controller" (include "widget-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "widget-operator.controllerMetricsServiceName" -}}
{{- printf "%s-controller-metrics" (include "widget-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
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

{{/* The ConfigMap that tells `kubectl widget status` which revision is applied. */}}
{{- define "widget-operator.releaseInfoName" -}}
{{- printf "%s-release-info" (include "widget-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of a hook Job: the revision that ran it, which status compares with release-info. */}}
{{- define "widget-operator.hookJobLabels" -}}
{{ include "widget-operator.labels" . }}
app.kubernetes.io/component: hooks
widgetry.io/release-revision: {{ .Release.Revision | quote }}
{{- end }}

{{- define "widget-operator.caBundleSecretName" -}}
{{- printf "%s-ca-bundle" (include "widget-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
cert-manager's cainjector annotation. With certManager.caBundleOverlap the caBundle comes from
the bundle Secret the manager keeps (outgoing and incoming CA across a rotation); without, from
the serving Certificate (its current CA only).
*/}}
{{- define "widget-operator.injectCAFrom" -}}
{{- if .Values.certManager.caBundleOverlap }}
cert-manager.io/inject-ca-from-secret: {{ printf "%s/%s" .Release.Namespace (include "widget-operator.caBundleSecretName" .) }}
{{- else }}
cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "widget-operator.servingCertificateName" .) }}
{{- end }}
{{- end }}

{{- /*
The admission webhooks' matchConditions shared by both: an UPDATE that leaves a Widget's spec
and annotations as they were (the only fields either webhook reads: the validator checks the
spec, ratcheting what is unchanged; the defaulter keeps v1-only spec fields, which a v1alpha1
client carries in the conversion-data annotation) needs neither webhook. Those are the writes
the cluster makes to delete things: finalizers removed (by the controller, kubectl patch or
the namespace controller's cleanup), the garbage collector's foregroundDeletion finalizer and
ownerReferences. The apiserver then never calls our pods for them, so deletion and garbage
collection go on while every pod of ours is gone or hung.
*/ -}}
{{- define "widget-operator.webhookMatchConditions" -}}
- name: changes-spec-or-annotations
  expression: >-
    request.operation != 'UPDATE' ||
    (has(object.spec) ? object.spec : {}) != (has(oldObject.spec) ? oldObject.spec : {}) ||
    (has(object.metadata.annotations) ? object.metadata.annotations : {}) !=
    (has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {})
{{- end -}}

{{/*
"true" when the MutatingAdmissionPolicy keeps, for v1alpha1 writers, what that version cannot
express (templates/mutatingadmissionpolicy.yaml), "" when the mutating webhook alone does.
webhook.mutation auto decides from the cluster's API versions at render time (helm install and
upgrade read them from the cluster; helm template needs --api-versions
admissionregistration.k8s.io/v1/MutatingAdmissionPolicy); policy and webhook force a route.
*/}}
{{- define "widget-operator.keepByPolicy" -}}
{{- $mode := .Values.webhook.mutation | default "auto" }}
{{- if not (has $mode (list "auto" "policy" "webhook")) }}
{{- fail (printf "webhook.mutation %q is not one of auto, policy, webhook" $mode) }}
{{- end }}
{{- if or (eq $mode "policy") (and (eq $mode "auto") (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")) }}true{{ end }}
{{- end -}}

{{/*
A CEL condition, true when the MutatingAdmissionPolicy computes exactly what the mutating
webhook would for an UPDATE through v1alpha1: the stored object's and the request's
conversion-data annotations are each absent or in the canonical form that
conversion.RestoreData.Marshal writes — {}, {"paused":P}, {"timeout":"T"} or
{"timeout":"T","paused":P} — with P true or false (an explicit false is kept as written) and T a Go duration of at most four components, each small
enough that time.ParseDuration (which CEL's duration() is) cannot overflow, and nothing to
unescape. CEL has no JSON parser; this grammar is what its regular expressions can read
exactly. Anything else (another key order, spaces, JSON escapes, unknown keys, a malformed
value) goes to the webhook, which parses JSON; the policy's matchConditions require this
condition and, when the policy is rendered, the webhook's require its negation, so each request
is handled by exactly one of them. Values over 256 characters go to the webhook before any
regular expression runs, which bounds the CEL cost. matchConditions cannot use variables,
hence one expression, written out for both objects.
*/}}
{{- define "widget-operator.conversionDataCanonical" -}}
{{- $key := "widgetry.io/conversion-data" }}
{{- $re := printf `^\{(?:"timeout":"%s"(?:,"paused":(?:true|false))?|"paused":(?:true|false))?\}$` (include "widget-operator.boundedDuration" .) }}
{{- $conds := list }}
{{- range $obj := list "oldObject" "object" }}
{{- $conds = append $conds (printf "(!has(%[1]s.metadata.annotations) || !(%[2]s in %[1]s.metadata.annotations) || (size(%[1]s.metadata.annotations[%[2]s]) <= 256 && %[1]s.metadata.annotations[%[2]s].matches(r'%[3]s')))" $obj (squote $key) $re) }}
{{- end }}
{{- join " && " $conds }}
{{- end -}}

{{/*
A regular expression (RE2, unanchored) for the Go durations CEL's duration() reads without
overflow: at most four components, each with few enough digits that their sum fits
time.Duration. The conversion-data routes and guard use it to read a timeout exactly.
*/}}
{{- define "widget-operator.boundedDuration" -}}
{{- $digits := dict "ns" 17 "us|µs|μs" 14 "ms" 11 "s" 8 "m" 6 "h" 5 }}
{{- $components := list }}
{{- range $unit := list "ns" "us|µs|μs" "ms" "s" "m" "h" }}
{{- $components = append $components (printf `(?:[0-9]{1,%d}(?:\.[0-9]*)?|\.[0-9]+)(?:%s)` (get $digits $unit | int) $unit) }}
{{- end }}
{{- printf `[-+]?(?:%s){1,4}` (join "|" $components) }}
{{- end -}}

{{/*
A CEL expression: the conversion-data annotation an UPDATE through v1alpha1 must store, as
conversion.RestoreData.Marshal writes it ('{}' when nothing is to be kept), for requests where
widget-operator.conversionDataCanonical holds. The same steps as the mutating webhook
(webhook.Defaulter with conversion.SpecFromHub/SpecToHub):
  - paused: always kept from the stored object ('true', 'false' or '': not set);
  - the exact timeout: the stored annotation's, while it is still the stored object's timeout
    (it rounds up to the stored timeoutSeconds: ceil(T) = s exactly when
    (s-1)s < T <= s·s, compared as durations; getSeconds() goes through float64), is not just
    the canonical rendering of those whole seconds (which timeoutSeconds holds on its own,
    time.Duration.String: 59s, 1m0s, 1h0m0s), and the request did not change timeoutSeconds
    (then it rounds up to the request's seconds too; a changed value means a v1alpha1 client
    set a new timeout, which wins).
The request's own annotation plays no part: it is replaced by what the stored object implies.
Admission CEL has no cel.bind and a webhook's matchConditions no variables, so each step is
bound as [value].map(name, rest)[0]: one expression, the same in the policy and in the
webhook's condition.
*/}}
{{- define "widget-operator.keptConversionData" -}}
{{- $key := squote "widgetry.io/conversion-data" -}}
[has(oldObject.metadata.annotations) && {{ $key }} in oldObject.metadata.annotations ? oldObject.metadata.annotations[{{ $key }}] : ''].map(stored,
[stored.endsWith('"paused":true}') ? 'true' : stored.endsWith('"paused":false}') ? 'false' : ''].map(paused,
[stored.startsWith('{"timeout":"') ? stored.substring(12, stored.indexOf('"', 12)) : ''].map(exact,
[has(oldObject.spec) && has(oldObject.spec.timeoutSeconds) ? oldObject.spec.timeoutSeconds : 0].map(oldSeconds,
[has(object.spec) && has(object.spec.timeoutSeconds) ? object.spec.timeoutSeconds : 0].map(newSeconds,
[oldSeconds >= 3600 ? string(oldSeconds / 3600) + 'h' + string(oldSeconds % 3600 / 60) + 'm' + string(oldSeconds % 60) + 's'
  : oldSeconds >= 60 ? string(oldSeconds / 60) + 'm' + string(oldSeconds % 60) + 's' : string(oldSeconds) + 's'].map(wholeSeconds,
[exact != '' && oldSeconds > 0 && newSeconds == oldSeconds && exact != wholeSeconds &&
    duration(exact) > duration(string(oldSeconds - 1) + 's') && duration(exact) <= duration(string(oldSeconds) + 's') ? exact : ''].map(timeout,
  timeout != '' ? '{"timeout":"' + timeout + (paused != '' ? '","paused":' + paused + '}' : '"}') : paused != '' ? '{"paused":' + paused + '}' : '{}'
)[0])[0])[0])[0])[0])[0])[0]
{{- end -}}

{{/* A CEL expression: the request's conversion-data annotation, '' when it has none. */}}
{{- define "widget-operator.requestConversionData" -}}
{{- $key := squote "widgetry.io/conversion-data" -}}
has(object.metadata.annotations) && {{ $key }} in object.metadata.annotations ? object.metadata.annotations[{{ $key }}] : ''
{{- end -}}

{{/* Pod and container security contexts (values; the defaults meet Pod Security "restricted"). */}}
{{- define "widget-operator.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext }}
{{- end }}
{{- define "widget-operator.containerSecurityContext" -}}
{{- toYaml .Values.containerSecurityContext }}
{{- end }}

{{/*
Annotations of the hook Jobs' RBAC: created before the Jobs (earlier in Helm's install order)
in every phase that runs a hook, and deleted when the phase ends: once its hooks succeeded, or
when a later hook fails (Helm deletes a failed phase's earlier hooks by their hook-succeeded
policy; internal/chart's TestHookRBACGoneAfterFailedHook, Helm 3 and 4). The failed Job stays
for its log.
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
{{- with $root.Values.hookPods.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $root.Values.hookPods.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.hookPods.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.hookPods.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
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
      # The reason recorded on every ConfigMap it writes (internal/gatestate): which hook of
      # which revision wrote it.
      - {{ printf "--reason=helm hook %s of release %s, revision %d" .name $root.Release.Name $root.Release.Revision | quote }}
      {{- range .args }}
      - {{ . | quote }}
      {{- end }}
    env:
      - name: POD_NAMESPACE
        valueFrom:
          fieldRef:
            fieldPath: metadata.namespace
    resources:
      {{- toYaml $root.Values.hookPods.resources | nindent 6 }}
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
    {{- include "widget-operator.annotations" (dict "root" .root "indent" 4) }}
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

{{/*
A Go duration ("1h30m", "10s", "500ms") in seconds, as a float: the cross-field checks compare
durations the schema only checks the form of.
*/}}
{{- define "widget-operator.seconds" -}}
{{- $total := 0.0 }}
{{- $units := dict "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 "us" 0.000001 "µs" 0.000001 "ns" 0.000000001 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" (toString .) -1 }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . }}
{{- $total = addf $total (mulf (float64 $number) (get $units (trimPrefix $number .))) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
Checks across values that the schema cannot express; each failure says what to change. The
Helm version: the chart relies on helm.sh/hook-output-log-policy (Helm 3.18) to print its
hooks' output, among them the preflight's refusals.
*/}}
{{- define "widget-operator.validate" -}}
{{- $minHelm := "3.18.0" }}
{{- if semverCompare (printf "<%s-0" $minHelm) .Capabilities.HelmVersion.Version }}
{{- fail (printf "this chart needs Helm %s or newer (it prints its hooks' output with helm.sh/hook-output-log-policy); this is Helm %s" $minHelm .Capabilities.HelmVersion.Version) }}
{{- end }}
{{- $ports := dict }}
{{- $named := list (list "webhook.port" .Values.webhook.port) (list "manager.healthPort" .Values.manager.healthPort) (list "manager.controllerHealthPort" .Values.manager.controllerHealthPort) }}
{{- if .Values.metrics.port }}
{{- $named = append $named (list "metrics.port" .Values.metrics.port) }}
{{- end }}
{{- range $named }}
{{- $key := toString (index . 1) }}
{{- if hasKey $ports $key }}
{{- fail (printf "%s and %s are both %s: the manager's webhook, health and metrics servers and the controller's health server need a port each" (get $ports $key) (index . 0) $key) }}
{{- end }}
{{- $_ := set $ports $key (index . 0) }}
{{- end }}
{{- $le := .Values.manager.leaderElection }}
{{- $lease := include "widget-operator.seconds" $le.leaseDuration | float64 }}
{{- $renew := include "widget-operator.seconds" $le.renewDeadline | float64 }}
{{- $retry := include "widget-operator.seconds" $le.retryPeriod | float64 }}
{{- if not (gt $lease $renew) }}
{{- fail (printf "manager.leaderElection: leaseDuration (%s) must be longer than renewDeadline (%s), or a leader could lose its lease before it gives up leading" $le.leaseDuration $le.renewDeadline) }}
{{- end }}
{{- if not (gt $renew (mulf $retry 1.2)) }}
{{- fail (printf "manager.leaderElection: renewDeadline (%s) must be longer than 1.2 × retryPeriod (%s): client-go's leader election refuses otherwise" $le.renewDeadline $le.retryPeriod) }}
{{- end }}
{{- $cm := .Values.certManager }}
{{- if not (lt (include "widget-operator.seconds" $cm.renewBefore | float64) (include "widget-operator.seconds" $cm.duration | float64)) }}
{{- fail (printf "certManager.renewBefore (%s) must be shorter than certManager.duration (%s)" $cm.renewBefore $cm.duration) }}
{{- end }}
{{- if not (lt (include "widget-operator.seconds" $cm.caRenewBefore | float64) (include "widget-operator.seconds" $cm.caDuration | float64)) }}
{{- fail (printf "certManager.caRenewBefore (%s) must be shorter than certManager.caDuration (%s)" $cm.caRenewBefore $cm.caDuration) }}
{{- end }}
{{- $shutdown := addf (include "widget-operator.seconds" .Values.manager.drainDelay | float64) (include "widget-operator.seconds" .Values.manager.gracefulShutdownTimeout | float64) }}
{{- if not (gt (float64 .Values.terminationGracePeriodSeconds) $shutdown) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed manager.drainDelay + manager.gracefulShutdownTimeout (%s + %s), or the kubelet kills the manager before it drained" .Values.terminationGracePeriodSeconds .Values.manager.drainDelay .Values.manager.gracefulShutdownTimeout) }}
{{- end }}
{{- $drain := include "widget-operator.seconds" .Values.manager.drainDelay | float64 }}
{{- $connDrain := include "widget-operator.seconds" .Values.manager.connectionDrainTimeout | float64 }}
{{- if lt $connDrain $drain }}
{{- fail (printf "manager.connectionDrainTimeout (%s) must not be shorter than manager.drainDelay (%s): both count from SIGTERM" .Values.manager.connectionDrainTimeout .Values.manager.drainDelay) }}
{{- end }}
{{- if not (gt (float64 .Values.terminationGracePeriodSeconds) (addf $connDrain 5.0)) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed manager.connectionDrainTimeout (%s) by more than 5 s, or the kubelet kills the manager while the apiserver still holds connections to it" .Values.terminationGracePeriodSeconds .Values.manager.connectionDrainTimeout) }}
{{- end }}
{{- $pdb := .Values.podDisruptionBudget }}
{{- if and (ne (toString $pdb.minAvailable) "") (ne (toString $pdb.maxUnavailable) "") }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" }}
{{- end }}
{{- end }}

{{/*
Environment of both planes' containers; dict "root" (the chart's root) and "container" (whose
memory limit GOMEMLIMIT reads).
*/}}
{{- define "widget-operator.managerEnv" -}}
# The manager's namespace (catalog, Lease, migration progress) and its Lease identity.
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
# Where the replica runs, for widget_replica_placement_info (WidgetWebhookReplicasNotSpread).
# The zone is the pod's copy of its node's topology.kubernetes.io/zone label, which the
# apiserver sets when the pod is bound (PodTopologyLabelsAdmission, on by default since
# Kubernetes 1.35); empty before that, or on nodes without the label.
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: NODE_ZONE
  valueFrom:
    fieldRef:
      fieldPath: metadata.labels['topology.kubernetes.io/zone']
# The container's memory limit, in bytes: the Go runtime's soft limit (the manager lowers it
# to 90%) and what the webhooks' in-flight budget and body limits are derived from. Without a
# limit set, the node's allocatable memory.
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      containerName: {{ .container }}
      resource: limits.memory
{{- with .root.Values.manager.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volume mounts of both planes' containers besides their certificates. */}}
{{- define "widget-operator.managerVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- with .Values.manager.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Where one plane's pods run: affinity (by default spread over nodes), the zone spread and the
user's topologySpreadConstraints (each without a labelSelector gets the plane's), nodeSelector
and tolerations; dict "root" and "plane". Each plane spreads its own replicas: a webhook replica
and a controller replica on one node do not repel each other.
*/}}
{{- define "widget-operator.podScheduling" -}}
{{- $root := .root }}
{{- $selector := include "widget-operator.selectorLabels" . }}
{{- if $root.Values.affinity }}
affinity:
  {{- toYaml $root.Values.affinity | nindent 2 }}
{{- else if $root.Values.podAntiAffinity }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- $selector | nindent 14 }}
{{- end }}
{{- $spreadHeader := false }}
{{- if $root.Values.zoneSpread }}
{{- $spreadHeader = true }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- $selector | nindent 8 }}
    matchLabelKeys:
      - pod-template-hash
{{- end }}
{{- range $root.Values.topologySpreadConstraints }}
{{- if not $spreadHeader }}
{{- $spreadHeader = true }}
topologySpreadConstraints:
{{- end }}
  {{- $constraint := deepCopy . }}
  {{- if not (hasKey $constraint "labelSelector") }}
  {{- $_ := set $constraint "labelSelector" (dict "matchLabels" ($selector | fromYaml)) }}
  {{- end }}
  - {{- toYaml $constraint | nindent 4 }}
{{- end }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The names widgetctl handover works on, as its flags. */}}
{{- define "widget-operator.handoverArgs" -}}
- --legacy-deployment={{ include "widget-operator.legacyDeploymentName" . }}
- --webhook-deployment={{ include "widget-operator.webhookDeploymentName" . }}
- --webhook-service={{ include "widget-operator.webhookServiceName" . }}
{{- end }}
