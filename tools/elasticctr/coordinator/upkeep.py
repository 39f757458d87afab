"""Months-long jobs: the coordinator gives spent retries back and replaces evicted trainers.

A streaming job runs for months, and routine events restart it: a node drain, an eviction
or a crash of a pserver or the coordinator makes Volcano restart the whole job from the
checkpoint (the chart's `RestartJob` policy). Volcano counts every such restart in the
Job's `status.retryCount` and fails the job once it reaches `spec.maxRetry`, for good: it
has no window or decay (v1.12.4, pkg/controllers/job/state/restarting.go), and no policy
says "restart, but do not count it". So a job with `maxRetry` 5 would die after five
drains over any number of months. Two things keep it alive:

- **Retry budget.** Once the job has been `Running` and healthy (the restarted job has
  loaded its checkpoint) for `recovery_seconds` without a restart, the coordinator sets
  `status.retryCount` back to 0 through the Job's status subresource, with a JSON patch
  whose `test` operations make it conditional on the count and the phase it read: a
  restart in between wins. Volcano's job controller reads the count from its informer's
  cache and writes the status with optimistic concurrency, so it never writes an older
  count back. `maxRetry` then bounds restarts *in a row* (a crash loop: each restart
  within `recovery_seconds` of the previous one's start), as Kubernetes' CrashLoopBackOff
  resets after ten minutes of running. What was given back is added up in the Job's
  annotation `elasticctr/retries-recovered`, so the restarts stay countable.
  Every restart starts a new coordinator (RestartJob kills every pod), so the healthy
  period is measured from this process's first sight of the job Running.
- **Evicted trainers.** A trainer the kubelet evicts under node pressure (or ends at a
  node shutdown) keeps its pod, phase `Failed`; the trainer task has no PodFailed policy
  (one that restarts spends a retry), so Volcano leaves it there and the job trains with
  a trainer less until someone deletes it. The coordinator watches the job's trainer pods
  and deletes such a pod (precondition: its uid) while the job is Running or Pending;
  Volcano then recreates it like any deleted trainer, without a retry. Trainers run with
  `restartPolicy: OnFailure`, so a trainer pod is `Failed` only by the kubelet's doing
  (eviction, node shutdown, admission refusal), never by its own exit. A pod that fails
  again and again is deleted with a growing pause (10 s doubling up to 10 min).

Rights (the chart's Role, only with these features on): get/patch the Job and patch its
`status`, list/watch/delete pods. An API failure is logged and retried; training never
waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from elasticctr import constants as C
from elasticctr.coordinator.yielding import JOBS, watch_trainer_pods
from elasticctr.errors import EctlError
from elasticctr.kube_api import ApiError, InCluster

log = logging.getLogger(__name__)

ANNOTATION_RECOVERED = "elasticctr/retries-recovered"
"""Retries the coordinators of this Job gave back in all (a Job annotation)."""
RUNNING = "Running"
REPLACE_PHASES = ("Running", "Pending")
"""Job phases in which a Failed trainer is deleted: in the others Volcano is killing the job
(Restarting, Aborting, Terminating, Completing) or keeps its Failed pods to look at."""
BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 600.0
RBAC_HINT = (
    "the coordinator's Role must allow get/patch on jobs.batch.volcano.sh, patch on "
    "jobs/status and list/watch/delete on pods (trainer.volcano.retryRecoverySeconds, "
    "trainer.coordinator.replaceEvictedTrainers)"
)


def kubelet_failed(pod: dict[str, Any]) -> str | None:
    """Why `pod` is Failed and kept (its status reason, e.g. "Evicted"), or None when it is
    not Failed or is being deleted anyway."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if status.get("phase") != "Failed" or meta.get("deletionTimestamp"):
        return None
    return status.get("reason") or "Failed"


def _escape(key: str) -> str:
    """`key` as one JSON-pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


class Upkeep:
    """Gives Volcano Job `job` its spent retries back after `recovery_seconds` of health
    (0: never) and deletes its kubelet-failed trainers (`replace_evicted`); see the module."""

    def __init__(
        self,
        kube: InCluster,
        job: str,
        *,
        recovery_seconds: float,
        replace_evicted: bool,
        healthy: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.kube = kube
        self.job = job
        self.recovery_seconds = recovery_seconds
        self.replace_evicted = replace_evicted
        self.healthy = healthy
        self.clock = clock
        self.healthy_since: float | None = None
        self.recovered = 0
        """Retries this coordinator gave back."""
        self.replaced: list[str] = []
        """Trainer pods this coordinator deleted, in order."""
        self._failed: dict[str, dict[str, Any]] = {}
        self._deleted: dict[str, tuple[int, float]] = {}  # name -> (deletions, last)
        self._lock = threading.Lock()

    @property
    def job_path(self) -> str:
        return JOBS.format(ns=self.kube.namespace, name=self.job)

    def _get_job(self) -> dict[str, Any]:
        return self.kube.get(self.job_path, hint=RBAC_HINT)

    # -- retry budget ------------------------------------------------------------------
    def check_retries(self) -> bool:
        """One look at the Job; True if its retryCount was set back to 0 now."""
        if self.recovery_seconds <= 0:
            return False
        job = self._get_job()
        status = job.get("status") or {}
        phase = (status.get("state") or {}).get("phase")
        count = int(status.get("retryCount") or 0)
        now = self.clock()
        if phase != RUNNING or not self.healthy():
            if self.healthy_since is not None:
                log.info("retries: the job is %s; the healthy period starts again", phase)
            self.healthy_since = None
            return False
        if self.healthy_since is None:
            self.healthy_since = now
            if count:
                log.info(
                    "retries: the job is Running after %d restart(s) of maxRetry %s; "
                    "giving them back after %.0f s of health",
                    count,
                    (job.get("spec") or {}).get("maxRetry"),
                    self.recovery_seconds,
                )
        if count == 0 or now - self.healthy_since < self.recovery_seconds:
            return False
        ops = [
            {"op": "test", "path": "/status/retryCount", "value": count},
            {"op": "test", "path": "/status/state/phase", "value": RUNNING},
            {"op": "replace", "path": "/status/retryCount", "value": 0},
        ]
        try:
            self.kube.json_patch(self.job_path + "/status", ops, hint=RBAC_HINT)
        except ApiError as exc:
            if exc.status in (409, 422):  # a failed `test`: the job restarted meanwhile
                log.info("retries: the job changed while giving retries back; looking again")
                return False
            raise
        self.recovered += count
        total = self._annotate(job, count)
        log.info(
            "retries: the job ran healthy for %.0f s; retryCount %d -> 0 of maxRetry %s "
            "(%d given back in all)",
            now - self.healthy_since,
            count,
            (job.get("spec") or {}).get("maxRetry"),
            total,
        )
        return True

    def _annotate(self, job: dict[str, Any], count: int) -> int:
        """Add `count` to the Job's ANNOTATION_RECOVERED; the new total (best effort)."""
        annotations = (job.get("metadata") or {}).get("annotations")
        try:
            total = int((annotations or {}).get(ANNOTATION_RECOVERED) or 0) + count
        except ValueError:
            total = count
        path = f"/metadata/annotations/{_escape(ANNOTATION_RECOVERED)}"
        ops = [{"op": "add", "path": path, "value": str(total)}]
        if annotations is None:
            ops.insert(0, {"op": "add", "path": "/metadata/annotations", "value": {}})
        try:
            self.kube.json_patch(self.job_path, ops, hint=RBAC_HINT)
        except EctlError as exc:
            log.warning("retries: could not record the total in %s: %s", ANNOTATION_RECOVERED, exc)
        return total

    # -- evicted trainers --------------------------------------------------------------
    def on_pod(self, pod: dict[str, Any]) -> None:
        """One trainer pod as the watch saw it: remember it if the kubelet failed it."""
        if not self.replace_evicted:
            return
        meta = pod.get("metadata") or {}
        name = meta.get("name") or ""
        with self._lock:
            if kubelet_failed(pod) is not None:
                self._failed[name] = pod
            else:  # being deleted, gone, or a new pod of that name
                self._failed.pop(name, None)

    def replace_failed(self) -> list[str]:
        """Delete the remembered Failed trainers whose pause is over while the job runs;
        the names deleted now."""
        now = self.clock()
        with self._lock:
            due = []
            for name, pod in self._failed.items():
                times, last = self._deleted.get(name, (0, -MAX_BACKOFF_SECONDS))
                if now - last > 2 * MAX_BACKOFF_SECONDS:
                    times = 0  # long enough ago: a new incident, not a loop
                pause = min(MAX_BACKOFF_SECONDS, BACKOFF_SECONDS * 2 ** (times - 1)) if times else 0
                if now - last >= pause:
                    due.append((name, pod, times))
        if not due:
            return []
        phase = ((self._get_job().get("status") or {}).get("state") or {}).get("phase")
        if phase not in REPLACE_PHASES:
            return []
        deleted = []
        for name, pod, times in due:
            meta = pod.get("metadata") or {}
            body = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "preconditions": {"uid": meta.get("uid")},
            }
            path = f"/api/v1/namespaces/{self.kube.namespace}/pods/{name}"
            try:
                self.kube.request(
                    "DELETE", path, body=body, content_type="application/json", hint=RBAC_HINT
                )
            except ApiError as exc:
                if exc.status not in (404, 409):  # 404 gone, 409 another pod of that name
                    raise
                with self._lock:
                    self._failed.pop(name, None)
                continue
            with self._lock:
                if (self._failed.get(name, {}).get("metadata") or {}).get("uid") == meta.get("uid"):
                    self._failed.pop(name, None)
                self._deleted[name] = (times + 1, now)
            self.replaced.append(name)
            deleted.append(name)
            log.info(
                "evicted: trainer pod %s was %s by the kubelet (%s); deleted it so that "
                "Volcano recreates it (no retry spent)",
                name,
                (pod.get("status") or {}).get("phase"),
                kubelet_failed(pod),
            )
        return deleted

    # -- loop --------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Watch the trainers in a thread (if asked), look at the Job every few seconds in
        this one; until `stop`."""
        if self.replace_evicted:
            threading.Thread(
                target=watch_trainer_pods,
                args=(self.kube, self.job, self.on_pod, stop, "evicted", RBAC_HINT),
                daemon=True,
                name="upkeep-watch",
            ).start()
        period = max(1.0, min(10.0, self.recovery_seconds / 4)) if self.recovery_seconds else 10
        next_look = 0.0
        failing = 0.0
        while not stop.wait(1.0):
            try:
                if self.recovery_seconds > 0 and self.clock() >= next_look:
                    next_look = self.clock() + period
                    self.check_retries()
                if self.replace_evicted:
                    self.replace_failed()
                failing = 0.0
            except EctlError as exc:
                failing = min(30.0, failing * 2 or 1.0)
                log.warning("upkeep: %s; again in %.0f s", exc, failing)
                stop.wait(failing)


def from_env(env: dict[str, str], healthy: Callable[[], bool] = lambda: True) -> Upkeep | None:
    """The Upkeep the chart asks for (ELASTICCTR_COORDINATOR_JOB, _RETRY_RECOVERY_SECONDS,
    _REPLACE_EVICTED_TRAINERS), or None when it asks for nothing."""
    job = (env.get(C.ENV_COORDINATOR_JOB) or "").strip()
    raw = (env.get(C.ENV_COORDINATOR_RETRY_RECOVERY_SECONDS) or "0").strip()
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        raise EctlError(
            f"{C.ENV_COORDINATOR_RETRY_RECOVERY_SECONDS}={raw!r} is not a number of seconds >= 0"
        )
    replace = (env.get(C.ENV_COORDINATOR_REPLACE_EVICTED) or "").strip().lower() in ("1", "true")
    if not job or (seconds == 0 and not replace):
        return None
    kube = InCluster(purpose=f"upkeep of Volcano Job {job}")
    return Upkeep(kube, job, recovery_seconds=seconds, replace_evicted=replace, healthy=healthy)
