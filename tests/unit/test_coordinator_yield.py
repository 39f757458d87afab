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
