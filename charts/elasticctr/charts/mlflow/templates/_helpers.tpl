{{/* Names, labels and images of the mlflow subchart. Every define is prefixed "mlflow.":
define names are global across the umbrella and its subcharts. */}}

{{- define "mlflow.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Always <release>-<chart>: other parts reach this one by that name (no "contains" shortcut). */}}
{{- define "mlflow.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mlflow.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: name + instance only (selectors are immutable). */}}
{{- define "mlflow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mlflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mlflow.labels" -}}
helm.sh/chart: {{ include "mlflow.chart" . }}
{{ include "mlflow.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: elasticctr
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Image reference (elasticctr.image): <registry>/<repository>/<name>, @<digest> or :<tag>. */}}
{{- define "mlflow.image" -}}
{{- include "elasticctr.image" (dict "ctx" . "image" .Values.image) -}}
{{- end -}}

{{- define "mlflow.claimName" -}}
{{- .Values.persistence.existingClaim | default (include "mlflow.fullname" .) -}}
{{- end -}}

{{/* Host header patterns MLflow's security middleware accepts. */}}
{{- define "mlflow.allowedHosts" -}}
{{- $f := include "mlflow.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $f (printf "%s:*" $f) (printf "%s.%s" $f $ns) (printf "%s.%s:*" $f $ns) (printf "%s.%s.svc*" $f $ns) "localhost" "localhost:*" "127.0.0.1:*" "10.*" "192.168.*" "172.*" -}}
{{- with .Values.ingress.host }}{{- $hosts = append $hosts . -}}{{- end -}}
{{- range $name, $pattern := .Values.allowedHosts }}{{- $hosts = append $hosts $pattern -}}{{- end -}}
{{- join "," $hosts -}}
{{- end -}}

