{{- define "shoal.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "shoal.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "shoal.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "shoal.serviceAccountName" -}}
{{- default (include "shoal.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The chart's labels plus monitoring.labels and an object's own, for what a Prometheus selects by label. */}}
{{- define "shoal.monitoringLabels" -}}
{{- include "shoal.labels" .root }}
{{- with .root.Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- with .own }}
{{ toYaml . }}
{{- end }}
{{- end -}}
