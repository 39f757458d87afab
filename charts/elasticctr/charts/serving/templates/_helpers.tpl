{{/* Names, labels and images of the serving subchart. Every define is prefixed "serving.":
define names are global across the umbrella and its subcharts. */}}

{{- define "serving.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Always <release>-<chart>: other parts reach this one by that name (no "contains" shortcut). */}}
{{- define "serving.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "serving.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: name + instance only (selectors are immutable). */}}
{{- define "serving.selectorLabels" -}}
app.kubernetes.io/name: {{ include "serving.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "serving.labels" -}}
helm.sh/chart: {{ include "serving.chart" . }}
{{ include "serving.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: elasticctr
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Image reference (elasticctr.image): <registry>/<repository>/<name>, @<digest> or :<tag>. */}}
{{- define "serving.image" -}}
{{- include "elasticctr.image" (dict "ctx" . "image" .Values.image) -}}
{{- end -}}


{{- define "serving.authSecretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-auth" (include "serving.fullname" .)) -}}
{{- end -}}

{{- define "serving.modelStore" -}}
{{- include "elasticctr.modelStore" . -}}
{{- end -}}

{{- define "serving.trackingUri" -}}
{{- .Values.global.mlflow.trackingUri | default (printf "http://%s-mlflow:5000" .Release.Name) -}}
{{- end -}}
