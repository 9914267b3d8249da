{{/* Chart name, honouring nameOverride. */}}
{{- define "omni-cluster-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name used as the prefix of every resource. */}}
{{- define "omni-cluster-operator.fullname" -}}
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

{{- define "omni-cluster-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "omni-cluster-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "omni-cluster-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
control-plane: controller-manager
{{- end }}

{{- define "omni-cluster-operator.labels" -}}
helm.sh/chart: {{ include "omni-cluster-operator.chart" . }}
{{ include "omni-cluster-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: omni-cluster-operator
{{- end }}

{{- define "omni-cluster-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-controller-manager" (include "omni-cluster-operator.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "omni-cluster-operator.image" -}}
{{- if eq .Values.image.repository "ghcr.io/texas-hpc/omni-cluster-operator" }}
{{- fail "image.repository ghcr.io/texas-hpc/omni-cluster-operator is the Go operator's image, which cannot run this chart; remove the key (a values file copied from the Go operator's chart has it) or name your own build" }}
{{- end }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "omni-cluster-operator.webhookServiceName" -}}
{{- printf "%s-webhook-service" (include "omni-cluster-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Service names are DNS labels: at most 63 characters. */}}
{{- define "omni-cluster-operator.metricsPortName" -}}
{{- ternary "https" "http-metrics" .Values.metrics.secure }}
{{- end }}

{{- define "omni-cluster-operator.metricsServiceName" -}}
{{- printf "%s-controller-manager-metrics-service" (include "omni-cluster-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "omni-cluster-operator.certificateName" -}}
{{- printf "%s-serving-cert" (include "omni-cluster-operator.fullname" .) }}
{{- end }}

{{/* Secret the webhook serving certificate is read from. */}}
{{- define "omni-cluster-operator.certSecretName" -}}
{{- if .Values.webhook.certSecretName }}
{{- .Values.webhook.certSecretName }}
{{- else if .Values.certManager.enabled }}
{{- printf "%s-webhook-server-cert" (include "omni-cluster-operator.fullname" .) }}
{{- else }}
{{- fail "webhook.enabled is true but certManager.enabled is false: set webhook.certSecretName to an existing kubernetes.io/tls Secret (and webhook.caBundle), enable cert-manager, or disable the webhook" }}
{{- end }}
{{- end }}

{{/*
The eleven kinds: kind, plural, singular (plural and singular match for OmniWorkers).
Rendered as YAML and read back with fromYamlArray so every template iterates the same list.
*/}}
{{- define "omni-cluster-operator.kinds" -}}
- {kind: OmniConnection, plural: omniconnections, singular: omniconnection}
- {kind: OmniCluster, plural: omniclusters, singular: omnicluster}
- {kind: OmniControlPlane, plural: omnicontrolplanes, singular: omnicontrolplane}
- {kind: OmniWorkers, plural: omniworkers, singular: omniworkers}
- {kind: OmniMachine, plural: omnimachines, singular: omnimachine}
- {kind: OmniKubeconfigExport, plural: omnikubeconfigexports, singular: omnikubeconfigexport}
- {kind: OmniHelmRelease, plural: omnihelmreleases, singular: omnihelmrelease}
- {kind: OmniSecretSync, plural: omnisecretsyncs, singular: omnisecretsync}
- {kind: OmniKubeconfigExportSet, plural: omnikubeconfigexportsets, singular: omnikubeconfigexportset}
- {kind: OmniHelmReleaseSet, plural: omnihelmreleasesets, singular: omnihelmreleaseset}
- {kind: OmniSecretSyncSet, plural: omnisecretsyncsets, singular: omnisecretsyncset}
{{- end }}

{{/* The manager's permissions; the same rules back the Role and the ClusterRole. */}}
{{- define "omni-cluster-operator.managerRules" -}}
{{- $kinds := include "omni-cluster-operator.kinds" . | fromYamlArray -}}
- apiGroups: [""]
  resources: [secrets]
  verbs: [create, delete, get, list, patch, update, watch]
{{- /* ConfigMaps named in an OmniHelmRelease's spec.chart.valuesFrom: their metadata is
       watched, their content read; never written. */}}
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
- apiGroups: [omni.texashpc.com]
  resources:
  {{- range $kinds }}
    - {{ .plural }}
  {{- end }}
  verbs: [create, delete, get, list, patch, update, watch]
- apiGroups: [omni.texashpc.com]
  resources:
  {{- range $kinds }}
    - {{ .plural }}/finalizers
  {{- end }}
  verbs: [update]
- apiGroups: [omni.texashpc.com]
  resources:
  {{- range $kinds }}
    - {{ .plural }}/status
  {{- end }}
  verbs: [get, patch, update]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- if .Values.impersonation.enabled }}
{{- /* Reads of the Secrets an object references are made as its ServiceAccount
       (spec.serviceAccountName, --default-service-account): the operator may act as a
       ServiceAccount of the namespaces it watches, and as nothing else (no users, no groups). */}}
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [impersonate]
  {{- with .Values.impersonation.serviceAccountNames }}
  resourceNames:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* Labels of one operator Deployment and its pods: `(list $ "")` for the main one, `(list $
NAME)` for shard NAME. A shard's pods carry `omni.texashpc.com/shard` and not the
`control-plane` label, so the main Deployment and the webhook Service never select them. */}}
{{- define "omni-cluster-operator.instanceSelectorLabels" -}}
{{- $root := index . 0 }}
{{- $shard := index . 1 }}
{{- if $shard }}
app.kubernetes.io/name: {{ include "omni-cluster-operator.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
omni.texashpc.com/shard: {{ $shard }}
{{- else }}
{{- include "omni-cluster-operator.selectorLabels" $root }}
{{- end }}
{{- end }}

{{- define "omni-cluster-operator.instanceLabels" -}}
helm.sh/chart: {{ include "omni-cluster-operator.chart" (index . 0) }}
{{ include "omni-cluster-operator.instanceSelectorLabels" . }}
app.kubernetes.io/version: {{ (index . 0).Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ (index . 0).Release.Service }}
app.kubernetes.io/part-of: omni-cluster-operator
{{- end }}

{{/* Every operator pod, the shards' included (metrics, the NetworkPolicy). */}}
{{- define "omni-cluster-operator.podSelectorLabels" -}}
app.kubernetes.io/name: {{ include "omni-cluster-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- if not .Values.sharding.shards }}
control-plane: controller-manager
{{- end }}
{{- end }}
