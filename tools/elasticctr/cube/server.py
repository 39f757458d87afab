"""cube server: one process per shard on the asyncio front end of elasticctr.httpd.

Not a framework: a 1000-key lookup costs ~20-25 µs in the native path (cubefast.c, which
also parses plain binary lookups: `CubeApp.fast`), so per-request framework overhead
would dominate (docs/cube.md, bench/http/compare.py). Routes:

    POST /v1/lookup        binary (protocol.py)         GET  /healthz   process alive
    POST /v1/lookup.json   {"keys": [...], "version"?}  GET  /readyz    serving what it holds
    GET  /v1/status        versions held, committed     GET  /metrics   Prometheus text
    POST /admin/load       {"version"}: verify sha256, mmap, stage
    POST /admin/commit     {"version"}: atomic swap, persisted to the state dir
    POST /admin/unload     {"version"}: drop a non-committed version
    POST /admin/drop       {"table"}: forget a scenario's table (the scenario was removed)

A shard holds one table per scenario (shard.Tables): `X-Cube-Table: <scenario>` on a
lookup (`"table"` in JSON bodies, admin ones included) picks it; none = the default table.

Errors are the layer's `{"error": {"code", "message"}}` (docs/http.md). Admin routes need
`Authorization: Bearer $ELASTICCTR_CUBE_ADMIN_TOKEN` when that variable is set.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import os
import signal
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from elasticctr import metrics as M
from elasticctr import scenarios
from elasticctr.constants import ENV_CUBE_ADMIN_TOKEN as ENV_ADMIN_TOKEN
from elasticctr.cube import native
from elasticctr.cube.protocol import (
    CONTENT_TYPE,
    LOOKUP_JSON_PATH,
    LOOKUP_PATH,
    TABLE_HEADER,
    encode_response,
)
from elasticctr.cube.shard import (
    NoRoom,
    ShardState,
    TableNotFound,
    Tables,
    VersionNotLoaded,
    VersionRejected,
)
from elasticctr.errors import EctlError
from elasticctr.httpd import (
    INTERNAL_MESSAGE,
    HttpError,
    HttpStats,
    Limits,
    Request,
    Response,
    bearer_ok,
    serve_async,
)
from elasticctr.versions import check_version_id

log = logging.getLogger("elasticctr.cube.server")

_TABLE_KEY = TABLE_HEADER.lower()  # elasticctr.httpd lower-cases header names
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_JSON_KEYS = 100_000
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0)


def json_response(status: int, obj) -> Response:
    return Response(status, json.dumps(obj).encode() + b"\n")


class Metrics:
    """Plain counters on the lookup path (a dict increment, not a labelled metric's lock);
    `CubeCollector` turns them into Prometheus families through prometheus_client."""

    def __init__(self):
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.errors: dict[str, int] = defaultdict(int)
        self.keys = 0
        self.missing = 0
        self.bucket_counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0
        self.latency_count = 0

    def observe_lookup(self, seconds: float, keys: int, missing: int) -> None:
        self.keys += keys
        self.missing += missing
        self.bucket_counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds
        self.latency_count += 1

    def answered(self, route: str, resp: Response) -> None:
        self.requests[(route, resp.status)] += 1
        if resp.error_code:
            self.errors[resp.error_code] += 1


class CubeCollector:
    """A prometheus_client collector reading the app's counters at scrape time. Tables are
    scenarios' (their names), so the label is `scenario`."""

    def __init__(self, app: CubeApp):
        self.app = app

    def collect(self):
        m, tables = self.app.metrics, self.app.tables
        req = M.CUBE_REQUESTS.family()
        for (route, code), n in sorted(m.requests.items()):
            req.add_metric([route, str(code)], n)
        yield req
        errors = M.CUBE_ERRORS.family()
        for kind, n in sorted(m.errors.items()):
            errors.add_metric([kind], n)
        yield errors
        yield M.CUBE_KEYS.family(m.keys)
        yield M.CUBE_MISSING_KEYS.family(m.missing)
        cum, buckets = 0, []
        for bound, n in zip(LATENCY_BUCKETS, m.bucket_counts, strict=False):
            cum += n
            buckets.append((str(bound), cum))
        buckets.append(("+Inf", m.latency_count))
        yield M.CUBE_LOOKUP_SECONDS.family(buckets=buckets, sum_value=m.latency_sum)
        loaded = M.CUBE_VERSION_LOADED.family()
        committed_at = M.CUBE_COMMITTED_VERSION.family()
        keys = M.CUBE_VERSION_KEYS.family()
        held = M.CUBE_TABLE_BYTES.family()
        all_tables = tables.all()
        for state in all_tables:
            committed = state.committed.version if state.committed else None
            for v in sorted(state.versions):
                loaded.add_metric([state.table, v, "true" if v == committed else "false"], 1)
            if committed:
                committed_at.add_metric([state.table], M.version_timestamp(committed, self.app.tz))
            keys.add_metric([state.table], state.committed.count if state.committed else 0)
            held.add_metric([state.table], state.held_bytes)
        yield loaded
        yield committed_at
        yield keys
        yield held
        yield M.CUBE_CAPACITY_BYTES.family(tables.capacity_bytes)
        yield M.CUBE_READY.family(int(tables.default.committed is not None))
        loads = M.CUBE_LOADS.family()
        loads.add_metric(["ok"], sum(s.loads_ok for s in all_tables))
        loads.add_metric(["rejected"], sum(s.loads_rejected for s in all_tables))
        yield loads
        yield M.CUBE_COMMITS.family(sum(s.commits for s in all_tables))
        yield from M.http_families(M.CUBE_HTTP, self.app.http_stats)


class CubeApp:
    """Routing and handlers; transport-independent (elasticctr.httpd feeds it Requests)."""

    def __init__(self, tables: Tables, admin_token: str | None = None):
        self.tables = tables
        self.state = tables.default
        self.metrics = Metrics()
        self.admin_token = admin_token
        self.tz = M.data_timezone()  # the data hours' clock, for version timestamps
        self.http_stats = HttpStats()  # replaced by the server's when serving
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(CubeCollector(self))
        self._admin_lock = asyncio.Lock()
        self._sync: dict[tuple[str, str], Callable[[Request], Response]] = {
            ("POST", LOOKUP_PATH): self.lookup,
            ("POST", LOOKUP_JSON_PATH): self.lookup_json,
            ("GET", "/healthz"): lambda r: Response(200, b"ok\n", "text/plain"),
            ("GET", "/readyz"): self.readyz,
            ("GET", "/metrics"): self.prometheus,
            ("GET", "/v1/status"): lambda r: json_response(200, self.tables.status()),
        }
        self._async: dict[tuple[str, str], Callable[[Request], Awaitable[Response]]] = {
            ("POST", "/admin/load"): self.admin_load,
            ("POST", "/admin/commit"): self.admin_commit,
            ("POST", "/admin/unload"): self.admin_unload,
            ("POST", "/admin/drop"): self.admin_drop,
        }
        self._paths = {p for _, p in (*self._sync, *self._async)}
        self.native = native.module()  # None: numpy lookups (the reason is logged)
        self.limits = Limits(max_body_bytes=MAX_BODY_BYTES)  # serve() sets the server's

    def fast(self, buf: bytearray) -> tuple[int, bytes] | None:
        """elasticctr.httpd's fast path: a plain binary lookup parsed, answered and counted
        in native code (cubefast.c). None for anything else, and for any request whose
        answer is not a 200 (unknown table or version, nothing committed): the handler
        answers those with every rule of the layer."""
        mod = self.native
        lim = self.limits
        req = mod.parse(buf, lim.max_header_bytes, lim.max_body_bytes)
        if req is None:
            return None
        t0 = time.perf_counter()
        consumed, offset, length, version, table = req
        try:
            state = self.tables.get(table)
        except TableNotFound:
            return None
        lv = state.versions.get(version) if version else state.committed
        if lv is None or lv.shard.native is None:
            return None
        out, missing = mod.lookup(
            lv.shard.native, buf, offset, length >> 3, state.shard, lv.version.encode(), True
        )
        m = self.metrics
        m.observe_lookup(time.perf_counter() - t0, length >> 3, missing)
        m.requests[(LOOKUP_PATH, 200)] += 1
        return consumed, out

    def route(self, req: Request) -> Response | Awaitable[Response]:
        key = (req.method, req.path)
        handler = self._sync.get(key)
        if handler is not None:
            try:
                resp = handler(req)
            except HttpError as exc:
                resp = exc.response()
            except Exception:  # a bug: answer 500 and keep serving
                log.exception("handler failed")
                resp = Response.error(500, "internal", INTERNAL_MESSAGE)
            self.metrics.answered(req.path, resp)
            return resp
        ahandler = self._async.get(key)
        if ahandler is not None:
            if not bearer_ok(req.headers.get("authorization"), self.admin_token):
                resp = Response.error(
                    401, "unauthorized", "admin routes need 'Authorization: Bearer <token>'"
                )
                resp.headers["WWW-Authenticate"] = "Bearer"
                self.metrics.answered(req.path, resp)
                return resp
            return self._run_admin(ahandler, req)
        if req.path in self._paths:
            resp = Response.error(
                405, "method_not_allowed", f"{req.method} not allowed on {req.path}"
            )
        else:
            resp = Response.error(404, "not_found", f"no route {req.path}")
        self.metrics.answered("other" if resp.status == 404 else req.path, resp)
        return resp

    async def _run_admin(self, handler, req: Request) -> Response:
        try:
            resp = await handler(req)
        except HttpError as exc:
            resp = exc.response()
        except Exception:  # a bug: answer 500 and keep serving
            log.exception("admin handler failed")
            resp = Response.error(500, "internal", INTERNAL_MESSAGE)
        self.metrics.answered(req.path, resp)
        return resp

    # --- lookups ------------------------------------------------------------------------
    def _pinned(self, req: Request, body_version: str | None = None) -> str | None:
        version = body_version or req.headers.get("x-cube-version")
        if not version and req.query:
            version = parse_qs(req.query).get("version", [None])[0]
        if version:
            try:
                check_version_id(version)
            except EctlError as exc:
                raise HttpError(400, "bad_version", str(exc)) from exc
        return version or None

    def _table(self, name: str | None) -> ShardState:
        try:
            return self.tables.get(name)
        except TableNotFound as exc:
            raise HttpError(404, "no_table", str(exc)) from exc

    def _pick(self, state: ShardState, version: str | None):
        try:
            return state.pick(version)
        except VersionNotLoaded as exc:
            status = 409 if version else 503
            raise HttpError(
                status, "version_not_loaded" if version else "no_model", str(exc)
            ) from exc

    def lookup(self, req: Request) -> Response:
        t0 = time.perf_counter()
        if len(req.body) % 8:
            raise HttpError(
                400,
                "bad_keys",
                f"body of {len(req.body)} bytes is not a whole number of uint64 keys",
            )
        state = self._table(req.headers.get(_TABLE_KEY))
        lv = self._pick(state, self._pinned(req))  # read once: the whole answer comes from lv
        n = len(req.body) >> 3
        if lv.shard.native is not None:
            body, missing = self.native.lookup(
                lv.shard.native, req.body, 0, n, state.shard, lv.version.encode(), False
            )
        else:
            rows, missing = lv.shard.lookup(np.frombuffer(req.body, dtype="<u8"))
            body = encode_response(rows, missing, state.shard, lv.version)
        self.metrics.observe_lookup(time.perf_counter() - t0, n, missing)
        return Response(
            200,
            body,
            CONTENT_TYPE,
            {"X-Cube-Version": lv.version, "X-Cube-Missing": str(missing)},
        )

    def lookup_json(self, req: Request) -> Response:
        t0 = time.perf_counter()
        obj = _parse_json(req.body)
        if not isinstance(obj, dict) or not isinstance(obj.get("keys"), list):
            raise HttpError(400, "bad_json", 'expected a JSON object {"keys": [uint64, ...]}')
        raw = obj["keys"]
        if len(raw) > MAX_JSON_KEYS:
            raise HttpError(
                413, "too_many_keys", f"{len(raw)} keys; the JSON API takes at most {MAX_JSON_KEYS}"
            )
        keys = np.empty(len(raw), dtype=np.uint64)
        for i, k in enumerate(raw):
            try:
                v = int(k) if isinstance(k, int | str) and not isinstance(k, bool) else None
            except ValueError:
                v = None
            if v is None or not (0 <= v < 2**64):
                raise HttpError(
                    400,
                    "bad_keys",
                    f"keys[{i}] = {k!r} is not a uint64 (integer or decimal string)",
                )
            keys[i] = v
        version = obj.get("version")
        if version is not None and not isinstance(version, str):
            raise HttpError(400, "bad_version", "version must be a string YYYYMMDD/HH")
        table = obj.get("table") or req.headers.get(_TABLE_KEY)
        if table is not None and not isinstance(table, str):
            raise HttpError(400, "bad_table", "table must be a string (a scenario name)")
        lv = self._pick(self._table(table), self._pinned(req, version))
        rows, missing = lv.shard.lookup(keys)
        found = lv.shard.find(keys) >= 0 if missing else None
        self.metrics.observe_lookup(time.perf_counter() - t0, keys.size, missing)
        return json_response(
            200,
            {
                "version": lv.version,
                "shard": self.state.shard,
                "dim": lv.dim,
                "missing": missing,
                "missing_keys": [] if found is None else [str(k) for k in keys[~found]],
                "rows": rows.tolist(),
            },
        )

    def readyz(self, req: Request) -> Response:
        """Ready = able to serve what the shard holds. Before the first version is committed
        that is nothing: ready, lookups answer 503 "no committed version yet" (so an install
        waiting for readiness completes before training has produced a model). Not ready
        only when the committed version of the state dir could not be restored."""
        state = self.state
        if state.committed is None and state.restore_error:
            return Response.error(503, "not_ready", f"not ready: {state.restore_error}")
        if state.committed is None:
            return json_response(
                200, {"ready": True, "version": None, "detail": "no model version committed yet"}
            )
        return json_response(200, {"ready": True, "version": state.committed.version})

    def prometheus(self, req: Request) -> Response:
        return Response(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)

    # --- admin --------------------------------------------------------------------------
    def _admin_body(self, req: Request, *, version: bool = True) -> tuple[str, str | None, dict]:
        """(version, table, body) of an admin request; the table is checked as a name."""
        obj = _parse_json(req.body)
        if not isinstance(obj, dict) or (version and not isinstance(obj.get("version"), str)):
            raise HttpError(400, "bad_json", 'expected a JSON object {"version": "YYYYMMDD/HH"}')
        table = obj.get("table")
        if table is not None:
            try:
                scenarios.check_name(table, field_name="table")
            except EctlError as exc:
                raise HttpError(400, "bad_table", str(exc)) from exc
        if not version:
            return "", table, obj
        try:
            return check_version_id(obj["version"]), table, obj
        except EctlError as exc:
            raise HttpError(400, "bad_version", str(exc)) from exc

    async def admin_load(self, req: Request) -> Response:
        version, table, obj = self._admin_body(req)
        budget = obj.get("budget_bytes")
        if budget is not None and (not isinstance(budget, int) or budget < 1):
            raise HttpError(400, "bad_budget", "budget_bytes must be a positive integer")
        async with self._admin_lock:
            loop = asyncio.get_running_loop()
            try:
                # sha256 + mmap off the event loop: lookups keep flowing during a load.
                lv = await loop.run_in_executor(None, self.tables.load, table, version, budget)
            except NoRoom as exc:
                return Response.error(507, "no_room", f"version {version} refused: {exc}")
            except VersionRejected as exc:
                return Response.error(422, "version_rejected", f"version {version} rejected: {exc}")
        return json_response(
            200,
            {"loaded": version, "table": table or scenarios.DEFAULT, "keys": lv.count,
             "dim": lv.dim, "sha256": lv.sha256, "bytes": lv.nbytes},
        )  # fmt: skip

    async def admin_commit(self, req: Request) -> Response:
        version, table, _ = self._admin_body(req)
        async with self._admin_lock:
            try:
                state = self.tables.get(table)
                state.commit(version)
            except (VersionNotLoaded, TableNotFound) as exc:
                return Response.error(409, "version_not_loaded", str(exc))
        return json_response(
            200, {"committed": version, "table": state.table, "shard": state.shard}
        )

    async def admin_unload(self, req: Request) -> Response:
        version, table, _ = self._admin_body(req)
        async with self._admin_lock:
            try:
                self.tables.get(table).unload(version)
            except (VersionNotLoaded, TableNotFound) as exc:
                return Response.error(409, "version_not_loaded", str(exc))
        return json_response(200, {"unloaded": version, "table": table or scenarios.DEFAULT})

    async def admin_drop(self, req: Request) -> Response:
        _, table, _ = self._admin_body(req, version=False)
        if not table or table == scenarios.DEFAULT:
            raise HttpError(400, "bad_table", 'expected {"table": "<scenario>"}, not the default')
        async with self._admin_lock:
            dropped = self.tables.drop(table)
        return json_response(200, {"dropped": table, "held": dropped})


def _parse_json(body: bytes):
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HttpError(400, "bad_json", f"body is not valid JSON: {exc}") from exc


DRAIN_TIMEOUT = 5.0
"""Seconds the lookups in progress get to finish after SIGTERM."""


async def serve(app: CubeApp, host: str, port: int, ready: Callable[[], None] | None = None):
    limits = Limits.from_env(max_body_bytes=MAX_BODY_BYTES)
    app.limits = limits
    fast = app.fast if app.native is not None else None
    server = await serve_async(app.route, host, port, limits, fast=fast)
    app.http_stats = server.stats
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "cube shard %d/%d listening on %s:%d (%s lookups)", app.tables.shard,
        app.tables.num_shards, host, port, "native" if fast else "numpy",
    )  # fmt: skip
    if ready:
        ready()
    try:
        await stop.wait()
        # Stop listening (clients move to another replica at once), let the lookups in
        # progress finish (a second or so at most), then close.
        await server.drain(DRAIN_TIMEOUT)
    finally:
        server.close()
    log.info("cube shard %d stopped", app.state.shard)


def run_server(
    *,
    cube_root: Path,
    state_dir: Path,
    shard: int,
    num_shards: int,
    host: str,
    port: int,
    keep: int = 2,
    capacity_bytes: int = 0,
) -> None:
    """Restore every table's committed version, then serve until SIGTERM/SIGINT."""
    native.module()  # build (or find) the lookup extension before any version maps
    tables = Tables(cube_root, state_dir, shard, num_shards, keep, capacity_bytes)
    tables.restore()
    app_token = os.environ.get(ENV_ADMIN_TOKEN) or None

    async def main():
        await serve(CubeApp(tables, app_token), host, port)

    try:
        import uvloop  # optional: a faster event loop when installed
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
