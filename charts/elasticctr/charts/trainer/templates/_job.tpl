{{/* The Volcano Job spec as YAML; job.yaml hashes it (minus the mutable fields) into the name. */}}
{{- define "trainer.jobSpec" -}}
{{- $v := .Values -}}
schedulerName: {{ $v.volcano.schedulerName }}
queue: {{ $v.volcano.queue }}
{{- $pcs := $v.volcano.priorityClasses }}
{{- /* Volcano gives pods without a class the job's: default the job to the trainers' class
only when the coordinator and pservers have their own. */}}
{{- with $v.volcano.priorityClassName | default (and $pcs.guaranteed $pcs.trainer) }}
# The PodGroup's priority (between jobs): Volcano preempts this job's pods above its gang
# minimum, lowest pod priority first (the trainers), for jobs of a higher one.
priorityClassName: {{ . }}
{{- end }}
# Gang minimum: the coordinator, every pserver and the fewest trainers the job can run with.
minAvailable: {{ add 1 $v.pserver.replicas $v.trainer.minReplicas }}
maxRetry: {{ $v.volcano.maxRetry }}
{{- if $v.volcano.ttlSecondsAfterFinished }}
ttlSecondsAfterFinished: {{ $v.volcano.ttlSecondsAfterFinished }}
{{- end }}
plugins:
  # svc: headless Service + stable hostnames <job>-<task>-<i>.<job>, VC_<TASK>_HOSTS/_NUM env.
  # The Service publishes not-ready pods too: peers resolve a pserver's or the coordinator's
  # host name while it starts (pservers bind their pod IP, elasticctr.train.env).
  svc: {{ if $v.volcano.svcNetworkPolicy }}["--publish-not-ready-addresses=true"]{{ else }}["--publish-not-ready-addresses=true", "--disable-network-policy=true"]{{ end }}
  # env: VC_TASK_INDEX (the trainer / pserver id).
  env: []
# Every task spells out maxRetry: Volcano's webhook defaults a missing one on create only,
# and then rejects a `helm upgrade` whose tasks lack it (in-place scaling).
tasks:
  - name: coordinator
    replicas: 1
    minAvailable: 1
    maxRetry: {{ $v.volcano.maxRetry }}
    # Progress lives in the checkpoint: a lost coordinator restarts the job, which resumes there.
    policies:
      - events: [PodFailed, PodEvicted]
        action: RestartJob
    template:
      {{- $c := $v.coordinator }}
      {{- /* Every coordinator start is a job (re)start here (RestartJob), so its progress comes from the checkpoint. */}}
      {{- $args := list "coordinator" "-f" "/etc/elasticctr/values.yaml" "--host" "0.0.0.0" "--port" (toString $c.port) "--lease-seconds" (toString $c.leaseSeconds) "--task-mb" (toString $c.taskMiB) "--window" (toString $c.window) "--checkpoint-every" (toString $c.checkpointEvery) "--poll-seconds" (toString $c.pollSeconds) "--from-checkpoint" "/var/lib/elasticctr/staging/checkpoint" }}
      {{- include "trainer.podTemplate" (dict "ctx" . "role" "coordinator" "args" $args "port" $c.port "resources" $c.resources) | nindent 6 }}
  - name: pserver
    replicas: {{ $v.pserver.replicas }}
    minAvailable: {{ $v.pserver.replicas }}
    maxRetry: {{ $v.volcano.maxRetry }}
    # A lost pserver loses its shard of the parameters: restart the job from the checkpoint.
    policies:
      - events: [PodFailed, PodEvicted]
        action: RestartJob
    template:
      {{- include "trainer.podTemplate" (dict "ctx" . "role" "pserver" "args" (list "train" "pserver" "-f" "/etc/elasticctr/values.yaml") "port" $v.pserver.port "resources" $v.pserver.resources) | nindent 6 }}
  - name: trainer
    replicas: {{ $v.trainer.replicas }}
    minAvailable: {{ $v.trainer.minReplicas }}
    maxRetry: {{ $v.volcano.maxRetry }}
    # A lost trainer only loses its task lease (it expires; another trainer takes the task).
    # Preempted or deleted (PodEvicted): no policy, so Volcano recreates that pod alone
    # without a retry (RestartTask would kill every trainer and spend one, Volcano >= 1.11).
    # A crash restarts the container in place (restartPolicy OnFailure). No PodFailed policy
    # either: a preempted trainer whose pod ends Failed on its way out (SIGKILLed after the
    # grace period, or deleted before its container started) must not spend a retry
    # (RestartPod does: a few preemptions would fail the job); its deletion recreates it.
    policies:
      # Bounded runs (endDateHour set): trainers exit 0 when no partition is left.
      - event: TaskCompleted
        action: CompleteJob
    template:
      {{- include "trainer.podTemplate" (dict "ctx" . "role" "trainer" "args" (list "train" "trainer" "-f" "/etc/elasticctr/values.yaml") "port" 0 "resources" $v.trainer.resources) | nindent 6 }}
{{- end -}}

{{/* Pod template of one task. Args: ctx (root), role, args (ectl verb), port (0 = none), resources. */}}
{{- define "trainer.podTemplate" -}}
{{- $ctx := .ctx -}}
{{- $v := $ctx.Values -}}
{{- $selector := printf "%s\napp.kubernetes.io/component: %s" (include "elasticctr.component.selectorLabels" (dict "ctx" $ctx "name" "trainer")) .role }}
{{- $labels := printf "%s\napp.kubernetes.io/part-of: elasticctr\n%s" $selector (include "trainer.scenarioLabels" $ctx) }}
{{- /* Volcano's preempt and reclaim actions evict trainers only (and never below the gang). */}}
{{- $annotations := printf "checksum/config: %s\nvolcano.sh/preemptable: %s" (include "trainer.configData" $ctx | sha256sum) (eq .role "trainer" | quote) }}
metadata:
  labels:
    {{- include "elasticctr.podMetadata" (dict "own" $labels "extra" $v.podLabels) | nindent 4 }}
  annotations:
    {{- include "elasticctr.podMetadata" (dict "own" $annotations "extra" $v.podAnnotations) | nindent 4 }}
spec:
  # Trainers: a crash restarts the container in place; coordinator and pservers fail the pod,
  # so that their RestartJob policy restarts the job from the checkpoint.
  restartPolicy: {{ ternary "OnFailure" "Never" (eq .role "trainer") }}
  {{- $class := ternary $v.volcano.priorityClasses.trainer $v.volcano.priorityClasses.guaranteed (eq .role "trainer") }}
  {{- with $class }}
  priorityClassName: {{ . }}
  {{- end }}
  serviceAccountName: {{ include "trainer.serviceAccountName" $ctx }}
  {{- /* Only the coordinator calls the Kubernetes API, and only for what rbac.yaml allows. */}}
  automountServiceAccountToken: {{ and (eq .role "coordinator") (eq (include "trainer.coordinatorUsesApi" $ctx) "true") }}
  {{- with $v.global.image.pullSecrets }}
  imagePullSecrets:
    {{- range . }}
    - name: {{ . }}
    {{- end }}
  {{- end }}
  securityContext:
    {{- toYaml $v.podSecurityContext | nindent 4 }}
  {{- with include "elasticctr.podPlacement" (dict "v" $v "selector" (fromYaml $selector)) }}{{ . | nindent 2 }}{{ end }}
  {{- with include "elasticctr.volumePermissions" (dict "ctx" $ctx "image" (include "elasticctr.component.image" (dict "ctx" $ctx "name" "trainer")) "volumes" (dict "staging" "/var/lib/elasticctr/staging")) }}{{ . | nindent 2 }}{{ end }}
  containers:
    - name: {{ .role }}
      image: {{ include "elasticctr.component.image" (dict "ctx" $ctx "name" "trainer") }}
      imagePullPolicy: {{ $v.global.image.pullPolicy }}
      command: ["ectl"]
      args: {{ .args | toJson }}
      env:
        - name: POD_IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: HOME
          value: /tmp
        {{- if ne .role "coordinator" }}
        # Paddle Fleet PS roles (docs/training.md); VC_* come from Volcano's svc/env plugins.
        - name: TRAINING_ROLE
          value: {{ ternary "PSERVER" "TRAINER" (eq .role "pserver") }}
        - name: PADDLE_PORT
          value: {{ $v.pserver.port | quote }}
        - name: FLAGS_enable_pir_api
          value: "0"
        - name: ELASTICCTR_TRAIN_STAGING
          value: /var/lib/elasticctr/staging
        # Elastic mode (docs/coordinator.md): no gloo barriers; trainers lease data tasks from
        # the coordinator task (VC_COORDINATOR_HOSTS) and share one checkpoint folder.
        - name: ELASTICCTR_TRAIN_ELASTIC
          value: "1"
        {{- end }}
        {{- if eq .role "coordinator" }}
        # The trainer task's bounds for /metrics (scale.yaml: updated in place on scaling).
        - name: ELASTICCTR_COORDINATOR_TRAINERS_FILE
          value: /etc/elasticctr-scale/trainers.json
        {{- if $v.coordinator.yieldToKubeScheduler.enabled }}
        # Give trainers up to kube-scheduler's preemptors (elasticctr.coordinator.yielding).
        - name: ELASTICCTR_COORDINATOR_YIELD_JOB
          valueFrom: {fieldRef: {fieldPath: "metadata.labels['volcano.sh/job-name']"}}
        - name: ELASTICCTR_COORDINATOR_YIELD_HOLD_SECONDS
          value: {{ $v.coordinator.yieldToKubeScheduler.holdSeconds | quote }}
        {{- end }}
        {{- if $v.coordinator.pokeTransfer }}
        # Poked after each export: the platform's cube-transfer publishes the version at once.
        - name: ELASTICCTR_CUBE_TRANSFER_URL
          value: {{ printf "http://%s-cube-transfer:%s" (include "trainer.platform" .ctx) (include "elasticctr.port" "cubeTransfer") | quote }}
        {{- end }}
        {{- if or (gt (int $v.volcano.retryRecoverySeconds) 0) $v.coordinator.replaceEvictedTrainers }}
        # Months-long jobs (elasticctr.coordinator.upkeep): give spent retries back after a
        # healthy period; delete trainers the kubelet evicted so that Volcano recreates them.
        - name: ELASTICCTR_COORDINATOR_JOB
          valueFrom: {fieldRef: {fieldPath: "metadata.labels['volcano.sh/job-name']"}}
        - name: ELASTICCTR_COORDINATOR_RETRY_RECOVERY_SECONDS
          value: {{ $v.volcano.retryRecoverySeconds | quote }}
        - name: ELASTICCTR_COORDINATOR_REPLACE_EVICTED_TRAINERS
          value: {{ ternary "1" "0" $v.coordinator.replaceEvictedTrainers | quote }}
        {{- end }}
        {{- end }}
        {{- if eq .role "trainer" }}
        - name: ELASTICCTR_COORDINATOR_PORT
          value: {{ $v.coordinator.port | quote }}
        - name: ELASTICCTR_TRAIN_CHECKPOINT
          value: /var/lib/elasticctr/staging/checkpoint
        {{- end }}
        - name: MLFLOW_TRACKING_URI
          value: {{ include "trainer.trackingUri" $ctx | quote }}
        {{- with include "trainer.scenario" $ctx }}
        # The scenario's own MLflow experiment and registered model (elasticctr.scenarios).
        - name: ELASTICCTR_MLFLOW_EXPERIMENT
          value: {{ printf "elasticctr-%s" . | quote }}
        - name: ELASTICCTR_MLFLOW_REGISTERED_MODEL
          value: {{ printf "elasticctr-%s" . | quote }}
        {{- end }}
        {{- with include "elasticctr.storeEnv" $ctx }}{{ . | nindent 8 }}{{ end }}
        - name: ELASTICCTR_FILESERVER_TOKEN
          valueFrom:
            secretKeyRef:
              name: {{ $v.fileserverToken.existingSecret | default (printf "%s-fileserver" (include "trainer.platform" $ctx)) }}
              key: {{ $v.fileserverToken.existingSecretKey }}
              # Not needed when the model store is not the fileserver.
              optional: true
        {{- with include "elasticctr.extraEnv" (dict "v" $v) }}{{ . | nindent 8 }}{{ end }}
      {{- with include "elasticctr.extraEnvFrom" (dict "v" $v) }}{{ . | nindent 6 }}{{ end }}
      {{- if .port }}
      ports:
        - name: {{ .role }}
          containerPort: {{ .port }}
      {{- end }}
      {{- if eq .role "coordinator" }}
      readinessProbe:
        httpGet: {path: /v1/progress, port: {{ .role }}}
        timeoutSeconds: 5
        periodSeconds: 10
      livenessProbe:
        httpGet: {path: /v1/progress, port: {{ .role }}}
        timeoutSeconds: 5
        initialDelaySeconds: 10
        periodSeconds: 20
        failureThreshold: 3
      {{- else if eq .role "pserver" }}
      readinessProbe:
        tcpSocket: {port: {{ .role }}}
        timeoutSeconds: 5
        periodSeconds: 10
      livenessProbe:
        tcpSocket: {port: {{ .role }}}
        timeoutSeconds: 5
        initialDelaySeconds: 60
        periodSeconds: 20
        failureThreshold: 6
      {{- end }}
      resources:
        {{- toYaml .resources | nindent 8 }}
      securityContext:
        {{- toYaml $v.containerSecurityContext | nindent 8 }}
      volumeMounts:
        - name: config
          mountPath: /etc/elasticctr
          readOnly: true
        - name: data-config
          mountPath: /etc/elasticctr-data
          readOnly: true
        - name: tmp
          mountPath: /tmp
        - name: work
          mountPath: /var/lib/elasticctr/work
        - name: staging
          mountPath: /var/lib/elasticctr/staging
        {{- if eq .role "coordinator" }}
        - name: scale
          mountPath: /etc/elasticctr-scale
          readOnly: true
        {{- end }}
        {{- with include "elasticctr.extraVolumeMounts" (dict "v" $v) }}{{ . | nindent 8 }}{{ end }}
  volumes:
    - name: config
      secret:
        secretName: {{ include "elasticctr.component.fullname" (dict "ctx" $ctx "name" "trainer") }}-config
        items:
          - {key: values.yaml, path: values.yaml}
    - name: data-config
      configMap:
        name: {{ include "elasticctr.component.fullname" (dict "ctx" $ctx "name" "trainer") }}-data
    - name: tmp
      emptyDir: {}
    - name: work
      emptyDir: {}
    - name: staging
      persistentVolumeClaim:
        claimName: {{ include "trainer.stagingClaim" $ctx }}
    {{- if eq .role "coordinator" }}
    - name: scale
      configMap:
        name: {{ include "elasticctr.component.fullname" (dict "ctx" $ctx "name" "trainer") }}-scale
        # A job of an older chart revision may outlive the ConfigMap's first install.
        optional: true
    {{- end }}
    {{- with include "elasticctr.extraVolumes" (dict "v" $v) }}{{ . | nindent 4 }}{{ end }}
{{- end -}}
