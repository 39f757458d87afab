"""chart-testing's `ct install --upgrade` on the one-node cluster, the way chart repositories
test charts in CI (issue 15 item 4).

One `ct` invocation installs charts/elasticctr with every `ci/*-values.yaml` set, the way
ct does it (helm-chart-testing v3.14.0, pkg/chart/chart.go `InstallChart`):

1. for each set: the chart's *previous revision* is installed (`helm install --wait`), its
   Deployments rolled out (`kubectl rollout status`) and `helm test` run, then upgraded in
   place to the current chart (`helm upgrade --wait`), rolled out and tested again;
2. for each set: the current chart installed, tested, upgraded to itself, tested;
3. for each set: the current chart installed and tested (plain `ct install`);

every release uninstalled after its round (`helm uninstall --wait`). Rounds 1 and 2
(`--upgrade`) run only when the chart differs from the previous revision (below,
`chart_changed_since`); otherwise plain `ct install` (round 3).

ct's previous revision is `git merge-base <remote>/<target-branch> HEAD`, checked out as a
git worktree (pkg/chart/chart.go `computeMergeBase`). In a clean checkout of main that is
HEAD itself (ct.yaml's target branch is main), and round 1 would repeat round 2. So the test
runs ct in a shared clone of this repository (the working tree's chart and ct.yaml copied
over it) whose `previous/main` (ct's `--remote previous`) is PREVIOUS_CHART_REVISION, the
chart revision a deployed release is upgraded from (or ELASTICCTR_CT_PREVIOUS): round 1
then upgrades that revision's releases to the current chart with every set. The chart's
version has been 0.1.0 from the start (ct's semver check never skips the upgrade), so there
is no older published version to start from: the pinned revision is the newest chart change
that moved a values key (a4c03c1: issue 27 removed trainer.rbac and made trainer.extraEnv a
list, which the ci sets of cf6b50e used); move it forward when a chart version is released
and when a values key moves (docs/chart.md, "Values changes between revisions"): ct upgrades
with the previous revision's own ci values file, which the new chart's schema must accept.
While the current chart equals that revision, round 1 upgrades each set's release to an
identical chart (no-op `helm upgrade`: generated Secrets kept through `lookup`, no immutable
field changed, the Volcano Job kept, still ready, `helm test` passes again) like round 2.
ct skips a set silently (exit 0) when the previous revision fails to install or test; this
test fails instead, so the upgrade from the previous revision is really tested every time.

The images come from the cluster's local registry (`published`, conftest.py: what
`make publish` pushes); `global.image.registry` and tests/e2e/ct-small-node-values.yaml
(CPU/memory requests that fit a 2-core node) are added through ct's
`--helm-extra-set-args`, and so is `global.data.hdfsAddress`: the `external-stores` set keeps
its data and model store on the cluster's real HDFS (`cluster_hdfs`), so its cube-transfer
is Ready only because it really reads that store (a namenode that does not exist makes the
install fail). The sets' external prerequisites (`external-stores`: pull, HDFS, database,
cube-admin and serving token Secrets, the staging and cube claims, `/elasticctr` on HDFS
owned by the Secret's HDFS user) are created first. Only ct and helm act on the releases.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from tests.conftest import REPO, require_tool, shared_path
from tests.e2e.conftest import chart_image_values

# 4 sets x 3 rounds, each release waits for readiness and runs `helm test`.
pytestmark = pytest.mark.timeout(3600)

NS = "ct"
CHART = "charts/elasticctr"
SETS = sorted(p.name for p in (REPO / CHART / "ci").glob("*-values.yaml"))
# Each helm install/upgrade/test/uninstall: a release not ready by then fails the round.
HELM_TIMEOUT = "300s"
# The chart revision ct upgrades from in round 1 (see the module docstring).
PREVIOUS_CHART_REVISION = "a4c03c1a3cc9cf8880c102ba26025838022db46a"
SMALL_NODE = Path(__file__).with_name("ct-small-node-values.yaml")
HDFS_USER = "ct"  # the external-stores set's HDFS user (its hdfs-ugi Secret)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=120
    ).stdout.strip()


def previous_revision() -> str:
    """The chart's previous revision: ELASTICCTR_CT_PREVIOUS or PREVIOUS_CHART_REVISION."""
    rev = os.environ.get("ELASTICCTR_CT_PREVIOUS") or PREVIOUS_CHART_REVISION
    try:
        return _git(REPO, "rev-parse", "--verify", "--quiet", rev + "^{commit}")
    except subprocess.CalledProcessError:
        pytest.fail(f"previous chart revision {rev} is not in this clone (shallow? fetch it)")


def checkout_for_ct(tmp_path: Path, previous: str) -> Path:
    """A shared clone at HEAD with the working tree's chart and ct.yaml, and
    `previous/main` at the previous revision (ct's `--remote previous`)."""
    clone = tmp_path / "repo"
    subprocess.run(
        ["git", "clone", "--quiet", "--shared", "--no-checkout", str(REPO), str(clone)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    _git(clone, "checkout", "--quiet", "--detach", _git(REPO, "rev-parse", "HEAD"))
    shutil.rmtree(clone / CHART)
    shutil.copytree(REPO / CHART, clone / CHART)
    shutil.copy2(REPO / "ct.yaml", clone / "ct.yaml")
    _git(clone, "update-ref", "refs/remotes/previous/main", previous)
    return clone


@pytest.fixture
def ct_namespace(kube_cluster, cluster_hdfs):
    """The namespace ct installs every release into (`--namespace`), holding what
    ci/external-stores-values.yaml expects to exist; deleted afterwards with what the
    releases leave on purpose (kept PVCs, the kept `helm test` pods)."""
    from kubernetes import client

    api = client.CoreV1Api(kube_cluster.api())
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))

    def secret(name: str, data: dict, kind: str = "Opaque") -> None:
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=name), type=kind, string_data=data)
        api.create_namespaced_secret(NS, body)

    secret("regcred", {".dockerconfigjson": '{"auths": {}}'}, "kubernetes.io/dockerconfigjson")
    secret("hdfs-ugi", {"hdfsUgi": f"{HDFS_USER},secret"})

    def hdfs_home(hdfs) -> None:
        hdfs.mkdirs("/elasticctr", permission=0o755, create_parent=True)
        hdfs.set_owner("/elasticctr", HDFS_USER, HDFS_USER)

    cluster_hdfs.as_superuser(hdfs_home)
    secret("unused-token", {"token": "ct-fileserver-token"})
    # MLflow's "external" database: a SQLite URI on the MLflow claim (the chart mounts it at
    # /mlflow); the tracking server opens it like any other SQLAlchemy URI.
    secret("mlflow-db", {"uri": "sqlite:////mlflow/external.db"})
    secret("cube-admin", {"token": "ct-cube-admin-token"})
    secret("serving-token", {"token": "ct-serving-token"})
    for claim in ("ctr-staging", "cube-root"):
        api.create_namespaced_persistent_volume_claim(
            NS,
            client.V1PersistentVolumeClaim(
                metadata=client.V1ObjectMeta(name=claim),
                spec=client.V1PersistentVolumeClaimSpec(
                    access_modes=["ReadWriteOnce"],
                    resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
                ),
            ),
        )
    yield NS
    api.delete_namespace(NS)


@pytest.mark.slow
def test_ct_install_and_upgrade_with_every_ci_values_set(
    kube_cluster, published, ct_namespace, cluster_hdfs, tmp_path
):
    shared_path("third_party", "chart-testing")
    for tool in ("ct", "kubectl", "helm", "git"):
        require_tool(tool)
    assert len(SETS) == 4, SETS
    previous = previous_revision()
    upgrade = chart_changed_since(previous)
    clone = checkout_for_ct(tmp_path, previous)
    registry = chart_image_values(published)["global"]["image"]["registry"]
    cmd = [
        "ct", "install", *(["--upgrade"] if upgrade else []), "--config", "ct.yaml",
        "--charts", CHART,
        "--remote", "previous", "--target-branch", "main",
        "--namespace", NS, "--release-label", "app.kubernetes.io/instance",
        "--helm-extra-args", f"--timeout {HELM_TIMEOUT}",
        "--helm-extra-set-args",
        f"--set=global.image.registry={registry} --set=global.data.hdfsAddress={cluster_hdfs.url}"
        f" --values={SMALL_NODE}",
    ]  # fmt: skip
    env = dict(os.environ, KUBECONFIG=str(kube_cluster.kubeconfig))
    env["PATH"] = f"{REPO / '.tools' / 'bin'}:{REPO / '.venv' / 'bin'}:{env['PATH']}"
    log = tmp_path / "ct.log"
    t0 = time.monotonic()
    with log.open("w") as sink, TestPodRuns(kube_cluster) as runs:  # `tail -f` the log
        proc = subprocess.run(
            cmd, cwd=clone, env=env, stdout=sink, stderr=subprocess.STDOUT, timeout=3300
        )  # fmt: skip
    seconds = round(time.monotonic() - t0, 1)
    out = log.read_text()
    mode = f"--upgrade from {previous[:12]}" if upgrade else (
        f"without --upgrade: the chart equals the previous revision {previous[:12]}"
    )  # fmt: skip
    print(f"\nct install {mode}: {seconds} s; log {log}")
    assert proc.returncode == 0, (
        f"ct exited {proc.returncode}:\n{out[-6000:]}\n{kube_cluster.diagnostics(NS)}"
    )
    tested = [n for n in SETS if renders_test_pod(n)]
    suites = re.findall(r"TEST SUITE:\s+(\S+)\n.*\n.*\nPhase:\s+(\w+)", out)
    assert all(phase == "Succeeded" for _, phase in suites), suites
    assert "All charts installed successfully" in out, out[-3000:]
    assert not runs.failed(), runs.failed()
    if not upgrade:
        # Plain `ct install`: each set installed once, `helm test` after each (two hooks).
        for name in SETS:
            installs = re.findall(
                rf'Installing chart (?:.* )?with values file "[^"]*ci/{re.escape(name)}"', out
            )
            assert len(installs) == 1, (name, installs, out[-3000:])
        assert runs.succeeded() == len(tested), (runs.runs, tested, suites_by_release(out))
        return

    # Round 1 really upgraded from the previous revision with every set: ct skips a set
    # silently (exit 0) when the previous revision fails to install or test.
    assert "ct-previous-revision" in out, out[-3000:]
    skipped = re.findall(r"Upgrade testing for .* skipped because.*", out)
    assert not skipped, "\n".join(skipped)
    assert re.search(
        r"Testing upgrades of chart .* relative to previous revision .*ct-previous-revision", out
    ), out[-3000:]
    for name in SETS:
        installs = re.findall(
            rf'Installing chart (?:.* )?with values file "[^"]*ci/{re.escape(name)}"',
            out,
        )
        # previous revision + current (upgraded to itself) + current (plain install)
        assert len(installs) == 3, (name, installs, out[-3000:])
    upgrades = re.findall(r'Release "elasticctr-\S+" has been upgraded', out)
    assert len(upgrades) == 2 * len(SETS), (upgrades, out[-3000:])
    # `helm test` ran and passed after every install and upgrade (5 per set) of the sets with
    # a test pod: counted on the cluster, one test pod per run (the next run of a release
    # replaces it), not from ct's output, which can lose a command's last lines (ct's
    # RunProcess reads the pipes in a goroutine that `cmd.Wait()` does not wait for: seen once,
    # a `helm test` printing nothing while its pod ran).
    assert runs.succeeded() == 5 * len(tested), (runs.runs, tested, suites_by_release(out))


class TestPodRuns:
    """The `helm test` pods the releases ran while ct ran, polled on the cluster every
    second: {pod uid: (name, last phase)}. A run's pod lives until the release's next
    `helm test` replaces it (hook-delete-policy before-hook-creation; minutes later, after
    an upgrade and its rollout) or the namespace goes, so every run is seen."""

    __test__ = False  # not a pytest test class

    def __init__(self, kube_cluster):
        from kubernetes import client

        self.api = client.CoreV1Api(kube_cluster.api())
        self.runs: dict[str, tuple[str, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _once(self) -> None:
        try:
            pods = self.api.list_namespaced_pod(
                NS, label_selector="app.kubernetes.io/component=test", _request_timeout=10
            ).items
        except Exception:  # noqa: BLE001 - the API is busy with ct's releases: next poll
            return
        for pod in pods:
            self.runs[pod.metadata.uid] = (pod.metadata.name, pod.status.phase)

    def _poll(self) -> None:
        while not self._stop.wait(1.0):
            self._once()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)
        self._once()  # the kept pods' final phases

    def succeeded(self) -> int:
        return sum(phase == "Succeeded" for _, phase in self.runs.values())

    def failed(self) -> list[tuple[str, str]]:
        return [run for run in self.runs.values() if run[1] == "Failed"]


def suites_by_release(out: str) -> dict[str, int]:
    """{release: `helm test` suites ct printed for it} for every release ct installed (a
    release with none was not tested: seen once, ct exiting 0 all the same)."""
    counts = {r: 0 for r in re.findall(r"^NAME: (\S+)$", out, re.M)}
    for suite in re.findall(r"TEST SUITE:\s+(\S+)-elasticctr-test-predict\n", out):
        counts[suite] = counts.get(suite, 0) + 1
    return counts


def chart_changed_since(previous: str) -> bool:
    """Whether the chart (working tree) differs from the previous revision's, or
    ELASTICCTR_CT_UPGRADE=always. Unchanged, ct's two upgrade rounds would each upgrade
    every set's release to an identical chart (measured: 17.8 of the test's 18.8 min went
    to the three rounds, ~2/3 to those two); plain `ct install` then covers what differs,
    and tests/e2e/test_release.py upgrades a release in place with a real change."""
    if os.environ.get("ELASTICCTR_CT_UPGRADE") == "always":
        return True
    diff = subprocess.run(
        ["git", "diff", "--quiet", previous, "--", CHART], cwd=REPO, timeout=120, check=False
    )
    return diff.returncode != 0


def renders_test_pod(name: str) -> bool:
    import yaml

    values = yaml.safe_load((REPO / CHART / "ci" / name).read_text()) or {}
    return values.get("tests", {}).get("enabled", True) and values.get("serving", {}).get(
        "enabled", True
    )
