{{/*
Stores (docs/storage.md): the one place every part gets its data and model store from.
These defines take any chart's context (the umbrella's or a subchart's: `.Values.global`
and `.Release.Name` are the same in both), so the trainer, cube-transfer and serving see
the same URL, user and credentials.
*/}}

{{/* The platform a release belongs to: itself, or global.scenario.platform for a scenario. */}}
{{- define "elasticctr.platform" -}}
{{- .Values.global.scenario.platform | default .Release.Name -}}
{{- end -}}

{{/* An hdfs:///path URL completed with global.data.hdfsAddress (HDFS_ADDRESS); other URLs as given. */}}
{{- define "elasticctr.hdfsUrl" -}}
{{- $address := .ctx.Values.global.data.hdfsAddress -}}
{{- if and (hasPrefix "hdfs:///" .url) $address -}}
{{- printf "%s/%s" (trimSuffix "/" $address) (trimPrefix "hdfs:///" .url) -}}
{{- else -}}
{{- .url -}}
{{- end -}}
{{- end -}}

{{/* The platform's model store URL (before a scenario's own folder): global.modelStore, or the
platform fileserver's /models. Scenario folders: elasticctr.scenarios.store_url. */}}
{{- define "elasticctr.modelStore" -}}
{{- $url := .Values.global.modelStore | default (printf "http://%s-fileserver:%s/models" (include "elasticctr.platform" .) (include "elasticctr.port" "fileserver")) -}}
{{- include "elasticctr.hdfsUrl" (dict "ctx" . "url" $url) -}}
{{- end -}}

{{/* The Secret holding HDFS_UGI: global.data.hdfsUgiSecret.name, else the release's own
store Secret (templates/store-secret.yaml, from global.data.hdfsUgi); "" = no HDFS user. */}}
{{- define "elasticctr.hdfsUgiSecret" -}}
{{- $d := .Values.global.data -}}
{{- if $d.hdfsUgiSecret.name -}}
{{- $d.hdfsUgiSecret.name -}}
{{- else if $d.hdfsUgi -}}
{{- printf "%s-store" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Env of the stores, in every container that reads or writes one: HDFS_UGI from its
Secret, and when a store is s3://, global.s3 as the AWS SDK's variables (credentials from
global.s3.existingSecret; none = the SDK's own chain, e.g. an IAM role of the pod). */}}
{{- define "elasticctr.storeEnv" -}}
{{- $g := .Values.global -}}
{{- with include "elasticctr.hdfsUgiSecret" . }}
- name: HDFS_UGI
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ if $g.data.hdfsUgiSecret.name }}{{ $g.data.hdfsUgiSecret.key }}{{ else }}HDFS_UGI{{ end }}
{{- end }}
{{- if or (hasPrefix "s3://" $g.data.path) (hasPrefix "s3://" $g.modelStore) }}
{{- $s3 := $g.s3 }}
- name: ELASTICCTR_S3_PATH_STYLE
  value: {{ ternary "true" "false" $s3.pathStyle | quote }}
{{- with $s3.endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- with $s3.region }}
- name: AWS_REGION
  value: {{ . | quote }}
{{- end }}
{{- if $s3.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef: {name: {{ $s3.existingSecret }}, key: {{ $s3.accessKeyIdKey }}}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef: {name: {{ $s3.existingSecret }}, key: {{ $s3.secretAccessKeyKey }}}
{{- end }}
{{- end }}
{{- end -}}
