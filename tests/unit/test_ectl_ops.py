"""ectl's operator verbs without a cluster: help, completion, doctor, unreachable-cluster errors.

Cluster-facing verbs run the real `ectl` entry point and the real helm binary against a
kubeconfig whose API server port is closed, so the failure path is the one a user meets.
The same verbs against a real kube-apiserver are covered in tests/cluster.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import REPO, require_tool, shared_path
from typer.testing import CliRunner

from elasticctr.cli.main import _register, app

runner = CliRunner()

OPERATOR_VERBS = [
    "install",
    "upgrade",
    "uninstall",
    "rollback",
    "history",
    "template",
    "status",
    "logs",
    "doctor",
    "completion",
    "port-forward",
    "init",
    "validate",
]


@pytest.fixture(scope="module", autouse=True)
def registered():
    _register()


@pytest.fixture
def closed_port():
    """A loopback port held bound but not listening for the whole test: connecting is
    refused, and no other process can take the port meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.fixture
def dead_kubeconfig(tmp_path: Path, closed_port: int) -> Path:
    """A kubeconfig whose API server is a closed loopback port: connection refused."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: dead
  cluster: {{server: "https://127.0.0.1:{closed_port}"}}
contexts:
- name: dead
  context: {{cluster: dead, user: u, namespace: ctr}}
current-context: dead
users:
- name: u
  user: {{token: not-a-real-token}}
"""
    )
    return path


def flat(text: str) -> str:
    """Rich wraps long lines at the terminal width; compare messages with spaces folded."""
    return " ".join(text.split())


def ectl(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    """Run the real console entry point in a subprocess (exit codes, stderr, no traceback)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=120,
    )


@pytest.mark.fast
@pytest.mark.parametrize("verb", OPERATOR_VERBS)
def test_every_verb_help_has_examples(verb):
    result = runner.invoke(app, [verb, "--help"])
    assert result.exit_code == 0, result.output
    assert "Examples" in result.output
    assert f"ectl {verb}" in result.output


@pytest.mark.fast
def test_root_help_lists_operator_verbs():
    result = runner.invoke(app, ["--help"])
    for verb in OPERATOR_VERBS:
        assert verb in result.output


@pytest.mark.fast
@pytest.mark.parametrize("shell", ["bash", "zsh", "fish", "powershell"])
def test_completion_script(shell):
    result = runner.invoke(app, ["completion", shell])
    assert result.exit_code == 0, result.output
    assert "_ECTL_COMPLETE" in result.output


@pytest.mark.fast
def test_completion_rejects_unknown_shell():
    result = runner.invoke(app, ["completion", "tcsh"])
    assert result.exit_code == 2
    assert "choose one of" in result.output


def test_completion_answers_from_the_installed_script():
    """What `source <(ectl completion bash)` makes bash run: completes verbs and options."""
    script = Path(sys.executable).with_name("ectl")
    assert script.exists(), "the ectl console script is installed in the venv"
    env = dict(os.environ, _ECTL_COMPLETE="complete_bash", COMP_WORDS="ectl ins", COMP_CWORD="1")
    proc = subprocess.run([str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "install" in proc.stdout.split()
    env.update(COMP_WORDS="ectl logs ", COMP_CWORD="2")
    proc = subprocess.run([str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert {"trainer", "pserver", "cube-transfer"} <= set(proc.stdout.split())
    env.update(COMP_WORDS="ectl doctor --kube", COMP_CWORD="2")
    proc = subprocess.run([str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert "--kubeconfig" in proc.stdout.split()


# --- doctor -----------------------------------------------------------------------------


def test_doctor_without_kubeconfig_fails_with_fix(tmp_path):
    require_tool("helm")
    proc = ectl(
        "doctor", "-o", "json", env={"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    )
    assert proc.returncode == 4, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is False
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["helm"]["status"] == "ok"
    assert checks["kubeconfig"]["status"] == "fail"
    assert "--kubeconfig" in checks["kubeconfig"]["fix"]
    for later in (
        "Volcano CRDs",
        "Volcano scheduler",
        "Volcano preemption",
        "default StorageClass",
        "permissions",
    ):
        assert checks[later]["status"] == "skip"


def test_doctor_unreachable_cluster_report(dead_kubeconfig):
    require_tool("helm")
    proc = ectl("doctor", "--kubeconfig", str(dead_kubeconfig), "-o", "json")
    assert proc.returncode == 4, proc.stderr
    report = json.loads(proc.stdout)
    assert [c["name"] for c in report["checks"]] == [
        "helm",
        "kubeconfig",
        "cluster reachable",
        "Volcano CRDs",
        "Volcano scheduler",
        "Volcano preemption",
        "default StorageClass",
        "permissions",
    ]
    reach = report["checks"][2]
    assert reach["status"] == "fail"
    assert "Connection refused" in reach["detail"]
    assert "kubectl cluster-info" in reach["fix"]
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in report["checks"])


@pytest.mark.fast
def test_doctor_finds_what_volcanos_own_scheduler_configuration_lacks_for_preemption():
    """Volcano v1.12.4's chart ships `enqueue, allocate, backfill` and gang with
    enablePreemptable: false: trainers would never be preempted or reclaimed."""
    import tarfile

    from elasticctr.cli.doctor import scheduler_conf_gaps

    source = shared_path("third_party", "volcano", "volcano-v1.12.4-src.tar.gz")
    with tarfile.open(source) as tar:
        member = "volcano/installer/helm/chart/volcano/config/volcano-scheduler.conf"
        shipped = tar.extractfile(member).read().decode()
    assert scheduler_conf_gaps(shipped) == [
        "action preempt",
        "action reclaim",
        "gang enablePreemptable (it is false)",
        "priority enablePreemptable: false (a scenario below its minimum waits)",
    ]
    fixed = shipped.replace(
        '"enqueue, allocate, backfill"', '"enqueue, allocate, preempt, reclaim, backfill"'
    )
    fixed = fixed.replace("  - name: gang\n    enablePreemptable: false\n", "  - name: gang\n")
    fixed = fixed.replace(
        "  - name: priority\n", "  - name: priority\n    enablePreemptable: false\n"
    )
    assert scheduler_conf_gaps(fixed) == []
    assert scheduler_conf_gaps("actions: allocate\ntiers: []\n") == [
        "action preempt",
        "action reclaim",
        *(f"plugin {p}" for p in ("priority", "gang", "conformance", "proportion")),
    ]


def _effective(*names: str) -> dict:
    from elasticctr import values as chart_values
    from elasticctr.constants import chart_dir

    files = [REPO / "values" / n for n in names]
    return chart_values.effective_values(chart_values.load_files(files), chart_dir())


@pytest.mark.fast
def test_doctor_lists_the_claims_ingresses_and_apis_the_values_need():
    from elasticctr.cli.doctor import (
        Claim,
        claims_needed,
        ingresses_needed,
        volcano_apis_needed,
        volume_permissions,
    )

    eks = _effective("production.yaml", "aws-eks.yaml")
    assert claims_needed(eks) == [
        Claim("trainer.staging", "efs-sc", "ReadWriteMany"),
        Claim("cube.sharedStorage", "efs-sc", "ReadWriteMany"),
        Claim("cube.persistence", "gp3", "ReadWriteOnce"),
        Claim("fileserver.persistence", "gp3", "ReadWriteOnce"),
        Claim("mlflow.persistence", "gp3", "ReadWriteOnce"),
    ]
    assert volume_permissions(eks) and not volume_permissions(_effective("production.yaml"))
    assert ingresses_needed(eks) == [("serving.ingress", "nginx"), ("mlflow.ingress", "nginx")]
    assert volcano_apis_needed(eks) == [("batch.volcano.sh", "v1alpha1"),
                                        ("scheduling.volcano.sh", "v1beta1")]  # fmt: skip
    demo = _effective("demo.yaml")
    assert {c.storage_class for c in claims_needed(demo)} == {""}  # the default class
    assert ingresses_needed(demo) == []
    # The user's own claims, emptyDirs and disabled parts need no class; a platform that
    # only creates team queues needs the scheduling API alone.
    demo["trainer"]["staging"]["existingClaim"] = "mine"
    demo["fileserver"]["persistence"]["enabled"] = False
    demo["mlflow"]["enabled"] = False
    demo["cube"]["enabled"] = False
    assert claims_needed(demo) == []
    demo["trainer"]["enabled"] = False
    assert volcano_apis_needed(demo) == []
    demo["teams"] = {"ads": {}}
    assert volcano_apis_needed(demo) == [("scheduling.volcano.sh", "v1beta1")]


EVEREST = "csi.storage.k8s.io/csi-driver-name"


@pytest.mark.fast
@pytest.mark.parametrize(
    ("provisioner", "parameters", "kind"),
    [
        ("efs.csi.aws.com", {}, "file"),
        ("ebs.csi.aws.com", {}, "block"),
        ("kubernetes.io/aws-ebs", {}, "block"),
        ("nfs.csi.k8s.io", {}, "file"),
        ("cluster.local/nfs-subdir-external-provisioner", {}, "file"),
        ("cephfs.csi.ceph.com", {}, "file"),
        ("rbd.csi.ceph.com", {}, "block"),
        ("pd.csi.storage.gke.io", {}, "block"),
        ("filestore.csi.storage.gke.io", {}, "file"),
        ("file.csi.azure.com", {}, "file"),
        ("disk.csi.azure.com", {}, "block"),
        ("rancher.io/local-path", {}, "block"),
        ("kubernetes.io/no-provisioner", {}, "block"),
        # Huawei CCE: one provisioner for every class, the CSI driver in the parameters.
        ("everest-csi-provisioner", {EVEREST: "nas.csi.everest.io"}, "file"),
        ("everest-csi-provisioner", {EVEREST: "disk.csi.everest.io"}, "block"),
        ("example.com/vendor", {}, "unknown"),
    ],
)  # fmt: skip
def test_doctor_tells_file_from_block_storage_by_the_provisioner(provisioner, parameters, kind):
    from elasticctr.cli.doctor import storage_kind

    assert storage_kind(provisioner, parameters) == kind


@pytest.mark.fast
def test_doctor_judges_a_storage_class_by_the_claims_that_use_it():
    from elasticctr.cli.doctor import Claim, judge_storage_class

    shared = [Claim("trainer.staging", "x", "ReadWriteMany"),
              Claim("cube.sharedStorage", "x", "ReadWriteMany")]  # fmt: skip
    once = [Claim("fileserver.persistence", "x", "ReadWriteOnce")]
    missing = judge_storage_class("x", None, shared, True)
    assert (missing.name, missing.status) == ("StorageClass x", "fail")
    assert "trainer.staging, cube.sharedStorage would stay Pending" in missing.detail
    assert "trainer.staging.storageClass / cube.sharedStorage.storageClass" in missing.fix
    efs, ebs = ("efs.csi.aws.com", {}), ("ebs.csi.aws.com", {})
    ok = judge_storage_class("x", efs, shared, True)
    assert ok.status == "ok"
    assert ok.detail == (
        "provisioner efs.csi.aws.com (file storage); used by trainer.staging (ReadWriteMany), "
        "cube.sharedStorage (ReadWriteMany)"
    )
    root_owned = judge_storage_class("x", efs, shared, False)
    assert root_owned.status == "warn"
    assert "global.volumePermissions.enabled: true" in root_owned.fix
    block = judge_storage_class("x", ebs, shared, True)
    assert block.status == "fail"
    assert "ReadWriteOnce only" in block.detail and "EFS, CFS, SFS csi-nas" in block.fix
    assert judge_storage_class("x", ebs, once, False).status == "ok"
    unknown = judge_storage_class("x", ("example.com/vendor", {}), shared, True)
    assert unknown.status == "warn" and "cannot tell whether" in unknown.detail
    assert judge_storage_class("x", ("example.com/vendor", {}), once, False).status == "ok"


@pytest.mark.fast
def test_doctor_judges_the_ingress_class_of_every_enabled_ingress():
    from elasticctr.cli.doctor import judge_ingress_class

    classes = {"nginx": "k8s.io/ingress-nginx", "alb": "ingress.k8s.aws/alb"}
    keys = ["serving.ingress", "mlflow.ingress"]
    ok = judge_ingress_class("nginx", keys, classes, [])
    assert (ok.name, ok.status) == ("IngressClass nginx", "ok")
    assert ok.detail == "controller k8s.io/ingress-nginx; used by serving.ingress, mlflow.ingress"
    missing = judge_ingress_class("traefik", keys, classes, ["nginx"])
    assert missing.status == "fail" and "one of: nginx, alb" in missing.fix
    default = judge_ingress_class("", keys, classes, ["alb"])
    assert (default.name, default.status) == ("IngressClass (default: alb)", "ok")
    no_default = judge_ingress_class("", keys, classes, [])
    assert no_default.status == "fail"
    assert "serving.ingress.className / mlflow.ingress.className" in no_default.fix
    assert "ingressclass.kubernetes.io/is-default-class" in no_default.fix


@pytest.mark.fast
def test_the_harness_runs_the_scheduler_configuration_docs_chart_recommends():
    """scripts/cluster/volcano-scheduler.conf (what the one-node cluster's vc-scheduler runs,
    tests/e2e/test_preemption.py needs its preempt action) is docs/chart.md's block, and
    `ectl doctor` finds nothing missing in it."""
    from elasticctr.cli.doctor import scheduler_conf_gaps

    conf = (REPO / "scripts" / "cluster" / "volcano-scheduler.conf").read_text()
    assert scheduler_conf_gaps(conf) == []
    docs = (REPO / "docs" / "chart.md").read_text()
    assert f"```yaml\n{conf}```" in docs, "docs/chart.md shows another configuration"


def test_doctor_table_names_the_fix(dead_kubeconfig, ectl_here):
    proc = ectl_here("doctor", "--kubeconfig", str(dead_kubeconfig))
    assert proc.returncode == 4
    assert "cluster reachable" in proc.stdout
    assert "not ready" in flat(proc.stdout)
    assert "kubectl" in proc.stdout and "cluster-info" in proc.stdout  # the fix column
    assert "Traceback" not in proc.stderr


def test_doctor_reports_missing_helm(dead_kubeconfig, tmp_path, ectl_here):
    proc = ectl_here(
        "doctor",
        "--kubeconfig",
        str(dead_kubeconfig),
        "--helm",
        str(tmp_path / "nohelm"),
        "-o",
        "json",
    )
    assert proc.returncode == 4
    helm = json.loads(proc.stdout)["checks"][0]
    assert helm["status"] == "fail"
    assert "make tools" in helm["fix"]


# --- cluster verbs without a cluster ----------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["status", "-o", "json"],
        ["logs", "trainer"],
        ["history"],
        ["rollback"],
        ["rollback", "2", "--dry-run"],
        ["uninstall", "--yes"],
        ["uninstall", "--dry-run"],
        ["port-forward", "serving"],
        ["model", "list", "-s", "coupon"],
        ["model", "rollback"],
        ["console", "--platform", "plat"],
    ],
    ids=lambda a: "-".join(a),
)
def test_cluster_verbs_say_unreachable(args, dead_kubeconfig, ectl_here):
    require_tool("helm")
    proc = ectl_here(*args, "--kubeconfig", str(dead_kubeconfig))
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "Kubernetes cluster unreachable" in flat(proc.stderr)
    assert "ectl doctor" in flat(proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "command failed" not in proc.stderr  # pyhelm3's log line stays quiet
    assert proc.stdout == ""


def test_missing_kubeconfig_is_a_clear_error(tmp_path):
    proc = ectl(
        "logs", "pserver", env={"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    )
    assert proc.returncode == 3
    assert "no usable kubeconfig" in flat(proc.stderr)
    assert "Traceback" not in proc.stderr


@pytest.mark.fast
def test_logs_rejects_unknown_component():
    result = runner.invoke(app, ["logs", "webserver"])
    assert result.exit_code == 2
    assert "cube-transfer" in result.output


def test_helm_not_found_is_a_clear_error(dead_kubeconfig, tmp_path, ectl_here):
    proc = ectl_here("history", "--kubeconfig", str(dead_kubeconfig), "--helm", str(tmp_path / "x"))
    assert proc.returncode == 1
    assert "helm not found" in flat(proc.stderr)
    assert "ELASTICCTR_HELM" in flat(proc.stderr)


def test_helm_found_through_env_var(dead_kubeconfig, ectl_here, monkeypatch):
    helm = require_tool("helm")
    monkeypatch.setenv("ELASTICCTR_HELM", helm)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    proc = ectl_here("history", "--kubeconfig", str(dead_kubeconfig))
    assert proc.returncode == 3, proc.stderr  # got as far as the cluster


@pytest.mark.fast
def test_followed_log_chunks_become_whole_lines():
    from elasticctr.cli.status import split_lines

    chunks = [b"step 1 auc=0.7", b"1\nstep 2", b" auc=0.72\r\n", b"", b"\xff tail"]
    assert list(split_lines(chunks)) == ["step 1 auc=0.71", "step 2 auc=0.72", "\ufffd tail"]
    assert list(split_lines([])) == []


@pytest.mark.fast
@pytest.mark.parametrize(
    "stderr,exit_code,words",
    [
        (
            b'Error: Kubernetes cluster unreachable: Get "https://10.0.0.1:6443/version": '
            b"dial tcp 10.0.0.1:6443: i/o timeout\n",
            3,
            ["Kubernetes cluster unreachable", "i/o timeout", "ectl doctor"],
        ),
        (
            b"Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress\n",
            1,
            ["another operation", "ectl rollback"],
        ),
        (b"Error: release: not found\n", 1, ["release: not found", "ectl install"]),
        # --wait gave up (seen on the one-node cluster when MLflow was OOM-killed): not an
        # unreachable cluster
        (
            b"Error: INSTALLATION FAILED: context deadline exceeded\n",
            1,
            ["timed out waiting", "ectl status", "--timeout"],
        ),
        (
            b'Error: Kubernetes cluster unreachable: Get "https://10.0.0.1:6443/version": '
            b"context deadline exceeded\n",
            3,
            ["Kubernetes cluster unreachable", "ectl doctor"],
        ),
        (
            b"WARNING: kubeconfig is group-readable\nError: INSTALLATION FAILED: quota exceeded\n",
            1,
            ["INSTALLATION FAILED: quota exceeded"],
        ),
    ],
)
def test_helm_errors_become_one_line_with_a_hint(stderr, exit_code, words):
    from pyhelm3.errors import Error

    from elasticctr.cli._common import helm_error

    err = helm_error(Error(1, b"", stderr), "upgrade ctr failed")
    assert err.exit_code == exit_code
    text = str(err)
    assert "\n" not in text and "WARNING" not in text
    for word in words:
        assert word in text


def test_uninstall_without_terminal_needs_yes(dead_kubeconfig, ectl_here):
    # capsys makes stdin a non-terminal: nobody to ask, so nothing is deleted
    proc = ectl_here("uninstall", "--kubeconfig", str(dead_kubeconfig))
    assert proc.returncode == 1
    assert "--yes" in flat(proc.stderr) and "not deleting" in flat(proc.stderr)


STATUS_SAMPLE = {
    "release": {
        "name": "ctr",
        "namespace": "ctr",
        "revision": 3,
        "status": "deployed",
        "updated": "2026-11-30T23:00:00+00:00",
        "chart": "elasticctr-0.1.0",
    },
    "pods": [
        {
            "name": "ctr-trainer-ab12-trainer-0",
            "component": "trainer",
            "phase": "Running",
            "ready": "1/1",
            "restarts": 0,
            "node": "n1",
        }
    ],
    "jobs": [
        {
            "name": "ctr-trainer-ab12",
            "phase": "Running",
            "running": 4,
            "pending": 0,
            "succeeded": 0,
            "failed": 0,
            "retryCount": 1,
            "maxRetry": 5,
            "retriesRecovered": 3,
            "tasks": {"trainer": 2, "pserver": 1, "coordinator": 1},
        }
    ],
    "coordinator": {
        "partitions": [{"partition": "20200401/00", "exported": True}, {"exported": False}],
        "tasks_done": 12,
        "tasks_leased": 2,
        "tasks_pending": 5,
        "tasks_retried": 1,
        "samples": 120000,
    },
    "model": {
        "newestVersion": "20200401/00",
        "store": {
            "source": "cube-transfer",
            "url": "http://ctr-fileserver:8080/models",
            "readable": True,
            "newestVersion": "20200401/00",
            "error": None,
            "lastOkAt": "2026-11-30T23:00:05Z",
            "lastPollAt": "2026-11-30T23:00:05Z",
            "scenarios": {"coupon": {"newestVersion": None, "error": None}},
        },
        "cube": {"committed": "20200401/00"},
    },
    "serving": {
        "deployment": "ctr-serving",
        "ready": 1,
        "replicas": 2,
        "serving": True,
        "modelVersion": "20200401/00",
    },
    "mlflow": {"url": "http://ctr-mlflow.ctr.svc:5000", "portForward": "ectl port-forward mlflow"},
}


@pytest.mark.fast
def test_status_tables_render_every_section(capsys):
    from elasticctr.cli._common import console
    from elasticctr.cli.status import _print_status

    console.width = 200
    _print_status(STATUS_SAMPLE)
    out = flat(capsys.readouterr().out)
    for expected in (
        "revision 3, deployed, elasticctr-0.1.0",
        "job ctr-trainer-ab12",
        "Running (running 4, pending 0, failed 0, retries 1 of 5, 3 given back)",
        "1/2 partitions exported, tasks done 12, leased 2, pending 5, retried 1, samples 120000",
        "model store",
        "http://ctr-fileserver:8080/models: readable at 2026-11-30T23:00:05Z, newest version "
        "20200401/00",
        "newest model version",
        "cube committed version",
        "1/2 ready, model version 20200401/00",
        "http://ctr-mlflow.ctr.svc:5000",
        "ctr-trainer-ab12-trainer-0",
    ):
        assert expected in out, expected


@pytest.mark.fast
def test_status_tables_show_what_is_not_up_yet(capsys):
    from elasticctr.cli._common import console
    from elasticctr.cli.status import _print_status

    console.width = 200
    sample = dict(STATUS_SAMPLE)
    sample.update(
        jobs=[{"unavailable": "Volcano jobs: HTTP 404 the server could not find it"}],
        coordinator={"unavailable": "no running coordinator pod"},
        model={
            "newestVersion": None,
            "store": {"unavailable": "no running cube-transfer pod and no fileserver service"},
            "cube": {"committed": None},
        },
        serving={"unavailable": "no serving Deployment"},
        mlflow={"unavailable": "mlflow disabled"},
        pods=[],
    )
    _print_status(sample)
    out = flat(capsys.readouterr().out)
    # Serving ready before the first model version: the status says there is none yet.
    sample["serving"] = {
        "deployment": "ctr-serving",
        "ready": 2,
        "replicas": 2,
        "serving": True,
        "modelVersion": None,
        "detail": "no model version yet (training has not published one)",
    }
    _print_status(sample)
    assert "2/2 ready, model version no model version yet (training" in flat(
        capsys.readouterr().out
    )
    for expected in (
        "HTTP 404",
        "no running coordinator pod",
        "none yet",
        "no serving Deployment",
        "mlflow disabled",
        "no running cube-transfer pod and no fileserver service",
    ):
        assert expected in out, expected


@pytest.mark.fast
def test_status_reads_the_stored_progress_when_the_running_coordinator_does_not_answer(capsys):
    """A bounded job's coordinator pod is still Running for a moment after its server has
    stopped: the pod proxy answers 503 (no route to host); the row then comes from the
    durable record, and names the live error, as for a pod that is gone."""
    from elasticctr.cli._common import console
    from elasticctr.cli.status import _print_status, coordinator_progress
    from elasticctr.coordinator.core import STATE_VERSION, progress_from_state

    state = {
        "state_version": STATE_VERSION,
        "done": {"20200401/00#0": {"samples": 70}, "20200401/01#0": {"samples": 30}},
        "exported": ["20200401/00", "20200401/01"],
    }
    stored = progress_from_state(json.dumps(state))
    down = {"unavailable": "coordinator: HTTP 503 dial tcp 10.244.0.128:8300: no route to host"}
    live = dict(stored, stored=False, tasks_leased=1)
    gone = {"unavailable": "no running coordinator pod, and no stored progress"}

    assert coordinator_progress(lambda: live, lambda: pytest.fail("read the store")) == live
    assert coordinator_progress(None, lambda: stored) == stored
    assert coordinator_progress(None, lambda: gone) == gone
    assert coordinator_progress(lambda: down, lambda: gone) == down
    got = coordinator_progress(lambda: down, lambda: stored)
    assert got == {**stored, "live": down["unavailable"]} and got["samples"] == 100

    console.width = 200
    _print_status(dict(STATUS_SAMPLE, coordinator=got))
    out = flat(capsys.readouterr().out)
    assert "coordinator (stored; not answering)" in out
    assert "2/2 partitions exported, tasks done 2" in out and "samples 100" in out


# What a platform's cube-transfer answers on GET /v1/status while its store (an HDFS
# namenode here) refuses it; elasticctr.cube.transfer.PlatformTransfer.status_doc's shape.
TRANSFER_DOWN = {
    "ready": False,
    "detail": "hdfs://nn:9000/models/versions: permission denied on HDFS (Permission denied: "
    'user=bob, access=READ_EXECUTE, inode="/models/versions":hdfs:supergroup:drwx------)',
    "modelStore": "hdfs://nn:9000/models",
    "lastPollAt": "2026-12-01T10:00:30Z",
    "lastOkAt": "2026-12-01T09:00:00Z",
    "lastError": "hdfs://nn:9000/models/versions: permission denied on HDFS (...)",
    "newestVersion": "20200401/05",
    "committed": "20200401/05",
    "shardsError": None,
    "registry": "kube:ctr",
    "registryError": None,
    "scenarios": {
        "default": {"modelStore": "hdfs://nn:9000/models", "error": "the store's own error"},
        "coupon": {
            "modelStore": "hdfs://nn:9000/models/scenarios/coupon",
            "newestVersion": "20200401/04",
            "lastError": "hdfs://nn:9000/models/scenarios/coupon/versions: ...",
            "error": "version 20200401/04 rejected: [bad] sha256 differs",
            "committed": None,
        },
    },
}


@pytest.mark.fast
def test_status_model_store_row_names_the_unreadable_store_and_its_error(capsys):
    from elasticctr.cli._common import console
    from elasticctr.cli.status import _print_status, store_from_transfer

    store = store_from_transfer(TRANSFER_DOWN)
    assert store == {
        "source": "cube-transfer",
        "url": "hdfs://nn:9000/models",
        "readable": False,
        "newestVersion": "20200401/05",
        "error": TRANSFER_DOWN["detail"],
        "lastOkAt": "2026-12-01T09:00:00Z",
        "lastPollAt": "2026-12-01T10:00:30Z",
        "scenarios": {
            "coupon": {
                "newestVersion": "20200401/04",
                "error": "version 20200401/04 rejected: [bad] sha256 differs",
            }
        },
    }
    # The JSON output's shape: the keys of STATUS_SAMPLE's readable store, always.
    assert set(store) == set(STATUS_SAMPLE["model"]["store"])
    console.width = 400
    sample = dict(STATUS_SAMPLE)
    sample["model"] = {"newestVersion": "20200401/05", "store": store, "cube": {"committed": None}}
    _print_status(sample)
    out = flat(capsys.readouterr().out)
    assert (
        "model store │ not readable: hdfs://nn:9000/models/versions: permission denied on HDFS "
        "(Permission denied: user=bob" in out
    ), out
    assert "last good read 2026-12-01T09:00:00Z, newest version then 20200401/05" in out
    # A scenario's own error gets its own row; rich markup in messages is printed as is.
    assert "model store (coupon) │ version 20200401/04 rejected: [bad] sha256 differs" in out


@pytest.mark.fast
def test_status_model_store_row_before_the_first_read_and_from_the_fileserver(capsys):
    from elasticctr.cli.status import store_from_fileserver, store_from_transfer, store_row

    first = {
        "ready": False,
        "detail": "s3://ctr-models/prod: not read yet",
        "modelStore": "s3://ctr-models/prod",
        "lastPollAt": None,
        "lastOkAt": None,
        "lastError": None,
        "newestVersion": None,
        "committed": None,
    }
    row = store_row(store_from_transfer(first))
    assert row == "[red]not readable[/red]: s3://ctr-models/prod: not read yet; never read"
    listing = store_from_fileserver(None, "http://ctr-fileserver.ml.svc:8080/models")
    assert listing["readable"] and listing["newestVersion"] is None
    assert store_row(listing) == (
        "http://ctr-fileserver.ml.svc:8080/models: readable (the fileserver's listing), "
        "newest version none yet"
    )
    failed = store_from_fileserver({"unavailable": "fileserver: HTTP 503"}, "http://fs/models")
    assert failed["error"] == "fileserver: HTTP 503" and not failed["readable"]
    assert store_row(failed) == (
        "[red]not readable[/red] (the fileserver's listing): fileserver: HTTP 503"
    )
    assert "unexpected" in store_from_transfer("<html>")["unavailable"]


@pytest.mark.fast
def test_without_the_kube_extra_the_cluster_verbs_say_what_to_install(monkeypatch, ectl_here):
    # sys.modules[name] = None is how Python marks a package as not importable
    monkeypatch.setitem(sys.modules, "pyhelm3", None)
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    for verb in (["status"], ["history"], ["rollback"], ["logs", "trainer"], ["install"]):
        proc = ectl_here(*verb)
        assert proc.returncode == 1, (verb, proc.stderr)
        assert "elasticctr[kube]" in flat(proc.stderr)
    proc = ectl_here("doctor", "-o", "json")
    assert proc.returncode == 4
    checks = json.loads(proc.stdout)["checks"]
    assert checks[1]["status"] == "fail" and "elasticctr[kube]" in checks[1]["fix"]


@pytest.mark.fast
def test_scenario_room_on_the_platforms_cube():
    """`ectl scenario add` refuses a table the platform's cube.capacityMiB cannot hold."""
    from elasticctr.cli.scenario import room_problem
    from elasticctr.scenarios import Scenario

    held = {"a": Scenario("a", cube_memory_mib=300), "b": Scenario("b", cube_memory_mib=300)}
    assert room_problem(0, held, "c", 10_000) is None  # no cap
    assert room_problem(1024, held, "c", 400) is None
    msg = room_problem(1024, held, "c", 500)
    assert msg.startswith("global.scenario.cubeMemoryMiB: 500 MiB does not fit")
    assert "600 MiB promised to 2 scenario(s)" in msg and "remove a scenario" in msg
    assert room_problem(1024, held, "a", 700) is None  # re-adding a counts its new budget only


@pytest.mark.fast
def test_registration_configmaps_are_parsed_and_checked_once():
    """cube-transfer's registry and `ectl scenario list` read ConfigMaps through one parser."""
    from elasticctr.errors import EctlError
    from elasticctr.scenarios import Scenario, from_configmaps, registry_selector

    def cm(name, label, data):
        return {
            "metadata": {"name": name, "labels": {"elasticctr.io/scenario": label}},
            "data": data,
        }

    spec = Scenario("coupon", team="growth", slots=(0, 1)).to_json()
    found = from_configmaps([cm("coupon-trainer-scenario", "coupon", {"scenario.json": spec})])
    assert found["coupon"].team == "growth" and found["coupon"].slots == (0, 1)
    with pytest.raises(EctlError, match="label elasticctr.io/scenario=feed but holds 'coupon'"):
        from_configmaps([cm("x", "feed", {"scenario.json": spec})])
    with pytest.raises(EctlError, match="ConfigMap x: no scenario.json key"):
        from_configmaps([cm("x", "coupon", {})])
    assert registry_selector("plat") == "elasticctr.io/platform=plat,elasticctr.io/scenario"


@pytest.mark.fast
def test_scenario_status_freshness_and_table():
    """`ectl scenario status`: freshness is the age of the served version's data hour
    (its end, UTC); the table shows each scenario's state on one row."""
    import datetime as dt

    from rich.console import Console

    from elasticctr.cli.scenario import format_age, status_table
    from elasticctr.scenarios import freshness_seconds

    now = dt.datetime(2020, 4, 1, 9, 30, tzinfo=dt.UTC)
    assert freshness_seconds("20200401/07", now) == 5400  # hour 07's data ends at 08:00
    assert freshness_seconds("20200401/08", now) == 1800
    assert freshness_seconds("20200401/10", now) < 0  # a clock behind the data
    assert freshness_seconds(None, now) is None and freshness_seconds("bad", now) is None
    assert [format_age(s) for s in (None, -5, 59, 61, 3 * 3600 + 120, 2 * 86400 + 7200)] == [
        "-", "ahead", "0m", "1m", "3h 2m", "2d 2h",
    ]  # fmt: skip
    row = {
        "name": "coupon", "trained": "20200401/08", "served": "20200401/07",
        "freshness_seconds": 5400, "heldout_auc": 0.71234, "trainers": "2/1/3",
        "queue": "growth", "job": "Running", "error": None, "store_error": "[red]x",
    }  # fmt: skip
    idle = {**row, "name": "feed", "trained": None, "served": None, "freshness_seconds": None,
            "heldout_auc": None, "store_error": None, "trainers": "0/1/2"}  # fmt: skip
    console = Console(width=200, record=True)
    console.print(status_table([row, idle], "scenarios"))
    text = console.export_text()
    assert "hour trained" in text and "held-out AUC" in text and "trainers r/min/max" in text
    assert "20200401/08" in text and "1h 30m" in text and "0.7123" in text and "2/1/3" in text
    assert "[red]x" in text  # a store error's markup is shown as is
    feed = next(line for line in text.splitlines() if "feed" in line)
    cells = [c.strip() for c in feed.split("│")[1:-1]]
    assert cells[:6] == ["feed", "-", "-", "-", "-", "0/1/2"]


@pytest.mark.fast
def test_served_version_carries_its_heldout_auc():
    from elasticctr.serving.model import VersionInfo

    base = {"slots": [0, 1], "embedding_dim": 4, "sparse_dim": None, "model": {"name": "lr"}}
    info = VersionInfo.from_manifest({**base, "metrics": {"auc": 0.75}}, "20200401/00")
    assert info.heldout_auc == 0.75
    assert VersionInfo.from_manifest(base, "20200401/00").heldout_auc is None
    nan = VersionInfo.from_manifest({**base, "metrics": {"auc": float("nan")}}, "20200401/00")
    assert nan.heldout_auc is None  # no held-out samples: no AUC, not NaN in JSON
