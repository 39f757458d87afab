{{/* The serving subchart's own helpers; its names, labels and image come from the common
library (elasticctr.component.*, name "serving"). Every define here is prefixed "serving.":
define names are global across the umbrella and its subcharts. */}}

{{- define "serving.authSecretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-auth" (include "elasticctr.component.fullname" (dict "ctx" . "name" "serving"))) -}}
{{- end -}}

{{- define "serving.modelStore" -}}
{{- include "elasticctr.modelStore" . -}}
{{- end -}}

{{- define "serving.trackingUri" -}}
{{- .Values.global.mlflow.trackingUri | default (printf "http://%s-mlflow:%s" .Release.Name (include "elasticctr.port" "mlflow")) -}}
{{- end -}}
