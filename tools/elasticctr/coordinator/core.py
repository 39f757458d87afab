"""The coordinator's state machine, independent of transport (HTTP lives in server.py).

Semantics (docs/coordinator.md):
- A task leaves the queue only when a trainer reports it done; an expired or abandoned
  lease puts it back, so only a task whose trainer died mid-way is trained twice.
- Completions are recorded durably (atomic write of the whole state) before they are
  acknowledged, so a restarted coordinator resumes at the first unfinished task.
- When every task of a partition is done, exactly one trainer (the chief: the lowest
  live trainer id) is asked to export it; the export is recorded when confirmed.
- A checkpoint export drains first: no new task is leased until it is confirmed, and
  it is handed out only once no lease is outstanding, so the pservers' dump contains
  exactly the done tasks of the snapshot that travels with it (`state` in the answer;
  the chief stores it in the checkpoint).
- A job restarted from a checkpoint starts from that snapshot with a pending `load`:
  one trainer loads the checkpoint into the (fresh) pservers, nobody trains before.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from elasticctr import constants as C
from elasticctr.errors import EctlError

log = logging.getLogger(__name__)

STATE_VERSION = 1
CHECKPOINT_STATE = "coordinator.json"
"""The coordinator's snapshot inside a checkpoint's `ps/` folder, beside the tables."""


@dataclass(frozen=True)
class PartitionSpec:
    """A ready partition: id `YYYYMMDD/HH` and its data files with sizes in bytes."""

    partition: str
    files: tuple[tuple[str, int], ...]


@dataclass
class Task:
    id: str
    partition: str
    url: str
    start: int
    end: int  # byte range [start, end): a reader starts at the first line beginning >= start
    attempts: int = 0
    size: int = -1  # the file's size when the partition was found (readers detect truncation)


@dataclass
class Lease:
    id: str
    task: Task
    trainer: str
    expires: float


@dataclass
class _Partition:
    id: str
    task_ids: list[str]
    done: set[str] = field(default_factory=set)
    samples: int = 0
    exported: bool = False
    export_leased_to: str | None = None
    checkpoint: bool = False
    found_at: float | None = None
    """Wall-clock time the partition was added (its data found complete), Unix time."""
    trained_at: float | None = None
    """Wall-clock time its last task was done; None when that was before a restart."""


def split_tasks(spec: PartitionSpec, task_bytes: int) -> list[Task]:
    """One task per file, or several byte ranges for files larger than `task_bytes`."""
    tasks: list[Task] = []
    for index, (url, size) in enumerate(spec.files):
        if size <= 0:
            continue
        step = max(task_bytes, 1)
        for chunk, start in enumerate(range(0, size, step)):
            end = min(start + step, size)
            task_id = f"{spec.partition}#{index}.{chunk}"
            tasks.append(Task(task_id, spec.partition, url, start, end, size=size))
    return tasks


class Coordinator:
    """Thread-safe; `save` persists the state (called before acknowledging progress)."""

    def __init__(
        self,
        *,
        lease_seconds: float = C.DEFAULT_COORDINATOR_LEASE_SECONDS,
        task_bytes: int = C.DEFAULT_COORDINATOR_TASK_MIB << 20,
        window: int = C.DEFAULT_COORDINATOR_WINDOW,
        checkpoint_every: int = C.DEFAULT_COORDINATOR_CHECKPOINT_EVERY,
        save: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], float] = time.time,
        on_exported: Callable[[str], None] | None = None,
    ):
        """`on_exported(partition)`: called, outside the lock, once an export is recorded
        (the runtime tells cube-transfer, so the hand-off does not wait for its poll)."""
        if lease_seconds <= 0 or task_bytes <= 0 or window <= 0 or checkpoint_every <= 0:
            raise EctlError("coordinator settings must be positive")
        self.lease_seconds = lease_seconds
        self.task_bytes = task_bytes
        self.window = window
        self.checkpoint_every = checkpoint_every
        self._save = save
        self._clock = clock
        self._wallclock = wallclock
        self._on_exported = on_exported
        self._lock = threading.RLock()
        self._partitions: dict[str, _Partition] = {}
        self._order: list[str] = []
        self._tasks: dict[str, Task] = {}
        self._pending: list[str] = []
        self._leases: dict[str, Lease] = {}
        self._done_log: dict[str, dict] = {}
        self._failures: list[str] = []  # reasons of tasks given back (`fail`), oldest first
        self._trainers: dict[str, dict] = {}
        self._input_closed = False
        self._exports_since_checkpoint = 0
        self._restored_exports: set[str] = set()
        self._load: str | None = None  # checkpoint version the pservers must load first
        self._load_leased_to: str | None = None

    @property
    def load_pending(self) -> str | None:
        """The checkpoint version the (restarted) pservers must load before training, or
        None once it is loaded (or there is none)."""
        with self._lock:
            return self._load

    # -- input -----------------------------------------------------------------------
    def add_partition(self, spec: PartitionSpec) -> bool:
        """Queue a ready partition; False if it is already known (restart, rediscovery)."""
        with self._lock:
            if spec.partition in self._partitions:
                return False
            if self._order and spec.partition < self._order[-1]:
                raise EctlError(
                    f"partition {spec.partition} arrived after {self._order[-1]}; "
                    "partitions must be added in time order"
                )
            tasks = split_tasks(spec, self.task_bytes)
            # Exported before a restart: stays exported (restore() loaded the record).
            part = _Partition(
                spec.partition,
                [t.id for t in tasks],
                exported=spec.partition in self._restored_exports,
                found_at=self._wallclock(),
            )
            self._partitions[spec.partition] = part
            self._order.append(spec.partition)
            for task in tasks:
                self._tasks[task.id] = task
                if task.id in self._done_log:
                    part.done.add(task.id)
                    part.samples += self._done_log[task.id]["samples"]
                else:
                    self._pending.append(task.id)
            self._persist()
            return True

    def close_input(self) -> None:
        """No more partitions will come (the end of the date range was reached)."""
        with self._lock:
            self._input_closed = True
            self._persist()

    # -- trainer API -----------------------------------------------------------------
    def lease(self, trainer: str) -> dict:
        """Next thing for `trainer` to do: load, export, task, wait or finished."""
        with self._lock:
            now = self._clock()
            self._touch(trainer, now)
            self._expire(now)
            # A trainer asks for work only once it holds no task (it completes or drops
            # one first), so a lease it still holds belongs to an attempt that is gone:
            # the trainer's process restarted after a crash (a container restarted in
            # place), or the answer to a retried request was lost. Re-queue it now
            # instead of after the lease period.
            self._requeue_leases_of(trainer)
            if self._load is not None:
                if self._load_leased_to in (None, trainer) or (
                    self._load_leased_to not in self._trainers
                ):
                    self._load_leased_to = trainer
                    return {"kind": "load", "version": self._load}
                return self._wait()
            export = self._export_for(trainer)
            if export is not None:
                return export
            task = None if self._draining() else self._next_task()
            if task is not None:
                task.attempts += 1
                lease = Lease(uuid.uuid4().hex, task, trainer, now + self.lease_seconds)
                self._leases[lease.id] = lease
                return {
                    "kind": "task",
                    "lease": lease.id,
                    "lease_seconds": self.lease_seconds,
                    "task": asdict(task),
                }
            if self.finished():
                return {"kind": "finished"}
            return self._wait()

    def loaded(self, trainer: str, version: str) -> None:
        """The pservers hold the checkpoint `version` now: training may start."""
        with self._lock:
            self._touch(trainer, self._clock())
            if self._load is None:
                return  # a repeated confirmation
            if version != self._load:
                raise EctlError(f"loaded checkpoint {version}, but {self._load} is required")
            self._load = self._load_leased_to = None
            self._persist()

    def heartbeat(self, lease_id: str, trainer: str) -> bool:
        """Extend a lease; False if it is gone (expired and re-queued): stop that task."""
        with self._lock:
            now = self._clock()
            self._touch(trainer, now)
            lease = self._leases.get(lease_id)
            if lease is None or lease.trainer != trainer:
                return False
            lease.expires = now + self.lease_seconds
            return True

    def complete(self, lease_id: str, trainer: str, samples: int) -> dict:
        """Record a finished task durably. A stale lease whose task is done elsewhere is
        acknowledged as a duplicate (its samples are not counted twice)."""
        if samples < 0:
            raise EctlError("samples must be >= 0")
        with self._lock:
            now = self._clock()
            self._touch(trainer, now)
            lease = self._leases.pop(lease_id, None)
            if lease is None:
                return {"accepted": False, "reason": "unknown or expired lease"}
            task = lease.task
            if task.id in self._done_log:
                return {"accepted": False, "reason": "task already done"}
            self._done_log[task.id] = {
                "samples": samples,
                "trainer": trainer,
                "attempts": task.attempts,
            }
            part = self._partitions[task.partition]
            part.done.add(task.id)
            part.samples += samples
            if len(part.done) == len(part.task_ids):
                part.trained_at = self._wallclock()
            info = self._trainers[trainer]
            info["samples"] += samples
            info["tasks"] += 1
            self._persist()
            return {"accepted": True, "partition_done": len(part.done) == len(part.task_ids)}

    def fail(self, lease_id: str, trainer: str, reason: str) -> None:
        """The trainer gives the task back (e.g. it is shutting down, or a read failed)."""
        with self._lock:
            lease = self._leases.pop(lease_id, None)
            if lease is not None and lease.task.id not in self._done_log:
                self._pending.insert(0, lease.task.id)
                self._trainers.get(trainer, {}).setdefault("failures", []).append(reason[:500])
                self._failures.append(f"trainer {trainer}: {reason[:500]}")

    def leave(self, trainer: str) -> int:
        """A trainer leaves (preemption notice): re-queue its leases and drop it as `_expire`
        drops a silent one (releasing an export it had claimed); returns how many leases."""
        with self._lock:
            requeued = self._requeue_leases_of(trainer)
            self._drop_trainer(trainer)
            return requeued

    def _requeue_leases_of(self, trainer: str) -> int:
        mine = [lid for lid, lease in self._leases.items() if lease.trainer == trainer]
        for lid in mine:
            lease = self._leases.pop(lid)
            if lease.task.id not in self._done_log:
                self._pending.insert(0, lease.task.id)
        return len(mine)

    def exported(self, partition: str, trainer: str, version: str, checkpoint: bool) -> None:
        with self._lock:
            part = self._partitions.get(partition)
            if part is None:
                raise EctlError(f"unknown partition {partition}")
            if len(part.done) != len(part.task_ids):
                raise EctlError(f"partition {partition} is not complete; refusing export record")
            part.exported = True
            part.export_leased_to = None
            info = self._trainers.setdefault(trainer, _new_trainer(self._clock()))
            info.pop("export_partition", None)
            if checkpoint:
                self._exports_since_checkpoint = 0
            self._persist()
        if self._on_exported is not None:
            try:
                self._on_exported(partition)
            except Exception:  # noqa: BLE001 - a hand-off hint never fails the record
                log.exception("on_exported(%s) failed", partition)

    # -- internals -------------------------------------------------------------------
    def _touch(self, trainer: str, now: float) -> None:
        info = self._trainers.setdefault(trainer, _new_trainer(now))
        info["last_seen"] = now

    def _expire(self, now: float) -> None:
        for lid, lease in list(self._leases.items()):
            if lease.expires <= now:
                del self._leases[lid]
                if lease.task.id not in self._done_log:
                    self._pending.insert(0, lease.task.id)
        # A trainer silent for a whole lease period is gone: drop it (so it cannot stay
        # chief) and release an export it had claimed.
        for name, info in list(self._trainers.items()):
            if now - info["last_seen"] > self.lease_seconds:
                self._drop_trainer(name)

    def _drop_trainer(self, name: str) -> None:
        """Forget a trainer that is gone (so it cannot stay chief) and release an export it
        had claimed: the next chief gets it on its next request."""
        info = self._trainers.pop(name, None) or {}
        pid = info.get("export_partition")
        if pid is not None and self._partitions[pid].export_leased_to == name:
            self._partitions[pid].export_leased_to = None

    def _active_window(self) -> list[str]:
        unfinished = [
            p
            for p in self._order
            if len(self._partitions[p].done) < len(self._partitions[p].task_ids)
        ]
        return unfinished[: self.window]

    def _next_task(self) -> Task | None:
        allowed = set(self._active_window())
        for index, tid in enumerate(self._pending):
            if self._tasks[tid].partition in allowed:
                del self._pending[index]
                return self._tasks[tid]
        return None

    def _next_export(self) -> _Partition | None:
        """The oldest complete, unexported partition, if it is next in time order."""
        for pid in self._order:
            part = self._partitions[pid]
            if part.exported:
                continue
            return part if len(part.done) == len(part.task_ids) else None
        return None

    def _checkpoint_due(self) -> bool:
        return self._exports_since_checkpoint + 1 >= self.checkpoint_every

    def _wait(self) -> dict:
        return {"kind": "wait", "seconds": min(C.COORDINATOR_WAIT_SECONDS, self.lease_seconds / 4)}

    def _draining(self) -> bool:
        """A checkpoint export is next: lease no new task until it is confirmed."""
        part = self._next_export()
        if part is None:
            return False
        return part.checkpoint if part.export_leased_to is not None else self._checkpoint_due()

    def _export_for(self, trainer: str) -> dict | None:
        """The oldest complete, unexported partition goes to the chief trainer, in order."""
        part = self._next_export()
        if part is None:
            return None
        if part.export_leased_to == trainer:
            # Asked again before confirming (e.g. the trainer restarted): same answer.
            return self._export_answer(part)
        live = sorted(self._trainers, key=_trainer_sort_key)
        chief = live[0] if live else trainer
        if part.export_leased_to is not None or chief != trainer:
            return None
        checkpoint = self._checkpoint_due()
        if checkpoint and self._leases:
            return None  # draining: the dump must not contain half-trained tasks
        part.export_leased_to = trainer
        self._trainers[trainer]["export_partition"] = part.id
        self._exports_since_checkpoint += 1
        part.checkpoint = checkpoint
        return self._export_answer(part)

    def _export_answer(self, part: _Partition) -> dict:
        answer = {"kind": "export", "partition": part.id, "checkpoint": part.checkpoint}
        # When its data was found and trained, for the version's manifest (`timeline`):
        # serving measures the hand-off to the moment it serves the version from them.
        timeline = {"data_found_at": part.found_at, "trained_at": part.trained_at}
        answer["timeline"] = {k: v for k, v in timeline.items() if v is not None}
        if part.checkpoint:
            # What the checkpoint holds: every done task, this partition exported.
            answer["state"] = self._snapshot(checkpoint=part.id)
        return answer

    def finished(self) -> bool:
        with self._lock:
            return (
                self._input_closed
                and self._load is None
                and not self._pending
                and not self._leases
                and all(self._partitions[p].exported for p in self._order)
            )

    # -- progress and persistence ----------------------------------------------------
    def progress(self) -> dict:
        with self._lock:
            now = self._clock()
            parts = []
            for pid in self._order:
                part = self._partitions[pid]
                leased = sum(1 for lease in self._leases.values() if lease.task.partition == pid)
                parts.append(
                    {
                        "partition": pid,
                        "tasks": len(part.task_ids),
                        "done": len(part.done),
                        "leased": leased,
                        "pending": len(part.task_ids) - len(part.done) - leased,
                        "samples": part.samples,
                        "exported": part.exported,
                    }
                )
            trainers = {
                name: {
                    "samples": info["samples"],
                    "tasks": info["tasks"],
                    "samples_per_s": info["samples"] / max(now - info["first_seen"], 1e-6),
                    "last_seen_s_ago": now - info["last_seen"],
                    "leased": sorted(
                        lease.task.id for lease in self._leases.values() if lease.trainer == name
                    ),
                }
                for name, info in self._trainers.items()
            }
            retried = sum(1 for d in self._done_log.values() if d["attempts"] > 1)
            return {
                "partitions": parts,
                "tasks_done": len(self._done_log),
                "tasks_leased": len(self._leases),
                "tasks_pending": len(self._pending),
                "tasks_retried": retried,
                "tasks_failed": len(self._failures),  # given back by a trainer with a reason
                "last_failure": self._failures[-1] if self._failures else None,
                "samples": sum(d["samples"] for d in self._done_log.values()),
                "trainers": trainers,
                "input_closed": self._input_closed,
                "load_pending": self._load,
                "draining": self._draining(),
                "finished": self.finished(),
            }

    def snapshot(self) -> str:
        """The durable state: done tasks and exported partitions (leases are not kept)."""
        with self._lock:
            return self._snapshot()

    def _snapshot(self, checkpoint: str | None = None) -> str:
        """`checkpoint`: the state a checkpoint of that partition holds (it counts as
        exported; the job restarted from it has to load it first)."""
        exported = [p for p in self._order if self._partitions[p].exported or p == checkpoint]
        state = {
            "state_version": STATE_VERSION,
            "done": self._done_log,
            "exported": exported,
            "input_closed": self._input_closed,
            "load": self._load,
        }
        if checkpoint is not None:
            state["checkpoint"] = checkpoint
        return json.dumps(state, sort_keys=True)

    def restore(self, text: str) -> None:
        """Load a snapshot before partitions are re-added (done tasks are then skipped)."""
        state = parse_state(text)
        with self._lock:
            self._done_log = dict(state["done"])
            self._restored_exports = set(state["exported"])
            self._input_closed = False  # the discovery loop closes it again if so
            self._load = state.get("load")

    def _persist(self) -> None:
        if self._save is not None:
            self._save(self.snapshot())


def parse_state(text: str) -> dict:
    """A snapshot's JSON, checked: a clear error for a corrupted or foreign file."""
    try:
        state = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EctlError(f"coordinator state is not valid JSON: {exc}") from exc
    if not isinstance(state, dict) or state.get("state_version") != STATE_VERSION:
        version = state.get("state_version") if isinstance(state, dict) else None
        raise EctlError(f"coordinator state version {version} unsupported")
    if not isinstance(state.get("done"), dict) or not isinstance(state.get("exported"), list):
        raise EctlError("coordinator state lacks 'done' or 'exported'")
    return state


def progress_from_state(text: str) -> dict:
    """What `Coordinator.progress()` says, as far as the durable state holds it: for a job
    whose coordinator is gone (completed, or between restarts). No leases, no trainers'
    rates; partitions are those with a done task or an export."""
    state = parse_state(text)
    parts: dict[str, dict] = {}
    for task_id, done in state["done"].items():
        part = parts.setdefault(
            task_id.split("#", 1)[0], {"done": 0, "samples": 0, "exported": False}
        )
        part["done"] += 1
        part["samples"] += int(done.get("samples", 0))
    for pid in state["exported"]:
        parts.setdefault(pid, {"done": 0, "samples": 0, "exported": False})["exported"] = True
    return {
        "partitions": [{"partition": pid, **parts[pid]} for pid in sorted(parts)],
        "tasks_done": len(state["done"]),
        "tasks_leased": 0,
        "tasks_pending": 0,
        "tasks_retried": sum(1 for d in state["done"].values() if d.get("attempts", 1) > 1),
        "samples": sum(int(d.get("samples", 0)) for d in state["done"].values()),
        "trainers": {},
        "input_closed": bool(state.get("input_closed")),
        "stored": True,
    }


def state_for_restart(checkpoint_state: str | None) -> str:
    """The state a job restarted from a checkpoint starts with: the checkpoint's own
    snapshot plus a pending load of it, or an empty state when there is no checkpoint
    (the pservers are fresh: nothing trained before survives)."""
    if checkpoint_state is None:
        return json.dumps(
            {"state_version": STATE_VERSION, "done": {}, "exported": [], "input_closed": False}
        )
    state = parse_state(checkpoint_state)
    if not isinstance(state.get("checkpoint"), str):
        raise EctlError("the checkpoint's coordinator state does not name its checkpoint")
    state["load"] = state["checkpoint"]
    return json.dumps(state, sort_keys=True)


def _new_trainer(now: float) -> dict:
    return {"first_seen": now, "last_seen": now, "samples": 0, "tasks": 0}


def _trainer_sort_key(name: str):
    return (0, int(name)) if name.isdigit() else (1, name)
