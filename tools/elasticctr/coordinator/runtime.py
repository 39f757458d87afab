"""Wiring for `ectl coordinator`: durable state in the model store, partition discovery
from the dataset path, and the HTTP server — one process, as in a Volcano task."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from elasticctr import constants as C
from elasticctr import metrics, scenarios
from elasticctr.coordinator import upkeep, yielding
from elasticctr.coordinator.core import (
    CHECKPOINT_STATE,
    Coordinator,
    PartitionSpec,
    state_for_restart,
)
from elasticctr.coordinator.server import CoordinatorServer, feed, serve
from elasticctr.data import partitions, storage
from elasticctr.errors import EctlError

log = logging.getLogger(__name__)

STATE_FILE = "progress/coordinator.json"
"""Where the coordinator's durable record lives, relative to the model store."""


@dataclass
class CoordinatorSettings:
    dataset_path: str
    start: str
    end: str | None
    state_url: str
    hdfs_ugi: str | None = None
    lease_seconds: float = C.DEFAULT_COORDINATOR_LEASE_SECONDS
    task_bytes: int = C.DEFAULT_COORDINATOR_TASK_MIB << 20
    window: int = C.DEFAULT_COORDINATOR_WINDOW
    checkpoint_every: int = C.DEFAULT_COORDINATOR_CHECKPOINT_EVERY
    poll_seconds: float = C.DEFAULT_COORDINATOR_POLL_SECONDS
    skip_missing_after: float | None = None
    scenario: str = scenarios.DEFAULT
    """Labels the version metrics (global.scenario.name)."""
    utc_offset: str | None = None
    """Clock of the data hours (global.data.utcOffset; else $ELASTICCTR_DATA_UTC_OFFSET)."""
    transfer_url: str | None = None
    """cube-transfer's status server: poked after each export (None: it polls alone)."""


class TransferPoke:
    """Tell cube-transfer that `scenario` exported a version (POST /v1/poke), off the
    request thread and at most one call at a time: a poke is a hint that moves the
    transfer's next poll earlier, so a failure is logged and its interval still finds
    the version (docs/cube.md "Hand-off")."""

    def __init__(self, url: str, scenario: str, timeout: float = 5.0):
        self.url = url.rstrip("/") + "/v1/poke"
        self.scenario = scenario
        self.timeout = timeout
        self._busy = threading.Lock()
        self.sent = 0
        self.failed = 0

    def __call__(self, partition: str) -> None:
        threading.Thread(target=self.send, args=(partition,), daemon=True).start()

    def send(self, partition: str) -> bool:
        import httpx

        with self._busy:
            try:
                httpx.post(
                    self.url, json={"scenario": self.scenario}, timeout=self.timeout
                ).raise_for_status()
            except httpx.HTTPError as exc:
                self.failed += 1
                log.warning("poke %s after exporting %s failed: %s", self.url, partition, exc)
                return False
            self.sent += 1
            return True


def read_stored_progress(store: str, hdfs_ugi: str | None = None) -> dict | None:
    """The progress a coordinator stored under model store `store` (STATE_FILE), shaped as
    its live `/v1/progress` (`progress_from_state`); None when no job stored any yet. An
    unreadable store or a corrupt record raises EctlError with the reason."""
    from elasticctr.coordinator.core import progress_from_state
    from elasticctr.modelstore import redact_url

    url = storage.join(store, STATE_FILE)
    try:
        if not storage.exists(url, hdfs_ugi):
            return None
        text = storage.read_text(url, hdfs_ugi)
    except EctlError:
        raise
    except Exception as exc:  # noqa: BLE001 - a store's client raises many types
        raise EctlError(f"{redact_url(url)}: {type(exc).__name__}: {exc}") from exc
    return progress_from_state(text)


def discover(settings: CoordinatorSettings, stop: threading.Event) -> Iterator[PartitionSpec]:
    """Ready partitions in order (waiting for new hours when there is no end), with the
    size of every data file so they can be split into byte ranges."""
    for part in partitions.follow_partitions(
        settings.dataset_path,
        settings.start,
        settings.end or None,
        poll_interval=settings.poll_seconds,
        stop=stop,
        skip_missing_after=settings.skip_missing_after,
        hdfs_ugi=settings.hdfs_ugi,
    ):
        files = []
        for url in partitions.data_files(part, settings.hdfs_ugi):
            fs, path = storage.url_to_fs(url, settings.hdfs_ugi)
            files.append((url, int(fs.size(path))))
        if not files:
            log.warning("partition %s is ready but has no part-* files", part.id)
        yield PartitionSpec(part.id, tuple(files))


def build(settings: CoordinatorSettings) -> Coordinator:
    """A coordinator that persists to `state_url` and resumes from it if present, and
    pokes cube-transfer (`transfer_url`) after each export."""

    def save(snapshot: str) -> None:
        storage.write_text(settings.state_url, snapshot, settings.hdfs_ugi)

    coordinator = Coordinator(
        lease_seconds=settings.lease_seconds,
        task_bytes=settings.task_bytes,
        window=settings.window,
        checkpoint_every=settings.checkpoint_every,
        save=save,
        on_exported=TransferPoke(settings.transfer_url, settings.scenario)
        if settings.transfer_url
        else None,
    )
    if storage.exists(settings.state_url, settings.hdfs_ugi):
        coordinator.restore(storage.read_text(settings.state_url, settings.hdfs_ugi))
        log.info("resumed coordinator state from %s", settings.state_url)
    return coordinator


def restart_from_checkpoint(checkpoint: str, state_url: str, hdfs_ugi: str | None = None) -> dict:
    """A job (re)start: replace the progress record at `state_url` with the snapshot kept
    in the checkpoint folder `checkpoint` (or with nothing, when there is no checkpoint
    yet). The pservers are fresh, so tasks done after the checkpoint are lost with them
    and must be trained again; the first trainer loads the checkpoint before anyone
    trains. Returns {"message", "checkpoint" (version or None), "tasks_done"}."""
    path = storage.join(checkpoint, "ps", CHECKPOINT_STATE)
    text = storage.read_text(path, hdfs_ugi) if storage.exists(path, hdfs_ugi) else None
    state = state_for_restart(text)
    storage.write_text(state_url, state, hdfs_ugi)
    parsed = json.loads(state)
    version = parsed.get("load")
    if version is None:
        message = f"no checkpoint in {checkpoint}: starting with no progress"
    else:
        message = f"restarting from checkpoint {version} in {checkpoint}"
    return {"message": message, "checkpoint": version, "tasks_done": len(parsed["done"])}


def run(settings: CoordinatorSettings, host: str, port: int) -> None:
    """Serve until SIGTERM; partition discovery runs beside the server. A discovery
    failure (storage unreachable, bad partition) stops the server with a clear error."""
    coordinator = build(settings)
    stop = threading.Event()
    failure: list[Exception] = []
    tz = metrics.parse_utc_offset(settings.utc_offset) if settings.utc_offset else None
    server = CoordinatorServer((host, port), coordinator, scenario=settings.scenario, data_tz=tz)

    def on_error(exc: Exception) -> None:
        failure.append(exc)
        log.error("partition discovery failed: %s", exc)
        threading.Thread(target=server.shutdown).start()

    yielder = yielding.from_env(dict(os.environ), server.trainers_file)
    # Healthy: the restarted job's pservers have their checkpoint back (nothing to load).
    keeper = upkeep.from_env(dict(os.environ), healthy=lambda: coordinator.load_pending is None)

    def on_ready() -> None:
        print(f"coordinator listening on http://{host}:{server.server_address[1]}", flush=True)
        feed(coordinator, discover(settings, stop), on_error)
        if yielder is not None:
            log.info(
                "yielding trainers to kube-scheduler's preemptors (Volcano Job %s, hold %.0f s)",
                yielder.job,
                yielder.hold_seconds,
            )
            threading.Thread(target=yielder.run, args=(stop,), daemon=True).start()
        if keeper is not None:
            log.info(
                "upkeep of Volcano Job %s: spent retries given back after %.0f s of health "
                "(0 = never); kubelet-evicted trainers replaced: %s",
                keeper.job,
                keeper.recovery_seconds,
                "yes" if keeper.replace_evicted else "no",
            )
            threading.Thread(target=keeper.run, args=(stop,), daemon=True).start()

    try:
        serve(server, on_ready=on_ready)
    finally:
        stop.set()
    if failure:
        raise EctlError(f"partition discovery failed: {failure[0]}")
