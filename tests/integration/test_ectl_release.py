"""Release verbs with the real helm binary: rendering, the dry-run diff, command failures.

No cluster here: `helm template` runs offline; everything that needs the API server is
driven against a kubeconfig whose server port is closed and must fail with exit code 3
and one clear line. Install/upgrade/rollback against a real API server: tests/cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
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


@pytest.fixture
def _closed_port():
    """A loopback port held bound but not listening for the whole test: connecting is
    refused, and no other process can take the port meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.fixture
def dead_kubeconfig(tmp_path: Path, _closed_port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: d, cluster: {{server: 'https://127.0.0.1:{_closed_port}'}}}}]\n"
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


def test_missing_chart_is_a_clear_error(tmp_path, dead_kubeconfig, ectl_here):
    values = tmp_path / "v.yaml"
    values.write_text("{}\n")
    for verb in ("template", "install", "upgrade"):
        cluster = [] if verb == "template" else ["--kubeconfig", str(dead_kubeconfig)]
        proc = ectl_here(verb, "-f", str(values), "--chart", str(tmp_path / "nochart"), *cluster)
        assert proc.returncode == 1, proc.stderr
        text = " ".join(proc.stderr.split())
        assert "no chart at" in text and "ELASTICCTR_CHART_DIR" in text
        assert "Traceback" not in proc.stderr


# --- the real chart ------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "values" / "demo.yaml"


def test_template_real_chart_offline(tmp_path):
    require_tool("helm")
    proc = ectl("template", "-f", str(DEMO), "-R", "ctr", "-n", "ctr", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    kinds = {d["kind"] for d in docs}
    assert {"Job", "StatefulSet", "Deployment", "Service"} <= kinds
    job = next(d for d in docs if d["kind"] == "Job")
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert all(d["metadata"]["labels"]["app.kubernetes.io/instance"] == "ctr" for d in docs)


def test_dry_run_diff_on_the_real_chart_shows_the_job_replaced():
    """More pservers change the Volcano Job's spec, so the chart renames the Job: the diff
    shows the old one deleted and a new one created (Volcano rejects in-place edits)."""
    from elasticctr.values import load_files, merge

    helm = require_tool("helm")
    client = helm_client(Target("ctr", "ctr", None, None, helm))
    base = load_files([DEMO])
    more = merge(base, {"trainer": {"pserver": {"replicas": 3}}}, drop_nulls=False)
    current = asyncio.run(render(client, REPO / "charts" / "elasticctr", "ctr", base, "ctr", False))
    proposed = asyncio.run(render(client, REPO / "charts" / "elasticctr", "ctr", more, "ctr", True))
    jobs = [(c.action, c.kind) for c in diff_manifests(current, proposed, "ctr") if c.kind == "Job"]
    assert sorted(jobs) == [("create", "Job"), ("delete", "Job")]


def test_invalid_values_stop_before_helm_and_cluster(tmp_path, dead_kubeconfig, ectl_here):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  pserver:\n    replicas: 0\ncube:\n  shards: x\n")
    for verb in ("template", "install", "upgrade"):
        cluster = [] if verb == "template" else ["--kubeconfig", str(dead_kubeconfig)]
        proc = ectl_here(verb, "-f", str(bad), *cluster)
        assert proc.returncode == 2, (verb, proc.stderr)
        assert "trainer.pserver.replicas: 0 is less than the minimum of 1" in proc.stderr
        assert "cube.shards: 'x' is not of type 'integer'" in proc.stderr
        assert "unreachable" not in proc.stderr  # validation came first
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["install"],
        ["install", "--dry-run"],
        ["upgrade"],
        ["upgrade", "--dry-run"],
    ],
    ids=lambda a: "-".join(a),
)
def test_deploy_verbs_without_a_cluster(args, dead_kubeconfig, ectl_here):
    require_tool("helm")
    proc = ectl_here(*args, "-f", str(DEMO), "--kubeconfig", str(dead_kubeconfig))
    assert proc.returncode == 3, proc.stderr
    text = " ".join(proc.stderr.split())
    assert "Kubernetes cluster unreachable" in text and "ectl doctor" in text
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_secret_values_never_appear_in_a_diff():
    def secret(token: str) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s"},
            "data": {"token": token},
            "stringData": {"plain": token + "-p"},
        }

    changes = diff_manifests([secret("b2xkLXNlY3JldA==")], [secret("bmV3LXNlY3JldA==")], "ns")
    assert [(c.action, c.kind) for c in changes] == [("change", "Secret")]
    text = changes[0].diff
    assert "b2xkLXNlY3JldA==" not in text and "bmV3LXNlY3JldA==" not in text
    assert "-p" not in text.replace("--- ", "").replace("+++ ", "")
    assert "(sha256 " in text and changes[0].added == 2 and changes[0].removed == 2
    assert diff_manifests([secret("same")], [secret("same")], "ns") == []


def test_template_set_overrides_the_files(ectl_here):
    require_tool("helm")
    proc = ectl_here(
        "template", "-f", str(DEMO), "--set", "cube.shards=3", "-o", "json", "-R", "ctr"
    )
    assert proc.returncode == 0, proc.stderr
    cube = next(d for d in json.loads(proc.stdout) if d["kind"] == "StatefulSet")
    assert cube["spec"]["replicas"] == 3 * 2  # 3 shards x the default 2 replicas each


# --- ectl's --set parser against helm's ------------------------------------------------------

DUMP_TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: values}
data:
  values: {{ toJson .Values | quote }}
"""
FILE_VALUES = "lst: [p, q, r]\nm: {k: 1}\n"


@pytest.mark.parametrize(
    "flags",
    [
        ["--set", "cube.shards=4,serving.replicas=3"],
        ["--set", r"a=one\,two,b=x\=y,c=p=q", "--set", r"d\.e=1"],
        ["--set", "a.b[0]=v,c[1].d=v,n[1][1]=1,l={x,3,true},e={}"],
        ["--set", "lst[1]=Q,m.j=2,m.k=null"],
        ["--set", "i=0,j=007,k=1.5,l=-5,m2=+5,n=99999999999999999999,o=1e3,p=TRUE,q=Null"],
        ["--set", "a=,b.c=,d=1,"],
        ["--set-string", "a=1,b=true,c={1,null}", "--set", "a=2"],
        ["--set-json", 'a=0.5,b=[1,{"c":null}],d=,e="s"', "--set", "b[2]=x"],
        ["--set-file", "a=file.txt", "--set", "a=overridden"],
        ["--set-literal", r"a=one,two\,x=y{1}", "--set", "a=1,b=2", "--set-literal", "c.d[1]=007"],
        ["--set-literal", "k,e.y=v", "--set-literal", "lst[0]=true", "--set-literal", "m.k="],
    ],
    ids=lambda f: " ".join(f)[:40],
)
def test_set_flags_read_as_helm_reads_them(flags, tmp_path, monkeypatch):
    """helm renders `toJson .Values` for the same -f file and --set flags: ectl's dict
    (what it validates and hands helm) is the one helm would build from the flags."""
    from elasticctr.cli._values import Overrides, apply_overrides

    helm = require_tool("helm")
    chart = tmp_path / "dump"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: dump\nversion: 0.1.0\n")
    (chart / "templates" / "values.yaml").write_text(DUMP_TEMPLATE)
    (tmp_path / "values.yaml").write_text(FILE_VALUES)
    (tmp_path / "file.txt").write_text("one, two\nthree\n")
    monkeypatch.chdir(tmp_path)
    done = subprocess.run(
        [helm, "template", "x", str(chart), "-f", "values.yaml", *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    by_helm = json.loads(yaml.safe_load(done.stdout)["data"]["values"])
    given: dict[str, list[str]] = {}
    for flag, item in zip(flags[::2], flags[1::2], strict=True):
        given.setdefault(flag.removeprefix("--").replace("-", "_"), []).append(item)
    ours = apply_overrides(
        yaml.safe_load(FILE_VALUES), Overrides(**{k: tuple(v) for k, v in given.items()})
    )
    assert json.loads(json.dumps(ours)) == by_helm
