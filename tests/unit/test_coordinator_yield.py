"""The decisions of elasticctr.coordinator.yielding that need no API server (the API
calls run against a real kube-apiserver in tests/cluster/test_release_lifecycle.py)."""

from __future__ import annotations

import pytest

from elasticctr import constants as C
from elasticctr.coordinator import yielding
from elasticctr.errors import EctlError

pytestmark = pytest.mark.fast


def pod(*conditions: dict) -> dict:
    return {
        "metadata": {"name": "job-trainer-1", "uid": "u1"},
        "status": {"conditions": list(conditions)},
    }


VICTIM = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}


def test_only_kube_schedulers_victims_count():
    assert yielding.preempted_by_kube_scheduler(pod(VICTIM))
    assert yielding.preempted_by_kube_scheduler(pod({"type": "Ready", "status": "True"}, VICTIM))
    # the kubelet's and the eviction API's reasons, a cleared condition, no status at all
    assert not yielding.preempted_by_kube_scheduler(
        pod(dict(VICTIM, reason="EvictionByEvictionAPI"))
    )
    assert not yielding.preempted_by_kube_scheduler(
        pod(dict(VICTIM, reason="TerminationByKubelet"))
    )
    assert not yielding.preempted_by_kube_scheduler(pod(dict(VICTIM, status="False")))
    assert not yielding.preempted_by_kube_scheduler({"metadata": {"name": "x"}})


def test_max_trainers_from_the_scale_file(tmp_path):
    scale = tmp_path / "trainers.json"
    scale.write_text('{"min": 1, "max": 4}')
    assert yielding.read_max_trainers(str(scale)) == 4
    for bad in ('{"min": 1}', '{"max": -1}', '{"max": "4"}', "[4]", "not json"):
        scale.write_text(bad)
        assert yielding.read_max_trainers(str(scale)) is None, bad
    assert yielding.read_max_trainers(str(tmp_path / "missing.json")) is None
    assert yielding.read_max_trainers(None) is None


def test_from_env(monkeypatch):
    assert yielding.from_env({}, None) is None  # the chart did not ask for it
    env = {
        C.ENV_COORDINATOR_YIELD_JOB: "ctr-trainer-1a2b3c4d",
        C.ENV_COORDINATOR_YIELD_HOLD_SECONDS: "soon",
    }
    with pytest.raises(EctlError, match=f"{C.ENV_COORDINATOR_YIELD_HOLD_SECONDS}='soon'"):
        yielding.from_env(env, None)
    # outside a pod: no API server to talk to, said so
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    env[C.ENV_COORDINATOR_YIELD_HOLD_SECONDS] = "30"
    with pytest.raises(EctlError, match="needs the Kubernetes API server and a namespace"):
        yielding.from_env(env, None)


def evicted(message: str) -> dict:
    return {"type": "Ready", "status": "False", "reason": "Evict", "message": message}


def test_volcanos_reclaim_victims_count_too():
    # the condition Volcano's evictor writes before deleting a reclaimed pod
    reclaimed = pod(evicted("Pod is evicted, because of reclaim"))
    assert yielding.reclaimed_by_volcano(reclaimed)
    assert yielding.victim_of(reclaimed) == "reclaim"
    assert yielding.victim_of(pod(VICTIM)) == "kube-scheduler"
    # Volcano's preemption inside one queue: its preemptor binds first, nothing to yield
    assert yielding.victim_of(pod(evicted("Pod is evicted, because of preempt"))) is None
    # a Ready pod, a pod not ready for another reason, no conditions
    assert yielding.victim_of(pod({"type": "Ready", "status": "True"})) is None
    assert yielding.victim_of(pod(dict(evicted("because of reclaim"), reason="Other"))) is None
    assert yielding.victim_of({"metadata": {"name": "x"}}) is None


class _Job(yielding.Yielder):
    """The Yielder's decisions over an in-memory trainer task (the API calls themselves
    run against a real kube-apiserver in tests/cluster/test_release_lifecycle.py)."""

    def __init__(self, replicas: int, least: int):
        super().__init__(None, "job", hold_seconds=30, clock=lambda: 0.0)
        self.replicas, self.least = replicas, least

    def _trainer_task(self):
        return 0, self.replicas, self.least

    def _set_replicas(self, index, was, replicas):
        assert was == self.replicas
        self.replicas = replicas
        return True


RECLAIMED = {
    "type": "Ready",
    "status": "False",
    "reason": "Evict",
    "message": "Pod is evicted, because of reclaim",
}


def _victim(index: int, condition: dict = RECLAIMED, uid: str = "") -> dict:
    return {
        "metadata": {"name": f"job-trainer-{index}", "uid": uid or f"u{index}"},
        "status": {"conditions": [condition]},
    }


def test_a_yield_to_reclaim_never_keeps_only_victims_indices():
    # Four trainers, minimum one. Reclaim takes trainers 0 and 2, then 1: lowering to one
    # would keep index 0 alone, a victim that Volcano recreates and that waits behind the
    # reclaiming queue's pods: the job would run no trainer. The third yield is refused.
    job = _Job(replicas=4, least=1)
    assert job.on_pod(_victim(0)) and job.replicas == 3
    assert job.on_pod(_victim(2)) and job.replicas == 2
    assert not job.on_pod(_victim(1)) and job.replicas == 2
    assert job.yielded == 2
    # a victim above every index kept is still given up
    job = _Job(replicas=4, least=1)
    assert job.on_pod(_victim(3)) and job.on_pod(_victim(2)) and job.replicas == 2


def test_a_yield_to_kube_scheduler_goes_down_to_the_minimum_whatever_the_indices():
    # CI, 2026-12-04: three trainers, minimum one; kube-scheduler's tenant needed the room
    # of two. It took trainers 0 and 2; refusing the second yield (as for reclaim) kept
    # index 0, which Volcano re-placed ahead of the tenant (it does not see kube-scheduler's
    # nominated pod) twice in 120 s: the tenant never ran. Lowering to one deletes trainer
    # 1 and recreates trainer 0 in the room the tenant leaves.
    job = _Job(replicas=3, least=1)
    assert job.on_pod(_victim(0, VICTIM)) and job.replicas == 2
    assert job.on_pod(_victim(2, VICTIM)) and job.replicas == 1
    # trainer 0 recreated and taken again: the job is at its minimum
    assert not job.on_pod(_victim(0, VICTIM, uid="u0-again")) and job.replicas == 1
    assert job.yielded == 2


def test_task_index_of_a_pod_name():
    assert yielding.task_index("coupon-trainer-426988aa-trainer-3") == 3
    assert yielding.task_index("job-trainer-x") is None and yielding.task_index(None) is None
