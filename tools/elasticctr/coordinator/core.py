"""The coordinator's state machine, independent of transport (HTTP lives in server.py).

Semantics (docs/coordinator.md):
- A task leaves the queue only when a trainer reports it done; an expired or abandoned
  lease puts it back, so only a task whose trainer died mid-way is trained twice.
- Completions are recorded durably (atomic write of the whole state) before they are
  acknowledged, so a restarted coordinator resumes at the first unfinished task.
- When every task of a partition is done, exactly one trainer (the chief: the lowest
  live trainer id) is asked to export it; the export is recorded when confirmed.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from elasticctr.errors import EctlError

STATE_VERSION = 1


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


def split_tasks(spec: PartitionSpec, task_bytes: int) -> list[Task]:
    """One task per file, or several byte ranges for files larger than `task_bytes`."""
    tasks: list[Task] = []
    for index, (url, size) in enumerate(spec.files):
        if size <= 0:
            continue
        step = max(task_bytes, 1)
        for chunk, start in enumerate(range(0, size, step)):
            end = min(start + step, size)
            tasks.append(Task(f"{spec.partition}#{index}.{chunk}", spec.partition, url, start, end))
    return tasks


class Coordinator:
    """Thread-safe; `save` persists the state (called before acknowledging progress)."""

    def __init__(
        self,
        *,
        lease_seconds: float = 60.0,
        task_bytes: int = 64 << 20,
        window: int = 2,
        checkpoint_every: int = 1,
        save: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if lease_seconds <= 0 or task_bytes <= 0 or window <= 0 or checkpoint_every <= 0:
            raise EctlError("coordinator settings must be positive")
        self.lease_seconds = lease_seconds
        self.task_bytes = task_bytes
        self.window = window
        self.checkpoint_every = checkpoint_every
        self._save = save
        self._clock = clock
        self._lock = threading.RLock()
        self._partitions: dict[str, _Partition] = {}
        self._order: list[str] = []
        self._tasks: dict[str, Task] = {}
        self._pending: list[str] = []
        self._leases: dict[str, Lease] = {}
        self._done_log: dict[str, dict] = {}
        self._trainers: dict[str, dict] = {}
        self._input_closed = False
        self._exports_since_checkpoint = 0
        self._restored_exports: set[str] = set()

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
        """Next thing for `trainer` to do: export, task, wait or finished."""
        with self._lock:
            now = self._clock()
            self._touch(trainer, now)
            self._expire(now)
            export = self._export_for(trainer)
            if export is not None:
                return export
            task = self._next_task()
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
            return {"kind": "wait", "seconds": min(5.0, self.lease_seconds / 4)}

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

    def leave(self, trainer: str) -> int:
        """A trainer leaves (preemption notice): re-queue its leases; returns how many."""
        with self._lock:
            mine = [lid for lid, lease in self._leases.items() if lease.trainer == trainer]
            for lid in mine:
                lease = self._leases.pop(lid)
                if lease.task.id not in self._done_log:
                    self._pending.insert(0, lease.task.id)
            self._trainers.pop(trainer, None)
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
                pid = info.get("export_partition")
                if pid is not None and self._partitions[pid].export_leased_to == name:
                    self._partitions[pid].export_leased_to = None
                del self._trainers[name]

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

    def _export_for(self, trainer: str) -> dict | None:
        """The oldest complete, unexported partition goes to the chief trainer, in order."""
        for pid in self._order:
            part = self._partitions[pid]
            if part.exported:
                continue
            if len(part.done) < len(part.task_ids):
                return None  # exports happen in time order
            if part.export_leased_to == trainer:
                # Asked again before confirming (e.g. the trainer restarted): same answer.
                return {"kind": "export", "partition": pid, "checkpoint": part.checkpoint}
            live = sorted(self._trainers, key=_trainer_sort_key)
            chief = live[0] if live else trainer
            if part.export_leased_to is not None or chief != trainer:
                return None
            part.export_leased_to = trainer
            self._trainers[trainer]["export_partition"] = pid
            self._exports_since_checkpoint += 1
            part.checkpoint = self._exports_since_checkpoint >= self.checkpoint_every
            return {"kind": "export", "partition": pid, "checkpoint": part.checkpoint}
        return None

    def finished(self) -> bool:
        with self._lock:
            return (
                self._input_closed
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
                "samples": sum(d["samples"] for d in self._done_log.values()),
                "trainers": trainers,
                "input_closed": self._input_closed,
                "finished": self.finished(),
            }

    def snapshot(self) -> str:
        """The durable state: done tasks and exported partitions (leases are not kept)."""
        with self._lock:
            return json.dumps(
                {
                    "state_version": STATE_VERSION,
                    "done": self._done_log,
                    "exported": [p for p in self._order if self._partitions[p].exported],
                    "input_closed": self._input_closed,
                },
                sort_keys=True,
            )

    def restore(self, text: str) -> None:
        """Load a snapshot before partitions are re-added (done tasks are then skipped)."""
        try:
            state = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EctlError(f"coordinator state is not valid JSON: {exc}") from exc
        if state.get("state_version") != STATE_VERSION:
            raise EctlError(f"coordinator state version {state.get('state_version')} unsupported")
        with self._lock:
            self._done_log = dict(state["done"])
            self._restored_exports = set(state["exported"])
            self._input_closed = False  # the discovery loop closes it again if so

    def _persist(self) -> None:
        if self._save is not None:
            self._save(self.snapshot())


def _new_trainer(now: float) -> dict:
    return {"first_seen": now, "last_seen": now, "samples": 0, "tasks": 0}


def _trainer_sort_key(name: str):
    return (0, int(name)) if name.isdigit() else (1, name)
