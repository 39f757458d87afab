{{/* Names, labels and images of the fileserver subchart. Every define is prefixed "fileserver.":
define names are global across the umbrella and its subcharts. */}}

{{- define "fileserver.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Always <release>-<chart>: other parts reach this one by that name (no "contains" shortcut). */}}
{{- define "fileserver.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fileserver.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: name + instance only (selectors are immutable). */}}
{{- define "fileserver.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fileserver.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fileserver.labels" -}}
helm.sh/chart: {{ include "fileserver.chart" . }}
{{ include "fileserver.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: elasticctr
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Image reference (elasticctr.image): <registry>/<repository>/<name>, @<digest> or :<tag>. */}}
{{- define "fileserver.image" -}}
{{- include "elasticctr.image" (dict "ctx" . "image" .Values.image) -}}
{{- end -}}


{{- define "fileserver.secretName" -}}
{{- .Values.auth.existingSecret | default (include "fileserver.fullname" .) -}}
{{- end -}}

{{- define "fileserver.claimName" -}}
{{- .Values.persistence.existingClaim | default (include "fileserver.fullname" .) -}}
{{- end -}}
