{{/* The name of the chart's objects: <release>-callback-platform, or the release name when it already says so. */}}
{{- define "callback-platform.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "callback-platform.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "callback-platform.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: callback-platform
{{- end -}}

{{/* Labels that select the operator's pods. */}}
{{- define "callback-platform.selectorLabels" -}}
app.kubernetes.io/name: callback-platform-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The operator's ServiceAccount. */}}
{{- define "callback-platform.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-operator" (include "callback-platform.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator image. */}}
{{- define "callback-platform.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The callbackd image of the samples. */}}
{{- define "callback-platform.callbackdImage" -}}
{{- printf "%s:%s" .Values.callbackdImage.repository (default .Chart.AppVersion .Values.callbackdImage.tag) -}}
{{- end -}}
