"""ectl against a real kube-apiserver + etcd (tests/cluster/conftest.py): the chart with the
demo values is installed, checked object by object, upgraded, rolled back, read by
`ectl status` and `ectl doctor`, and uninstalled without leftovers.

Nothing runs the objects (no scheduler, controllers or kubelet), so deploy verbs run without
--wait/--atomic: waiting for readiness can never finish here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import require_tool

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "values" / "demo.yaml"
RELEASE = "ctr"
NAMESPACE = "ctr"
INSTANCE = "app.kubernetes.io/instance"
VOLCANO = ("batch.volcano.sh", "v1alpha1", "jobs")


@pytest.fixture(scope="module")
def ectl():
    """The console entry point in this process (real exit codes and output, no start-up)."""
    from elasticctr.cli.main import run

    def call(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess:
        argv = ["ectl", *args, "--kubeconfig", str(kubeconfig)]
        mp = pytest.MonkeyPatch()
        out, err = _Capture(), _Capture()
        mp.setattr(sys, "argv", argv)
        mp.setattr(sys, "stdout", out)
        mp.setattr(sys, "stderr", err)
        code = 0
        try:
            run()  # rich's consoles write to sys.stdout/sys.stderr as they are at print time
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            mp.undo()
        return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())

    return call


class _Capture:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, s: str) -> int:
        self.parts.append(s)
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def getvalue(self) -> str:
        return "".join(self.parts)


def helm(cluster, *args: str) -> str:
    proc = subprocess.run(
        [require_tool("helm"), *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def manifest(cluster, namespace: str = NAMESPACE, release: str = RELEASE) -> list[dict]:
    text = helm(cluster, "get", "manifest", release, "-n", namespace)
    return [d for d in yaml.safe_load_all(text) if d]


def subset_mismatch(want: Any, got: Any, path: str = "") -> str | None:
    """Where `got` (stored by the API server) lacks or changes something of `want` (sent).

    Defaults the server adds are fine, and so is an empty list or map it omits (built-in
    types serialise them away); a dropped field (CRD pruning) or changed value is not.
    """
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{path}: {got!r} is not a mapping"
        for key, value in want.items():
            if key not in got:
                if value in ([], {}, None):
                    continue
                return f"{path}.{key}: missing in the stored object (pruned?)"
            found = subset_mismatch(value, got[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{path}: {got!r} != {want!r}"
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            found = subset_mismatch(w, g, f"{path}[{i}]")
            if found:
                return found
        return None
    if want != got and str(want) != str(got):
        return f"{path}: stored {got!r}, sent {want!r}"
    return None


def stored(api, doc: dict, namespace: str = NAMESPACE) -> dict:
    from kubernetes.dynamic import DynamicClient

    resource = DynamicClient(api).resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    ns = namespace if resource.namespaced else None
    return resource.get(name=doc["metadata"]["name"], namespace=ns).to_dict()


def volcano_jobs(api, namespace: str = NAMESPACE, release: str = RELEASE) -> list[dict]:
    from kubernetes import client

    return (
        client.CustomObjectsApi(api)
        .list_namespaced_custom_object(*VOLCANO[:2], namespace, VOLCANO[2],
                                       label_selector=f"{INSTANCE}={release}")
        .get("items", [])
    )  # fmt: skip


def images(docs: list[dict]) -> set[str]:
    found = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    found.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(docs)
    return found


@pytest.fixture(scope="module")
def release(cluster, ectl):
    """The chart with the demo values, installed once for this module (revision 1)."""
    started = time.monotonic()
    proc = ectl("install", "-f", str(DEMO), "-R", RELEASE, "-n", NAMESPACE, "-o", "json",
                kubeconfig=cluster.kubeconfig)  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    print(
        f"cluster start {cluster.start_seconds:.1f} s, install {time.monotonic() - started:.1f} s"
    )
    return json.loads(proc.stdout)


def _as_job_account(cluster, core):
    """An InCluster client with a token of the chart's job account: what the coordinator
    calls the API server with (only the Role the chart gives it)."""
    from kubernetes import client

    from elasticctr.kube_api import InCluster

    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=900)
    )
    token = core.create_namespaced_service_account_token(
        f"{RELEASE}-trainer", SECOND_NS, request
    ).status.token
    return InCluster(
        purpose="test", namespace=SECOND_NS, api=cluster.server, token=token,
        ca=str(cluster.pki["ca.crt"]),
    )  # fmt: skip


def _trainer_pod(job: str, pod: str) -> dict:
    """A pod shaped as one of Volcano Job `job`'s trainers (labels, the chart's account), on
    the cluster's pause image: what the coordinator's API calls act on."""
    return {
        "metadata": {
            "name": pod,
            "labels": {"volcano.sh/job-name": job, "volcano.sh/task-spec": "trainer"},
        },
        "spec": {
            "serviceAccountName": f"{RELEASE}-trainer",
            "automountServiceAccountToken": False,
            "containers": [{"name": "t", "image": "elasticctr.local/pause:3.10"}],
        },
    }


def test_install_stores_every_object_as_rendered(cluster, release):
    assert release["revision"] == 1
    docs = manifest(cluster)
    kinds = {d["kind"] for d in docs}
    assert {
        "Job",
        "StatefulSet",
        "Deployment",
        "Service",
        "Secret",
        "PersistentVolumeClaim",
    } <= kinds
    api = cluster.api()
    try:
        for doc in docs:
            obj = stored(api, doc)
            assert obj["metadata"]["labels"][INSTANCE] == RELEASE, doc["metadata"]["name"]
            sent = {k: v for k, v in doc.items() if k not in ("stringData", "status")}
            problem = subset_mismatch(sent, obj)
            assert problem is None, f"{doc['kind']}/{doc['metadata']['name']}: {problem}"
        # The Volcano Job went through the CRD's structural schema: nothing was pruned.
        jobs = volcano_jobs(api)
        assert [j["metadata"]["name"] for j in jobs] == [
            d["metadata"]["name"] for d in docs if d["kind"] == "Job"
        ]
        tasks = {t["name"]: t["replicas"] for t in jobs[0]["spec"]["tasks"]}
        assert tasks == {"coordinator": 1, "pserver": 1, "trainer": 2}
    finally:
        api.close()


def test_volcano_job_schema_is_enforced(cluster, release):
    """The real server rejects a Job that breaks the Volcano CRD schema (no webhook here),
    so the acceptance above is a real check."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    job = next(d for d in manifest(cluster) if d["kind"] == "Job")
    bad = json.loads(json.dumps(job))
    bad["metadata"] = {"name": "schema-probe"}
    bad["spec"]["tasks"][0]["replicas"] = "two"
    api = cluster.api()
    try:
        with pytest.raises(ApiException) as err:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                *VOLCANO[:2], NAMESPACE, VOLCANO[2], bad
            )
        assert err.value.status == 422
        assert "spec.tasks[0].replicas" in err.value.body
    finally:
        api.close()


SECOND_NS = "ctr-rbac"


@pytest.fixture(scope="module")
def second(cluster, ectl):
    """The demo values again, in a namespace of their own; uninstalled by
    test_uninstall_leaves_nothing_behind."""
    proc = ectl("install", "-f", str(DEMO), "-R", RELEASE, "-n", SECOND_NS,
                "-o", "json", kubeconfig=cluster.kubeconfig)  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return manifest(cluster, SECOND_NS)


def test_chart_rbac_is_least_privilege(cluster, second):
    """The chart's Roles, evaluated by the real RBAC authorizer: cube-transfer reads the
    scenario registrations; the training job's account watches its pods and scales its
    Volcano Job (the coordinator's yielding) and reads nothing else."""
    from kubernetes import client

    assert {"Role", "RoleBinding"} <= {d["kind"] for d in second}
    api = cluster.api()
    try:
        authz = client.AuthorizationV1Api(api)

        def allowed(
            sa: str, verb: str, resource: str, namespace: str = SECOND_NS, group: str = ""
        ) -> bool:
            review = client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    user=f"system:serviceaccount:{SECOND_NS}:{sa}",
                    groups=["system:serviceaccounts", f"system:serviceaccounts:{SECOND_NS}"],
                    resource_attributes=client.V1ResourceAttributes(
                        namespace=namespace, verb=verb, resource=resource, group=group
                    ),
                )
            )
            return authz.create_subject_access_review(review).status.allowed

        transfer = f"{RELEASE}-cube-transfer"
        assert all(allowed(transfer, verb, "configmaps") for verb in ("get", "list"))
        assert not allowed(transfer, "update", "configmaps")
        assert not allowed(transfer, "get", "secrets")
        assert not allowed(transfer, "list", "configmaps", namespace="default")
        # The job's account: what the coordinator needs to yield trainers to kube-scheduler,
        # give spent retries back and replace trainers the kubelet evicted.
        job_sa = f"{RELEASE}-trainer"
        assert all(allowed(job_sa, verb, "pods") for verb in ("list", "watch", "delete"))
        assert all(allowed(job_sa, v, "jobs", group="batch.volcano.sh") for v in ("get", "patch"))
        assert allowed(job_sa, "patch", "jobs/status", group="batch.volcano.sh")
        assert not allowed(job_sa, "create", "pods")
        assert not allowed(job_sa, "delete", "jobs", group="batch.volcano.sh")
        assert not allowed(job_sa, "create", "jobs", group="batch.volcano.sh")
        assert not allowed(job_sa, "list", "pods", namespace="default")
        assert not allowed(job_sa, "get", "configmaps")
        assert not allowed(job_sa, "get", "secrets")
    finally:
        api.close()


def test_coordinator_yields_trainers_to_kube_scheduler(cluster, second):
    """elasticctr.coordinator.yielding against the real API server, as the job's account
    (a token of the chart's ServiceAccount, the chart's Role): a trainer pod that
    kube-scheduler marked as its victim, or Volcano evicted for another queue's reclaim,
    lowers the Volcano Job's trainer count by one;
    the count comes back after the hold; a count someone else changed meanwhile is kept;
    never below the task's minAvailable; a coordinator that starts below the release's
    maximum restores it. No kubelet here: the pods are API objects, their condition is
    written as kube-scheduler writes it."""
    import threading

    from kubernetes import client

    from elasticctr.coordinator.yielding import Yielder

    api = cluster.api()
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    (job,) = volcano_jobs(api, SECOND_NS)
    name = job["metadata"]["name"]
    index = [t["name"] for t in job["spec"]["tasks"]].index("trainer")
    least = job["spec"]["tasks"][index]["minAvailable"]
    most = job["spec"]["tasks"][index]["replicas"]
    assert most > least, job["spec"]["tasks"][index]

    def replicas() -> int:
        got = custom.get_namespaced_custom_object(*VOLCANO[:2], SECOND_NS, VOLCANO[2], name)
        return got["spec"]["tasks"][index]["replicas"]

    def scale(n: int) -> None:
        got = custom.get_namespaced_custom_object(*VOLCANO[:2], SECOND_NS, VOLCANO[2], name)
        tasks = got["spec"]["tasks"]
        tasks[index]["replicas"] = n
        patch = {"spec": {"tasks": tasks}}  # a merge patch replaces the list as a whole
        custom.patch_namespaced_custom_object(*VOLCANO[:2], SECOND_NS, VOLCANO[2], name, patch)

    def until(what: str, check, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while not check():
            assert time.monotonic() < deadline, f"{what}: trainers {replicas()}"
            time.sleep(0.2)

    # Task indices above the Job's replicas: the coordinator never lowers the count so far
    # that only victims' indices stay (tests/unit/test_coordinator_yield.py covers that).
    victims = iter(range(100, 200))

    def preempt(by: str = "kube-scheduler") -> str:
        pod = f"{name}-trainer-{next(victims)}"
        core.create_namespaced_pod(SECOND_NS, _trainer_pod(name, pod))
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "default-scheduler: preempting to accommodate a higher priority pod",
        }
        if by == "reclaim":  # as Volcano's evictor writes it for another queue
            condition = {
                "type": "Ready",
                "status": "False",
                "reason": "Evict",
                "message": "Pod is evicted, because of reclaim",
            }
        core.patch_namespaced_pod_status(pod, SECOND_NS, {"status": {"conditions": [condition]}})
        return pod

    kube = _as_job_account(cluster, core)
    stop = threading.Event()
    scale(most - 1)  # as an earlier coordinator left it
    yielder = Yielder(kube, name, hold_seconds=2.0, max_trainers=lambda: most)
    thread = threading.Thread(target=yielder.run, args=(stop,), daemon=True)
    thread.start()
    try:
        until("restored at start", lambda: replicas() == most)
        # a pod without the condition changes nothing
        core.create_namespaced_pod(SECOND_NS, _trainer_pod(name, f"{name}-trainer-calm"))
        preempt()
        until("lowered by the victim", lambda: replicas() == most - 1, 15)
        assert yielder.yielded == 1
        until("restored after the hold", lambda: replicas() == most)
        preempt("reclaim")
        until("lowered again", lambda: replicas() == most - 1, 15)
        scale(most + 1)  # helm upgrade during the hold
        time.sleep(4.0)
        assert replicas() == most + 1, "the coordinator overrode someone else's count"
        scale(least)
        preempt()
        time.sleep(3.0)
        assert replicas() == least, "lowered below minAvailable"
        assert yielder.yielded == 2
    finally:
        stop.set()
        thread.join(10)
        scale(most)
        for pod in core.list_namespaced_pod(SECOND_NS, label_selector="volcano.sh/task-spec").items:
            core.delete_namespaced_pod(pod.metadata.name, SECOND_NS, grace_period_seconds=0)
        api.close()


def test_coordinator_gives_retries_back_and_replaces_evicted_trainers(cluster, second):
    """elasticctr.coordinator.upkeep against the real API server, as the job's account (a
    token of the chart's ServiceAccount, the chart's Role): a Job that Volcano restarted
    twice (status written as its controller writes it) gets `retryCount` 0 back through
    the status subresource after the healthy period, the total lands in the Job's
    annotation; a trainer pod the kubelet evicted (phase Failed, reason Evicted) is
    deleted, one still running is not. No Volcano controller here: tests/e2e/test_release.py
    runs the same with Volcano."""
    import threading

    from kubernetes import client

    from elasticctr.coordinator.upkeep import ANNOTATION_RECOVERED, Upkeep

    api = cluster.api()
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    (job,) = volcano_jobs(api, SECOND_NS)
    name = job["metadata"]["name"]

    def get() -> dict:
        return custom.get_namespaced_custom_object(*VOLCANO[:2], SECOND_NS, VOLCANO[2], name)

    job["status"] = {"state": {"phase": "Running"}, "retryCount": 2, "minAvailable": 3}
    custom.replace_namespaced_custom_object_status(*VOLCANO[:2], SECOND_NS, VOLCANO[2], name, job)

    running, evicted = f"{name}-trainer-0", f"{name}-trainer-1"
    for pod in (running, evicted):
        core.create_namespaced_pod(SECOND_NS, _trainer_pod(name, pod))
    # as the kubelet writes an eviction under node pressure
    status = {
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on resource: memory.",
    }
    core.patch_namespaced_pod_status(evicted, SECOND_NS, {"status": status})

    kube = _as_job_account(cluster, core)
    keeper = Upkeep(kube, name, recovery_seconds=3.0, replace_evicted=True)
    stop = threading.Event()
    thread = threading.Thread(target=keeper.run, args=(stop,), daemon=True)
    t0 = time.monotonic()
    thread.start()

    def until(what: str, check, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while not check():
            assert time.monotonic() < deadline, f"{what}: {get().get('status')}"
            time.sleep(0.2)

    def names() -> set[str]:
        listed = core.list_namespaced_pod(SECOND_NS, label_selector=f"volcano.sh/job-name={name}")
        return {p.metadata.name for p in listed.items}

    try:
        until("the evicted trainer deleted", lambda: evicted not in names())
        assert running in names() and keeper.replaced == [evicted]
        until("retries given back", lambda: get()["status"].get("retryCount", 0) == 0)
        assert time.monotonic() - t0 >= 3.0, "given back before the healthy period"
        got = get()
        assert got["metadata"]["annotations"][ANNOTATION_RECOVERED] == "2", got["metadata"]
        assert got["status"]["state"]["phase"] == "Running" and keeper.recovered == 2
        assert got["spec"] == job["spec"]
    finally:
        stop.set()
        thread.join(15)
        for pod in names():
            core.delete_namespaced_pod(pod, SECOND_NS, grace_period_seconds=0)
        api.close()


def test_status_reads_the_real_objects(cluster, release, ectl):
    from kubernetes import client

    api = cluster.api()
    try:
        job = volcano_jobs(api)[0]
        # What Volcano's job controller writes into the status subresource.
        job["status"] = {
            "state": {"phase": "Running", "lastTransitionTime": "2026-12-01T00:00:00Z"},
            "minAvailable": 3,
            "running": 3,
            "pending": 1,
            "succeeded": 0,
            "failed": 0,
            "retryCount": 1,
            "taskStatusCount": {
                "coordinator": {"phase": {"Running": 1}},
                "pserver": {"phase": {"Running": 1}},
                "trainer": {"phase": {"Running": 1, "Pending": 1}},
            },
        }
        client.CustomObjectsApi(api).replace_namespaced_custom_object_status(
            *VOLCANO[:2], NAMESPACE, VOLCANO[2], job["metadata"]["name"], job
        )
    finally:
        api.close()
    proc = ectl("status", "-R", RELEASE, "-n", NAMESPACE, "-o", "json",
                kubeconfig=cluster.kubeconfig)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["release"]["revision"] >= 1 and data["release"]["status"] == "deployed"
    assert data["jobs"] == [
        {
            "name": job["metadata"]["name"],
            "phase": "Running",
            "running": 3,
            "pending": 1,
            "succeeded": 0,
            "failed": 0,
            "retryCount": 1,
            "maxRetry": job["spec"]["maxRetry"],
            "retriesRecovered": 0,
            "tasks": {"coordinator": 1, "pserver": 1, "trainer": 2},
        }
    ]
    assert data["pods"] == []  # no scheduler, no kubelet: no pod ever exists
    # no coordinator pod, and the fileserver Service has no endpoint to read the stored
    # progress from
    assert data["coordinator"] == {
        "unavailable": "no running coordinator pod, and no stored progress"
    }
    serving = {k: data["serving"][k] for k in ("deployment", "ready", "serving")}
    assert serving == {"deployment": f"{RELEASE}-serving", "ready": 0, "serving": False}
    assert data["serving"]["modelVersion"] is None  # the proxy finds no endpoint
    assert data["mlflow"]["url"] == f"http://{RELEASE}-mlflow.{NAMESPACE}.svc:5000"
    table = ectl("status", "-R", RELEASE, "-n", NAMESPACE, kubeconfig=cluster.kubeconfig)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if job["metadata"]["name"] in line)
    assert "Running (running 3, pending 1" in row, table.stdout


def test_status_watch_prints_until_interrupted(cluster, release):
    """`ectl status -w -o json`: one JSON document per line every --interval, as kubectl's
    -w; Ctrl-C (SIGINT) ends it with exit 0."""
    import signal

    argv = [sys.executable, "-m", "elasticctr.cli.main", "status", "-R", RELEASE, "-n",
            NAMESPACE, "--kubeconfig", str(cluster.kubeconfig), "-w", "--interval", "1s",
            "-o", "json"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        second = json.loads(proc.stdout.readline())
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert first["release"]["name"] == second["release"]["name"] == RELEASE, first
    assert first.keys() == second.keys()
    for line in rest.splitlines():  # a round cut short prints nothing half-way
        json.loads(line)
    bad = subprocess.run([*argv[:-4], "--interval", "0s"], capture_output=True, text=True)
    assert bad.returncode == 2 and "under 1s" in bad.stderr, bad.stderr


def test_status_names_the_chart(cluster, release, ectl):
    proc = ectl("status", "-R", RELEASE, "-n", NAMESPACE, "-o", "json",
                kubeconfig=cluster.kubeconfig)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["release"]["chart"].startswith("elasticctr-")


def test_doctor_reports_no_volcano_scheduler(cluster, release, ectl):
    proc = ectl("doctor", "-n", NAMESPACE, "-o", "json", kubeconfig=cluster.kubeconfig)
    assert proc.returncode == 4, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert (
        checks["kubeconfig"]["status"] == "ok" and cluster.server in checks["kubeconfig"]["detail"]
    )
    # The version stamp of the bootstrap's build (-X k8s.io/component-base/version...).
    assert checks["cluster reachable"]["detail"].startswith("Kubernetes v1.32.13 at ")
    assert checks["Volcano CRDs"]["status"] == "ok"
    scheduler = checks["Volcano scheduler"]
    assert scheduler["status"] == "fail"
    assert "no volcano-scheduler Deployment" in scheduler["detail"]
    assert checks["permissions"]["status"] == "ok"  # system:masters may create everything


def test_doctor_accepts_a_scheduler_renewing_its_lease(cluster, release, ectl):
    """A Volcano scheduler run outside a Deployment (e.g. the e2e harness's host process)
    holds the `volcano` leader-election Lease: fresh counts, stale does not."""
    import datetime as dt

    from kubernetes import client

    api = cluster.api()
    coord = client.CoordinationV1Api(api)
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "volcano-system"}})

    def doctor_scheduler():
        proc = ectl("doctor", "-n", NAMESPACE, "-o", "json", kubeconfig=cluster.kubeconfig)
        return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}["Volcano scheduler"]

    try:
        stale = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        lease = {
            "metadata": {"name": "volcano", "namespace": "volcano-system"},
            "spec": {"holderIdentity": "node_1234", "leaseDurationSeconds": 15,
                     "renewTime": stale.strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
        }  # fmt: skip
        coord.create_namespaced_lease("volcano-system", lease)
        assert doctor_scheduler()["status"] == "fail"
        fresh = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        coord.patch_namespaced_lease("volcano", "volcano-system", {"spec": {"renewTime": fresh}})
        check = doctor_scheduler()
        assert check["status"] == "ok", check
        assert "volcano-system/volcano Lease held by node_1234" in check["detail"]
    finally:
        coord.delete_namespaced_lease("volcano", "volcano-system")
        core.delete_namespace("volcano-system")  # stays Terminating: no namespace controller
        api.close()


def test_upgrade_then_rollback(cluster, release, ectl, tmp_path):
    from kubernetes import client

    changed = tmp_path / "changed.yaml"
    changed.write_text(
        yaml.safe_dump(
            {
                "global": {"image": {"tag": "9.9.9-test"}},
                "trainer": {"trainer": {"replicas": 3}},
                "cube": {"shards": 3},
            }
        )
    )
    api = cluster.api()
    core = client.CoreV1Api(api)
    try:
        before = manifest(cluster)
        # Passwords the chart generates once and finds again with `lookup` on upgrades.
        secrets = {
            s.metadata.name: s.data
            for s in core.list_namespaced_secret(NAMESPACE, label_selector=f"{INSTANCE}={RELEASE}")
            .items
            if s.metadata.name != f"{RELEASE}-trainer-config"  # the values: changes on purpose
        }  # fmt: skip
        assert {f"{RELEASE}-cube-admin", f"{RELEASE}-fileserver"} <= set(secrets)
        old_job = next(d["metadata"]["name"] for d in before if d["kind"] == "Job")

        proc = ectl("upgrade", "-f", str(DEMO), "-f", str(changed), "-R", RELEASE,
                    "-n", NAMESPACE, "--no-atomic", "-o", "json",
                    kubeconfig=cluster.kubeconfig)  # fmt: skip
        assert proc.returncode == 0, proc.stderr + proc.stdout
        upgraded = json.loads(proc.stdout)
        assert upgraded["revision"] == release["revision"] + 1
        after = manifest(cluster)
        ours = images(after)
        assert len(ours) == 6 and all(i.endswith(":9.9.9-test") for i in ours), images(after)
        jobs = volcano_jobs(api)
        # A changed task spec renames the Job (Volcano rejects in-place edits): old one gone.
        assert len(jobs) == 1 and jobs[0]["metadata"]["name"] != old_job
        tasks = {t["name"]: t["replicas"] for t in jobs[0]["spec"]["tasks"]}
        assert tasks["trainer"] == 3
        for task in jobs[0]["spec"]["tasks"]:
            for c in task["template"]["spec"]["containers"]:
                assert c["image"] == "elasticctr/elasticctr-train:9.9.9-test"
        cube = client.AppsV1Api(api).read_namespaced_stateful_set(f"{RELEASE}-cube", NAMESPACE)
        assert cube.spec.replicas == 3 * 2  # 3 shards x the default 2 replicas each
        assert all(c.image.endswith(":9.9.9-test") for c in cube.spec.template.spec.containers)
        # Generated passwords survive the upgrade (the chart's lookup ran on the real server).
        for name, data in secrets.items():
            assert core.read_namespaced_secret(name, NAMESPACE).data == data, name

        proc = ectl("rollback", "-R", RELEASE, "-n", NAMESPACE, "-o", "json",
                    kubeconfig=cluster.kubeconfig)  # fmt: skip
        assert proc.returncode == 0, proc.stderr + proc.stdout
        back = json.loads(proc.stdout)
        assert back["rolledBackTo"] == upgraded["revision"] - 1
        assert back["revision"] == upgraded["revision"] + 1 and back["status"] == "deployed"
        proc = ectl("history", "-R", RELEASE, "-n", NAMESPACE, "-o", "json",
                    kubeconfig=cluster.kubeconfig)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        revisions = json.loads(proc.stdout)["revisions"]
        assert [(r["revision"], r["status"]) for r in revisions][-3:] == [
            (upgraded["revision"] - 1, "superseded"),
            (upgraded["revision"], "superseded"),
            (back["revision"], "deployed"),
        ]
        assert revisions[-1]["description"] == f"Rollback to {upgraded['revision'] - 1}"
        restored = manifest(cluster)
        key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
        assert sorted(restored, key=key) == sorted(before, key=key)
        jobs = volcano_jobs(api)
        assert [j["metadata"]["name"] for j in jobs] == [old_job]
        tasks = {t["name"]: t["replicas"] for t in jobs[0]["spec"]["tasks"]}
        assert tasks == {"coordinator": 1, "pserver": 1, "trainer": 2}
        cube = client.AppsV1Api(api).read_namespaced_stateful_set(f"{RELEASE}-cube", NAMESPACE)
        assert cube.spec.replicas == 2 * 2  # the demo's 2 shards x 2 replicas again
        assert images(restored) == images(before)
        for doc in restored:
            obj = stored(api, doc)
            sent = {k: v for k, v in doc.items() if k not in ("stringData", "status")}
            problem = subset_mismatch(sent, obj)
            assert problem is None, f"{doc['kind']}/{doc['metadata']['name']}: {problem}"
    finally:
        api.close()


def _namespace_contents(api, namespace: str) -> list[str]:
    """Every object of every listable namespaced type in the namespace (events aside)."""
    from kubernetes.dynamic import DynamicClient

    dyn = DynamicClient(api)
    found = []
    for resource in dyn.resources.search():
        if (
            not resource.namespaced
            or "/" in resource.name
            or "list" not in (resource.verbs or [])
            or resource.kind in ("Event", "Binding")
            or resource.kind.endswith("List")
        ):
            continue
        items = resource.get(namespace=namespace).items
        found += [f"{resource.kind}/{i.metadata.name}" for i in items]
    return sorted(set(found))


def test_uninstall_leaves_nothing_behind(cluster, ectl, second):
    """Everything goes but what the chart keeps on purpose (helm.sh/resource-policy: keep:
    the fileserver's and mlflow's data volumes, the console's change log)."""
    ns = SECOND_NS
    kept = {
        f"{d['kind']}/{d['metadata']['name']}"
        for d in second
        if (d["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") == "keep"
    }
    assert kept == {
        f"PersistentVolumeClaim/{RELEASE}-fileserver",
        f"PersistentVolumeClaim/{RELEASE}-mlflow",
        f"PersistentVolumeClaim/{RELEASE}-console",
    }
    api = cluster.api()
    try:
        installed = _namespace_contents(api, ns)
        assert f"Job/{volcano_jobs(api, ns)[0]['metadata']['name']}" in installed
        assert any(name.startswith("Secret/sh.helm.release.v1.") for name in installed)
        # What `helm test` leaves (its pod is kept for `helm test --logs`; helm uninstall
        # keeps hook resources): ectl uninstall removes it too.
        from kubernetes import client

        labels = {"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "test"}
        core = client.CoreV1Api(api)
        name = f"{RELEASE}-elasticctr-test-predict"
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
        try:  # no controller-manager here makes the namespace's default ServiceAccount
            core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        core.create_namespaced_pod(ns, {
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "predict", "image": "elasticctr.local/busybox:1"}]},
        })  # fmt: skip
        proc = ectl("uninstall", "-R", RELEASE, "-n", ns, "--yes", kubeconfig=cluster.kubeconfig)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        # helm deletes in the background; without a controller-manager no finalizer runs
        # (the fixture disables the PVC-protection admission that would add one).
        deadline = time.monotonic() + 30
        kept.add("ServiceAccount/default")  # made above, as a controller-manager would
        while (left := set(_namespace_contents(api, ns))) != kept and time.monotonic() < deadline:
            time.sleep(1)
        assert left == kept
        assert not core.list_namespaced_pod(ns).items
    finally:
        api.close()
