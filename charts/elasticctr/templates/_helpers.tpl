{{/* Umbrella helpers. Every define is prefixed "elasticctr." (define names are global).
The helpers the subcharts share too (names, labels, images, stores, pod settings,
metrics) are in the common library, charts/common. */}}

{{/*
Cross-field rules that no schema can express: comparisons of two values, messages naming
what is set, rules across subcharts. A rule the schema of the chart owning its keys can
state exactly (a conditional `if`/`then`, an `allOf` item) lives there instead, with an
`errorMessage` that `ectl validate` prints (docs/chart.md, "Cross-field rules").
Collects every problem as "path: message" and fails once, listing all of them.
tools/elasticctr/values.py implements the same rules with the same messages for
`ectl validate`; keep both in step (tests/chart/test_chart.py renders both).
*/}}
{{- define "elasticctr.validateValues" -}}
{{- $v := .Values -}}
{{- $g := $v.global -}}
{{- $errs := list -}}
{{- $fileserver := $v.fileserver.enabled -}}
{{- /* A scenario of a platform release uses the platform's fileserver and MLflow. */ -}}
{{- $onPlatform := and $g.scenario.name $g.scenario.platform -}}
{{- if $g.scenario.name -}}
  {{- $parts := list -}}
  {{- range $part := list "fileserver" "mlflow" "cube" "serving" -}}
    {{- if (index $v $part).enabled -}}{{- $parts = append $parts $part -}}{{- end -}}
  {{- end -}}
  {{- if include "elasticctr.consoleOn" $ -}}{{- $parts = append $parts "console" -}}{{- end -}}
  {{- if $parts -}}
    {{- $errs = append $errs (printf "global.scenario.name: a scenario release runs only its training job (its platform serves it); set %s enabled: false (ectl scenario add does)" (join ", " $parts)) -}}
  {{- end -}}
  {{- if not $v.trainer.enabled -}}
    {{- $errs = append $errs "trainer.enabled: a scenario release is its training job; it must be true" -}}
  {{- end -}}
{{- else if and (include "elasticctr.consoleOn" .) (not (and $v.cube.enabled $v.serving.enabled)) -}}
  {{- $errs = append $errs "console.enabled: the console serves a platform, which runs cube and serving; set console.enabled: false in a release without them" -}}
{{- end -}}
{{- if $v.trainer.enabled -}}
  {{- $t := $v.trainer.trainer -}}
  {{- if gt (int $t.minReplicas) (int $t.replicas) -}}
    {{- $errs = append $errs (printf "trainer.trainer.minReplicas: %d is more than trainer.trainer.replicas (%d)" (int $t.minReplicas) (int $t.replicas)) -}}
  {{- end -}}
  {{- /* Hyperparameters each zoo model has (elasticctr.train.models DEFAULTS/COMMON_DEFAULTS). */ -}}
  {{- $common := list "batchSize" "learningRate" "optimizer" "sparseLearningRate" -}}
  {{- $deep := list "embeddingDim" "hiddenUnits" -}}
  {{- $zoo := dict "dnn" $deep "lr" list "wide_deep" $deep "deepfm" $deep "dcn" (append $deep "crossLayers") "xdeepfm" (append $deep "cinLayers") -}}
  {{- $m := $v.trainer.model -}}
  {{- if hasKey $zoo $m.name -}}
    {{- $known := concat $common (get $zoo $m.name) | sortAlpha -}}
    {{- range $key := keys $m | sortAlpha -}}
      {{- if and (ne $key "name") (not (has $key $known)) -}}
        {{- $errs = append $errs (printf "trainer.model.%s: not a hyperparameter of %s (known: %s)" $key $m.name (join ", " $known)) -}}
      {{- end -}}
    {{- end -}}
  {{- end -}}
  {{- if and (not $g.data.path) (not $fileserver) (not $onPlatform) -}}
    {{- $errs = append $errs "global.data.path: required when fileserver.enabled is false (empty means the release's fileserver)" -}}
  {{- end -}}
  {{- if and (hasPrefix "hdfs:///" $g.data.path) (not $g.data.hdfsAddress) -}}
    {{- $errs = append $errs "global.data.hdfsAddress: required when global.data.path is an hdfs:/// URL without a namenode" -}}
  {{- end -}}
{{- end -}}
{{- /* Also a platform without a training job creates the classes for its scenarios. */ -}}
{{- $pc := $v.trainer.volcano.priorityClasses -}}
{{- if and $pc.create (ge (int64 $pc.trainerValue) (int64 $pc.guaranteedValue)) -}}
  {{- $errs = append $errs (printf "trainer.volcano.priorityClasses.trainerValue: %d must be lower than guaranteedValue (%d)" (int64 $pc.trainerValue) (int64 $pc.guaranteedValue)) -}}
{{- end -}}
{{- if and $pc.guaranteed (eq $pc.guaranteed $pc.trainer) -}}
  {{- $errs = append $errs "trainer.volcano.priorityClasses.trainer: must differ from guaranteed (trainers are the preemptible part)" -}}
{{- end -}}
{{- if and $g.s3.existingSecret (eq $g.s3.accessKeyIdKey $g.s3.secretAccessKeyKey) -}}
  {{- $errs = append $errs (printf "global.s3.secretAccessKeyKey: must differ from global.s3.accessKeyIdKey (%s): they name the two keys of %s" $g.s3.accessKeyIdKey $g.s3.existingSecret) -}}
{{- end -}}
{{- if and $g.data.endDateHour (lt $g.data.endDateHour $g.data.startDateHour) -}}
  {{- $errs = append $errs (printf "global.data.endDateHour: %s is before global.data.startDateHour %s" $g.data.endDateHour $g.data.startDateHour) -}}
{{- end -}}
{{- if and (not $g.modelStore) (not $fileserver) (not $onPlatform) (or $v.trainer.enabled $v.cube.enabled $v.serving.enabled) -}}
  {{- $errs = append $errs "global.modelStore: required when fileserver.enabled is false (empty means the release's fileserver)" -}}
{{- end -}}
{{- /* Parts that send the fileserver token: the Secret and key they read must be the
fileserver's (trainer: uploads; cube-transfer and serving: reads, with protectReads). */ -}}
{{- if and $fileserver (not $g.modelStore) -}}
  {{- $auth := $v.fileserver.auth -}}
  {{- $key := ternary $auth.existingSecretKey "token" (ne $auth.existingSecret "") -}}
  {{- $why := dict "trainer" "training uploads model versions to the fileserver with that token" "cube" "cube-transfer reads model versions from the fileserver with that token" "serving" "serving reads model versions from the fileserver with that token" -}}
  {{- range $part := list "trainer" "cube" "serving" -}}
    {{- $pv := index $v $part -}}
    {{- if and $pv.enabled (or (eq $part "trainer") $auth.protectReads) -}}
      {{- if and $auth.existingSecret (ne $auth.existingSecret $pv.fileserverToken.existingSecret) -}}
        {{- $errs = append $errs (printf "%s.fileserverToken.existingSecret: must be %s like fileserver.auth.existingSecret (%s)" $part $auth.existingSecret (get $why $part)) -}}
      {{- end -}}
      {{- if ne $key $pv.fileserverToken.existingSecretKey -}}
        {{- $errs = append $errs (printf "%s.fileserverToken.existingSecretKey: must be %s like the fileserver's token key (%s)" $part $key (get $why $part)) -}}
      {{- end -}}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- if $v.serving.enabled -}}
  {{- $s := $v.serving -}}
  {{- if not $v.cube.enabled -}}
    {{- $errs = append $errs "serving.enabled: serving needs cube.enabled (it looks embeddings up in the cube shards)" -}}
  {{- end -}}
  {{- $minReplicas := int $s.replicas -}}
  {{- if $s.autoscaling.enabled -}}
    {{- $minReplicas = int $s.autoscaling.minReplicas -}}
    {{- if gt (int $s.autoscaling.minReplicas) (int $s.autoscaling.maxReplicas) -}}
      {{- $errs = append $errs (printf "serving.autoscaling.minReplicas: %d is more than serving.autoscaling.maxReplicas (%d)" (int $s.autoscaling.minReplicas) (int $s.autoscaling.maxReplicas)) -}}
    {{- end -}}
  {{- end -}}
  {{- if and $s.podDisruptionBudget.enabled (ge (int $s.podDisruptionBudget.minAvailable) $minReplicas) -}}
    {{- $errs = append $errs (printf "serving.podDisruptionBudget.minAvailable: %d must be lower than the minimum replica count (%d), or no node could ever be drained" (int $s.podDisruptionBudget.minAvailable) $minReplicas) -}}
  {{- end -}}
{{- end -}}
{{- if and (not $v.mlflow.enabled) (or $v.trainer.enabled $v.serving.enabled) (not $v.global.mlflow.trackingUri) (not $onPlatform) -}}
  {{- $errs = append $errs "global.mlflow.trackingUri: required when mlflow.enabled is false (training and serving report to MLflow; with no URI they would report to this release's MLflow, which is not deployed, and each trainer would wait minutes for it)" -}}
{{- end -}}
{{- $cubeReplicas := int (default 1 $v.cube.replicas) -}}
{{- if and $v.cube.enabled $v.cube.podDisruptionBudget.enabled (gt $cubeReplicas 1) (ge (int $v.cube.podDisruptionBudget.maxUnavailable) $cubeReplicas) -}}
  {{- $errs = append $errs (printf "cube.podDisruptionBudget.maxUnavailable: %d would let every replica (%d) of a shard go down at once" (int $v.cube.podDisruptionBudget.maxUnavailable) $cubeReplicas) -}}
{{- end -}}
{{- if and $v.cube.enabled $v.cube.podDisruptionBudget.enabled (eq $cubeReplicas 1) (ge (int $v.cube.podDisruptionBudget.maxUnavailable) (int $v.cube.shards)) (gt (int $v.cube.shards) 1) -}}
  {{- $errs = append $errs (printf "cube.podDisruptionBudget.maxUnavailable: %d would let every shard (%d) go down at once" (int $v.cube.podDisruptionBudget.maxUnavailable) (int $v.cube.shards)) -}}
{{- end -}}
{{- if $errs -}}
{{- fail (printf "\n\nvalues are invalid:\n  %s\n" (join "\n  " $errs)) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the console subchart is deployed: the umbrella's condition
`console.enabled,serving.enabled` (console.enabled when set, else serving.enabled). */}}
{{- define "elasticctr.consoleOn" -}}
{{- $c := .Values.console.enabled -}}
{{- if kindIs "bool" $c -}}{{- if $c -}}true{{- end -}}
{{- else if .Values.serving.enabled -}}true
{{- end -}}
{{- end -}}
