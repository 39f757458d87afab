"""Trainers borrow idle capacity and give it back (issue 16, item 3) on the one-node cluster.

Two releases of the published chart, one after the other, train the same three generated
hours (hours trained one at a time, `window` 1) with the same model, with 3 trainers (min 1)
in the chart's low, preemptible PriorityClass and the coordinator and pserver in its high
one. Data and model store are on S3 (a real SeaweedFS on the node IP, `cluster_s3`, with
checked credentials that the pods get from an existing Secret through `global.s3`): the
pods read the hours, keep the coordinator's record and publish the versions there, with no
fileserver in the release.

- undisturbed (`e2e-calm`): nothing else asks for the node; the three hours are uploaded
  at once;
- disturbed (`e2e-preempt`): while the first hour trains, a tenant Deployment (the
  harness's pause image, scheduled by Volcano in the release's high PriorityClass, the
  default queue) requests the node's free CPU plus one and a half trainers' worth. Volcano's
  `preempt` action (the harness runs scripts/cluster/volcano-scheduler.conf, docs/chart.md)
  evicts exactly two trainers (the gang plugin keeps the job at its `minAvailable`) and binds
  the tenant; the job keeps running with one trainer (its Volcano Job never restarts:
  `retryCount` 0, the surviving trainer pod keeps its UID) and trains the second hour alone;
  the tenant leaves, Volcano places the two recreated trainers again; then a tenant of
  kube-scheduler (no PriorityClass, so priority 0, above the trainers) asks for the same:
  kube-scheduler preempts trainers, the coordinator lowers its job's trainer count so
  that Volcano does not re-place them (elasticctr.coordinator.yielding), the tenant runs
  and keeps its room; it leaves, the count is restored after the hold, and the three
  trainers train the last hour.

Both must count every sample exactly once (the coordinator's progress equals every line
minus the held-out ones) with `retryCount` 0, the disturbed job's held-out AUC of the last
hour (its model lived through the preemption and the recovery) must be within 0.01 of the
undisturbed job's (every hour's difference is printed; data and model are chosen so that
two undisturbed runs differ by well under that, see HOURS), and the test prints the node's
requested-CPU utilisation over each run (time-averaged samples of the CPU requests of every
pod bound to the node over its allocatable CPU) with the preemption and recovery times.
Sizes come from the node itself (its allocatable CPU and what is already requested), so the
test holds on any node with room for the release. docs/cluster-tests.md has the measured
numbers.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time

import pytest
from tests.e2e import releases
from tests.e2e.capacity import TENANT, Utilisation, node_cpu, tenant_deployment
from tests.e2e.conftest import wait_until

from elasticctr.cli.status import component_name

pytestmark = pytest.mark.timeout(1500)

RELEASE = "ctr"
CALM, BUSY = "e2e-calm", "e2e-preempt"
HOURS = ["20200401/00", "20200401/01", "20200401/02"]
# Data and model where the undisturbed job's held-out AUC repeats from run to run (measured
# with `ectl train --local`, docs/cluster-tests.md): 8 slots of 100 feasigns each, so one
# hour of 40,000 lines pins every weight down (4,000 held-out samples per hour), and the
# linear model on AdaGrad, whose steps shrink as a weight settles (on Adam the last hour
# of 27 slots x 10,000 feasigns, 12,000 lines, differed by up to 0.015 between two runs).
LINES, FILES, SEED = 40000, 2, 23
SLOTS = list(range(8))
GENERATE = ("--slots", "0-7", "--vocab", "100")
MODEL = {"name": "lr", "batchSize": 128, "optimizer": "adagrad"}
SPARSE_DIM = 1000001
TRAINERS, MIN_TRAINERS = 3, 1
# Requests of the release's other pods (coordinator and pserver, values below).
OTHERS_MILLICPU = 50 + 200
S3_SECRET = "s3-cred"
KUBE_TENANT = "kube-tenant"
HOLD_SECONDS = 30
"""trainer.coordinator.yieldToKubeScheduler.holdSeconds of the releases."""
AUC_TOLERANCE = 0.01


def trainer_pods(kube_cluster, namespace: str) -> list:
    items = (
        releases.core_api(kube_cluster)
        .list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/instance={RELEASE}")
        .items
    )
    return [p for p in items if component_name(p.metadata.labels) == "trainer"]


def running(pods: list) -> list:
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def volcano_job(kube_cluster, namespace: str) -> dict:
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_cluster.api())
    (job,) = custom.list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs"
    )["items"]
    return job


def store(s3, namespace: str) -> str:
    """The release's own prefix in the test bucket: `{store}/data` and `{store}/models`."""
    from tests.s3_fixture import TEST_BUCKET

    return f"s3://{TEST_BUCKET}/{namespace}"


def override_values(namespace: str, trainer_millicpu: int, s3) -> dict:
    """The release's values: the training job only (no fileserver, cube, serving or MLflow),
    data and model store on the cluster's S3 with credentials from an existing Secret, the
    linear model (its held-out AUC is stable from run to run, docs/coordinator.md), small
    tasks so three trainers share an hour, and the per-role PriorityClasses created by the
    release."""
    from tests.s3_fixture import REGION

    return {
        "global": {
            "data": {
                "path": f"{store(s3, namespace)}/data",
                "startDateHour": HOURS[0],
                "endDateHour": HOURS[-1],
                "sparseDim": SPARSE_DIM,
                "slots": SLOTS,
            },
            "modelStore": f"{store(s3, namespace)}/models",
            "s3": {
                "endpoint": s3.endpoint,
                "region": REGION,
                "pathStyle": True,
                "existingSecret": S3_SECRET,
            },
            # No MLflow server in this release: each exporting trainer reports to an SQLite
            # store in its pod's /tmp (emptyDir), gone with the pod.
            "mlflow": {"trackingUri": "sqlite:////tmp/mlflow.db"},
        },
        "fileserver": {"enabled": False},
        "cube": {"enabled": False},
        "serving": {"enabled": False},
        "mlflow": {"enabled": False},
        "trainer": {
            "model": MODEL,
            "volcano": {
                "priorityClasses": {
                    "guaranteed": f"{namespace}-guaranteed",
                    "trainer": f"{namespace}-trainer",
                    "create": True,
                }
            },
            "coordinator": {
                "pollSeconds": 2,
                "taskMiB": 0.5,
                # one hour at a time: every export holds exactly the hours up to its own,
                # whether the hours arrive together (undisturbed) or one by one
                "window": 1,
                "yieldToKubeScheduler": {"enabled": True, "holdSeconds": HOLD_SECONDS},
                "resources": {
                    "requests": {"cpu": "50m", "memory": "128Mi"},
                    "limits": {"cpu": "500m", "memory": "256Mi"},
                },
            },
            "staging": {"size": "1Gi"},
            "pserver": {
                "replicas": 1,
                "resources": {
                    "requests": {"cpu": "200m", "memory": "384Mi"},
                    "limits": {"cpu": "1", "memory": "1Gi"},
                },
            },
            "trainer": {
                "replicas": TRAINERS,
                "minReplicas": MIN_TRAINERS,
                "threads": 1,
                "resources": {
                    "requests": {"cpu": f"{trainer_millicpu}m", "memory": "384Mi"},
                    "limits": {"cpu": "1", "memory": "1Gi"},
                },
            },
        },
    }


@pytest.fixture(scope="module")
def sizing(kube_cluster):
    """Trainer CPU request: three trainers and the release's other pods fit the node's free
    CPU (with 100m to spare); nothing else runs while the module's releases do."""
    allocatable, requested = node_cpu(kube_cluster)
    trainer = min(500, (allocatable - requested - OTHERS_MILLICPU - 100) // TRAINERS)
    if trainer < 150:
        pytest.fail(
            f"the node has {allocatable}m CPU with {requested}m requested: no room for three "
            f"trainers of >= 150m beside the release's {OTHERS_MILLICPU}m",
            pytrace=False,
        )
    return {"allocatable": allocatable, "trainer": trainer}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {"data": tmp_path_factory.mktemp("preempt-data")}


def s3_secret(kube_cluster, namespace: str, s3) -> None:
    """The namespace and the Secret holding the S3 credentials (global.s3.existingSecret),
    as a user creates them before installing."""
    from kubernetes import client

    core = releases.core_api(kube_cluster)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    releases.s3_secret(kube_cluster, namespace, s3, S3_SECRET)


def _train(kube_cluster, chart_ref, namespace, sizing, tmp_path, s3, tenant: bool) -> dict:
    """Install, train the three hours on the schedule of the module docstring (with the tenant
    when asked), read the results, uninstall."""
    h, ns, out = kube_cluster, namespace, {}
    values = tmp_path / "values.yaml"
    values.write_text(json.dumps(override_values(ns, sizing["trainer"], s3)))
    s3_secret(h, ns, s3)
    t0 = time.monotonic()
    releases.run_ectl(
        h,
        ns,
        "install",
        "--chart",
        chart_ref,
        "-f",
        str(values),
        "-R",
        RELEASE,
        "-n",
        ns,
        "--create-namespace",
        "--wait",
        "--timeout",
        "10m",
        timeout=900,
    )
    out["install_s"] = round(time.monotonic() - t0, 1)
    try:
        wait_until(
            f"{TRAINERS} trainers running",
            lambda: len(running(trainer_pods(h, ns))) == TRAINERS,
            300,
            h,
            ns,
        )

        def progress() -> dict:
            """The coordinator's progress: live while its pod runs; once the bounded job
            has ended, what `ectl status` reads from the S3 store itself (a training-only
            release: no fileserver or cube-transfer to ask), with the shell's S3
            credentials as users run it."""
            return releases.status(h, RELEASE, ns, env=s3.env).get("coordinator") or {}

        def exported_all(hours) -> bool:
            parts = {p["partition"]: p for p in progress().get("partitions", [])}
            return all(parts.get(hour, {}).get("exported") for hour in hours)

        def upload(first: int, count: int) -> None:
            """Hours written to S3 (partitions + donefiles), as a user's pipeline does."""
            args = releases.generate_args(HOURS[first], count, LINES, FILES, SEED, GENERATE)
            subprocess.run(
                [*releases.ECTL, "data", "generate", f"{store(s3, ns)}/data", *args],
                check=True, capture_output=True, timeout=600, env={**os.environ, **s3.env},
            )  # fmt: skip

        with Utilisation(h) as util:
            t_run = time.monotonic()
            # undisturbed: every hour at once (one upload; the window trains them in order)
            upload(0, 1 if tenant else len(HOURS))
            if tenant:
                wait_until("training started", lambda: progress().get("samples", 0) > 0, 300, h, ns)
                core = releases.core_api(h)
                from kubernetes import client

                apps = client.AppsV1Api(h.api())
                allocatable, requested = node_cpu(h)
                tenant_cpu = allocatable - requested + sizing["trainer"] * 3 // 2
                out["tenant_millicpu"] = tenant_cpu
                t_tenant = time.monotonic()
                apps.create_namespaced_deployment(
                    ns, tenant_deployment(tenant_cpu, f"{ns}-guaranteed")
                )

                def preempted():
                    tenants = core.list_namespaced_pod(ns, label_selector=f"app={TENANT}").items
                    trainers = running(trainer_pods(h, ns))
                    return len(running(tenants)) == 1 and len(trainers) == MIN_TRAINERS and trainers

                (survivor,) = wait_until(
                    "trainers preempted down to the minimum", preempted, 300, h, ns
                )
                out["preempted_s"] = round(time.monotonic() - t_tenant, 1)
                # the job keeps running with the minimum: the second hour trained by one trainer
                upload(1, 1)
                most = [0]

                def second_hour_alone():
                    most[0] = max(most[0], len(running(trainer_pods(h, ns))))
                    return exported_all(HOURS[:2])

                wait_until(
                    "the first two hours exported with one trainer", second_hour_alone, 600, h, ns
                )
                assert most[0] == MIN_TRAINERS, f"{most[0]} trainers ran beside the tenant"
                pending = [p for p in trainer_pods(h, ns) if p.status.phase == "Pending"]
                assert len(pending) == TRAINERS - MIN_TRAINERS, [p.metadata.name for p in pending]
                job = volcano_job(h, ns)
                assert (job.get("status") or {}).get("retryCount", 0) == 0, job.get("status")
                out["alone_s"] = round(time.monotonic() - t_tenant, 1)

                t_gone = time.monotonic()
                apps.delete_namespaced_deployment(TENANT, ns, propagation_policy="Foreground")
                wait_until(
                    f"{TRAINERS} trainers back",
                    lambda: len(running(trainer_pods(h, ns))) == TRAINERS,
                    300,
                    h,
                    ns,
                )
                out["back_s"] = round(time.monotonic() - t_gone, 1)
                uids = {p.metadata.name: p.metadata.uid for p in trainer_pods(h, ns)}
                assert uids[survivor.metadata.name] == survivor.metadata.uid, "survivor restarted"
                out.update(_kube_scheduler_tenant(h, ns, sizing, apps, core))
                upload(2, 1)
            wait_until("every hour exported", lambda: exported_all(HOURS), 600, h, ns)
            out["train_s"] = round(time.monotonic() - t_run, 1)
        out["utilisation"] = round(util.mean(), 3)
        final = progress()
        assert "samples" in final, f"no progress from ectl status: {final}"
        out["samples"] = final["samples"]
        out["tasks_retried"] = final.get("tasks_retried")
        job = volcano_job(h, ns)
        out["retry_count"] = (job.get("status") or {}).get("retryCount", 0)
        out["auc"] = heldout_auc(s3, ns)
    finally:
        if tenant:  # a failed run must not leave the node full for the tests after it
            from kubernetes import client

            for name in (TENANT, KUBE_TENANT):
                with contextlib.suppress(client.ApiException):
                    client.AppsV1Api(h.api()).delete_namespaced_deployment(name, ns)
        t_un = time.monotonic()
        releases.run_ectl(
            h, ns, "uninstall", "-R", RELEASE, "-n", ns, "--yes", "--wait", check=False, timeout=600
        )
        out["uninstall_s"] = round(time.monotonic() - t_un, 1)
    return out


def _kube_scheduler_tenant(h, ns: str, sizing: dict, apps, core) -> dict:
    """A tenant of kube-scheduler (no PriorityClass: priority 0, above the trainers') asks
    for the node's free CPU plus one and a half trainers. kube-scheduler preempts trainers;
    the coordinator gives them up (elasticctr.coordinator.yielding) so that Volcano does
    not re-place them, and the tenant runs; HOLD_SECONDS after the last preemption the
    trainer count is restored, and once the tenant has left all trainers run again."""
    out: dict = {}
    allocatable, requested = node_cpu(h)
    cpu = allocatable - requested + sizing["trainer"] * 3 // 2
    t0 = time.monotonic()
    apps.create_namespaced_deployment(
        ns, tenant_deployment(cpu, None, scheduler="default-scheduler", name=KUBE_TENANT)
    )

    fewest = [TRAINERS]  # the lowest trainer count the Job had while the tenant came

    def tenant_running() -> bool:
        (task,) = [t for t in volcano_job(h, ns)["spec"]["tasks"] if t["name"] == "trainer"]
        fewest[0] = min(fewest[0], task["replicas"])
        pods = core.list_namespaced_pod(ns, label_selector=f"app={KUBE_TENANT}").items
        return len(running(pods)) == 1

    wait_until("kube-scheduler's tenant running", tenant_running, 120, h, ns)
    out["kube_tenant_s"] = round(time.monotonic() - t0, 1)
    # Lowered while the tenant came (the count may be back already when it runs: the hold
    # counts from the last preemption, and a loaded machine binds the tenant later).
    out["kube_yielded_to"] = fewest[0]
    assert MIN_TRAINERS <= fewest[0] < TRAINERS, fewest
    job = volcano_job(h, ns)
    assert (job.get("status") or {}).get("retryCount", 0) == 0, job.get("status")
    # Volcano removes the trainers above the lowered count by index, so a survivor may go
    # and a recreated trainer take its place: the job is back at its minimum shortly.
    wait_until(
        f"{MIN_TRAINERS} trainer(s) beside kube-scheduler's tenant",
        lambda: len(running(trainer_pods(h, ns))) >= MIN_TRAINERS,
        120,
        h,
        ns,
    )
    out["kube_min_s"] = round(time.monotonic() - t0, 1)
    time.sleep(5)  # Volcano does not take the room back
    assert tenant_running(), "the tenant lost its room again"
    t_gone = time.monotonic()
    apps.delete_namespaced_deployment(KUBE_TENANT, ns, propagation_policy="Foreground")
    wait_until(
        f"{TRAINERS} trainers back after the hold",
        lambda: len(running(trainer_pods(h, ns))) == TRAINERS,
        HOLD_SECONDS + 300,
        h,
        ns,
    )
    out["kube_back_s"] = round(time.monotonic() - t_gone, 1)
    return out


def heldout_auc(s3, namespace: str) -> dict[str, float]:
    """Each hour's held-out AUC, from the manifest of its published model version on S3."""
    from tests.s3_fixture import s3_env

    from elasticctr.modelstore import open_store

    with s3_env(s3):
        models = open_store(f"{store(s3, namespace)}/models")
        return {hour: models.read_manifest(hour)["metrics"]["auc"] for hour in HOURS}


def expected(runs) -> int:
    if "expected" not in runs:
        root = releases.local_copy(
            runs["data"] / "hours", HOURS[0], len(HOURS), LINES, FILES, SEED, GENERATE
        )
        runs["expected"] = releases.expected_samples([root], SPARSE_DIM, runs["data"], SLOTS)
    return runs["expected"]


@pytest.mark.slow
def test_undisturbed_job_counts_every_sample_once(
    kube_cluster, published, sizing, runs, tmp_path, cluster_s3
):
    calm = _train(
        kube_cluster, published["chart"], CALM, sizing, tmp_path, cluster_s3, tenant=False
    )
    runs["calm"] = calm
    print(f"\nundisturbed: {json.dumps(calm)}")
    assert calm["samples"] == expected(runs), calm
    assert calm["retry_count"] == 0, calm


@pytest.mark.slow
def test_trainers_preempted_to_the_minimum_and_back_train_the_same_model(
    kube_cluster, published, sizing, runs, tmp_path, cluster_s3
):
    busy = _train(kube_cluster, published["chart"], BUSY, sizing, tmp_path, cluster_s3, tenant=True)
    calm = runs.get("calm")
    print(f"\ndisturbed: {json.dumps(busy)}\nundisturbed: {json.dumps(calm)}")
    assert busy["samples"] == expected(runs), busy
    assert busy["retry_count"] == 0, busy
    assert calm is not None, "the undisturbed run failed: nothing to compare with"
    gaps = {hour: round(busy["auc"][hour] - calm["auc"][hour], 4) for hour in HOURS}
    print(
        f"\npreempted to {MIN_TRAINERS} trainer in {busy['preempted_s']} s, "
        f"{TRAINERS} back in {busy['back_s']} s; kube-scheduler's tenant running in "
        f"{busy['kube_tenant_s']} s (trainers {TRAINERS} -> {busy['kube_yielded_to']}), "
        f"{TRAINERS} back {busy['kube_back_s']} s after it left; requested-CPU utilisation "
        f"{busy['utilisation']:.1%} disturbed (tenant {busy['tenant_millicpu']}m) vs "
        f"{calm['utilisation']:.1%} undisturbed; held-out AUC disturbed - undisturbed {gaps}"
    )
    # The last hour's model went through the preemption and the recovery. Earlier hours are
    # printed, not asserted: the first hour's AUC differed by 0.014 between two undisturbed
    # runs (a young model, async updates in another order), docs/cluster-tests.md.
    last = HOURS[-1]
    assert abs(gaps[last]) <= AUC_TOLERANCE, (last, busy, calm)
