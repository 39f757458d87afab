"""Names and defaults shared by every part: environment variables, file names, ports.

One source of truth: other modules import these names instead of re-typing strings.
Each part adds its own contract here (and documents it in docs/) as it lands.
"""

from __future__ import annotations

import os
from pathlib import Path

# --- ectl / general -----------------------------------------------------------------
ENV_VERBOSE = "ECTL_VERBOSE"
"""Set to 1 to print tracebacks for errors (same as --verbose)."""

ENV_CHART_DIR = "ELASTICCTR_CHART_DIR"
"""Where the umbrella chart lives; defaults to charts/elasticctr beside the package source."""

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
DONEFILE = "donefile"
"""A partition or model version is complete only when this marker file exists."""

SLOT_CONF = "slot.conf"
DATA_CONFIG = "data.config"

DEFAULT_MAX_ERROR_RATE = 0.01
"""Share of malformed lines a data file may have before reading it fails (maxErrorRate)."""

DATA_FILE_PREFIX = "part-"
"""Data files of a partition are named part-*; other files (donefile, _SUCCESS) are not data."""


def repo_root() -> Path:
    """The source checkout this package runs from (tools/elasticctr -> repo root)."""
    return Path(__file__).resolve().parents[2]


def chart_dir() -> Path:
    """The umbrella chart: $ELASTICCTR_CHART_DIR, else charts/elasticctr of the checkout."""
    override = os.environ.get(ENV_CHART_DIR)
    if override:
        return Path(override)
    return repo_root() / "charts" / "elasticctr"


# --- fileserver -----------------------------------------------------------------------
ENV_FILESERVER_TOKEN = "ELASTICCTR_FILESERVER_TOKEN"
"""Bearer token for fileserver writes (server side) and for uploads (client side)."""
FILESERVER_PORT = 8080
FILESERVER_MAX_UPLOAD_BYTES = 8 << 30

# --- cube -----------------------------------------------------------------------------
ENV_CUBE_ADMIN_TOKEN = "ELASTICCTR_CUBE_ADMIN_TOKEN"
"""Bearer token for a cube shard's /admin routes (server) and for cube-transfer (client)."""
ENV_CUBE_SHARDS = "ELASTICCTR_CUBE_SHARDS"
"""Comma-separated base URLs of the cube shards, shard 0 first (transfer, serving)."""
CUBE_PORT = 8500

# --- serving --------------------------------------------------------------------------
ENV_SERVING_TOKEN = "ELASTICCTR_SERVING_TOKEN"
"""Bearer token for the prediction API and its /admin routes (server and `ectl predict`)."""
ENV_SERVING_URL = "ELASTICCTR_SERVING_URL"
"""Base URL of the prediction service for `ectl predict`."""
ENV_MODEL_STORE = "ELASTICCTR_MODEL_STORE"
"""URL of the model store (global.modelStore): file://, http(s):// fileserver, hdfs://."""
SERVING_PORT = 8600
