{{/* Names, labels and images of the cube subchart. Every define is prefixed "cube.":
define names are global across the umbrella and its subcharts. */}}

{{- define "cube.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Always <release>-<chart>: other parts reach this one by that name (no "contains" shortcut). */}}
{{- define "cube.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cube.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: name + instance only (selectors are immutable). */}}
{{- define "cube.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cube.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cube.labels" -}}
helm.sh/chart: {{ include "cube.chart" . }}
{{ include "cube.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: elasticctr
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Image reference: <registry>/<repository>/<name>:<tag>; tag falls back to appVersion. */}}
{{- define "cube.image" -}}
{{- $g := .Values.global.image -}}
{{- $tag := .Values.image.tag | default $g.tag | default .Chart.AppVersion -}}
{{- $repo := printf "%s/%s" $g.repository .Values.image.name -}}
{{- if $g.registry -}}{{- $repo = printf "%s/%s" $g.registry $repo -}}{{- end -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}


{{- define "cube.headless" -}}
{{- printf "%s-headless" (include "cube.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Comma-separated shard base URLs, shard 0 first (ELASTICCTR_CUBE_SHARDS). */}}
{{- define "cube.shardUrls" -}}
{{- $f := include "cube.fullname" . -}}
{{- $h := include "cube.headless" . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.shards) -}}
{{- $urls = append $urls (printf "http://%s-%d.%s.%s.svc:8500" $f $i $h $.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- end -}}

{{- define "cube.adminSecretName" -}}
{{- .Values.adminToken.existingSecret | default (printf "%s-admin" (include "cube.fullname" .)) -}}
{{- end -}}

{{- define "cube.modelStore" -}}
{{- include "elasticctr.modelStore" . -}}
{{- end -}}

{{- define "cube.sharedClaim" -}}
{{- .Values.sharedStorage.existingClaim | default (printf "%s-root" (include "cube.fullname" .)) -}}
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
      name: {{ include "cube.fullname" . }}-endpoints
      key: shards
- name: ELASTICCTR_CUBE_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "cube.adminSecretName" . }}
      key: {{ if .Values.adminToken.existingSecret }}{{ .Values.adminToken.existingSecretKey }}{{ else }}token{{ end }}
{{- end -}}

{{/* The pod spec both cube workloads share. cube-transfer, when it follows the platform's
scenarios, runs as its own account with a token (rbac.yaml); the shards get none. */}}
{{- define "cube.podSpecCommon" -}}
{{- if and .transfer .Values.transfer.scenarios }}
serviceAccountName: {{ include "cube.fullname" . }}-transfer
automountServiceAccountToken: true
{{- else }}
serviceAccountName: {{ .Values.serviceAccount.create | ternary (include "cube.fullname" .) "default" }}
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
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
