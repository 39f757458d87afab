"""The coordinator's HTTP/JSON API over `Coordinator` (stdlib server: a few requests per
task, never on the sample path), plus the discovery loop that feeds it partitions.

API (docs/coordinator.md):
  POST /v1/lease      {"trainer"}                    -> load | task | export | wait | finished
  POST /v1/heartbeat  {"lease", "trainer"}                 -> {"ok": bool}
  POST /v1/complete   {"lease", "trainer", "samples"}      -> {"accepted", ...}
  POST /v1/fail       {"lease", "trainer", "reason"}       -> {"ok": true}
  POST /v1/leave      {"trainer"}                          -> {"requeued": n}
  POST /v1/exported   {"partition","trainer","version","checkpoint"} -> {"ok": true}
  POST /v1/loaded     {"trainer", "version"}               -> {"ok": true}
  GET  /v1/progress   GET /healthz   GET /metrics (Prometheus text, prometheus_client)

Served by the threaded front end of elasticctr.httpd (timeouts, connection cap, framing
checks, one error body `{"error": {"code", "message"}}`). Trainer ids are client-supplied:
they must match TRAINER_ID (else 400), and /metrics shows at most MAX_TRAINER_SERIES of
them (the rest are counted in `elasticctr_coordinator_trainers`). Metric names live in
elasticctr.metrics (docs/operations.md).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from elasticctr import metrics as M
from elasticctr import scenarios
from elasticctr.constants import ENV_COORDINATOR_TRAINERS_FILE
from elasticctr.coordinator.core import Coordinator, PartitionSpec
from elasticctr.errors import EctlError
from elasticctr.httpd import HardenedHandler, Limits, ThreadedServer

_MAX_BODY = 1 << 20
TRAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
"""What a trainer id may look like (pod names, indices)."""
MAX_TRAINER_SERIES = 256
"""Per-trainer series on /metrics at most (ids are client-supplied)."""


class CoordinatorServer(ThreadedServer):
    def __init__(
        self,
        address: tuple[str, int],
        coordinator: Coordinator,
        limits: Limits | None = None,
        *,
        scenario: str = scenarios.DEFAULT,
        data_tz: dt.timezone | None = None,
        trainers_file: str | None = None,
    ):
        """`scenario` labels the version metrics; `data_tz` is the clock of the data hours
        (elasticctr.metrics); `trainers_file` the trainer task's `{"min", "max"}` (default:
        $ELASTICCTR_COORDINATOR_TRAINERS_FILE)."""
        self.coordinator = coordinator
        self.scenario = scenario
        self.data_tz = data_tz or M.data_timezone()
        self.trainers_file = trainers_file or os.environ.get(ENV_COORDINATOR_TRAINERS_FILE)
        self.started_at = time.time()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        super().__init__(address, _Handler, limits or Limits.from_env(max_body_bytes=_MAX_BODY))


def _field(body: dict, name: str, kind: type | tuple[type, ...]):
    value = body.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wanted = " or ".join(k.__name__ for k in kinds)
        raise ValueError(f"field {name!r} must be {wanted}")
    return value


class _Handler(HardenedHandler):
    server: CoordinatorServer

    def _reply(self, status: int, payload: dict | bytes, ctype: str = "application/json") -> None:
        self.send_json(status, payload, ctype)

    def _error(self, status: int, code: str, message: str) -> None:
        self.send_json_error(status, code, message)

    def do_GET(self) -> None:  # noqa: N802
        coord = self.server.coordinator
        if self.path == "/healthz":
            return self._reply(200, {"ok": True})
        if self.path == "/v1/progress":
            return self._reply(200, coord.progress())
        if self.path == "/metrics":
            return self._reply(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        self._error(404, "not_found", f"no such endpoint {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        coord = self.server.coordinator
        if self.body_length == 0 and "Content-Length" not in self.headers:
            self.close_connection = True
            return self._error(
                HTTPStatus.LENGTH_REQUIRED,
                "length_required",
                "a JSON body up to 1 MiB with Content-Length is required",
            )
        raw = self.read_body(_MAX_BODY)  # HttpError 413/400: answered by the layer
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            trainer = str(_field(body, "trainer", (str, int)))
            if not TRAINER_ID.fullmatch(trainer):
                raise ValueError(f"field 'trainer' must match {TRAINER_ID.pattern}")
            if self.path == "/v1/lease":
                return self._reply(200, coord.lease(trainer))
            if self.path == "/v1/heartbeat":
                return self._reply(
                    200, {"ok": coord.heartbeat(_field(body, "lease", str), trainer)}
                )
            if self.path == "/v1/complete":
                samples = _field(body, "samples", int)
                return self._reply(
                    200, coord.complete(_field(body, "lease", str), trainer, samples)
                )
            if self.path == "/v1/fail":
                coord.fail(_field(body, "lease", str), trainer, str(body.get("reason", "")))
                return self._reply(200, {"ok": True})
            if self.path == "/v1/leave":
                return self._reply(200, {"requeued": coord.leave(trainer)})
            if self.path == "/v1/exported":
                coord.exported(
                    _field(body, "partition", str),
                    trainer,
                    _field(body, "version", str),
                    bool(body.get("checkpoint", False)),
                )
                return self._reply(200, {"ok": True})
            if self.path == "/v1/loaded":
                coord.loaded(trainer, _field(body, "version", str))
                return self._reply(200, {"ok": True})
            return self._error(404, "not_found", f"no such endpoint {self.path}")
        except (ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
            return self._error(HTTPStatus.BAD_REQUEST, "bad_request", f"bad request: {exc}")
        except EctlError as exc:
            return self._error(HTTPStatus.CONFLICT, "conflict", str(exc))


class _Collector:
    """Coordinator state as Prometheus families, read at scrape time."""

    def __init__(self, server: CoordinatorServer):
        self.server = server

    def collect(self):
        srv = self.server
        progress = srv.coordinator.progress()
        label = [srv.scenario]
        tasks = M.COORDINATOR_TASKS.family()
        for state in ("done", "leased", "pending"):
            tasks.add_metric([*label, state], progress[f"tasks_{state}"])
        yield tasks
        yield _one(M.COORDINATOR_TASKS_RETRIED, label, progress["tasks_retried"])
        yield _one(M.COORDINATOR_TASKS_FAILED, label, progress["tasks_failed"])
        yield _one(M.COORDINATOR_SAMPLES, label, progress["samples"])
        trainers = sorted(progress["trainers"].items())
        yield _one(M.COORDINATOR_TRAINERS, label, len(trainers))
        for spec, value in zip(
            (M.COORDINATOR_TRAINERS_MIN, M.COORDINATOR_TRAINERS_MAX),
            trainer_bounds(srv.trainers_file),
            strict=True,
        ):
            if value is not None:
                yield _one(spec, label, value)
        per = M.COORDINATOR_TRAINER_SAMPLES.family()
        for name, info in trainers[:MAX_TRAINER_SERIES]:
            per.add_metric([*label, name], info["samples"])
        yield per
        parts = progress["partitions"]
        exported = [p["partition"] for p in parts if p["exported"]]
        yield _one(M.COORDINATOR_PARTITIONS_EXPORTED, label, len(exported))
        if parts:
            newest = M.version_timestamp(parts[-1]["partition"], srv.data_tz)
            yield _one(M.COORDINATOR_NEWEST_DATA_HOUR, label, newest)
            if exported:
                done = M.version_timestamp(exported[-1], srv.data_tz)
                yield _one(M.COORDINATOR_EXPORTED_VERSION, label, done)
            else:  # nothing exported: every hour found is behind
                done = M.version_timestamp(parts[0]["partition"], srv.data_tz) - M.HOUR_SECONDS
            yield _one(M.COORDINATOR_EXPORT_LAG, label, max(newest - done, 0.0))
        yield _one(M.COORDINATOR_START, label, srv.started_at)
        yield from M.http_families(M.COORDINATOR_HTTP, srv.stats)


def _one(spec: M.Spec, labels: list[str], value: float):
    family = spec.family()
    family.add_metric(labels, value)
    return family


def trainer_bounds(path: str | None) -> tuple[int | None, int | None]:
    """(min, max) trainers from the chart's `{"min": m, "max": n}` file; (None, None) when
    there is none or it is unreadable (local mode, an older chart). Read at each scrape:
    the chart updates the file in place when `helm upgrade` changes the replicas."""
    if not path:
        return None, None
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None, None
    if not isinstance(doc, dict):
        return None, None

    def count(key: str) -> int | None:
        value = doc.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return count("min"), count("max")


def feed(
    coordinator: Coordinator,
    partitions: Iterable[PartitionSpec],
    on_error: Callable[[Exception], None],
) -> threading.Thread:
    """Add partitions from a (possibly endless, polling) iterable in a daemon thread;
    close the input when the iterable ends."""

    def run() -> None:
        try:
            for spec in partitions:
                coordinator.add_partition(spec)
            coordinator.close_input()
        except Exception as exc:  # reported by the caller, which decides to exit
            on_error(exc)

    thread = threading.Thread(target=run, name="partition-discovery", daemon=True)
    thread.start()
    return thread


def serve(server: CoordinatorServer, *, on_ready: Callable[[], None] | None = None) -> None:
    """Serve until SIGTERM/SIGINT."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    if on_ready:
        on_ready()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
