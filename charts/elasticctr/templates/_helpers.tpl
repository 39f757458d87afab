{{/* Umbrella helpers. Every define is prefixed "elasticctr." (define names are global). */}}

{{- define "elasticctr.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "elasticctr.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: elasticctr
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Cross-field rules that one schema cannot express (schemas check each chart's own keys).
Collects every problem as "path: message" and fails once, listing all of them.
tools/elasticctr/values.py implements the same rules with the same messages for
`ectl validate`; keep both in step (tests/unit/test_values.py renders both).
*/}}
{{- define "elasticctr.validateValues" -}}
{{- $v := .Values -}}
{{- $g := $v.global -}}
{{- $errs := list -}}
{{- $fileserver := $v.fileserver.enabled -}}
{{- /* A scenario of a platform release uses the platform's fileserver and MLflow. */ -}}
{{- $onPlatform := and $g.scenario.name $g.scenario.platform -}}
{{- if $g.scenario.name -}}
  {{- if not $g.scenario.platform -}}
    {{- $errs = append $errs "global.scenario.platform: required with global.scenario.name (the platform release that serves the scenario; ectl scenario add --platform sets it)" -}}
  {{- end -}}
  {{- $parts := list -}}
  {{- range $part := list "fileserver" "mlflow" "cube" "serving" -}}
    {{- if (index $v $part).enabled -}}{{- $parts = append $parts $part -}}{{- end -}}
  {{- end -}}
  {{- if $parts -}}
    {{- $errs = append $errs (printf "global.scenario.name: a scenario release runs only its training job (its platform serves it); set %s enabled: false (ectl scenario add does)" (join ", " $parts)) -}}
  {{- end -}}
  {{- if not $v.trainer.enabled -}}
    {{- $errs = append $errs "trainer.enabled: a scenario release is its training job; it must be true" -}}
  {{- end -}}
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
  {{- $vol := $v.trainer.volcano -}}
  {{- if and $vol.createQueue.enabled (eq $vol.queue "default") -}}
    {{- $errs = append $errs "trainer.volcano.createQueue.enabled: the default queue is Volcano's own; name this release's queue in trainer.volcano.queue" -}}
  {{- end -}}
{{- end -}}
{{- /* Also a platform without a training job creates the classes for its scenarios. */ -}}
{{- $pc := $v.trainer.volcano.priorityClasses -}}
{{- if and $pc.create (or (not $pc.guaranteed) (not $pc.trainer)) -}}
  {{- $errs = append $errs "trainer.volcano.priorityClasses.create: needs both names, guaranteed and trainer" -}}
{{- end -}}
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
{{- if and $fileserver $v.fileserver.auth.token $v.fileserver.auth.existingSecret -}}
  {{- $errs = append $errs "fileserver.auth: set token or existingSecret, not both" -}}
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
  {{- if and $s.ingress.enabled (not $s.ingress.host) -}}
    {{- $errs = append $errs "serving.ingress.host: required when serving.ingress.enabled" -}}
  {{- end -}}
{{- end -}}
{{- if $v.mlflow.enabled -}}
  {{- if and (eq $v.mlflow.backendStore.type "external") (not $v.mlflow.backendStore.existingSecret) -}}
    {{- $errs = append $errs "mlflow.backendStore.existingSecret: required when mlflow.backendStore.type is external" -}}
  {{- end -}}
  {{- if and $v.mlflow.ingress.enabled (not $v.mlflow.ingress.host) -}}
    {{- $errs = append $errs "mlflow.ingress.host: required when mlflow.ingress.enabled" -}}
  {{- end -}}
{{- end -}}
{{- if and (not $v.mlflow.enabled) (or $v.trainer.enabled $v.serving.enabled) (not $v.global.mlflow.trackingUri) (not $onPlatform) -}}
  {{- $errs = append $errs "global.mlflow.trackingUri: required when mlflow.enabled is false (training and serving report to MLflow; with no URI they would report to this release's MLflow, which is not deployed, and each trainer would wait minutes for it)" -}}
{{- end -}}
{{- if and $v.cube.enabled $v.cube.podDisruptionBudget.enabled (ge (int $v.cube.podDisruptionBudget.maxUnavailable) (int $v.cube.shards)) (gt (int $v.cube.shards) 1) -}}
  {{- $errs = append $errs (printf "cube.podDisruptionBudget.maxUnavailable: %d would let every shard (%d) go down at once" (int $v.cube.podDisruptionBudget.maxUnavailable) (int $v.cube.shards)) -}}
{{- end -}}
{{- if $v.cube.enabled -}}
  {{- $tsa := $v.cube.transfer.serviceAccount -}}
  {{- if and $v.cube.transfer.scenarios (not $tsa.create) (not $tsa.name) -}}
    {{- $errs = append $errs "cube.transfer.serviceAccount.name: required when cube.transfer.serviceAccount.create is false and cube.transfer.scenarios is on (its Role, which reads the scenario registrations, would be bound to the namespace's default account)" -}}
  {{- end -}}
{{- end -}}
{{- if $errs -}}
{{- fail (printf "\n\nvalues are invalid:\n  %s\n" (join "\n  " $errs)) -}}
{{- end -}}
{{- end -}}

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
{{- $url := .Values.global.modelStore | default (printf "http://%s-fileserver:8080/models" (include "elasticctr.platform" .)) -}}
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

{{/*
Root-owned volumes (global.volumePermissions, docs/chart.md "Shared volumes"): an init
container that gives the mount root of each writable volume (the directory itself, never
what is in it) to the pod's runAsUser and fsGroup. NFS-like ReadWriteMany classes (EFS,
CFS, SFS csi-nas, NFS) hand out root-owned volumes and ignore fsGroup, and every part runs
as uid 10001. It runs as root with CAP_CHOWN and CAP_FOWNER only (the root it starts with
cannot read or write files it does not own) and does nothing when the root already belongs
to the pod's user with rwx for user and group. When the server refuses the chown but lets
this container write there (an EFS access point maps every client to its own uid), the
volume is left as it is; otherwise the pod stops here with the reason. Args: ctx (a chart's context), image (that
part's own image: every one has a shell and coreutils), volumes (volume name -> mount
path). Renders `initContainers:` with the container, or nothing when off or no volume.
*/}}
{{- define "elasticctr.volumePermissions" -}}
{{- $v := .ctx.Values -}}
{{- if and $v.global.volumePermissions.enabled .volumes -}}
{{- $pod := $v.podSecurityContext -}}
{{- $uid := int64 (default 10001 $pod.runAsUser) -}}
{{- $gid := int64 (default (default $uid $pod.runAsGroup) $pod.fsGroup) -}}
initContainers:
  - name: volume-permissions
    image: {{ .image }}
    imagePullPolicy: {{ $v.global.image.pullPolicy }}
    command:
      - /bin/sh
      - -c
      - |
        want={{ $uid }}:{{ $gid }}
        for dir; do
          before=$(stat -c '%u:%g %A' "$dir")
          case "$before" in
            "$want "?rw[xs]rw[xs]*) echo "$dir: $before, nothing to change"; continue ;;
          esac
          if err=$(chown "$want" "$dir" 2>&1 && chmod u+rwx,g+rwx "$dir" 2>&1); then
            echo "$dir: $before -> $(stat -c '%u:%g %A' "$dir")"
          elif mkdir "$dir/.volume-permissions-$$" 2>/dev/null && rmdir "$dir/.volume-permissions-$$"; then
            # The server maps every client to one identity that may write (an EFS access point).
            echo "$dir: $before kept: the server refuses the change ($err) but lets writers in"
          else
            echo "$dir: cannot give it to $want ($before): $err. An export that maps root to nobody (root_squash) refuses this: give the export to $want or use the class's uid/gid options (docs/chart.md, Shared volumes)" >&2
            exit 1
          fi
        done
      - volume-permissions
    args:
      {{- range $name := keys .volumes | sortAlpha }}
      - {{ get $.volumes $name }}
      {{- end }}
    resources:
      requests: {cpu: 10m, memory: 16Mi}
      limits: {cpu: 100m, memory: 64Mi}
    securityContext:
      runAsUser: 0
      runAsNonRoot: false
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL], add: [CHOWN, FOWNER]}
      seccompProfile: {type: RuntimeDefault}
    volumeMounts:
      {{- range $name := keys .volumes | sortAlpha }}
      - name: {{ $name }}
        mountPath: {{ get $.volumes $name }}
      {{- end }}
{{- end -}}
{{- end -}}

{{/*
Prometheus (global.metrics, docs/operations.md). Args of each: ctx (a chart's context) and
kind (ServiceMonitor | PodMonitor) or port (the metrics port's name).
*/}}

{{/* "true" when a part's monitor of `kind` renders: the global switch, the part's own
metrics.enabled and the cluster serving prometheus-operator's kind; else "". */}}
{{- define "elasticctr.monitored" -}}
{{- $v := .ctx.Values -}}
{{- if and $v.global.metrics.serviceMonitor.enabled $v.metrics.enabled (.ctx.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind)) -}}
true
{{- end -}}
{{- end -}}

{{/* One scrape endpoint's settings after its port: path, interval, and the target labels
the dashboard and the rules select on (`component`, `release`; never `scenario`, which
the metrics carry themselves). */}}
{{- define "elasticctr.monitorEndpoint" -}}
path: /metrics
{{- with .Values.global.metrics.serviceMonitor.interval }}
interval: {{ . }}
{{- end }}
relabelings:
  - sourceLabels: [__meta_kubernetes_pod_label_app_kubernetes_io_component]
    targetLabel: component
  - sourceLabels: [__meta_kubernetes_pod_label_app_kubernetes_io_instance]
    targetLabel: release
{{- end -}}

{{/* A NetworkPolicy ingress rule admitting global.metrics.allowFromNamespaces (and
allowFromPods) to the metrics port, when the part is monitored; nothing otherwise. */}}
{{- define "elasticctr.metricsIngress" -}}
{{- $m := .ctx.Values.global.metrics -}}
{{- if and $m.allowFromNamespaces .ctx.Values.metrics.enabled }}
# Prometheus (global.metrics.allowFromNamespaces): the metrics port only.
- ports:
    - port: {{ .port }}
  from:
    - namespaceSelector:
        matchLabels:
          {{- toYaml $m.allowFromNamespaces | nindent 10 }}
      {{- with $m.allowFromPods }}
      podSelector:
        matchLabels:
          {{- toYaml . | nindent 10 }}
      {{- end }}
{{- end }}
{{- end -}}

{{/*
Conventions every workload shares (docs/chart.md "Pod settings of every workload"): the
subcharts call these with their own values, so there is one copy of each. Args named `v`
are a part's values (a subchart's `.Values`, or the umbrella's `.Values.tests`).
*/}}

{{/* Image of a part: <registry>/<repository>/<name>, then `@<digest>` when the part's
image.digest is set (`make publish` records each image's digest), else `:<tag>` (the
part's tag, else global.image.tag, else the chart's appVersion). Args: ctx (a chart's
context), image (the part's image values: name, tag, digest). */}}
{{- define "elasticctr.image" -}}
{{- $g := .ctx.Values.global.image -}}
{{- $repo := printf "%s/%s" $g.repository .image.name -}}
{{- if $g.registry -}}{{- $repo = printf "%s/%s" $g.registry $repo -}}{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.image.tag | default $g.tag | default .ctx.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount a workload runs as: serviceAccount.name when set, else the part's
own account when the chart creates it, else `default`. Args: sa (serviceAccount values:
create, name), name (the part's own account name). */}}
{{- define "elasticctr.serviceAccountName" -}}
{{- if .sa.name -}}{{ .sa.name }}{{- else if .sa.create -}}{{ .name }}{{- else -}}default{{- end -}}
{{- end -}}

{{/* Pod template labels or annotations: the chart's own (`own`, YAML text, rendered as
given), then those of `extra` (a part's podLabels or podAnnotations) whose keys the chart
does not set itself: selectors, NetworkPolicies, monitors and config checksums keep
working whatever a user adds. */}}
{{- define "elasticctr.podMetadata" -}}
{{- $own := fromYaml .own -}}
{{- $extra := dict -}}
{{- range $key, $value := .extra -}}
{{- if not (hasKey $own $key) }}{{ $_ := set $extra $key (toString $value) }}{{ end -}}
{{- end -}}
{{ .own }}
{{- with $extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The helpers below render nothing, or text without a leading newline for
`{{- with include ... }}{{ . | nindent N }}{{ end }}`. */}}

{{/* Container env entries of v.extraEnv (Kubernetes EnvVar objects: `value` or
`valueFrom`), appended after the chart's own: for a name the chart sets too, the container
gets the user's (the last entry). */}}
{{- define "elasticctr.extraEnv" -}}
{{- with .v.extraEnv }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* A container's `envFrom:` of v.extraEnvFrom (ConfigMaps and Secrets as variables). */}}
{{- define "elasticctr.extraEnvFrom" -}}
{{- with .v.extraEnvFrom }}{{ printf "envFrom:\n%s" (toYaml . | indent 2) }}{{ end -}}
{{- end -}}

{{/* Volume mount entries of v.extraVolumeMounts, appended to a container's own. */}}
{{- define "elasticctr.extraVolumeMounts" -}}
{{- with .v.extraVolumeMounts }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* Volume entries of v.extraVolumes, appended to a pod's own. */}}
{{- define "elasticctr.extraVolumes" -}}
{{- with .v.extraVolumes }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* Where a pod runs: v.nodeSelector, v.tolerations, v.affinity and
v.topologySpreadConstraints; a constraint without a labelSelector gets the workload's own
pod labels (`selector`, a dict), so that it spreads the pods of this workload. */}}
{{- define "elasticctr.podPlacement" -}}
{{- $v := .v -}}
{{- $out := list -}}
{{- range $key := list "nodeSelector" "tolerations" "affinity" -}}
{{- with index $v $key }}{{ $out = append $out (printf "%s:\n%s" $key (toYaml . | indent 2)) }}{{ end -}}
{{- end -}}
{{- with $v.topologySpreadConstraints -}}
{{- $constraints := list -}}
{{- range . -}}
{{- $c := . -}}
{{- if not (hasKey $c "labelSelector") -}}
{{- $c = merge (dict "labelSelector" (dict "matchLabels" $.selector)) $c -}}
{{- end -}}
{{- $constraints = append $constraints $c -}}
{{- end -}}
{{- $out = append $out (printf "topologySpreadConstraints:\n%s" (toYaml $constraints | indent 2)) -}}
{{- end -}}
{{- join "\n" $out -}}
{{- end -}}
