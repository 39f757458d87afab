"""Fixtures of the chart tests: bootstrapped tools and offline kubeconform schemas."""

from __future__ import annotations

import subprocess
import sys

import pytest
from chart_helpers import KUBE_VERSIONS, REPO, SCHEMAS
from tests.conftest import require_tool, shared_path


@pytest.fixture(scope="session")
def helm() -> str:
    return require_tool("helm")


@pytest.fixture(scope="session")
def kubeconform() -> str:
    return require_tool("kubeconform")


@pytest.fixture(scope="session")
def kube_schema_locations() -> dict[str, list[str]]:
    """kubeconform -schema-location flags per Kubernetes version: the Kubernetes schemas of
    the kubernetes-validate package (rewritten to resolve offline), the Volcano CRDs of
    ../shared and prometheus-operator's (ServiceMonitor, PodMonitor, PrometheusRule: the
    chart's monitors; bootstrap-tools.sh links them) converted into .tools/schemas/crds."""
    crds = sorted(shared_path("crds", "volcano").glob("*.yaml"))
    assert crds, "no Volcano CRDs in ../shared/crds/volcano"
    monitoring = REPO / ".tools" / "prometheus-operator-crd"
    kinds = ("servicemonitors", "podmonitors", "prometheusrules")
    crds += [monitoring / f"monitoring.coreos.com_{kind}.yaml" for kind in kinds]
    if not all(c.is_file() for c in crds):
        pytest.fail(f"prometheus-operator CRDs missing in {monitoring}: run `make tools`")
    run = [sys.executable, str(REPO / "scripts" / "k8s-jsonschema.py"), str(SCHEMAS)]
    subprocess.run(run + list(KUBE_VERSIONS), check=True, capture_output=True, text=True)
    convert = [
        sys.executable,
        str(REPO / "scripts" / "crd-to-jsonschema.py"),
        str(SCHEMAS / "crds"),
    ]
    subprocess.run(convert + [str(c) for c in crds], check=True, capture_output=True, text=True)
    crd_location = (
        str(SCHEMAS / "crds") + "/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
    )
    return {
        v: [
            "-schema-location",
            str(SCHEMAS / f"v{v}.0-local-strict") + "/{{ .ResourceKind }}{{ .KindSuffix }}.json",
            "-schema-location",
            crd_location,
        ]
        for v in KUBE_VERSIONS
    }
