{{/* The trainer subchart's own helpers; its names, labels and image come from the common
library (elasticctr.component.*, name "trainer"). Every define here is prefixed "trainer.":
define names are global across the umbrella and its subcharts. */}}

{{/* The job's account: serviceAccount.name, else <release>-trainer when created, else default. */}}
{{- define "trainer.serviceAccountName" -}}
{{- include "elasticctr.serviceAccountName" (dict "sa" .Values.serviceAccount "name" (include "elasticctr.component.fullname" (dict "ctx" . "name" "trainer"))) -}}
{{- end -}}

{{/* The platform release whose fileserver, MLflow, cube and serving this job uses: this
release, or global.scenario.platform for a scenario release (docs/platform.md). */}}
{{- define "trainer.platform" -}}
{{- include "elasticctr.platform" . -}}
{{- end -}}

{{/* The scenario this job trains; "" = the default scenario of a single release. */}}
{{- define "trainer.scenario" -}}
{{- .Values.global.scenario.name -}}
{{- end -}}

{{/* The scenario's own folder of a platform URL: <base>/scenarios/<name> (elasticctr.scenarios.store_url). */}}
{{- define "trainer.scenarioUrl" -}}
{{- $name := include "trainer.scenario" .ctx -}}
{{- if $name }}{{ printf "%s/scenarios/%s" (trimSuffix "/" .base) $name }}{{ else }}{{ .base }}{{ end -}}
{{- end -}}

{{- define "trainer.modelStore" -}}
{{- $base := include "elasticctr.modelStore" . -}}
{{- include "trainer.scenarioUrl" (dict "ctx" . "base" $base) -}}
{{- end -}}

{{/* Data: global.data.path as given; empty = the platform fileserver's /data (a scenario's
own folder of it for a named scenario). */}}
{{- define "trainer.dataPath" -}}
{{- if .Values.global.data.path -}}
{{- .Values.global.data.path -}}
{{- else -}}
{{- include "trainer.scenarioUrl" (dict "ctx" . "base" (printf "http://%s-fileserver:%s/data" (include "trainer.platform" .) (include "elasticctr.port" "fileserver"))) -}}
{{- end -}}
{{- end -}}

{{- define "trainer.trackingUri" -}}
{{- .Values.global.mlflow.trackingUri | default (printf "http://%s-mlflow:%s" (include "trainer.platform" .) (include "elasticctr.port" "mlflow")) -}}
{{- end -}}

{{/* Pod labels that tie a job to its platform and scenario (NetworkPolicies, registry). */}}
{{- define "trainer.scenarioLabels" -}}
elasticctr.io/platform: {{ include "trainer.platform" . }}
elasticctr.io/scenario: {{ include "trainer.scenario" . | default "default" }}
{{- end -}}

{{/* scenario.json of the registration ConfigMap (elasticctr.scenarios.Scenario). */}}
{{- define "trainer.scenarioSpec" -}}
{{- $g := .Values.global -}}
{{- $slots := list -}}
{{- range $g.data.slots }}{{ $slots = append $slots (int .) }}{{ end -}}
{{- dict "name" $g.scenario.name "team" $g.scenario.team "model" .Values.model.name "slots" $slots "sparse_dim" (int64 $g.data.sparseDim) "cube_memory_mib" (int $g.scenario.cubeMemoryMiB) "labels" (dict) | toJson -}}
{{- end -}}

{{- define "trainer.stagingClaim" -}}
{{- .Values.staging.existingClaim | default (printf "%s-staging" (include "elasticctr.component.fullname" (dict "ctx" . "name" "trainer"))) -}}
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
with defaults resolved, plus this chart's section under `trainer`. Without global.metrics:
no role reads it, and a changed monitor label or alert threshold must not change the pods'
config checksum nor the Job's name (which would restart training from its checkpoint). */}}
{{- define "trainer.runtimeValues" -}}
{{- $global := omit (deepCopy .Values.global) "metrics" -}}
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

{{/* Secret: the values file the roles read (it carries global.data.hdfsUgi when given there). */}}
{{- define "trainer.secretData" -}}
# What `ectl train pserver|trainer -f` and `ectl coordinator -f` read.
values.yaml: |
  {{- include "trainer.runtimeValues" . | nindent 2 }}
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


{{/* "true" when the coordinator calls the Kubernetes API: yielding trainers, giving spent
retries back, replacing evicted trainers (rbac.yaml, docs/coordinator.md); else empty. */}}
{{- define "trainer.coordinatorUsesApi" -}}
{{- $v := .Values -}}
{{- if or $v.coordinator.yieldToKubeScheduler.enabled (gt (int $v.volcano.retryRecoverySeconds) 0) $v.coordinator.replaceEvictedTrainers -}}
true
{{- end -}}
{{- end -}}
