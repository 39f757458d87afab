{{/* The cube subchart's own helpers; its names, labels and image come from the common
library (elasticctr.component.*, name "cube"). Every define here is prefixed "cube.":
define names are global across the umbrella and its subcharts. */}}

{{- define "cube.headless" -}}
{{- printf "%s-headless" (include "elasticctr.component.fullname" (dict "ctx" . "name" "cube")) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The shard URL contract (ELASTICCTR_CUBE_SHARDS, elasticctr.cube.protocol.parse_shards):
comma-separated shards, shard 0 first; each shard's replicas joined by "|". Pod ordinal
i + r*shards is replica r of shard i. */}}
{{- define "cube.shardUrls" -}}
{{- $f := include "elasticctr.component.fullname" (dict "ctx" . "name" "cube") -}}
{{- $h := include "cube.headless" . -}}
{{- $port := include "elasticctr.port" "cube" -}}
{{- $shards := int .Values.shards -}}
{{- $urls := list -}}
{{- range $i := until $shards -}}
{{- $replicas := list -}}
{{- range $r := until (int $.Values.replicas) -}}
{{- $replicas = append $replicas (printf "http://%s-%d.%s.%s.svc:%s" $f (add $i (mul $r $shards)) $h $.Release.Namespace $port) -}}
{{- end -}}
{{- $urls = append $urls (join "|" $replicas) -}}
{{- end -}}
{{- join "," $urls -}}
{{- end -}}

{{- define "cube.adminSecretName" -}}
{{- .Values.adminToken.existingSecret | default (printf "%s-admin" (include "elasticctr.component.fullname" (dict "ctx" . "name" "cube"))) -}}
{{- end -}}

{{- define "cube.modelStore" -}}
{{- include "elasticctr.modelStore" . -}}
{{- end -}}

{{- define "cube.sharedClaim" -}}
{{- .Values.sharedStorage.existingClaim | default (printf "%s-root" (include "elasticctr.component.fullname" (dict "ctx" . "name" "cube"))) -}}
{{- end -}}

{{/* Env shared by shards and cube-transfer. */}}
{{- define "cube.env" -}}
- name: HOME
  value: /tmp
# The data hours' clock: /metrics turns versions into times with it.
- name: ELASTICCTR_DATA_UTC_OFFSET
  value: {{ .Values.global.data.utcOffset | quote }}
- name: ELASTICCTR_CUBE_SHARDS
  valueFrom:
    configMapKeyRef:
      name: {{ include "elasticctr.component.fullname" (dict "ctx" . "name" "cube") }}-endpoints
      key: shards
- name: ELASTICCTR_CUBE_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "cube.adminSecretName" . }}
      key: {{ if .Values.adminToken.existingSecret }}{{ .Values.adminToken.existingSecretKey }}{{ else }}token{{ end }}
{{- end -}}

{{/* cube-transfer's account (transfer.serviceAccount): its name, else <release>-cube-transfer
when created, else default. */}}
{{- define "cube.transferServiceAccountName" -}}
{{- include "elasticctr.serviceAccountName" (dict "sa" .Values.transfer.serviceAccount "name" (printf "%s-transfer" (include "elasticctr.component.fullname" (dict "ctx" . "name" "cube")))) -}}
{{- end -}}

{{/* The pod spec both cube workloads share (args: the chart's context, plus `transfer`
for cube-transfer; `component`: the workload's component label). Each runs as its own
account; cube-transfer, when it follows the platform's scenarios, with a token (its Role in
rbac.yaml); the shards never get one. */}}
{{- define "cube.podSpecCommon" -}}
{{- if .transfer }}
serviceAccountName: {{ include "cube.transferServiceAccountName" . }}
automountServiceAccountToken: {{ .Values.transfer.scenarios }}
{{- else }}
serviceAccountName: {{ include "elasticctr.serviceAccountName" (dict "sa" .Values.serviceAccount "name" (include "elasticctr.component.fullname" (dict "ctx" . "name" "cube"))) }}
automountServiceAccountToken: false
{{- end }}
{{- with .Values.global.image.pullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- $selector := printf "%s\napp.kubernetes.io/component: %s" (include "elasticctr.component.selectorLabels" (dict "ctx" . "name" "cube")) .component | fromYaml }}
{{- with include "elasticctr.podPlacement" (dict "v" .Values "selector" $selector) }}
{{ . }}
{{- end }}
{{- end -}}
