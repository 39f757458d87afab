"""Release verbs with the real helm binary: rendering, the dry-run diff, command failures.

No cluster here: `helm template` runs offline; everything that needs the API server is
driven against a kubeconfig whose server port is closed and must fail with exit code 3
and one clear line. Install/upgrade/rollback against a real API server: tests/cluster.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import require_tool

from elasticctr.cli._common import Target, helm_client
from elasticctr.cli.release import diff_manifests, render

pytestmark = pytest.mark.integration

FIXTURE_CHART = Path(__file__).resolve().parents[1] / "fixtures" / "ectl_chart"


def _render(values: dict, release: str = "demo") -> list[dict]:
    client = helm_client(Target(release, "ctr", None, None, require_tool("helm")))
    return asyncio.run(render(client, FIXTURE_CHART, release, values, "ctr", upgrade=False))


def test_render_uses_one_merged_values_dict():
    docs = _render({"replicas": 3, "message": "hi", "extra": {"enabled": True}})
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "Deployment", "Service"]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert next(d for d in docs if d["kind"] == "ConfigMap")["data"]["message"] == "hi"


def test_dry_run_diff_of_real_renders():
    current = _render({"replicas": 1})
    proposed = _render({"replicas": 2, "message": "changed", "extra": {"enabled": True}})
    changes = {(c.action, c.kind, c.name): c for c in diff_manifests(current, proposed, "ctr")}
    assert set(changes) == {
        ("change", "ConfigMap", "demo-config"),
        ("change", "Deployment", "demo-app"),
        ("create", "Service", "demo-extra"),
    }
    dep = changes[("change", "Deployment", "demo-app")]
    assert "-  replicas: 1\n" in dep.diff and "+  replicas: 2\n" in dep.diff
    assert dep.added == 1 and dep.removed == 1
    assert changes[("create", "Service", "demo-extra")].removed == 0
    # and back: the Service would be deleted
    back = diff_manifests(proposed, current, "ctr")
    assert ("delete", "Service", "demo-extra") in {(c.action, c.kind, c.name) for c in back}


def test_identical_renders_have_no_changes():
    assert diff_manifests(_render({"replicas": 2}), _render({"replicas": 2}), "ctr") == []


def test_render_failure_is_one_clear_error():
    from elasticctr.errors import EctlError

    with pytest.raises(EctlError) as err:
        _render({"extra": "not-a-map"})  # template reads .Values.extra.enabled
    assert "helm template failed" in err.value.message


# --- the console entry point against no cluster ------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def dead_kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: d, cluster: {{server: 'https://127.0.0.1:{_closed_port()}'}}}}]\n"
        "contexts: [{name: d, context: {cluster: d, user: u}}]\ncurrent-context: d\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    return path


def ectl(*args: str, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def test_missing_chart_is_a_clear_error(tmp_path, dead_kubeconfig):
    values = tmp_path / "v.yaml"
    values.write_text("{}\n")
    for verb in ("template", "install", "upgrade"):
        cluster = [] if verb == "template" else ["--kubeconfig", str(dead_kubeconfig)]
        proc = ectl(verb, "-f", str(values), "--chart", str(tmp_path / "nochart"), *cluster)
        assert proc.returncode == 1, proc.stderr
        assert "no chart at" in proc.stderr and "ELASTICCTR_CHART_DIR" in proc.stderr
        assert "Traceback" not in proc.stderr
