"""`ectl install/upgrade --wait` says which pods it is waiting for, and why: the reason
read from each pod's status (tools/elasticctr/cli/status.py `waiting_reason`)."""

from __future__ import annotations

import pytest
from kubernetes.client import (
    V1ContainerState,
    V1ContainerStateRunning,
    V1ContainerStateTerminated,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1Pod,
    V1PodCondition,
    V1PodStatus,
)

from elasticctr.cli.status import waiting_reason

pytestmark = pytest.mark.fast


def cs(name="main", ready=False, waiting=None, exit_code=None, restarts=0):
    if waiting:
        state = V1ContainerState(waiting=V1ContainerStateWaiting(reason=waiting))
    elif exit_code is not None:
        state = V1ContainerState(terminated=V1ContainerStateTerminated(exit_code=exit_code))
    else:
        state = V1ContainerState(running=V1ContainerStateRunning())
    return V1ContainerStatus(name=name, ready=ready, state=state, restart_count=restarts,
                             image="i", image_id="", )  # fmt: skip


def pod(phase="Running", containers=(), init=(), conditions=()):
    return V1Pod(status=V1PodStatus(phase=phase, container_statuses=list(containers) or None,
                                    init_container_statuses=list(init) or None,
                                    conditions=list(conditions) or None))  # fmt: skip


@pytest.mark.parametrize(
    "p, want",
    [
        (pod(containers=[cs(ready=True)]), None),
        (pod("Succeeded"), None),
        (pod("Pending", conditions=[V1PodCondition(type="PodScheduled", status="False",
         message="0/1 nodes are available: 1 Insufficient cpu.")]),
         "not scheduled: 0/1 nodes are available: 1 Insufficient cpu."),
        (pod("Pending", init=[cs("volume-permissions", waiting="PodInitializing")]),
         "init container volume-permissions: PodInitializing"),
        (pod("Pending", init=[cs("volume-permissions", exit_code=1)]),
         "init container volume-permissions exited 1"),
        (pod("Pending", containers=[cs("cube", waiting="ImagePullBackOff")]),
         "cube: ImagePullBackOff"),
        (pod(containers=[cs("transfer", restarts=2)]), "running, not ready (2 restarts)"),
        (pod(containers=[cs("serving")]), "running, not ready"),
        (pod("Pending"), "Pending"),
    ],
)  # fmt: skip
def test_waiting_reason(p, want):
    assert waiting_reason(p) == want
