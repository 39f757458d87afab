"""cube-transfer's status server: health, readiness and status of the watcher over HTTP.

  GET /healthz    200 {"ok": true} while the process runs
  GET /readyz     200 {"ready": true, ...} once the latest read of the model store
                  succeeded; 503 {"ready": false, "detail": "<store url>: <error>"} before
                  the first successful read and whenever the latest one failed
  GET /v1/status  200, the watcher's `status_doc()` (docs/cube.md "cube-transfer status")
  GET /v1/progress[?scenario=NAME]
                  200, the training progress the coordinator stored in the model store
                  (`progress/coordinator.json`); 404 when there is none yet or the
                  scenario is not registered; 502 when the store cannot be read or the
                  record is corrupt
  POST /v1/poke   {"scenario": NAME} (optional): a new version may be in the store, poll
                  now instead of at the end of the interval; 202 {"poked": true}. The
                  coordinator calls it after each export (docs/cube.md "Hand-off")
  GET /v1/versions[?scenario=NAME]
                  200 {"scenario", "committed", "pinned", "store": [...], "retained":
                  [...], "failed": {...}, "metrics": {version: manifest metrics} (the
                  newest 48)}: what can be pinned (`ectl model list`); 404 for
                  a scenario not registered, 502 when the store cannot be read
  POST /v1/pin    {"version": V, "scenario": NAME?} with the cube admin token (Bearer, or
                  X-Elasticctr-Admin-Token through the API server's proxy):
                  serve V on every shard and nothing newer until unpinned (`ectl model
                  pin|rollback`); 200 {"committed", "pinned", "previous"}; 401 without the
                  token, 404 unknown scenario, 409 when V cannot be served (not in the
                  store, corrupt, other slots, a shard refused): the committed version stays
  POST /v1/unpin  {"scenario": NAME?} with the token: follow the newest version again
  GET /metrics    Prometheus text (prometheus_client; names in elasticctr.metrics):
                  per scenario the committed and the store's newest version, whether the
                  store reads, publishes and errors by kind; each shard's reachability

Read-only but for the poke, which only moves the next poll earlier, and pin/unpin, which
need the cube admin token ($ELASTICCTR_CUBE_ADMIN_TOKEN, what the shards' admin routes
take; without one set, as in a bare local run, they are open). The probes are answered
from memory (plus the small transfer.json) and never wait for the store or the shards;
/v1/progress and /v1/versions read the store on request. Served by the threaded front end
of elasticctr.httpd (the coordinator's), on CUBE_TRANSFER_PORT by default.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from elasticctr import constants as C
from elasticctr import metrics as M
from elasticctr.errors import EctlError
from elasticctr.httpd import HardenedHandler, Limits, ThreadedServer, bearer_ok

log = logging.getLogger("elasticctr.cube.transfer")

ADMIN_TOKEN_HEADER = C.CUBE_ADMIN_TOKEN_HEADER


class Watched(Protocol):
    def readiness(self) -> tuple[bool, str | None]: ...

    def status_doc(self) -> dict[str, Any]: ...

    def stored_progress(self, scenario: str | None = None) -> dict[str, Any] | None: ...

    def poke(self, scenario: str | None = None) -> None: ...

    def scenario_transfer(self, scenario: str | None) -> Any: ...

    def tables(self) -> dict[str, Any]: ...


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::]:PORT`` for IPv6) -> (host, port); port 0 picks a free one."""
    host, sep, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise EctlError(f"--listen {text!r}: expected HOST:PORT, e.g. 0.0.0.0:8510")
    return host, int(port)


class TransferStatusServer(ThreadedServer):
    def __init__(self, address: tuple[str, int], watched: Watched, admin_token: str | None = None):
        self.watched = watched
        self.admin_token = admin_token or os.environ.get(C.ENV_CUBE_ADMIN_TOKEN) or None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(TransferCollector(self))
        super().__init__(address, _Handler, Limits.from_env(max_body_bytes=1 << 10))

    def start(self, name: str = "transfer-status") -> TransferStatusServer:
        return super().start(name)


class _Handler(HardenedHandler):
    server: TransferStatusServer

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            return self.send_json(200, {"ok": True})
        if path == "/readyz":
            ready, detail = self.server.watched.readiness()
            if not ready:
                return self.send_json(503, {"ready": False, "detail": detail})
            doc = self.server.watched.status_doc()
            return self.send_json(
                200,
                {
                    "ready": True,
                    "modelStore": doc["modelStore"],
                    "newestVersion": doc["newestVersion"],
                },
            )
        if path == "/v1/status":
            return self.send_json(200, self.server.watched.status_doc())
        if path == "/v1/progress":
            return self._progress()
        if path == "/v1/versions":
            scenario = parse_qs(urlsplit(self.path).query).get("scenario", [None])[-1]
            try:
                return self.send_json(
                    200, self.server.watched.scenario_transfer(scenario).versions()
                )
            except LookupError as exc:
                return self.send_json_error(404, "not_found", str(exc))
            except EctlError as exc:
                return self.send_json_error(502, "store_unreadable", exc.message)
        if path == "/metrics":
            return self.send_json(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        self.send_json_error(404, "not_found", f"no such endpoint {path}")

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path not in ("/v1/poke", "/v1/pin", "/v1/unpin"):
            return self.send_json_error(404, "not_found", f"no such endpoint {path}")
        raw = self.read_body(1 << 10)  # HttpError 413/400: answered by the layer
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            return self.send_json_error(400, "bad_request", f"body is not JSON: {exc}")
        if not isinstance(body, dict):
            return self.send_json_error(400, "bad_request", "body must be a JSON object")
        scenario = body.get("scenario")
        if scenario is not None and not isinstance(scenario, str):
            return self.send_json_error(400, "bad_request", "'scenario' must be a string")
        watched = self.server.watched
        if path == "/v1/poke":
            watched.poke(scenario)
            return self.send_json(202, {"poked": True})
        # The API server's pod proxy (how `ectl` reaches this port) strips Authorization,
        # so the token also comes as X-Elasticctr-Admin-Token (compared the same way).
        given = self.headers.get("Authorization")
        if self.headers.get(ADMIN_TOKEN_HEADER):
            given = f"Bearer {self.headers.get(ADMIN_TOKEN_HEADER)}"
        if not bearer_ok(given, self.server.admin_token):
            return self.send_json_error(
                401, "unauthorized", "pin and unpin need the cube admin token (Bearer)"
            )
        version = body.get("version")
        if path == "/v1/pin" and not isinstance(version, str):
            return self.send_json_error(400, "bad_request", "'version' (YYYYMMDD/HH) is required")
        try:
            t = watched.scenario_transfer(scenario)
            done = t.pin(version) if path == "/v1/pin" else t.unpin()
        except LookupError as exc:
            return self.send_json_error(404, "not_found", str(exc))
        except EctlError as exc:
            return self.send_json_error(409, "not_switched", str(exc))
        if path == "/v1/unpin":
            watched.poke(scenario)  # publish the newest now, not at the next poll
        return self.send_json(200, done)

    def _progress(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        scenario = query.get("scenario", [None])[-1]
        try:
            progress = self.server.watched.stored_progress(scenario)
        except LookupError as exc:
            return self.send_json_error(404, "not_found", str(exc))
        except EctlError as exc:
            return self.send_json_error(502, "store_unreadable", exc.message)
        if progress is None:
            return self.send_json_error(404, "not_found", "no stored training progress yet")
        return self.send_json(200, progress)


class TransferCollector:
    """The watcher's state as Prometheus families, read at scrape time (the committed
    version from each scenario's transfer.json, the rest from memory)."""

    def __init__(self, server: TransferStatusServer):
        self.server = server
        self.tz = M.data_timezone()

    def collect(self):
        watched = self.server.watched
        tables = watched.tables()
        committed = M.TRANSFER_COMMITTED_VERSION.family()
        newest = M.TRANSFER_NEWEST_VERSION.family()
        readable = M.TRANSFER_STORE_READABLE.family()
        read_at = M.TRANSFER_STORE_READ.family()
        for name, t in sorted(tables.items()):
            try:
                version = t.state().get("committed")
            except EctlError:
                version = None  # unreadable state: the poll reports it
            if version:
                committed.add_metric([name], M.version_timestamp(version, self.tz))
            if t.health is None:
                continue
            ok, last_ok_at, store_newest = t.health.values()
            readable.add_metric([name], int(ok))
            if last_ok_at is not None:
                read_at.add_metric([name], last_ok_at)
            if store_newest:
                newest.add_metric([name], M.version_timestamp(store_newest, self.tz))
        yield from (committed, newest, readable, read_at)
        publishes, errors = M.TRANSFER_PUBLISHES.family(), M.TRANSFER_ERRORS.family()
        for key, n in sorted(watched.counts.snapshot().items()):
            (publishes if key[0] == "publish" else errors).add_metric(list(key[1:]), n)
        yield publishes
        yield errors
        up = M.TRANSFER_SHARD_UP.family()
        for i, replicas in enumerate(watched.cube.replicas):
            for r, shard in enumerate(replicas):
                if shard.reachable is not None:
                    up.add_metric([str(i), str(r)], int(shard.reachable))
        yield up
        yield M.TRANSFER_SCENARIOS.family(len(tables))
        yield M.TRANSFER_POKES.family(watched.pokes)
        yield from M.http_families(M.TRANSFER_HTTP, self.server.stats)
