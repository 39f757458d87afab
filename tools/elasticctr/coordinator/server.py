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
  GET  /v1/progress   GET /healthz   GET /metrics (Prometheus text)
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from elasticctr.coordinator.core import Coordinator, PartitionSpec
from elasticctr.errors import EctlError

_MAX_BODY = 1 << 20


class CoordinatorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], coordinator: Coordinator):
        self.coordinator = coordinator
        super().__init__(address, _Handler)


def _field(body: dict, name: str, kind: type | tuple[type, ...]):
    value = body.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wanted = " or ".join(k.__name__ for k in kinds)
        raise ValueError(f"field {name!r} must be {wanted}")
    return value


class _Handler(BaseHTTPRequestHandler):
    server: CoordinatorServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - keep logs for state changes only
        pass

    def _reply(self, status: int, payload: dict | str, ctype: str = "application/json") -> None:
        body = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        coord = self.server.coordinator
        if self.path == "/healthz":
            return self._reply(200, {"ok": True})
        if self.path == "/v1/progress":
            return self._reply(200, coord.progress())
        if self.path == "/metrics":
            return self._reply(200, _metrics(coord.progress()), "text/plain; version=0.0.4")
        self._reply(404, {"error": f"no such endpoint {self.path}"})

    def do_POST(self) -> None:  # noqa: N802
        coord = self.server.coordinator
        try:
            length = int(self.headers.get("Content-Length") or -1)
        except ValueError:
            length = -1
        if length < 0 or length > _MAX_BODY:
            self.close_connection = True
            return self._reply(
                HTTPStatus.BAD_REQUEST,
                {"error": "a JSON body up to 1 MiB with Content-Length is required"},
            )
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            trainer = str(_field(body, "trainer", (str, int)))
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
            return self._reply(404, {"error": f"no such endpoint {self.path}"})
        except (ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": f"bad request: {exc}"})
        except EctlError as exc:
            return self._reply(HTTPStatus.CONFLICT, {"error": str(exc)})


def _metrics(progress: dict) -> str:
    lines = [
        "# TYPE elasticctr_coordinator_tasks gauge",
        f'elasticctr_coordinator_tasks{{state="done"}} {progress["tasks_done"]}',
        f'elasticctr_coordinator_tasks{{state="leased"}} {progress["tasks_leased"]}',
        f'elasticctr_coordinator_tasks{{state="pending"}} {progress["tasks_pending"]}',
        "# TYPE elasticctr_coordinator_tasks_retried_total counter",
        f"elasticctr_coordinator_tasks_retried_total {progress['tasks_retried']}",
        "# TYPE elasticctr_coordinator_samples_total counter",
        f"elasticctr_coordinator_samples_total {progress['samples']}",
        "# TYPE elasticctr_coordinator_trainer_samples_per_second gauge",
    ]
    for name, info in sorted(progress["trainers"].items()):
        lines.append(
            f'elasticctr_coordinator_trainer_samples_per_second{{trainer="{name}"}} '
            f"{info['samples_per_s']:.3f}"
        )
    exported = sum(1 for p in progress["partitions"] if p["exported"])
    lines += [
        "# TYPE elasticctr_coordinator_partitions_exported gauge",
        f"elasticctr_coordinator_partitions_exported {exported}",
        "",
    ]
    return "\n".join(lines)


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
