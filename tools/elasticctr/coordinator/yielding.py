"""Room for preemptors and reclaimers: the coordinator lowers its job's trainer count.

Trainers borrow idle capacity at the lowest priority, so a pod of kube-scheduler (the
default scheduler) with a higher priority preempts them, and Volcano's `reclaim` action
evicts them when another team's queue takes back its guaranteed share. But Volcano's job
controller recreates an evicted trainer at once, and the scheduler binds it into the
freed room again: kube-scheduler's preemptor (Volcano does not see another scheduler's
nominated pod) or the other queue's pods lose the race, are evicted for again and again,
and may wait minutes or never run (docs/coordinator.md). ElasticDL's master answers by
changing its own worker count; so does the coordinator here:

- it watches its Volcano Job's trainer pods for victims: kube-scheduler marks each with
  the condition `DisruptionTarget` (reason `PreemptionByScheduler`) before deleting it;
  Volcano's reclaim sets `Ready=False` with reason `Evict` and the message "Pod is
  evicted, because of reclaim" (Volcano's preemption inside one queue is left alone:
  its preemptor is Volcano's own pod and binds first);
- for each victim it lowers the Job's trainer `replicas` by one (never below the task's
  `minAvailable`; for reclaim, not so far that the indices kept are all victims', which
  Volcano recreates and which then wait behind the reclaiming queue's pods): Volcano's job
  controller then deletes the trainer pods above that count instead of re-placing them,
  and the preemptor or the reclaiming queue's pods bind. A victim of kube-scheduler kept
  at its index would be re-placed ahead of the preemptor every time (the preemptor
  starves), so for those the count goes down regardless and the recreated victim runs in
  what room the preemptor leaves;
- `hold_seconds` after the last victim it sets `replicas` back to what it was: trainers
  that find no room wait Pending (their class never preempts, and a queue above its
  guaranteed share reclaims nothing) and borrow again once the room is idle. If someone
  else changed `replicas` meanwhile (`helm upgrade`), the coordinator leaves it as they
  set it. A coordinator that starts with fewer trainers than the release's maximum
  (ELASTICCTR_COORDINATOR_TRAINERS_FILE) restores them after a hold, so a restart during
  a hold loses nothing.

Only the coordinator's pod mounts a token (trainer.coordinator.yieldToKubeScheduler in
the chart: a Role to watch pods and get/patch this Job). An API failure is logged and
retried; training never stops for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from elasticctr import constants as C
from elasticctr.coordinator.server import trainer_bounds
from elasticctr.errors import EctlError
from elasticctr.kube_api import ApiError, InCluster

log = logging.getLogger(__name__)

PREEMPTION_REASON = "PreemptionByScheduler"
"""kube-scheduler's reason on a victim's DisruptionTarget condition (Kubernetes >= 1.26)."""
EVICT_REASON = "Evict"
RECLAIM_MESSAGE = "because of reclaim"
"""Volcano's evictor sets Ready=False, reason Evict, message "Pod is evicted, because of
<action>" before deleting a victim (pkg/scheduler/cache/cache.go, defaultEvictor)."""
LABEL_JOB = C.VOLCANO_JOB_LABEL
LABEL_TASK = C.VOLCANO_TASK_LABEL
TRAINER_TASK = "trainer"
JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/{name}"
RBAC_HINT = (
    "the coordinator's Role must allow list/watch on pods and get/patch on "
    "jobs.batch.volcano.sh (trainer.coordinator.yieldToKubeScheduler.enabled)"
)


def _condition(pod: dict[str, Any], kind: str, status: str, reason: str) -> dict | None:
    """`pod`'s condition of type `kind` with that status and reason, if it has one."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (cond.get("type"), cond.get("status"), cond.get("reason")) == (kind, status, reason):
            return cond
    return None


def preempted_by_kube_scheduler(pod: dict[str, Any]) -> bool:
    """Whether kube-scheduler marked `pod` as a victim of its preemption."""
    return _condition(pod, "DisruptionTarget", "True", PREEMPTION_REASON) is not None


def reclaimed_by_volcano(pod: dict[str, Any]) -> bool:
    """Whether Volcano's reclaim action evicted `pod` for another queue."""
    cond = _condition(pod, "Ready", "False", EVICT_REASON)
    return cond is not None and RECLAIM_MESSAGE in (cond.get("message") or "")


def victim_of(pod: dict[str, Any]) -> str | None:
    """Who takes `pod`'s room: "kube-scheduler", "reclaim" (another Volcano queue) or None."""
    if preempted_by_kube_scheduler(pod):
        return "kube-scheduler"
    if reclaimed_by_volcano(pod):
        return "reclaim"
    return None


def task_index(pod_name: str | None) -> int | None:
    """The task index of a Volcano Job pod (`<job>-<task>-<index>`), None if absent."""
    tail = (pod_name or "").rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else None


def read_max_trainers(path: str | None) -> int | None:
    """The release's trainer maximum from the scale file (the coordinator's /metrics reads
    the same file: server.trainer_bounds), if readable and not negative."""
    most = trainer_bounds(path)[1]
    return most if most is not None and most >= 0 else None


class Yielder:
    """Lowers and restores the trainer count of Volcano Job `job` (see the module)."""

    def __init__(
        self,
        kube: InCluster,
        job: str,
        hold_seconds: float,
        *,
        max_trainers: Callable[[], int | None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.kube = kube
        self.job = job
        self.hold_seconds = hold_seconds
        self.max_trainers = max_trainers
        self.clock = clock
        self.seen: set[str] = set()
        self.victim_indices: set[int] = set()
        """Task indices of this hold's victims: Volcano recreates each at its index."""
        self.lowered: int | None = None
        """The replicas this coordinator set (None: it changed nothing)."""
        self.restore_to: int | None = None
        self.last_victim = 0.0
        self.yielded = 0
        """Trainers given up so far (for the logs and the tests)."""
        self._lock = threading.Lock()

    @property
    def job_path(self) -> str:
        return JOBS.format(ns=self.kube.namespace, name=self.job)

    def _trainer_task(self) -> tuple[int, int, int]:
        """(index in spec.tasks, replicas, minAvailable) of the Job's trainer task."""
        job = self.kube.get(self.job_path, hint=RBAC_HINT)
        for i, task in enumerate((job.get("spec") or {}).get("tasks") or []):
            if task.get("name") == TRAINER_TASK:
                replicas = int(task.get("replicas") or 0)
                return i, replicas, int(task.get("minAvailable") or 0)
        raise EctlError(f"Volcano Job {self.job} has no task {TRAINER_TASK!r}")

    def _set_replicas(self, index: int, was: int, replicas: int) -> bool:
        """Patch the trainer task's replicas from `was` to `replicas`; False when the Job
        changed in between (the patch's test failed: someone else scaled it)."""
        ops = [
            {"op": "test", "path": f"/spec/tasks/{index}/name", "value": TRAINER_TASK},
            {"op": "test", "path": f"/spec/tasks/{index}/replicas", "value": was},
            {"op": "replace", "path": f"/spec/tasks/{index}/replicas", "value": replicas},
        ]
        try:
            self.kube.json_patch(self.job_path, ops, hint=RBAC_HINT)
        except ApiError as exc:
            if exc.status in (409, 422):  # a failed `test`: the Job moved on
                return False
            raise
        return True

    def start(self) -> None:
        """At the coordinator's start: fewer trainers than the release's maximum means an
        earlier coordinator yielded and stopped before restoring; restore after a hold."""
        most = self.max_trainers()
        if most is None:
            return
        _, replicas, _ = self._trainer_task()
        with self._lock:
            if replicas < most:
                self.lowered, self.restore_to = replicas, most
                self.last_victim = self.clock()
                log.info(
                    "yield: the job has %d of %d trainers (an earlier coordinator yielded); "
                    "restoring in %.0f s",
                    replicas,
                    most,
                    self.hold_seconds,
                )

    def on_pod(self, pod: dict[str, Any]) -> bool:
        """One trainer pod as the watch saw it; True if it was a new victim and the Job
        gave up one trainer for it."""
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or meta.get("name") or ""
        taker = victim_of(pod)
        if taker is None or uid in self.seen:
            return False
        self.seen.add(uid)
        with self._lock:
            self.last_victim = self.clock()
            if (victim_index := task_index(meta.get("name"))) is not None:
                self.victim_indices.add(victim_index)
            for _ in range(3):  # the Job may change between the read and the patch
                index, replicas, least = self._trainer_task()
                if replicas <= least:
                    log.info(
                        "yield: %s took %s; the job is at its minimum of %d trainers",
                        taker,
                        meta.get("name"),
                        least,
                    )
                    return False
                # Volcano keeps the pods of indices below the new count and recreates the
                # victims among them. Behind a reclaiming queue those wait for room: never
                # keep fewer than the minimum that are not victims (else the job may run no
                # trainer at all). Behind kube-scheduler's preemptor (which Volcano does
                # not see) a kept victim is re-placed first and the preemptor starves.
                kept = [i for i in range(replicas - 1) if i not in self.victim_indices]
                if taker == "reclaim" and len(kept) < least:
                    log.info(
                        "yield: %s took %s; %d trainers would leave only victims' indices "
                        "below the minimum of %d; kept",
                        taker,
                        meta.get("name"),
                        replicas - 1,
                        least,
                    )
                    return False
                if self._set_replicas(index, replicas, replicas - 1):
                    if self.lowered is None:
                        self.restore_to = replicas
                    self.lowered = replicas - 1
                    self.yielded += 1
                    log.info(
                        "yield: %s took %s; trainers %d -> %d for %.0f s so that its pods bind",
                        taker,
                        meta.get("name"),
                        replicas,
                        replicas - 1,
                        self.hold_seconds,
                    )
                    return True
            return False

    def tick(self) -> bool:
        """Restore the trainer count once the hold is over; True if it was restored."""
        with self._lock:
            if self.lowered is None or self.clock() - self.last_victim < self.hold_seconds:
                return False
            target = self.restore_to
            index, replicas, _ = self._trainer_task()
            lowered, self.lowered, self.restore_to = self.lowered, None, None
            self.victim_indices.clear()
            if replicas != lowered or target is None:
                log.info("yield: trainer count changed to %d by someone else; kept", replicas)
                return False
            if not self._set_replicas(index, replicas, target):
                log.info("yield: the job changed while restoring; kept as it is")
                return False
            log.info("yield: hold over; trainers %d -> %d", replicas, target)
            return True

    def _watch(self, stop: threading.Event) -> None:
        watch_trainer_pods(self.kube, self.job, self.on_pod, stop, "yield")

    def run(self, stop: threading.Event) -> None:
        """Watch in a thread, restore on time in this one; until `stop`."""
        try:
            self.start()
        except EctlError as exc:
            log.warning("yield: %s", exc)
        watcher = threading.Thread(target=self._watch, args=(stop,), daemon=True, name="yield")
        watcher.start()
        while not stop.wait(1.0):
            try:
                self.tick()
            except EctlError as exc:
                log.warning("yield: %s", exc)


def watch_trainer_pods(
    kube: InCluster,
    job: str,
    on_pod: Callable[[dict[str, Any]], Any],
    stop: threading.Event,
    what: str,
    hint: str = RBAC_HINT,
) -> None:
    """Feed `on_pod` every trainer pod of Volcano Job `job` (a list, then its watch),
    listing again after a lost watch; until `stop`. `what` prefixes the log lines, `hint`
    says which rights an API error may be about."""
    path = f"/api/v1/namespaces/{kube.namespace}/pods"
    selector = f"{LABEL_JOB}={job},{LABEL_TASK}={TRAINER_TASK}"
    failing = 0.0
    while not stop.is_set():
        try:
            listed = kube.get(path, {"labelSelector": selector}, hint=hint)
            for pod in listed.get("items") or []:
                on_pod(pod)
            version = (listed.get("metadata") or {}).get("resourceVersion", "")
            while not stop.is_set():
                params = {"labelSelector": selector, "resourceVersion": version}
                for event in kube.watch(path, params, stop, hint=hint):
                    obj = event.get("object") or {}
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        on_pod(obj)
                failing = 0.0
        except EctlError as exc:  # API errors, a lost connection, 410 Gone: list again
            failing = min(30.0, failing * 2 or 1.0)
            log.warning("%s: %s; again in %.0f s", what, exc, failing)
            stop.wait(failing)


def from_env(env: dict[str, str], trainers_file: str | None) -> Yielder | None:
    """The Yielder the chart asks for (ELASTICCTR_COORDINATOR_YIELD_JOB, _HOLD_SECONDS), or None."""
    job = (env.get(C.ENV_COORDINATOR_YIELD_JOB) or "").strip()
    if not job:
        return None
    raw = env.get(C.ENV_COORDINATOR_YIELD_HOLD_SECONDS) or str(C.DEFAULT_YIELD_HOLD_SECONDS)
    try:
        hold = float(raw)
    except ValueError:
        raise EctlError(
            f"{C.ENV_COORDINATOR_YIELD_HOLD_SECONDS}={raw!r} is not a number of seconds"
        ) from None
    kube = InCluster(purpose=f"yielding trainers of Volcano Job {job}")
    return Yielder(kube, job, hold, max_trainers=lambda: read_max_trainers(trainers_file))
