"""The decisions of elasticctr.coordinator.upkeep against a fake API (the same calls run
against a real kube-apiserver, as the chart's account, in
tests/cluster/test_release_lifecycle.py, and with Volcano in tests/e2e/test_release.py)."""

from __future__ import annotations

import copy

import pytest

from elasticctr import constants as C
from elasticctr.coordinator import upkeep
from elasticctr.errors import EctlError
from elasticctr.kube_api import ApiError

pytestmark = pytest.mark.fast

JOB = "ctr-trainer-1a2b3c4d"
JOB_PATH = f"/apis/batch.volcano.sh/v1alpha1/namespaces/ns/jobs/{JOB}"


def _pointer_get(doc, path):
    for part in path.strip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        doc = doc[part]
    return doc


class FakeKube:
    """The Job and the pods, with JSON patches applied as the API server does (a failed
    `test` answers 422)."""

    namespace = "ns"

    def __init__(self, phase="Running", retries=0, annotations=None):
        self.job = {
            "metadata": {"name": JOB},
            "spec": {"maxRetry": 2},
            "status": {"state": {"phase": phase}, "retryCount": retries},
        }
        if annotations is not None:
            self.job["metadata"]["annotations"] = annotations
        self.pods: dict[str, dict] = {}
        self.calls: list[tuple] = []

    def get(self, path, params=None, hint=None):
        self.calls.append(("GET", path))
        assert path == JOB_PATH
        return copy.deepcopy(self.job)

    def json_patch(self, path, ops, hint=None):
        self.calls.append(("PATCH", path, ops))
        assert path in (JOB_PATH, JOB_PATH + "/status")
        job = copy.deepcopy(self.job)
        for op in ops:
            parent, _, key = op["path"].rpartition("/")
            key = key.replace("~1", "/").replace("~0", "~")
            if op["op"] == "test":
                try:
                    ok = _pointer_get(job, op["path"]) == op["value"]
                except KeyError:
                    ok = False
                if not ok:
                    raise ApiError("test failed", 422)
            else:
                _pointer_get(job, parent)[key] = op["value"] if parent else None
        if path.endswith("/status"):
            self.job["status"] = job["status"]
        else:
            self.job["metadata"] = job["metadata"]
        return job

    def request(self, method, path, *, body=None, content_type=None, hint=None, params=None):
        self.calls.append((method, path, body))
        name = path.rsplit("/", 1)[1]
        pod = self.pods.get(name)
        if pod is None:
            raise ApiError("not found", 404)
        if body["preconditions"]["uid"] != pod["metadata"]["uid"]:
            raise ApiError("uid precondition", 409)
        del self.pods[name]
        return {}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def keeper(kube, clock, **kw):
    kw.setdefault("recovery_seconds", 60)
    kw.setdefault("replace_evicted", True)
    return upkeep.Upkeep(kube, JOB, clock=clock, **kw)


def test_spent_retries_come_back_after_a_healthy_period():
    kube, clock = FakeKube(retries=1), Clock()
    health = {"ok": False}
    k = keeper(kube, clock, healthy=lambda: health["ok"])
    assert not k.check_retries()  # the checkpoint is not loaded yet: not healthy
    clock.now += 120
    health["ok"] = True
    assert not k.check_retries()  # the healthy period starts now
    clock.now += 59
    assert not k.check_retries()
    clock.now += 1
    assert k.check_retries()
    assert kube.job["status"]["retryCount"] == 0 and k.recovered == 1
    assert kube.job["metadata"]["annotations"] == {upkeep.ANNOTATION_RECOVERED: "1"}
    assert not k.check_retries()  # nothing left to give back
    patches = [c for c in kube.calls if c[0] == "PATCH"]
    assert len(patches) == 2, patches


def test_a_restart_starts_the_healthy_period_again():
    kube, clock = FakeKube(retries=1), Clock()
    k = keeper(kube, clock)
    k.check_retries()
    clock.now += 50
    kube.job["status"]["state"]["phase"] = "Restarting"
    kube.job["status"]["retryCount"] = 2
    assert not k.check_retries()
    kube.job["status"]["state"]["phase"] = "Running"
    clock.now += 20
    assert not k.check_retries()  # 70 s since the first look, 0 since Running again
    clock.now += 60
    assert k.check_retries()
    assert kube.job["status"]["retryCount"] == 0 and k.recovered == 2


def test_the_patch_is_conditional_on_what_was_read():
    """Volcano restarts the job between the look and the patch: the patch's `test` fails
    and the count Volcano wrote stays."""
    kube, clock = FakeKube(retries=1), Clock()
    k = keeper(kube, clock)
    k.check_retries()
    clock.now += 60
    real_get = kube.get

    def get_then_restart(path, params=None, hint=None):
        got = real_get(path, params, hint)
        kube.job["status"] = {"state": {"phase": "Restarting"}, "retryCount": 2}
        return got

    kube.get = get_then_restart
    assert not k.check_retries()
    assert kube.job["status"]["retryCount"] == 2 and k.recovered == 0


def test_the_total_given_back_adds_up_in_the_annotation():
    annotations = {"elasticctr/spec-hash": "x", upkeep.ANNOTATION_RECOVERED: "3"}
    kube, clock = FakeKube(retries=2, annotations=annotations), Clock()
    k = keeper(kube, clock)
    k.check_retries()
    clock.now += 60
    assert k.check_retries()
    assert kube.job["metadata"]["annotations"][upkeep.ANNOTATION_RECOVERED] == "5"
    assert kube.job["metadata"]["annotations"]["elasticctr/spec-hash"] == "x"


def test_zero_means_never():
    kube, clock = FakeKube(retries=1), Clock()
    k = keeper(kube, clock, recovery_seconds=0)
    clock.now += 10**6
    assert not k.check_retries() and kube.calls == []


def pod(name, uid, phase="Running", reason=None, deleting=False):
    meta = {"name": name, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    status = {"phase": phase}
    if reason:
        status["reason"] = reason
    return {"metadata": meta, "status": status}


def test_which_pods_the_kubelet_failed():
    assert upkeep.kubelet_failed(pod("t", "u", "Failed", "Evicted")) == "Evicted"
    assert upkeep.kubelet_failed(pod("t", "u", "Failed")) == "Failed"
    assert upkeep.kubelet_failed(pod("t", "u", "Failed", "Evicted", deleting=True)) is None
    for phase in ("Running", "Pending", "Succeeded"):
        assert upkeep.kubelet_failed(pod("t", "u", phase)) is None
    assert upkeep.kubelet_failed({}) is None


def test_an_evicted_trainer_is_deleted_once_by_its_uid():
    kube, clock = FakeKube(), Clock()
    k = keeper(kube, clock)
    evicted = pod(f"{JOB}-trainer-1", "u1", "Failed", "Evicted")
    kube.pods[evicted["metadata"]["name"]] = evicted
    k.on_pod(pod(f"{JOB}-trainer-0", "u0"))
    k.on_pod(evicted)
    assert k.replace_failed() == [f"{JOB}-trainer-1"]
    delete = [c for c in kube.calls if c[0] == "DELETE"]
    assert delete == [("DELETE", f"/api/v1/namespaces/ns/pods/{JOB}-trainer-1",
                       {"apiVersion": "v1", "kind": "DeleteOptions",
                        "preconditions": {"uid": "u1"}})]  # fmt: skip
    assert k.replace_failed() == []  # the watch's DELETED event may come later: not twice
    k.on_pod(pod(f"{JOB}-trainer-1", "u1", "Failed", "Evicted", deleting=True))
    assert k.replace_failed() == [] and k.replaced == [f"{JOB}-trainer-1"]


def test_a_trainer_failing_again_and_again_waits_longer_each_time():
    kube, clock = FakeKube(), Clock()
    k = keeper(kube, clock)
    name = f"{JOB}-trainer-0"
    times = []
    for i in range(4):
        failed = pod(name, f"u{i}", "Failed", "OutOfcpu")
        kube.pods[name] = failed
        k.on_pod(failed)
        start = clock.now
        while not k.replace_failed():
            clock.now += 1
        times.append(clock.now - start)
    assert times == [0, upkeep.BACKOFF_SECONDS, 2 * upkeep.BACKOFF_SECONDS,
                     4 * upkeep.BACKOFF_SECONDS]  # fmt: skip
    # long after: a new incident, replaced at once
    clock.now += 3 * upkeep.MAX_BACKOFF_SECONDS
    kube.pods[name] = pod(name, "u9", "Failed", "Evicted")
    k.on_pod(kube.pods[name])
    assert k.replace_failed() == [name]


def test_failed_trainers_are_left_alone_when_the_job_is_not_running():
    for phase in ("Failed", "Completed", "Restarting", "Aborted", "Completing"):
        kube, clock = FakeKube(phase=phase), Clock()
        k = keeper(kube, clock)
        failed = pod(f"{JOB}-trainer-0", "u0", "Failed", "Evicted")
        kube.pods[f"{JOB}-trainer-0"] = failed
        k.on_pod(failed)
        assert k.replace_failed() == [], phase
        assert f"{JOB}-trainer-0" in kube.pods, phase


def test_a_pod_gone_or_replaced_meanwhile_is_forgotten():
    kube, clock = FakeKube(), Clock()
    k = keeper(kube, clock)
    name = f"{JOB}-trainer-0"
    k.on_pod(pod(name, "u0", "Failed", "Evicted"))
    kube.pods[name] = pod(name, "u1")  # someone deleted it; Volcano recreated it
    assert k.replace_failed() == []  # 409: the uid precondition
    assert name in kube.pods and k.replace_failed() == []
    k.on_pod(pod(name, "u2", "Failed", "Evicted"))
    k.on_pod(pod(name, "u3", "Pending"))  # a new pod of that name: nothing to do
    assert k.replace_failed() == []


def test_replacing_is_off_when_not_asked():
    kube, clock = FakeKube(), Clock()
    k = keeper(kube, clock, replace_evicted=False)
    k.on_pod(pod(f"{JOB}-trainer-0", "u0", "Failed", "Evicted"))
    assert k.replace_failed() == [] and kube.calls == []


def test_from_env(monkeypatch, tmp_path):
    assert upkeep.from_env({}) is None
    env = {C.ENV_COORDINATOR_JOB: JOB, C.ENV_COORDINATOR_RETRY_RECOVERY_SECONDS: "0",
           C.ENV_COORDINATOR_REPLACE_EVICTED: "0"}  # fmt: skip
    assert upkeep.from_env(env) is None  # asked for nothing
    for bad in ("soon", "-1", "nan"):
        with pytest.raises(EctlError, match=C.ENV_COORDINATOR_RETRY_RECOVERY_SECONDS):
            upkeep.from_env({**env, C.ENV_COORDINATOR_RETRY_RECOVERY_SECONDS: bad})
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(EctlError, match="needs the Kubernetes API server and a namespace"):
        upkeep.from_env({**env, C.ENV_COORDINATOR_REPLACE_EVICTED: "1"})
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    (tmp_path / "namespace").write_text("ns")
    monkeypatch.setattr("elasticctr.kube_api.SA_DIR", tmp_path)
    got = upkeep.from_env(
        {**env, C.ENV_COORDINATOR_RETRY_RECOVERY_SECONDS: "30"}, healthy=lambda: False
    )
    assert got is not None and got.recovery_seconds == 30 and not got.replace_evicted
    assert not got.healthy()
