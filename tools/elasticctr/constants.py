"""Names and defaults shared by every part: environment variables, file names, ports.

One source of truth: other modules import these names instead of re-typing strings.
Each part adds its own contract here (and documents it in docs/) as it lands.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

# --- ectl / general -----------------------------------------------------------------
ENV_PREFIX = "ELASTICCTR_"
"""Every environment variable of ElasticCTR's own starts with this (ENV_NAMES lists them);
the other names it reads are other tools' (PADDLE_*, AWS_*, HDFS_UGI, MLFLOW_*)."""
LEGACY_ENV_PREFIX = "ECTL_"
"""ElasticCTR 0.1 named part of them ECTL_; `adopt_legacy_env` still reads them, with a
warning, until 0.3."""

ENV_VERBOSE = "ELASTICCTR_VERBOSE"
"""Set to 1 to print tracebacks for errors (same as --verbose)."""

ENV_CHART_DIR = "ELASTICCTR_CHART_DIR"
"""Where the umbrella chart lives; default: the chart packaged with ectl (chart_dir())."""

ENV_HOME = "ELASTICCTR_HOME"
"""Working folder of local mode (logs, data, model store); default ./.elasticctr."""

ENV_HELM = "ELASTICCTR_HELM"
"""Path of the helm binary for the cluster verbs (else `helm` on PATH, e.g. .tools/bin)."""

ENV_RELEASE = "ELASTICCTR_RELEASE"
"""Default release name for install/upgrade/status/logs/... (else DEFAULT_RELEASE)."""
DEFAULT_RELEASE = "elasticctr"

ENV_NAMESPACE = "ELASTICCTR_NAMESPACE"
"""Default Kubernetes namespace for the cluster verbs (else the kubeconfig context's)."""

# --- data format ----------------------------------------------------------------------
ENV_DATA_UTC_OFFSET = "ELASTICCTR_DATA_UTC_OFFSET"
"""UTC offset (`+08:00`, `-05:00`, `UTC`) of the clock the data hours are named in
(global.data.utcOffset); UTC when unset. Only /metrics reads it: version timestamps and
model freshness (elasticctr.metrics)."""

DONEFILE = "donefile"
"""A partition or model version is complete only when this marker file exists."""

SLOT_CONF = "slot.conf"
DATA_CONFIG = "data.config"

DEFAULT_MAX_ERROR_RATE = 0.01
"""Share of malformed lines a data file may have before reading it fails (maxErrorRate)."""

ENV_HDFS_UGI = "HDFS_UGI"
"""HDFS credentials (`user,password`; the user is the HDFS user) when the values file
carries no global.data.hdfsUgi (the chart sets it in every part that opens a store, from
global.data.hdfsUgiSecret or the release's `<release>-store` Secret); the model store
(elasticctr.modelstore) reads it too."""

# S3-compatible object stores (s3:// data and model store; docs/storage.md). The standard
# AWS names where one exists, so an AWS SDK default (or an IAM role) works unchanged; the
# chart sets them from global.s3 and its existingSecret (one named template per subchart).
ENV_S3_ENDPOINT = "AWS_ENDPOINT_URL"
"""Endpoint URL of an S3-compatible store (global.s3.endpoint); empty = AWS S3 itself."""
ENV_S3_REGION = "AWS_REGION"
"""Region of the bucket (global.s3.region), e.g. us-east-1, cn-north-4, bj."""
ENV_S3_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
ENV_S3_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
ENV_S3_SESSION_TOKEN = "AWS_SESSION_TOKEN"
"""The credentials (from global.s3.existingSecret); unset = the AWS SDK's own chain
(shared credentials file, web identity / IAM role of the pod or instance)."""
ENV_S3_PATH_STYLE = "ELASTICCTR_S3_PATH_STYLE"
"""`true`: path-style requests (`ENDPOINT/bucket/key`, what SeaweedFS, MinIO and in-cluster
stores need); `false`: virtual-hosted (`bucket.ENDPOINT/key`); unset: the SDK's choice
(global.s3.pathStyle)."""

DATA_FILE_PREFIX = "part-"
"""Data files of a partition are named part-*; other files (donefile, _SUCCESS) are not data."""


def repo_root() -> Path:
    """The source checkout this package runs from (tools/elasticctr -> repo root)."""
    return Path(__file__).resolve().parents[2]


def chart_dir() -> Path:
    """The umbrella chart: $ELASTICCTR_CHART_DIR, else the chart of this package's own
    version (the wheel carries it as elasticctr/chart, setup.py), else charts/elasticctr
    of the checkout the package runs from (an editable install)."""
    override = os.environ.get(ENV_CHART_DIR)
    if override:
        return Path(override)
    packaged = Path(__file__).resolve().parent / "chart"
    if (packaged / "Chart.yaml").is_file():
        return packaged
    return repo_root() / "charts" / "elasticctr"


# --- HTTP servers (elasticctr.httpd: fileserver, coordinator, cube, serving) ----------------
ENV_HTTP_HEADER_TIMEOUT = "ELASTICCTR_HTTP_HEADER_TIMEOUT"
"""Seconds a client has to send a whole request head (default 30)."""
ENV_HTTP_IDLE_TIMEOUT = "ELASTICCTR_HTTP_IDLE_TIMEOUT"
"""Seconds an idle keep-alive connection (or a stalled body) is kept open (default 60)."""
ENV_HTTP_MAX_CONNECTIONS = "ELASTICCTR_HTTP_MAX_CONNECTIONS"
"""Open connections a server accepts before answering 503 and closing (default 1024)."""
ENV_HTTP_ACCESS_LOG = "ELASTICCTR_HTTP_ACCESS_LOG"
"""1: every elasticctr.httpd server logs one line per request (debugging)."""

# --- fileserver -----------------------------------------------------------------------
ENV_FILESERVER_TOKEN = "ELASTICCTR_FILESERVER_TOKEN"
"""Bearer token for fileserver writes (server side) and for uploads (client side)."""
ENV_FILESERVER_ACCESS_LOG = "ELASTICCTR_FILESERVER_ACCESS_LOG"
"""1: the fileserver logs one line per request (debugging; off by default)."""
FILESERVER_PORT = 8080
FILESERVER_MAX_UPLOAD_BYTES = 8 << 30

# --- cube -----------------------------------------------------------------------------
ENV_CUBE_ADMIN_TOKEN = "ELASTICCTR_CUBE_ADMIN_TOKEN"
"""Bearer token for a cube shard's /admin routes (server) and for cube-transfer (client)."""
ENV_CUBE_SHARDS = "ELASTICCTR_CUBE_SHARDS"
"""Comma-separated base URLs of the cube shards, shard 0 first (transfer, serving); the
replicas of one shard are separated by CUBE_REPLICA_SEPARATOR, e.g.
`http://c-0:8500|http://c-2:8500,http://c-1:8500|http://c-3:8500` (two shards of two
replicas: `elasticctr.cube.protocol.parse_shards`)."""
CUBE_REPLICA_SEPARATOR = "|"
ENV_CUBE_TRANSFER_URL = "ELASTICCTR_CUBE_TRANSFER_URL"
"""cube-transfer's status server, for the coordinator's poke after each export (`ectl
coordinator --transfer-url`): the hand-off does not wait for the transfer's poll."""
VOLCANO_JOB_LABEL = "volcano.sh/job-name"
VOLCANO_TASK_LABEL = "volcano.sh/task-spec"
"""Labels Volcano's job controller puts on every pod of a Job: its name and its task."""
CUBE_ADMIN_TOKEN_HEADER = "X-Elasticctr-Admin-Token"
"""The cube admin token where Authorization cannot carry it: the API server's pod proxy
strips Authorization (`ectl model` -> cube-transfer's /v1/pin, /v1/unpin)."""
CUBE_PORT = 8500
CUBE_TRANSFER_PORT = 8510
"""cube-transfer's status server (/healthz, /readyz, /v1/status; `--listen`). The chart's
transfer container declares it. The chart states every port of this module once, in its
common library's elasticctr.port (tests/chart/test_ports.py keeps them equal)."""

# --- training roles (Paddle Fleet parameter server) ------------------------------------
# One environment contract for local processes and pods; see docs/training.md. The PADDLE_*
# names are what Paddle's PaddleCloudRoleMaker reads; elasticctr.train.env fills them from
# Volcano's variables when they are absent.
ENV_TRAINING_ROLE = "TRAINING_ROLE"
"""PSERVER or TRAINER."""
ROLE_PSERVER = "PSERVER"
ROLE_TRAINER = "TRAINER"
ENV_PSERVER_ENDPOINTS = "PADDLE_PSERVERS_IP_PORT_LIST"
"""Comma-separated host:port of every pserver, pserver 0 first."""
ENV_TRAINER_ID = "PADDLE_TRAINER_ID"
"""This trainer's index, 0..PADDLE_TRAINERS_NUM-1 (trainer 0 evaluates and exports)."""
ENV_TRAINERS_NUM = "PADDLE_TRAINERS_NUM"
ENV_POD_IP = "POD_IP"
"""Address this role is reachable at; a pserver's POD_IP:PADDLE_PORT must be in the list."""
ENV_PADDLE_PORT = "PADDLE_PORT"
"""Port this role listens on (pserver: the PS service)."""
ENV_GLOO_HTTP_ENDPOINT = "PADDLE_GLOO_HTTP_ENDPOINT"
"""host:port of the trainer rendezvous store that pserver 0 serves (trainer barriers)."""
ENV_WITH_GLOO = "PADDLE_WITH_GLOO"
ENV_GLOO_RENDEZVOUS = "PADDLE_GLOO_RENDEZVOUS"
ENV_PIR_API = "FLAGS_enable_pir_api"
"""Must be 0 in PS processes: Paddle 3.0's Fleet PS runs only on the legacy program IR."""
DEFAULT_PSERVER_PORT = 6170
DEFAULT_GLOO_PORT = 6171
"""On pserver 0 (rendezvous store for trainer barriers)."""
ENV_VC_PSERVER_HOSTS = "VC_PSERVER_HOSTS"
"""Volcano svc plugin: comma-separated stable host names of task `pserver`."""
ENV_VC_TRAINER_HOSTS = "VC_TRAINER_HOSTS"
ENV_VC_PSERVER_NUM = "VC_PSERVER_NUM"
ENV_VC_TRAINER_NUM = "VC_TRAINER_NUM"
ENV_VC_TASK_INDEX = "VC_TASK_INDEX"
"""Volcano env plugin: this pod's index within its task."""
ENV_VC_COORDINATOR_HOSTS = "VC_COORDINATOR_HOSTS"
"""Volcano svc plugin: host name of the job's coordinator task."""
ENV_COORDINATOR_URL = "ELASTICCTR_COORDINATOR_URL"
"""Elastic trainers: the coordinator's URL (else VC_COORDINATOR_HOSTS +
ELASTICCTR_COORDINATOR_PORT)."""
ENV_COORDINATOR_PORT = "ELASTICCTR_COORDINATOR_PORT"
DEFAULT_COORDINATOR_PORT = 8300
DEFAULT_COORDINATOR_LEASE_SECONDS = 120.0
"""How long a trainer's task lease lasts without a heartbeat (chart:
trainer.coordinator.leaseSeconds; tests/unit/test_chart_defaults.py keeps them equal)."""
DEFAULT_COORDINATOR_TASK_MIB = 64
"""Data files are split into tasks of about this many MiB (trainer.coordinator.taskMiB)."""
DEFAULT_COORDINATOR_WINDOW = 2
"""Partitions trained at the same time (trainer.coordinator.window)."""
DEFAULT_COORDINATOR_CHECKPOINT_EVERY = 1
"""Checkpoint after every N exports (trainer.coordinator.checkpointEvery)."""
COORDINATOR_WAIT_SECONDS = 1.0
"""How long an idle trainer sleeps before it asks for work again (a `wait` answer).
Short: with the native pipeline a task of a small hour trains in well under a second,
and a trainer that slept 5 s through a checkpoint export missed the whole next hour."""
DEFAULT_COORDINATOR_POLL_SECONDS = 30.0
"""Seconds between looks for new hourly partitions (trainer.coordinator.pollSeconds)."""
ENV_COORDINATOR_TRAINERS_FILE = "ELASTICCTR_COORDINATOR_TRAINERS_FILE"
EXIT_STOPPED = 143
"""Exit status of an elastic trainer stopped by SIGTERM (128 + 15: preempted, evicted,
drained) before the coordinator said `finished`. Not 0: a trainer pod that ends Succeeded
counts towards Volcano's TaskCompleted (Succeeded pods >= the task's replicas), whose
CompleteJob would end the whole job when every trainer is preempted at once or the count
was lowered (elasticctr.coordinator.yielding). The trainer task has no PodFailed policy,
so a Failed trainer pod spends no retry."""
ENV_COORDINATOR_YIELD_JOB = "ELASTICCTR_COORDINATOR_YIELD_JOB"
"""The coordinator's Volcano Job: set, it gives trainers up to kube-scheduler's preemptors
(elasticctr.coordinator.yielding; trainer.coordinator.yieldToKubeScheduler)."""
ENV_COORDINATOR_YIELD_HOLD_SECONDS = "ELASTICCTR_COORDINATOR_YIELD_HOLD_SECONDS"
DEFAULT_YIELD_HOLD_SECONDS = 120
"""Seconds after kube-scheduler's last preemption before the trainer count is restored."""
"""JSON `{"min": m, "max": n}` of the trainer task (trainer.trainer.minReplicas and
replicas) for the coordinator's /metrics: a ConfigMap the chart mounts, outside the job's
spec, so scaling changes it in place (docs/operations.md)."""
ENV_COORDINATOR_JOB = "ELASTICCTR_COORDINATOR_JOB"
"""The coordinator's Volcano Job, for its upkeep (elasticctr.coordinator.upkeep): giving
spent retries back after a healthy period and replacing trainers the kubelet evicted."""
ENV_COORDINATOR_RETRY_RECOVERY_SECONDS = "ELASTICCTR_COORDINATOR_RETRY_RECOVERY_SECONDS"
DEFAULT_RETRY_RECOVERY_SECONDS = 1800
"""Seconds a restarted job must run healthy before its Volcano retryCount goes back to 0
(trainer.volcano.retryRecoverySeconds); 0 = never."""
ENV_COORDINATOR_REPLACE_EVICTED = "ELASTICCTR_COORDINATOR_REPLACE_EVICTED_TRAINERS"
""""1": the coordinator deletes trainer pods the kubelet ended Failed (evicted under node
pressure, node shutdown), so that Volcano recreates them
(trainer.coordinator.replaceEvictedTrainers)."""
ENV_PSERVER_WAIT_SECONDS = "ELASTICCTR_PSERVER_WAIT_SECONDS"
"""How long a trainer waits for every pserver endpoint to accept TCP connections."""
DEFAULT_PSERVER_WAIT_SECONDS = 300.0
ENV_TRAIN_VALUES = "ELASTICCTR_TRAIN_VALUES"
"""Path of the values file a role reads (same as `ectl train pserver|trainer -f`)."""
ENV_TRAIN_STAGING = "ELASTICCTR_TRAIN_STAGING"
"""Folder pservers dump sparse tables into before export (shared volume in a cluster)."""
ENV_TRAIN_ELASTIC = "ELASTICCTR_TRAIN_ELASTIC"
"""1: elastic job (coordinator tasks): no gloo rendezvous/barriers on any role."""
ENV_TRAIN_CHECKPOINT = "ELASTICCTR_TRAIN_CHECKPOINT"
"""Folder of the training checkpoint (PS dump + progress.json); shared volume in a cluster."""
ENV_TRAIN_KEEP_STAGING = "ELASTICCTR_TRAIN_KEEP_STAGING"
"""Set to 1 to keep each partition's table dump in the staging folder (debugging)."""
ENV_TRAIN_THREADS = "ELASTICCTR_TRAIN_THREADS"
"""Training threads per trainer (overrides the values' `trainer.trainer.threads`, i.e. the
trainer subchart's `trainer.threads`); 0 = the Python reader, >= 1 = Paddle's native
dataset pipeline with that many threads (docs/training.md "Native path")."""
DEFAULT_TRAIN_THREADS = 2
MAX_TRAIN_THREADS = 64
ENV_NATIVE_CACHE = "ELASTICCTR_NATIVE_CACHE"
"""Folder of the compiled native reader (default ~/.cache/elasticctr/native)."""
ENV_SLOTFEED = "ELASTICCTR_SLOTFEED"
"""Path of a prebuilt ectl-slotfeed binary (skips the build; images, tests)."""
ENV_CUBEFAST = "ELASTICCTR_CUBEFAST"
"""Path of a prebuilt cube lookup extension (cubefast.c; skips the build; images)."""
ENV_CUBE_NATIVE = "ELASTICCTR_CUBE_NATIVE"
"""0 = cube shards serve lookups from the numpy path instead of the native extension."""
ENV_STREAM_BLOCK_KIB = "ELASTICCTR_STREAM_BLOCK_KIB"
"""KiB per ranged read when the native reader streams a range of a stored (remote) file
(default 4096: one HTTP Range GET / HDFS read per 4 MiB)."""
ENV_READ_RETRY_SECONDS = "ELASTICCTR_READ_RETRY_SECONDS"
"""How long a stream of a stored file retries a failed read (connection refused, server
gone) from the byte it reached before the task fails (default 30)."""
ENV_DENSE_PULL_EVERY = "ELASTICCTR_DENSE_PULL_EVERY"
"""Steps between a trainer's pulls of the dense parameters (default 5)."""
ENV_DENSE_PULL_SECONDS = "ELASTICCTR_DENSE_PULL_SECONDS"
"""Seconds between dense pulls while the native pipeline trains (default 0.1)."""
ENV_MLFLOW_EXPERIMENT = "ELASTICCTR_MLFLOW_EXPERIMENT"
"""MLflow experiment of training runs (default `elasticctr`)."""
ENV_MLFLOW_REGISTERED_MODEL = "ELASTICCTR_MLFLOW_REGISTERED_MODEL"
"""MLflow registered model that training adds every exported version to."""
ENV_MLFLOW_FLUSH_SECONDS = "ELASTICCTR_MLFLOW_FLUSH_SECONDS"
"""How long a trainer's exit waits for MLflow updates still queued (tracking server down)."""
DEFAULT_MLFLOW_FLUSH_SECONDS = 120.0
MLFLOW_PORT = 5000
"""The tracking server's port in the chart (container and Service): the default
global.mlflow.trackingUri is http://<release>-mlflow:5000 (the chart's elasticctr.port)."""
DEFAULT_MLFLOW_REGISTERED_MODEL = "elasticctr"
MLFLOW_TAG_VERSION = "elasticctr.version"
"""Tag naming the model version id (YYYYMMDD/HH): on registered model versions (training)
and on the runs serving logs a pyfunc in."""
MLFLOW_EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MLFLOW_EXPERIMENT_KIND = "custom_model_development"
"""Experiment tag training sets: MLflow 3's kind of experiment ("Machine learning", not
GenAI). MLflow 3.17's UI chooses its view from a global workflow type instead (URL query
`workflowType=machine_learning`, else the browser's last choice, default GenAI): links
printed to people carry MLFLOW_UI_QUERY (docs/training.md)."""
MLFLOW_UI_QUERY = "workflowType=machine_learning"

# --- serving --------------------------------------------------------------------------
ENV_SERVING_TOKEN = "ELASTICCTR_SERVING_TOKEN"
"""Bearer token for the prediction API and its /admin routes (server and `ectl predict`)."""
ENV_SERVING_URL = "ELASTICCTR_SERVING_URL"
"""Base URL of the prediction service for `ectl predict`."""
ENV_MODEL_STORE = "ELASTICCTR_MODEL_STORE"
"""URL of the model store (global.modelStore): file://, http(s):// fileserver, hdfs://, s3://."""
SERVING_PORT = 8600
SERVING_MAX_BATCH_SAMPLES = 1024
"""Most samples in one dynamic batch (chart: serving.batching.maxBatchSamples)."""
SERVING_MAX_WAIT_MS = 0.0
"""Longest a batch waits to fill (chart: serving.batching.maxWaitMs); 0 = no waiting."""
SERVING_MAX_QUEUE_SAMPLES = 20000
"""Samples waiting beyond this answer 503 (chart: serving.batching.maxQueueSamples)."""

# --- console --------------------------------------------------------------------------
ENV_CONSOLE_TOKEN = "ELASTICCTR_CONSOLE_TOKEN"
"""The console's administrator token: every team's scenarios (`ectl console`; a users
file adds per-team tokens)."""
CONSOLE_PORT = 8700


# --- one prefix -----------------------------------------------------------------------
ENV_NAMES = frozenset(
    value
    for name, value in dict(globals()).items()
    if name.startswith("ENV_") and isinstance(value, str) and value.startswith(ENV_PREFIX)
)
"""Every ELASTICCTR_* name the package reads (tests/unit/test_env_names.py: the chart,
the package and the docs use no other)."""


def current_env_name(legacy: str) -> str:
    """The ELASTICCTR_<X> name of a legacy ECTL_<X> one."""
    return ENV_PREFIX + legacy.removeprefix(LEGACY_ENV_PREFIX)


def adopt_legacy_env(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Copy each legacy `ECTL_<X>` whose `ELASTICCTR_<X>` is one of ENV_NAMES into that
    name (a set new name wins); the legacy names found, sorted, for the caller to warn
    about. `ectl` calls it first, so every part and its child processes read new names only."""
    env = os.environ if environ is None else environ
    found = []
    for legacy in sorted(name for name in env if name.startswith(LEGACY_ENV_PREFIX)):
        new = current_env_name(legacy)
        if new in ENV_NAMES:
            found.append(legacy)
            env.setdefault(new, env[legacy])
    return found
