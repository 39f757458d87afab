"""Shared pieces of the chart tests (paths, rendering); fixtures are in conftest.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "elasticctr"
SCHEMAS = REPO / ".tools" / "schemas"
# The chart's kubeVersion floor and the Kubernetes minor helm is built for.
KUBE_VERSIONS = ("1.28", "1.34")


def values_files() -> list[Path]:
    return sorted((REPO / "values").glob("*.yaml")) + sorted((CHART / "ci").glob("*-values.yaml"))


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("timeout", 120)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def render(helm: str, *args: str, kube_version: str = "1.34") -> subprocess.CompletedProcess:
    """`helm template` of the umbrella chart (release `ctr`, namespace `ml`)."""
    return run(
        [helm, "template", "ctr", str(CHART), "--namespace", "ml", "--kube-version", kube_version]
        + list(args)
    )
