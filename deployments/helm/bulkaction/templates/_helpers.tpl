{{/* Chart name, truncated to the 63 characters a label value may hold. */}}
{{- define "bulkaction.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects: <release>-<chart>, or the release name when it already holds the chart's. */}}
{{- define "bulkaction.fullname" -}}
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

{{/* Name of one target's objects; call with (dict "root" $ "target" "worker"). */}}
{{- define "bulkaction.targetName" -}}
{{- printf "%s-%s" (include "bulkaction.fullname" .root) .target | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "bulkaction.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "bulkaction.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: bulkaction
{{- end }}

{{/* Selector labels of every pod of the release. */}}
{{- define "bulkaction.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bulkaction.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector labels of one target's pods; call with (dict "root" $ "target" "worker"). */}}
{{- define "bulkaction.targetSelectorLabels" -}}
{{ include "bulkaction.selectorLabels" .root }}
app.kubernetes.io/component: {{ .target }}
{{- end }}

{{/* Labels of one target's objects; call with (dict "root" $ "target" "worker"). */}}
{{- define "bulkaction.targetLabels" -}}
{{ include "bulkaction.labels" .root }}
app.kubernetes.io/component: {{ .target }}
{{- end }}

{{/* Name of the Secret the chart creates for the connection URLs. */}}
{{- define "bulkaction.secretName" -}}
{{- printf "%s-connections" (include "bulkaction.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of the ConfigMap of the BULKACTION_* settings. */}}
{{- define "bulkaction.configMapName" -}}
{{- printf "%s-config" (include "bulkaction.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of the service account the pods run as. */}}
{{- define "bulkaction.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "bulkaction.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Replicas the worker Deployment may reach: its autoscaling maximum, or its replicas. */}}
{{- define "bulkaction.workerInstances" -}}
{{- $w := .Values.targets.worker }}
{{- if and $w.enabled $w.autoscaling.enabled }}
{{- int64 $w.autoscaling.maxReplicas }}
{{- else if $w.enabled }}
{{- int64 $w.replicas }}
{{- else }}
{{- 1 }}
{{- end }}
{{- end }}

{{/*
An environment value as a string. Values files decode numbers as float64, which would print
1048576 as 1.048576e+06: whole numbers are printed as integers.
*/}}
{{- define "bulkaction.envValue" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) }}
{{- int64 . | toString }}
{{- else }}
{{- toString . }}
{{- end }}
{{- end }}

{{/* SHUTDOWN_GRACE_PERIOD_MS in seconds, plus 15 s for draining NATS and the HTTP server. */}}
{{- define "bulkaction.terminationGracePeriodSeconds" -}}
{{- $ms := 30000 }}
{{- if hasKey .Values.config "BULKACTION_SHUTDOWN_GRACE_PERIOD_MS" }}
{{- $ms = int64 (index .Values.config "BULKACTION_SHUTDOWN_GRACE_PERIOD_MS") }}
{{- end }}
{{- add (div $ms 1000) 15 }}
{{- end }}

{{/* Replicas a target runs with at least (its autoscaling minimum when autoscaled). */}}
{{- define "bulkaction.minReplicas" -}}
{{- if and (hasKey .t "autoscaling") .t.autoscaling.enabled }}
{{- int64 .t.autoscaling.minReplicas }}
{{- else }}
{{- int64 .t.replicas }}
{{- end }}
{{- end }}

{{/* Name of the Secret holding the gateway's API keys file. */}}
{{- define "bulkaction.gatewayKeysSecretName" -}}
{{- if .Values.gateway.existingKeysSecret }}
{{- .Values.gateway.existingKeysSecret }}
{{- else }}
{{- printf "%s-gateway-keys" (include "bulkaction.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Directory the keys Secret is mounted on, and the keys file in it (BULKACTION_GATEWAY_KEYS_FILE). */}}
{{- define "bulkaction.gatewayKeysDir" -}}
/etc/bulkaction/gateway
{{- end }}
{{- define "bulkaction.gatewayKeysFile" -}}
{{- include "bulkaction.gatewayKeysDir" . }}/keys
{{- end }}

{{/* Directory of the gateway's spool emptyDir (BULKACTION_GATEWAY_SPOOL_DIR). */}}
{{- define "bulkaction.gatewaySpoolDir" -}}
/var/spool/bulkaction
{{- end }}

{{/* Name of the gateway's API Service. */}}
{{- define "bulkaction.gatewayAPIServiceName" -}}
{{- printf "%s-gateway-api" (include "bulkaction.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
