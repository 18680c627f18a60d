{{/* Names. */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.headless" -}}
{{- printf "%s-headless" (include "sluice.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: server
{{- end -}}

{{/* Cluster mode: more than one node. */}}
{{- define "sluice.cluster" -}}
{{- if gt (int .Values.replicaCount) 1 -}}true{{- end -}}
{{- end -}}

{{- define "sluice.secretName" -}}
{{- default (printf "%s-cluster" (include "sluice.fullname" .)) .Values.clusterSecret.existingSecret -}}
{{- end -}}

{{- define "sluice.gracePeriod" -}}
{{- $min := add (int .Values.drainTimeoutSeconds) (int .Values.shutdownTimeoutSeconds) -}}
{{- if gt (int .Values.terminationGracePeriodSeconds) 0 -}}
{{- if le (int .Values.terminationGracePeriodSeconds) $min -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be above drainTimeoutSeconds + shutdownTimeoutSeconds (%d)" (int .Values.terminationGracePeriodSeconds) $min) -}}
{{- end -}}
{{- .Values.terminationGracePeriodSeconds -}}
{{- else -}}
{{- add $min 15 -}}
{{- end -}}
{{- end -}}
