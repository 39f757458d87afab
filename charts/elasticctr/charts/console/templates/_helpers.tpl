{{/* The console subchart's own helpers; its names, labels and image come from the common
library (elasticctr.component.*, name "console"). Every define here is prefixed "console.":
define names are global across the umbrella and its subcharts. */}}

{{- define "console.fullname" -}}
{{- include "elasticctr.component.fullname" (dict "ctx" . "name" "console") -}}
{{- end -}}

{{- define "console.secretName" -}}
{{- .Values.auth.existingSecret | default (include "console.fullname" .) -}}
{{- end -}}

{{- define "console.claimName" -}}
{{- .Values.persistence.existingClaim | default (include "console.fullname" .) -}}
{{- end -}}

{{- define "console.serviceAccountName" -}}
{{- include "elasticctr.serviceAccountName" (dict "sa" .Values.serviceAccount "name" (include "console.fullname" .)) -}}
{{- end -}}
