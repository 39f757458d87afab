{{/* Names, labels and images of the trainer subchart. Every define is prefixed "trainer.":
define names are global across the umbrella and its subcharts. */}}

{{- define "trainer.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Always <release>-<chart>: other parts reach this one by that name (no "contains" shortcut). */}}
{{- define "trainer.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "trainer.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: name + instance only (selectors are immutable). */}}
{{- define "trainer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "trainer.labels" -}}
helm.sh/chart: {{ include "trainer.chart" . }}
{{ include "trainer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: elasticctr
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Image reference: <registry>/<repository>/<name>:<tag>; tag falls back to appVersion. */}}
{{- define "trainer.image" -}}
{{- $g := .Values.global.image -}}
{{- $tag := .Values.image.tag | default $g.tag | default .Chart.AppVersion -}}
{{- $repo := printf "%s/%s" $g.repository .Values.image.name -}}
{{- if $g.registry -}}{{- $repo = printf "%s/%s" $g.registry $repo -}}{{- end -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{- define "trainer.serviceAccountName" -}}
{{- include "trainer.fullname" . -}}
{{- end -}}

{{- define "trainer.coordinatorServiceAccountName" -}}
{{- printf "%s-coordinator" (include "trainer.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "trainer.modelStore" -}}
{{- .Values.global.modelStore | default (printf "http://%s-fileserver:8080/models" .Release.Name) -}}
{{- end -}}

{{- define "trainer.dataPath" -}}
{{- .Values.global.data.path | default (printf "http://%s-fileserver:8080/data" .Release.Name) -}}
{{- end -}}

{{- define "trainer.trackingUri" -}}
{{- .Values.global.mlflow.trackingUri | default (printf "http://%s-mlflow:5000" .Release.Name) -}}
{{- end -}}

{{- define "trainer.stagingClaim" -}}
{{- .Values.staging.existingClaim | default (printf "%s-staging" (include "trainer.fullname" .)) -}}
{{- end -}}

{{/* ElasticCTR data.config: shell-style env file (HDFS_UGI comes from a Secret instead).
Single quotes: literal values (no $VAR expansion). SPARSE_DIM through int64: Helm reads
numbers in values as floats and would print 1000001 as 1.000001e+06; 0 (raw feasigns) is
written as no SPARSE_DIM at all, as ElasticCTR's parser expects. */}}
{{- define "trainer.dataConfig" -}}
{{- $d := .Values.global.data -}}
HDFS_ADDRESS={{ $d.hdfsAddress | squote }}
START_DATE_HR={{ $d.startDateHour | squote }}
END_DATE_HR={{ $d.endDateHour | squote }}
DATASET_PATH={{ include "trainer.dataPath" . | squote }}
{{- if $d.sparseDim }}
SPARSE_DIM={{ $d.sparseDim | int64 }}
{{- end }}
{{- end -}}

{{/* The effective values every role reads with `ectl ... -f`: the umbrella's global section
with defaults resolved, plus this chart's section under `trainer`. */}}
{{- define "trainer.runtimeValues" -}}
{{- $global := deepCopy .Values.global -}}
{{- $_ := set $global "modelStore" (include "trainer.modelStore" .) -}}
{{- $data := deepCopy .Values.global.data -}}
{{- $_ := set $data "path" (include "trainer.dataPath" .) -}}
{{- $_ := set $global "data" $data -}}
{{- $_ := set $global "mlflow" (dict "trackingUri" (include "trainer.trackingUri" .)) -}}
{{- /* No trainer replicas here: changing them must not change the pods (nor the Job's name). */ -}}
{{- $own := pick .Values "model" "coordinator" "pserver" -}}
{{- $_ := set $own "trainer" (omit .Values.trainer "replicas" "minReplicas") -}}
{{- toYaml (dict "global" $global "trainer" $own) -}}
{{- end -}}

{{/* The config Secret's data (its hash is the pods' checksum/config annotation). */}}
{{- define "trainer.configData" -}}
{{ include "trainer.secretData" . }}
{{ include "trainer.dataFiles" . }}
{{- end -}}

{{/* Secret: the values file the roles read (it carries global.data.hdfsUgi) and HDFS_UGI. */}}
{{- define "trainer.secretData" -}}
# What `ectl train pserver|trainer -f` and `ectl coordinator -f` read.
values.yaml: |
  {{- include "trainer.runtimeValues" . | nindent 2 }}
{{- with .Values.global.data.hdfsUgi }}
hdfsUgi: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* ConfigMap: ElasticCTR's own inputs (no credentials), for users and tools that read them. */}}
{{- define "trainer.dataFiles" -}}
data.config: |
  {{- include "trainer.dataConfig" . | nindent 2 }}
slot.conf: |
  {{- range .Values.global.data.slots }}
  {{ . }}
  {{- end }}
{{- end -}}
