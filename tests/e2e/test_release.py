"""The chart on the one-node cluster, run the way a user runs it, through `ectl` and `helm`,
with its data and model store on HDFS, where ElasticCTR's users keep them. The install,
the first hours of data, the status and the first prediction are the steps of
docs/install.md, run as written (tests/e2e/guide.py).

A real HDFS (MiniDFSCluster with permissions on, on the node IP: `cluster_hdfs`) holds
`/ctr`, owned by the HDFS user `ctr`. ElasticCTR's own `data.config` (HDFS_ADDRESS, HDFS_UGI
`ctr,...`, DATASET_PATH) and `slot.conf` go through `ectl init` into a values file that the
published chart (`make publish` to the local OCI registry: images and chart) installs with
`ectl install --wait` over the demo values. Hours of data are written to HDFS with `ectl data
generate` (partitions + donefiles); the Volcano Job's pods read them from HDFS, publish one
model version per hour to the HDFS model store as `ctr`, cube-transfer builds and commits
each from HDFS, cube and serving switch to the newest; `helm test` passes; `ectl status`
shows it all; predictions through `ectl port-forward serving -- ectl predict` equal a local
`ectl serve` of the same version read from HDFS; MLflow has the run, the registered versions
and the `serving` alias on the served one. Under constant prediction load a cube pod and a
serving pod are evicted and serving rolls to a new image tag, and no prediction fails (two
replicas of each, PodDisruptionBudgets, serving's drain). Then an `ectl upgrade` adds a
trainer in place, a deleted trainer pod is replaced alone and no sample is counted twice; a
real Prometheus
scrapes every part through the chart's ServiceMonitors and PodMonitors and, while training
waits for data, sees the stale-model alert fire (scripts/cluster/prometheus.py); three pserver pods
deleted with healthy periods between (the last mid-hour) each restart the whole job from
its last checkpoint, the coordinator gives each restart's retry back, so a `maxRetry` of 2
is never exhausted, and the hour in flight is trained and published with every sample
counted once; `ectl rollback` restores the previous revision and
`ectl uninstall` leaves no pod.

The tests of this module run in order on one release (module-scoped fixture).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import REPO
from tests.e2e import guide, releases
from tests.e2e.conftest import wait_until

from elasticctr.cli.status import component_name

# The first test's set-up publishes every image (cold: ~2 GB into the registry) and the
# cluster pulls them all; each later test waits for training on a 2-core machine.
pytestmark = pytest.mark.timeout(1800)

NS = "e2e-release"
PSERVER_GRACE_S = 120  # the deleted pserver's grace period
RECOVERY_S = 20
"""trainer.volcano.retryRecoverySeconds of the release: the healthy period after which the
coordinator gives a restart's retry back (production default 1800)."""
TRAINER_SCRATCH = "256Mi"
LONG_JOB_VALUES = {
    "trainer": {
        "volcano": {"maxRetry": 2, "retryRecoverySeconds": RECOVERY_S},
        "trainer": {"resources": {"limits": {"ephemeral-storage": TRAINER_SCRATCH}}},
    }
}
"""Added to the guide's ctr.yaml: with `maxRetry` 2, the second of the three pserver
deletions would fail the job unless the retries come back; a trainer that writes more
than TRAINER_SCRATCH to its /tmp is evicted by the kubelet (a real kubelet eviction on a
node without pressure)."""
STALE_FOR = "10s"
MONITORING_VALUES = {
    "global": {
        "metrics": {
            "serviceMonitor": {"enabled": True, "interval": "2s"},
            "prometheusRule": {"enabled": True, "modelStale": {"hours": 1e6, "for": STALE_FOR}},
        }
    },
    "trainer": {"volcano": {"svcNetworkPolicy": False}},
}
"""Added to the guide's ctr.yaml: the ServiceMonitors, PodMonitors and the PrometheusRule
(prometheus-operator's CRDs are applied before the install), scraped every 2 s, the
coordinator open to scrapers (as the notes advise), and the stale-model alert far away
(a million hours: the test data is from 2020) until the Prometheus test sets it."""
STALE_MARGIN_S = 60
"""The Prometheus test sets the stale threshold to the served model's freshness plus this:
long enough for the upgrade and the reload to land before the model crosses it."""
PROMETHEUS_OPERATOR_CRDS = REPO / ".tools" / "prometheus-operator-crd"
RELEASE = "ctr"
ECTL = releases.ECTL
HOURS = ["20200401/00", "20200401/01", "20200401/02", "20200401/03", "20200401/04"]
# FIRST: trained and served; REST: after the upgrade and a trainer's deletion; LAST: in
# flight when its pserver is deleted (endDateHour = LAST: the job then completes).
FIRST, REST, LAST = HOURS[:2], HOURS[2:4], HOURS[4]
UPLOADS = ((FIRST[0], len(FIRST)), (REST[0], len(REST)), (LAST, 1))
LINES = 3000  # per hour: the job trains an hour in seconds; enough for a held-out AUC
SEED = 11
HDFS_USER = "ctr"  # owns /ctr on the cluster's HDFS; the release's HDFS_UGI names it
HDFS_UGI = f"{HDFS_USER},ctr-password"
DATA_DIR, MODELS_DIR = "/ctr/train_data", "/ctr/models"


_env = releases.kube_env


def ectl(kube_cluster, *args: str, timeout: float = 300, env: dict | None = None, check=True):
    return releases.run_ectl(kube_cluster, NS, *args, timeout=timeout, env=env, check=check)


def helm(kube_cluster, *args: str, timeout: float = 300):
    return subprocess.run(
        ["helm", *args, "--kubeconfig", str(kube_cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(kube_cluster),
    )


@pytest.fixture(scope="module")
def chart_ref(published) -> str:
    """The published chart's reference (the package-scoped `published`, conftest.py)."""
    return published["chart"]


@pytest.fixture(scope="module")
def hdfs(cluster_hdfs):
    """`/ctr` on the cluster's HDFS, owned by `ctr` and closed to other users (0755)."""

    def prepare(client) -> None:
        client.mkdirs("/ctr", permission=0o755, create_parent=True)
        client.set_owner("/ctr", HDFS_USER, HDFS_USER)

    cluster_hdfs.as_superuser(prepare)
    return cluster_hdfs


@pytest.fixture(scope="module")
def release(kube_cluster, chart_ref, published, hdfs, tmp_path_factory):
    """The installed release; uninstalled at the end if a test left it. Its values are the
    demo values plus what `ectl init` makes of ElasticCTR's data.config and slot.conf (the
    guide's `init` step)."""
    work = guide.workdir(tmp_path_factory.mktemp("release"))
    (work / "data.config").write_text(
        "# ElasticCTR data.config of the test HDFS\n"
        f'export HDFS_ADDRESS="{hdfs.url}"\n'
        f'export HDFS_UGI="{HDFS_UGI}"\n'
        f"export START_DATE_HR={HOURS[0]}\n"
        f"export END_DATE_HR={HOURS[-1]}\n"
        f'export DATASET_PATH="{DATA_DIR}"\n'
        'export SPARSE_DIM="1000001"\n'
    )
    (work / "slot.conf").write_text((REPO / "tests/fixtures/elasticctr/slot.conf").read_text())
    state: dict = {
        "chart": chart_ref,
        "t0": time.monotonic(),
        "values": ["-f", str(REPO / "values" / "demo.yaml"), "-f", str(work / "ctr.yaml")],
        "hdfs": hdfs,
        "work": work,
        # the guide's shell variables, for this cluster
        "guide": {
            "REGISTRY": published["registry"],
            "CHART": chart_ref,
            "RELEASE": RELEASE,
            "NS": NS,
            "HDFS": hdfs.url,
            "HDFS_UGI": HDFS_UGI,
        },  # fmt: skip
    }
    run_step(kube_cluster, state, "init", timeout=300)
    import yaml

    from elasticctr.values import merge

    ctr = work / "ctr.yaml"
    values = merge(yaml.safe_load(ctr.read_text()), LONG_JOB_VALUES)
    values = merge(merge(values, MONITORING_VALUES), NO_OUTAGE_VALUES)
    ctr.write_text(yaml.safe_dump(values))
    apply_monitoring_crds(kube_cluster)
    yield state
    ectl(kube_cluster, "uninstall", "-R", RELEASE, "-n", NS, "--yes", check=False, timeout=300)


def run_step(kube_cluster, release: dict, step: str, timeout: float = 900):
    """One step of docs/install.md on this cluster (tests/e2e/guide.py)."""
    return guide.run(
        step, release["work"], _env(kube_cluster), release["guide"], timeout=timeout,
        diagnostics=lambda: kube_cluster.diagnostics(NS),
    )  # fmt: skip


def apply_monitoring_crds(kube_cluster) -> None:
    """prometheus-operator's ServiceMonitor, PodMonitor and PrometheusRule CRDs (its Go
    module's, as bootstrap-tools.sh links them), Established, so the chart renders its
    monitors and rule (it checks .Capabilities)."""
    import yaml
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(kube_cluster.api())
    names = []
    for plural in ("servicemonitors", "podmonitors", "prometheusrules"):
        path = PROMETHEUS_OPERATOR_CRDS / f"monitoring.coreos.com_{plural}.yaml"
        assert path.exists(), f"{path} missing: run `make tools`"
        doc = yaml.safe_load(path.read_text())
        names.append(doc["metadata"]["name"])
        try:
            ext.create_custom_resource_definition(doc)
        except ApiException as exc:
            if exc.status != 409:  # already there (a cluster reused)
                raise

    def established():
        for name in names:
            conds = ext.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conds):
                return False
        return True

    wait_until("prometheus-operator CRDs Established", established, 60, kube_cluster)


def helm_values(kube_cluster, revision: int | None = None) -> dict:
    """The release's user-supplied values (`helm get values`), of `revision` or the current."""
    more = ["--revision", str(revision)] if revision else []
    proc = helm(kube_cluster, "get", "values", RELEASE, "-n", NS, "-o", "json", *more)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) or {}


def status(kube_cluster) -> dict:
    proc = ectl(kube_cluster, "status", "-R", RELEASE, "-n", NS, "-o", "json", timeout=120)
    return json.loads(proc.stdout)


def core_api(kube_cluster):
    from kubernetes import client

    return client.CoreV1Api(kube_cluster.api())


def pods(kube_cluster, component: str | None = None) -> list:
    selector = f"app.kubernetes.io/instance={RELEASE}"
    items = core_api(kube_cluster).list_namespaced_pod(NS, label_selector=selector).items
    if component is None:
        return items
    return [p for p in items if component_name(p.metadata.labels) == component]


def upload_hours(release: dict, start: str, hours: int) -> None:
    """Generate hours with a fixed seed (same bytes as a local copy) and write them to HDFS
    as the release's HDFS user (partitions + donefiles), as a user's data pipeline does."""
    subprocess.run(
        [*ECTL, "data", "generate", f"{release['hdfs'].url}{DATA_DIR}", "--start", start,
         "--hours", str(hours), "--lines", str(LINES), "--files", "2", "--seed", str(SEED)],
        check=True, capture_output=True, timeout=600, env={**os.environ, "HDFS_UGI": HDFS_UGI},
    )  # fmt: skip


def local_copy(kube_cluster, tmp_path: Path, start: str, hours: int) -> Path:
    """The same bytes as `upload_hours` wrote (same generator options and seed), locally."""
    out = tmp_path / f"data-{start.replace('/', '')}"
    subprocess.run(
        [*ECTL, "data", "generate", f"file://{out}", "--start", start, "--hours", str(hours),
         "--lines", str(LINES), "--files", "2", "--seed", str(SEED)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


def trained_samples(kube_cluster, tmp_path: Path, uploads) -> int:
    """Samples the job must train once each: every line of the uploaded hours (`uploads`:
    (start, hours) pairs as `upload_hours` got them) minus the held-out ones
    (elasticctr.train.elastic.heldout_mask, the trainers' own rule)."""
    import yaml

    from elasticctr.train import config
    from elasticctr.train.elastic import _read, heldout_mask

    # The release's data settings (sparseDim changes the hashed feasigns the held-out rule
    # reads: without it 10,745 were expected where the job rightly trained 10,808).
    demo = yaml.safe_load((REPO / "values" / "demo.yaml").read_text())["global"]["data"]
    values = tmp_path / "values.yaml"
    data = {"slots": list(range(27)), "sparseDim": demo["sparseDim"]}
    values.write_text(json.dumps({"global": {"data": data}}))
    cfg = config.load(values)
    total = 0
    for start, hours in uploads:
        root = local_copy(kube_cluster, tmp_path, start, hours)
        for part in sorted(root.glob("*/*/part-*")):
            for batch in _read(cfg, f"file://{part}"):
                total += len(batch) - int(heldout_mask(batch).sum())
    return total


def exported(kube_cluster) -> set[str]:
    coordinator = status(kube_cluster).get("coordinator") or {}
    return {p["partition"] for p in coordinator.get("partitions", []) if p.get("exported")}


@pytest.mark.slow
def test_install_waits_for_every_part_without_a_model(kube_cluster, release):
    run_step(kube_cluster, release, "doctor", timeout=300)
    t0 = time.monotonic()
    run_step(kube_cluster, release, "install")
    release["install_s"] = round(time.monotonic() - t0, 1)
    s = status(kube_cluster)
    assert s["release"]["status"] == "deployed", s["release"]
    running = {p["component"] for p in s["pods"] if p["phase"] == "Running"}
    assert {"coordinator", "pserver", "trainer", "cube", "cube-transfer", "serving",
            "fileserver", "mlflow"} <= running, s["pods"]  # fmt: skip
    assert s["model"]["newestVersion"] is None  # no model yet: ready anyway
    print(f"\ninstall --wait: {release['install_s']} s")


@pytest.mark.slow
def test_hours_are_trained_published_committed_and_served(kube_cluster, release, tmp_path):
    t0 = time.monotonic()
    # The guide's data step writes exactly FIRST, as upload_hours would (same generator
    # options and seed), so local_copy still has the same bytes.
    data = guide.steps()["data"]
    assert (
        f"--start {FIRST[0]} --hours {len(FIRST)} --lines {LINES} --files 2 --seed {SEED}" in data
    )
    run_step(kube_cluster, release, "data", timeout=600)
    wait_until(
        f"hours {FIRST} exported", lambda: set(FIRST) <= exported(kube_cluster), 900,
        kube_cluster, NS,
    )  # fmt: skip

    def served(version: str):
        s = status(kube_cluster)
        ready = s["model"]["newestVersion"] == version and s["model"]["cube"]
        ready = ready and s["model"]["cube"].get("committed") == version
        return ready and s["serving"].get("modelVersion") == version and s

    s = wait_until(f"{FIRST[-1]} served", lambda: served(FIRST[-1]), 300, kube_cluster, NS)
    release["first_hours_s"] = round(time.monotonic() - t0, 1)
    release["status"] = s
    print(f"\ntwo hours uploaded -> served in {release['first_hours_s']} s")

    proc = helm(kube_cluster, "test", RELEASE, "-n", NS, "--timeout", "5m", "--logs", timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Succeeded" in proc.stdout, proc.stdout

    # ectl status: the job's progress, the newest version, cube's and serving's
    assert s["release"]["status"] == "deployed"
    assert set(FIRST) <= {p["partition"] for p in s["coordinator"]["partitions"]}
    assert s["coordinator"]["samples"] > 0
    table = run_step(kube_cluster, {**release, "guide": {**release["guide"], "COLUMNS": "200"}},
                     "status", timeout=120).stdout  # fmt: skip
    assert f"model version {FIRST[-1]}" in table and "newest model version" in table, table

    # The pods wrote the versions to HDFS as the release's HDFS user (its HDFS_UGI reached
    # every role); another user may not write under /ctr.
    def owners(client) -> set[str]:
        version = f"{MODELS_DIR}/versions/{FIRST[-1]}"
        return {f.owner for f in client.list_status(version)} | {
            client.get_file_info(version).owner
        }

    assert release["hdfs"].as_superuser(owners) == {HDFS_USER}
    intruder = subprocess.run(
        [*ECTL, "data", "generate", f"{release['hdfs'].url}{DATA_DIR}", "--start", "20200402/00",
         "--hours", "1", "--lines", "10"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "HDFS_UGI": "intruder,wrong"},
    )  # fmt: skip
    assert intruder.returncode != 0 and "ermission" in intruder.stderr, intruder.stderr[-2000:]


def test_deployed_predictions_equal_a_local_serve_of_the_same_version(
    kube_cluster, release, tmp_path
):
    version = release["status"]["serving"]["modelVersion"]
    local = local_copy(kube_cluster, tmp_path, FIRST[0], len(FIRST))
    samples = tmp_path / "samples.txt"
    lines = (local / FIRST[-1]).glob("part-*")
    samples.write_text("".join(next(iter(lines)).read_text().splitlines(True)[:300]))
    deployed = ectl(
        kube_cluster, "port-forward", "serving", "-R", RELEASE, "-n", NS, "--",
        *ECTL, "predict", str(samples),
    )  # fmt: skip
    assert f"version={version}" in deployed.stderr, deployed.stderr
    theirs = releases.local_predictions(
        kube_cluster, NS, RELEASE, "", version, samples, tmp_path,
        store_url=f"{release['hdfs'].url}{MODELS_DIR}", env={"HDFS_UGI": HDFS_UGI},
    )  # fmt: skip
    ours = [float(x) for x in deployed.stdout.split()]
    assert len(ours) == len(theirs) == 300
    assert max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) <= 2e-6

    # The guide's first prediction: its own 300 lines, through the same port-forward.
    proc = run_step(kube_cluster, release, "predict", timeout=300)
    # (the generator's progress and summary come first on stdout)
    probabilities = [float(x) for x in proc.stdout.strip().splitlines()[-300:]]
    assert len(probabilities) == 300 and all(0 < p < 1 for p in probabilities)
    assert f"version={version}" in proc.stderr, proc.stderr


def test_mlflow_has_the_run_the_versions_and_the_serving_alias(kube_cluster, release):
    served = release["status"]["serving"]["modelVersion"]
    script = (
        "import json, os, mlflow\n"
        "c = mlflow.MlflowClient(os.environ['MLFLOW_TRACKING_URI'])\n"
        "runs = mlflow.search_runs(experiment_names=['elasticctr'], output_format='list')\n"
        "mvs = c.search_model_versions(\"name = 'elasticctr'\")\n"
        "alias = c.get_model_version_by_alias('elasticctr', 'serving')\n"
        "print(json.dumps({'runs': [r.info.run_name for r in runs],\n"
        "  'versions': sorted(m.tags.get('elasticctr.version') for m in mvs),\n"
        "  'alias': alias.tags.get('elasticctr.version')}))\n"
    )

    def registered():
        proc = ectl(
            kube_cluster, "port-forward", "mlflow", "-R", RELEASE, "-n", NS, "--",
            sys.executable, "-c", script, check=False, timeout=300,
        )  # fmt: skip
        if proc.returncode != 0:
            return None
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        return got if got["alias"] == served and set(FIRST) <= set(got["versions"]) else None

    got = wait_until("MLflow registry and alias", registered, 600, kube_cluster, NS)
    assert any(name.startswith("train-") for name in got["runs"]), got


NO_OUTAGE_VALUES = {
    "serving": {"replicas": 2, "podDisruptionBudget": {"enabled": True, "minAvailable": 1}},
    "cube": {"replicas": 2},
}
"""Added to the guide's ctr.yaml: two serving replicas behind a PodDisruptionBudget and two
replicas of every cube shard, for test_evictions_and_a_serving_rollout_drop_no_prediction."""


def retag(image: str, tag: str) -> str:
    """Publish `image` (REGISTRY/NAME:TAG) under another tag of the cluster's registry (the
    registry API: its manifest PUT under the new tag); returns the new reference."""
    import httpx

    host, _, rest = image.partition("/")
    name, _, old = rest.rpartition(":")
    accept = ", ".join((
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ))  # fmt: skip
    got = httpx.get(f"http://{host}/v2/{name}/manifests/{old}", headers={"Accept": accept})
    got.raise_for_status()
    put = httpx.put(f"http://{host}/v2/{name}/manifests/{tag}", content=got.content,
                    headers={"Content-Type": got.headers["content-type"]})  # fmt: skip
    put.raise_for_status()
    return f"{host}/{name}:{tag}"


@pytest.mark.slow
def test_evictions_and_a_serving_rollout_drop_no_prediction(kube_cluster, release, tmp_path):
    """No outage on routine events (docs/operations.md "Drains and rollouts"): under constant
    prediction load through the serving Service, a cube shard pod is evicted (Eviction API,
    as `kubectl drain` does; its shard's other replica answers, the pod comes back on its
    committed version), then a serving pod (preStop sleep while the endpoints drop it, then
    a drain), then serving is rolled to a new image tag (the same image published under
    another tag). Not one prediction fails."""
    import ssl

    import yaml
    from kubernetes import client

    core, apps = core_api(kube_cluster), client.AppsV1Api(kube_cluster.api())
    selector = f"app.kubernetes.io/instance={RELEASE}"
    (svc,) = core.list_namespaced_service(
        NS, label_selector=f"{selector},app.kubernetes.io/name=serving"
    ).items
    # Through the API server's proxy of the Service: each request goes to one of the
    # Service's ready endpoints, so an evicted or replaced pod leaves it as it would a
    # ClusterIP's (the test runs on the host, outside the cluster network).
    api = kube_cluster.api()
    cfg = api.configuration
    kc = yaml.safe_load(kube_cluster.kubeconfig.read_text())  # the admin's client certificate
    user, cluster = kc["users"][0]["user"], kc["clusters"][0]["cluster"]
    tls = ssl.create_default_context(cafile=cluster["certificate-authority"])
    tls.load_cert_chain(user["client-certificate"], user["client-key"])
    http = {"verify": tls}
    url = (
        f"{cfg.host}/api/v1/namespaces/{NS}/services/"
        f"{svc.metadata.name}:{svc.spec.ports[0].port}/proxy"
    )
    (dep,) = apps.list_namespaced_deployment(
        NS, label_selector=f"{selector},app.kubernetes.io/name=serving"
    ).items
    (sts,) = apps.list_namespaced_stateful_set(
        NS, label_selector=f"{selector},app.kubernetes.io/name=cube"
    ).items
    serving_name, cube_name = dep.metadata.name, sts.metadata.name

    def settled():
        d = apps.read_namespaced_deployment(serving_name, NS)
        s = apps.read_namespaced_stateful_set(cube_name, NS)
        live = [p for p in pods(kube_cluster, "serving") if not p.metadata.deletion_timestamp]
        return (
            d.status.observed_generation >= d.metadata.generation
            and d.status.updated_replicas == d.status.ready_replicas == 2
            and len(live) == 2
            and s.status.ready_replicas == s.spec.replicas == 4
        )

    wait_until("2 serving and 4 cube pods ready", settled, 300, kube_cluster, NS)

    def evict(name: str) -> None:
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=NS))
        core.create_namespaced_pod_eviction(name, NS, body)

    local = local_copy(kube_cluster, tmp_path, FIRST[-1], 1)
    lines = [
        ln for part in sorted(local.glob("*/*/part-*")) for ln in part.read_bytes().splitlines()
    ]
    took: dict[str, float] = {}
    from tests.prediction_load import PredictionLoad

    with PredictionLoad(url, lines, http) as load:
        time.sleep(3)
        # 1. a cube shard pod, evicted: back (same name, new uid) and ready
        victim = next(p for p in pods(kube_cluster, "cube") if p.metadata.name == f"{cube_name}-0")
        t0 = time.monotonic()
        evict(victim.metadata.name)

        def cube_back():
            p = core.read_namespaced_pod(victim.metadata.name, NS)
            return p.metadata.uid != victim.metadata.uid and settled()

        wait_until("the evicted cube pod back", cube_back, 180, kube_cluster, NS)
        took["cube eviction"] = time.monotonic() - t0
        # 2. a serving pod, evicted: a new one ready, the old one gone
        victim = pods(kube_cluster, "serving")[0]
        t0 = time.monotonic()
        evict(victim.metadata.name)

        def serving_back():
            names = {p.metadata.name for p in pods(kube_cluster, "serving")}
            return victim.metadata.name not in names and settled()

        wait_until("the evicted serving pod replaced", serving_back, 180, kube_cluster, NS)
        took["serving eviction"] = time.monotonic() - t0
        # 3. serving rolled to a new image tag (kubectl set image)
        image = dep.spec.template.spec.containers[0].image
        new = retag(image, f"{image.rpartition(':')[2]}-rollout")
        t0 = time.monotonic()
        apps.patch_namespaced_deployment(serving_name, NS, {"spec": {"template": {"spec": {
            "containers": [{"name": "serving", "image": new}]}}}})  # fmt: skip

        def rolled():
            live = [p for p in pods(kube_cluster, "serving") if p.status.phase != "Succeeded"]
            return all(p.spec.containers[0].image == new for p in live) and settled()

        wait_until("serving rolled to the new tag", rolled, 300, kube_cluster, NS)
        took["serving rollout"] = time.monotonic() - t0
        time.sleep(2)
    api.close()
    lat = sorted(load.latencies) or [0.0]
    print(
        f"\nno outage: {load.sent} predictions, {len(load.failed)} failed; "
        + ", ".join(f"{k} {v:.1f} s" for k, v in took.items())
        + f"; latency p50 {lat[len(lat) // 2] * 1000:.0f} ms, p99 "
        f"{lat[int(len(lat) * 0.99)] * 1000:.0f} ms, max {lat[-1] * 1000:.0f} ms"
    )
    for f in load.failed[:3]:
        print("failed:", f)
    assert not load.failed, load.failed[:10]
    assert load.sent > 100


@pytest.mark.slow
def test_upgrade_adds_a_trainer_in_place_and_a_deleted_trainer_is_replaced_alone(
    kube_cluster, release, tmp_path
):
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_cluster.api())
    (job,) = custom.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", NS, "jobs")[
        "items"
    ]
    name = job["metadata"]["name"]
    before = {p.metadata.name: p.metadata.uid for p in pods(kube_cluster, "trainer")}
    assert len(before) == 2, before
    ectl(
        kube_cluster,
        "upgrade", "--chart", release["chart"], *release["values"],
        "--set", "trainer.trainer.replicas=3",
        "-R", RELEASE, "-n", NS, "--wait", "--timeout", "10m",
        timeout=900,
    )  # fmt: skip

    def three_running():
        now = {p.metadata.name: p for p in pods(kube_cluster, "trainer")}
        running = [p for p in now.values() if p.status.phase == "Running"]
        return len(running) == 3 and now

    now = wait_until("a third trainer", three_running, 300, kube_cluster, NS)
    for pod_name, uid in before.items():  # in place: the two trainers were not restarted
        assert now[pod_name].metadata.uid == uid, pod_name
    job = custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", NS, "jobs", name)
    assert (job.get("status") or {}).get("retryCount", 0) == 0, job.get("status")

    victim = sorted(now)[0]
    others = {n: p.metadata.uid for n, p in now.items() if n != victim}
    core_api(kube_cluster).delete_namespaced_pod(victim, NS)

    def replaced():
        after = {p.metadata.name: p for p in pods(kube_cluster, "trainer")}
        new = after.get(victim)
        return (
            new is not None
            and new.metadata.uid != now[victim].metadata.uid
            and (new.status.phase == "Running")
            and after
        )

    after = wait_until(f"{victim} replaced", replaced, 300, kube_cluster, NS)
    for pod_name, uid in others.items():
        assert after[pod_name].metadata.uid == uid, f"{pod_name} was restarted too"
    job = custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", NS, "jobs", name)
    assert (job.get("status") or {}).get("retryCount", 0) == 0, job.get("status")

    # The kubelet evicts a trainer (its scratch space over the limit): the pod stays Failed
    # until the coordinator deletes it; Volcano recreates it alone, no retry spent.
    victim = sorted(after)[-1]
    evicted_uid = after[victim].metadata.uid
    others = {n: p.metadata.uid for n, p in after.items() if n != victim}
    mib = int(TRAINER_SCRATCH.removesuffix("Mi")) + 64
    proc = subprocess.run(
        ["kubectl", "exec", "-n", NS, victim, "--", "sh", "-c",
         f"dd if=/dev/zero of=/tmp/fill bs=1M count={mib} 2>&1 | tail -1"],
        capture_output=True, text=True, timeout=300, env=_env(kube_cluster),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    t0 = time.monotonic()
    seen: dict = {}

    def evicted_and_replaced():
        by_name = {p.metadata.name: p for p in pods(kube_cluster, "trainer")}
        pod = by_name.get(victim)
        if pod is not None and pod.metadata.uid == evicted_uid:
            if pod.status.phase == "Failed" and pod.status.reason == "Evicted":
                seen.setdefault("evicted_s", round(time.monotonic() - t0, 1))
            return None
        if pod is None or pod.status.phase != "Running":
            return None
        return by_name

    after = wait_until(f"{victim} evicted and replaced", evicted_and_replaced, 600,
                       kube_cluster, NS)  # fmt: skip
    replaced_s = round(time.monotonic() - t0, 1)
    for pod_name, uid in others.items():
        assert after[pod_name].metadata.uid == uid, f"{pod_name} was restarted too"
    job = custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", NS, "jobs", name)
    assert (job.get("status") or {}).get("retryCount", 0) == 0, job.get("status")
    (coordinator,) = pods(kube_cluster, "coordinator")
    log = core_api(kube_cluster).read_namespaced_pod_log(coordinator.metadata.name, NS)
    assert f"evicted: trainer pod {victim} was Failed by the kubelet (Evicted)" in log, log[-2000:]
    print(f"\n{victim} evicted by the kubelet {seen.get('evicted_s')} s after writing "
          f"{mib} MiB, replaced and Running {replaced_s} s after")  # fmt: skip

    # the rest of the hours: every sample of every hour trained exactly once
    upload_hours(release, REST[0], len(REST))
    done = FIRST + REST
    wait_until(f"all of {done} exported", lambda: set(done) <= exported(kube_cluster), 900,
               kube_cluster, NS)  # fmt: skip
    progress = status(kube_cluster)["coordinator"]
    expected = trained_samples(kube_cluster, tmp_path, UPLOADS[:2])
    assert progress["samples"] == expected, (progress, expected)


@pytest.mark.slow
def test_a_real_prometheus_scrapes_every_part_and_the_stale_model_alert_fires(
    kube_cluster, release, tmp_path
):
    """Prometheus as users run it (issue 25): a real Prometheus (Debian's, 2.42) scrapes the
    release with the scrape jobs prometheus-operator makes of the chart's ServiceMonitors
    and PodMonitors (scripts/cluster/prometheus.py, read from the cluster) and evaluates its
    PrometheusRule. Every part's target is up, each job scrapes exactly the Running pods of
    its part, and serving's freshness is now minus the end of the served version's data
    hour. The test hours are from April 2020, so every model is years old: the release was
    installed with the stale threshold a million hours away. Training is paused (no hour
    after REST has landed: the job waits for data, serving stays on REST[-1]); the test
    sets the threshold (a chart value, `ectl upgrade`) to the model's freshness plus
    STALE_MARGIN_S, with `for` STALE_FOR: under the new rule the alert is inactive, goes
    pending when the model's age crosses it and fires STALE_FOR later."""
    from elasticctr import metrics
    from elasticctr.values import merge
    from prometheus import Prometheus  # scripts/cluster (on sys.path: tests/e2e/conftest.py)

    served = REST[-1]

    def serving_served():
        s = status(kube_cluster)
        return s["serving"].get("modelVersion") == served and s

    wait_until(f"{served} served", serving_served, 300, kube_cluster, NS)
    assert exported(kube_cluster) == set(FIRST + REST)  # paused: nothing newer to train
    end = metrics.version_timestamp(served, metrics.parse_utc_offset("UTC")) + 3600
    sel = f'{{namespace="{NS}", release="{RELEASE}"}}'
    t0 = time.monotonic()
    with Prometheus(
        kube_cluster.kubeconfig, NS, RELEASE, dir=tmp_path / "prometheus",
        scrape_interval="2s", evaluation_interval="1s", sd_interval=1.0,
    ) as prom:  # fmt: skip
        started_s = round(time.monotonic() - t0, 1)
        kinds = {k: [m["metadata"]["name"] for m in v] for k, v in prom.objects.items()}
        assert len(kinds["servicemonitors"]) == 3, kinds  # fileserver, cube shards, serving
        assert len(kinds["podmonitors"]) == 2, kinds  # cube-transfer, the coordinator
        assert len(kinds["prometheusrules"]) == 1, kinds

        # Every job scrapes the Running pods of its part, all up, with the chart's labels.
        def all_up():
            by_pool: dict[str, dict] = {}
            for t in prom.targets():
                by_pool.setdefault(t["scrapePool"], {})[t["labels"]["pod"]] = t
            if len(by_pool) != 5:
                return None
            for pool, targets in by_pool.items():
                parts = {t["labels"].get("component") for t in targets.values()}
                assert len(parts) == 1 and None not in parts, (pool, targets)
                (part,) = parts
                running = {p.metadata.name for p in pods(kube_cluster, part)
                           if p.status.phase == "Running"}  # fmt: skip
                if set(targets) != running:
                    return None
                if any(t["health"] != "up" for t in targets.values()):
                    return None
                for t in targets.values():
                    assert t["labels"]["release"] == RELEASE and t["labels"]["namespace"] == NS
            return by_pool

        by_pool = wait_until("every target up", all_up, 120, kube_cluster, NS)
        up_s = round(time.monotonic() - t0, 1)
        jobs = {p: {t["labels"]["job"] for t in ts.values()} for p, ts in by_pool.items()}
        parts = {next(iter(ts.values()))["labels"]["component"]: len(ts) for ts in by_pool.values()}
        assert set(parts) == {"serving", "cube", "fileserver", "cube-transfer", "coordinator"}
        up = prom.query(f"up{sel}")
        assert len(up) == sum(parts.values()) and all(r["value"][1] == "1" for r in up), up

        # Freshness: the scrape's time minus the end of the served hour, per serving pod.
        name = "elasticctr_serving_model_freshness_seconds"
        fresh = wait_until(
            "freshness scraped", lambda: prom.query(f"{name}{sel}"), 60, kube_cluster, NS
        )
        assert len(fresh) == parts["serving"], fresh
        scenarios = {r["metric"]["scenario"] for r in fresh}
        assert len(scenarios) == 1, fresh
        drift = prom.query(f"abs({name}{sel} - (timestamp({name}{sel}) - {end}))")
        assert drift and all(float(r["value"][1]) < 2 for r in drift), (drift, fresh)
        info = prom.query(
            f'elasticctr_serving_version_info{{version="{served}", release="{RELEASE}"}}'
        )
        assert len(info) == parts["serving"], info
        freshness = max(float(r["value"][1]) for r in fresh)

        def rule(want_hours: float):
            r = prom.alert_rule("ElasticCTRModelStale")
            if r is None or r["health"] != "ok":
                return None
            got = re.search(r">\s*([0-9.e+-]+)\s*\*\s*3600", r["query"])
            assert got, r["query"]
            return r if abs(float(got[1]) - want_hours) <= 1e-9 * want_hours else None

        first = wait_until("the install's rule", lambda: rule(1e6), 60, kube_cluster, NS)
        assert first["state"] == "inactive" and first["duration"] == 10, first

        # The threshold: this model's freshness plus the margin, `for` STALE_FOR.
        threshold_s = time.time() - end + STALE_MARGIN_S
        hours = threshold_s / 3600
        values = merge(helm_values(kube_cluster), {"global": {"metrics": {"prometheusRule": {
            "modelStale": {"hours": hours, "for": STALE_FOR}}}}})  # fmt: skip
        (tmp_path / "stale.json").write_text(json.dumps(values))
        t_set = time.monotonic()
        ectl(kube_cluster, "upgrade", "--chart", release["chart"], "-f",
             str(tmp_path / "stale.json"), "-R", RELEASE, "-n", NS, timeout=300)  # fmt: skip
        prom.refresh()
        now_rule = wait_until("the new threshold loaded", lambda: rule(hours), 60, kube_cluster, NS)
        loaded_s = round(time.monotonic() - t_set, 1)
        left_s = round(end + threshold_s - time.time(), 1)
        assert now_rule["state"] == "inactive" and left_s > 0, (now_rule, left_s)

        seen: dict = {}

        def firing():
            r = prom.alert_rule("ElasticCTRModelStale")
            if r["state"] in ("pending", "firing"):
                seen.setdefault("pending", time.time())
            if r["state"] == "firing":
                seen["firing"] = time.time()
                return r
            return None

        fired = wait_until("ElasticCTRModelStale firing", firing, STALE_MARGIN_S + 90,
                           kube_cluster, NS)  # fmt: skip
        crossed = end + threshold_s  # wall clock of the model's age reaching the threshold
        pending_after_s = round(seen["pending"] - crossed, 1)
        fired_after_s = round(seen["firing"] - crossed, 1)
        # not before its time, and within two scrapes and evaluations after it
        assert -1 <= pending_after_s <= 6, (pending_after_s, fired)
        assert 10 <= fired_after_s <= 10 + 8, (fired_after_s, fired)
        (alert,) = fired["alerts"]
        assert alert["labels"]["scenario"] in scenarios and alert["labels"]["release"] == RELEASE
        assert alert["labels"]["namespace"] == NS and alert["labels"]["severity"] == "warning"
        assert (
            f"Scenario {alert['labels']['scenario']} serves a model"
            in alert["annotations"]["summary"]
        )
        alerts = prom.query('ALERTS{alertname="ElasticCTRModelStale", alertstate="firing"}')
        assert len(alerts) == 1, alerts
    release["prometheus"] = {
        "targets": parts, "started_s": started_s, "all_up_s": up_s, "threshold_loaded_s":
        loaded_s, "pending_after_s": pending_after_s, "firing_after_s": fired_after_s,
    }  # fmt: skip
    print(
        f"\nPrometheus: ready {started_s} s, {sum(parts.values())} targets up {up_s} s after "
        f"start ({parts}; jobs {sorted(j for js in jobs.values() for j in js)}); freshness of "
        f"{served} {freshness:.0f} s (scenario {sorted(scenarios)}); threshold freshness + "
        f"{STALE_MARGIN_S} s loaded {loaded_s} s after `ectl upgrade` began ({left_s} s before "
        f"the crossing); pending {pending_after_s} s, firing {fired_after_s} s after the "
        f"model's age crossed it (for {STALE_FOR}); whole test {time.monotonic() - t0:.0f} s"
    )


def volcano_job(kube_cluster) -> dict:
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_cluster.api())
    (job,) = custom.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", NS, "jobs")[
        "items"
    ]
    return job


def coordinator_progress(kube_cluster, pod) -> dict:
    """The running coordinator's /v1/progress through the API server's pod proxy (what
    `ectl status` reads), fast enough to poll several times a second."""
    from elasticctr.cli.status import COORDINATOR_PROGRESS_PATH, _pod_proxy_get

    got = _pod_proxy_get(core_api(kube_cluster), NS, pod, COORDINATOR_PROGRESS_PATH)
    if not isinstance(got, dict):
        raise AssertionError(f"coordinator progress is not JSON: {str(got)[:300]}")
    return got


def delete_pserver(
    kube_cluster, checkpoint: str, kept: dict, deletion: int, recover: bool = True
) -> dict:
    """Delete the job's pserver pod and follow the restart it causes: Volcano counts one
    retry and restarts the whole job (PodEvicted/PodFailed → RestartJob), the new
    coordinator resumes from `checkpoint` with the samples of `kept` (hour → samples)
    unchanged, a trainer loads the checkpoint into the new pserver, and (`recover`) after
    RECOVERY_S of health the coordinator gives the retry back (`retryCount` 0, the
    `elasticctr/retries-recovered` annotation counts `deletion` in all). Returns the
    timings (s after the deletion)."""
    job = volcano_job(kube_cluster)
    st = job["status"]
    assert st["state"]["phase"] == "Running" and st.get("retryCount", 0) == 0, st
    (pserver,) = pods(kube_cluster, "pserver")
    (old_coordinator,) = pods(kube_cluster, "coordinator")
    t0 = time.monotonic()
    # A long grace period: a pserver that ignored SIGTERM would hold the restart for all of
    # it, one that exits at once frees it in seconds, loaded machine or not.
    core_api(kube_cluster).delete_namespaced_pod(
        pserver.metadata.name, NS, grace_period_seconds=PSERVER_GRACE_S
    )
    seen: dict = {}

    def restarted():
        st = volcano_job(kube_cluster).get("status") or {}
        assert st["state"]["phase"] != "Failed", st
        if st.get("retryCount", 0) == 1:
            seen.setdefault("restart_s", round(time.monotonic() - t0, 1))
        if st.get("retryCount", 0) != 1 or st["state"]["phase"] != "Running":
            return None
        new_ps = pods(kube_cluster, "pserver")
        ok = new_ps and all(p.metadata.uid != pserver.metadata.uid for p in new_ps)
        return ok and all(p.status.phase == "Running" for p in new_ps) and st

    wait_until(f"deletion {deletion}: the job restarted and Running", restarted, 600,
               kube_cluster, NS)  # fmt: skip
    seen["running_s"] = round(time.monotonic() - t0, 1)
    # The pserver exits at once on SIGTERM (it is its container's PID 1): Volcano restarts
    # the job right away, not at the kubelet's SIGKILL after the grace period.
    assert seen["restart_s"] < PSERVER_GRACE_S / 2, seen

    # The restarted job resumed from the checkpoint, not from scratch: the coordinator says
    # so, and its progress holds every hour up to the checkpoint with the same samples.
    # Volcano says Running once minAvailable pods run; the coordinator pod may still be starting.
    def new_coordinator():
        running = [
            p
            for p in pods(kube_cluster, "coordinator")
            if p.status.phase == "Running"
            and p.metadata.deletion_timestamp is None
            and p.metadata.uid != old_coordinator.metadata.uid
        ]
        return len(running) == 1 and running[0]

    coordinator = wait_until("a new coordinator Running", new_coordinator, 300, kube_cluster, NS)

    def said(pod, text: str):
        log = core_api(kube_cluster).read_namespaced_pod_log(pod.metadata.name, NS)
        return text in log and pod.metadata.name

    # The line comes once Python started, a few seconds after the pod is Running.
    line = f"restarting from checkpoint {checkpoint} in"
    wait_until(f"coordinator: {line}", lambda: said(coordinator, line), 120, kube_cluster, NS)

    def restored():
        got = coordinator_progress(kube_cluster, coordinator)
        parts = {p["partition"]: p for p in got["partitions"]}
        return set(kept) <= set(parts) and parts

    restored = wait_until("the restored progress", restored, 120, kube_cluster, NS)
    for hour, samples in kept.items():
        assert restored[hour]["exported"] and restored[hour]["samples"] == samples, restored

    line = f"loaded checkpoint {checkpoint} into the pservers"

    def loaded():
        return any(said(pod, line) for pod in pods(kube_cluster, "trainer"))

    wait_until(f"a trainer: {line}", loaded, 300, kube_cluster, NS)
    seen["loaded_s"] = round(time.monotonic() - t0, 1)
    seen["coordinator"] = coordinator
    if not recover:
        return seen

    # The healthy period: the coordinator gives the retry back (elasticctr.coordinator.upkeep)
    # and then records the total in an annotation: two patches (the status subresource
    # ignores metadata), so a look in between sees retryCount 0 with the old total (CI,
    # 2026-12-05): both are waited for.
    def recovered():
        j = volcano_job(kube_cluster)
        st = j.get("status") or {}
        assert st["state"]["phase"] != "Failed", st
        total = (j["metadata"].get("annotations") or {}).get("elasticctr/retries-recovered")
        return st.get("retryCount", 0) == 0 and total == str(deletion) and j

    wait_until(f"deletion {deletion}: the retry given back", recovered, 300, kube_cluster, NS)
    seen["recovered_s"] = round(time.monotonic() - t0, 1)
    assert seen["recovered_s"] - seen["running_s"] >= RECOVERY_S, seen  # not before its time
    said_back = "retries: the job ran healthy for"
    wait_until("coordinator: " + said_back, lambda: said(coordinator, said_back), 60,
               kube_cluster, NS)  # fmt: skip
    print(f"deletion {deletion}: " + ", ".join(f"{k} {v}" for k, v in seen.items()
                                              if k != "coordinator"))  # fmt: skip
    return seen


@pytest.mark.slow
def test_pserver_deletions_restart_the_job_from_its_checkpoint_and_never_exhaust_it(
    kube_cluster, release, tmp_path
):
    """The pserver holds the only copy of its shard of the parameters, so losing its pod
    restarts the whole job (the chart's pserver policy: PodEvicted/PodFailed → RestartJob;
    Volcano deletes every pod of the job, counts one retry of `maxRetry` and recreates them).
    The coordinator restarts from the checkpoint of the last exported hour, one trainer loads
    it into the fresh pserver, and after a healthy period the coordinator gives the retry
    back (issue 25: a months-long job survives routine restarts). Three deletions, with the
    release's `maxRetry` 2 (LONG_JOB_VALUES): without the retries given back the second one
    would fail the job. Two come while the job waits for data, the third mid-hour: that hour
    is trained again from its start and published, and every sample is counted once."""
    job = volcano_job(kube_cluster)
    assert job["spec"]["maxRetry"] == LONG_JOB_VALUES["trainer"]["volcano"]["maxRetry"], job
    (coordinator,) = pods(kube_cluster, "coordinator")
    progress = coordinator_progress(kube_cluster, coordinator)
    checkpoint = REST[-1]  # checkpointEvery 1: every export is checkpointed
    done = {p["partition"] for p in progress["partitions"] if p["exported"]}
    assert done == set(FIRST + REST), progress
    kept = {p["partition"]: p["samples"] for p in progress["partitions"]}

    timings = [delete_pserver(kube_cluster, checkpoint, kept, deletion) for deletion in (1, 2)]
    coordinator = timings[-1]["coordinator"]

    upload_hours(release, LAST, 1)

    # Mid-hour: the coordinator handed out LAST's tasks (leased, or done and not yet
    # exported). Polled through the pod proxy: an hour of this size trains in seconds.
    deadline = time.monotonic() + 300  # the coordinator looks for new hours every 30 s
    while True:
        try:
            progress = coordinator_progress(kube_cluster, coordinator)
        except Exception:  # noqa: BLE001 - a slow API server: try again
            assert time.monotonic() < deadline, "the coordinator's progress is unreachable"
            time.sleep(0.2)
            continue
        part = {p["partition"]: p for p in progress["partitions"]}.get(LAST)
        if part and part["exported"]:
            pytest.fail(f"{LAST} was exported before the pserver could be deleted: {part}")
        if part and part["done"] + part["leased"] > 0:
            break
        assert time.monotonic() < deadline, f"{LAST} never leased: {progress}"
        time.sleep(0.2)
    print(f"\npserver deleted with {LAST} at {part}")
    t0 = time.monotonic()
    # The job completes once LAST (its endDateHour) is exported, perhaps before a healthy
    # period is over: this retry is not waited for (1 of maxRetry 2 either way).
    timings.append(delete_pserver(kube_cluster, checkpoint, kept, 3, recover=False))
    release["pserver_restart_s"] = timings[-1]["running_s"]

    # The hour in flight is trained again and published, every sample of every hour once.
    wait_until(f"{LAST} exported", lambda: LAST in exported(kube_cluster), 600, kube_cluster, NS)
    release["pserver_published_s"] = round(time.monotonic() - t0, 1)
    # The job completes once LAST is exported: between its coordinator's exit and the
    # stored progress being read, `ectl status` says "unavailable" for a moment.
    progress = wait_until(
        "the coordinator's progress with LAST exported",
        lambda: (p := status(kube_cluster)["coordinator"]).get("samples") is not None
        and LAST in {q["partition"] for q in p["partitions"] if q["exported"]}
        and p,
        120, kube_cluster, NS,
    )  # fmt: skip
    expected = trained_samples(kube_cluster, tmp_path, UPLOADS)
    assert progress["samples"] == expected, (progress, expected)

    def served():
        s = status(kube_cluster)
        cube = s["model"]["cube"] or {}
        ready = s["model"]["newestVersion"] == cube.get("committed") == LAST
        return ready and s["serving"].get("modelVersion") == LAST

    wait_until(f"{LAST} served", served, 300, kube_cluster, NS)
    release["pserver_served_s"] = round(time.monotonic() - t0, 1)
    # LAST is endDateHour: the job completes once it is exported; it never failed.
    st = volcano_job(kube_cluster)["status"]
    assert st["state"]["phase"] in ("Running", "Completing", "Completed"), st
    assert st.get("retryCount", 0) <= 1, st  # three restarts, never more than one counted
    print(
        f"three pserver deletions, maxRetry {job['spec']['maxRetry']}, recovery {RECOVERY_S} s: "
        f"job Running again {[t['running_s'] for t in timings]} s, checkpoint loaded "
        f"{[t['loaded_s'] for t in timings]} s, retry given back "
        f"{[t.get('recovered_s') for t in timings]} s after each deletion; {LAST} "
        f"published {release['pserver_published_s']} s -> served {release['pserver_served_s']} s "
        f"after the third; {progress['samples']} samples, each once"
    )


def test_rollback_restores_the_previous_revision(kube_cluster, release):
    before = status(kube_cluster)["release"]["revision"]
    # Whatever the last upgrade changed (a trainer, the stale-model alert), it is undone.
    previous = helm_values(kube_cluster, before - 1)
    assert helm_values(kube_cluster) != previous
    ectl(kube_cluster, "rollback", str(before - 1), "-R", RELEASE, "-n", NS, "--wait",
         timeout=900)  # fmt: skip
    s = status(kube_cluster)
    assert s["release"]["revision"] == before + 1 and s["release"]["status"] == "deployed"
    assert helm_values(kube_cluster) == previous


@pytest.mark.slow
def test_uninstall_leaves_no_pod(kube_cluster, release):
    ectl(kube_cluster, "uninstall", "-R", RELEASE, "-n", NS, "--yes", "--wait", timeout=600)
    wait_until("no pod left", lambda: not pods(kube_cluster), 300, kube_cluster, NS)
