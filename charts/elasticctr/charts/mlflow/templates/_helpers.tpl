{{/* The mlflow subchart's own helpers; its names, labels and image come from the common
library (elasticctr.component.*, name "mlflow"). Every define here is prefixed "mlflow.":
define names are global across the umbrella and its subcharts. */}}

{{- define "mlflow.claimName" -}}
{{- .Values.persistence.existingClaim | default (include "elasticctr.component.fullname" (dict "ctx" . "name" "mlflow")) -}}
{{- end -}}

{{/* Host header patterns MLflow's security middleware accepts. */}}
{{- define "mlflow.allowedHosts" -}}
{{- $f := include "elasticctr.component.fullname" (dict "ctx" . "name" "mlflow") -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $f (printf "%s:*" $f) (printf "%s.%s" $f $ns) (printf "%s.%s:*" $f $ns) (printf "%s.%s.svc*" $f $ns) "localhost" "localhost:*" "127.0.0.1:*" "10.*" "192.168.*" "172.*" -}}
{{- with .Values.ingress.host }}{{- $hosts = append $hosts . -}}{{- end -}}
{{- range $name, $pattern := .Values.allowedHosts }}{{- $hosts = append $hosts $pattern -}}{{- end -}}
{{- join "," $hosts -}}
{{- end -}}

