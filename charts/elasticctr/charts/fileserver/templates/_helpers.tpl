{{/* The fileserver subchart's own helpers; its names, labels and image come from the common
library (elasticctr.component.*, name "fileserver"). Every define here is prefixed "fileserver.":
define names are global across the umbrella and its subcharts. */}}

{{- define "fileserver.secretName" -}}
{{- .Values.auth.existingSecret | default (include "elasticctr.component.fullname" (dict "ctx" . "name" "fileserver")) -}}
{{- end -}}

{{- define "fileserver.claimName" -}}
{{- .Values.persistence.existingClaim | default (include "elasticctr.component.fullname" (dict "ctx" . "name" "fileserver")) -}}
{{- end -}}
