"""cube server: one process per shard, a lean asyncio HTTP/1.1 keep-alive server.

A hand-written protocol handler instead of a framework: a 1000-key lookup costs ~20 µs
of numpy, so per-request framework overhead would dominate (see docs/cube.md for the
measurements). Routes:

    POST /v1/lookup        binary (protocol.py)         GET  /healthz   process alive
    POST /v1/lookup.json   {"keys": [...], "version"?}  GET  /readyz    serving what it holds
    GET  /v1/status        versions held, committed     GET  /metrics   Prometheus text
    POST /admin/load       {"version"}: verify sha256, mmap, stage
    POST /admin/commit     {"version"}: atomic swap, persisted to the state dir
    POST /admin/unload     {"version"}: drop a non-committed version

Errors are JSON `{"error": "...", "status": n}`. Admin routes need
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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np

from elasticctr.constants import ENV_CUBE_ADMIN_TOKEN as ENV_ADMIN_TOKEN
from elasticctr.cube.modelstore import check_version_id
from elasticctr.cube.protocol import (
    CONTENT_TYPE,
    LOOKUP_JSON_PATH,
    LOOKUP_PATH,
    encode_response,
)
from elasticctr.cube.shard import ShardState, VersionNotLoaded, VersionRejected
from elasticctr.errors import EctlError

log = logging.getLogger("elasticctr.cube.server")

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_JSON_KEYS = 100_000
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0)
_REASONS = {
    200: "OK", 100: "Continue", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
    405: "Method Not Allowed", 409: "Conflict", 411: "Length Required",
    413: "Payload Too Large", 422: "Unprocessable Entity", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 503: "Service Unavailable", 505: "HTTP Version Not Supported",
}  # fmt: skip


class HttpError(Exception):
    def __init__(self, status: int, message: str, *, close: bool = False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Response:
    status: int
    body: bytes | list[bytes]
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def json_response(status: int, obj) -> Response:
    return Response(status, json.dumps(obj).encode() + b"\n")


def error_response(status: int, message: str) -> Response:
    return json_response(status, {"error": message, "status": status})


class Metrics:
    """Counters and one latency histogram, rendered in Prometheus text format."""

    def __init__(self):
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
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

    def render(self, state: ShardState) -> str:
        lines = [
            "# HELP ectl_cube_requests_total HTTP requests by route and status code.",
            "# TYPE ectl_cube_requests_total counter",
        ]
        for (route, code), n in sorted(self.requests.items()):
            lines.append(f'ectl_cube_requests_total{{route="{route}",code="{code}"}} {n}')
        lines += [
            "# HELP ectl_cube_keys_total Keys looked up.",
            "# TYPE ectl_cube_keys_total counter",
            f"ectl_cube_keys_total {self.keys}",
            "# HELP ectl_cube_missing_keys_total Keys not found (answered with zero rows).",
            "# TYPE ectl_cube_missing_keys_total counter",
            f"ectl_cube_missing_keys_total {self.missing}",
            "# HELP ectl_cube_lookup_seconds Server time of one lookup request.",
            "# TYPE ectl_cube_lookup_seconds histogram",
        ]
        cum = 0
        for bound, n in zip(LATENCY_BUCKETS, self.bucket_counts, strict=False):
            cum += n
            lines.append(f'ectl_cube_lookup_seconds_bucket{{le="{bound}"}} {cum}')
        lines.append(f'ectl_cube_lookup_seconds_bucket{{le="+Inf"}} {self.latency_count}')
        lines.append(f"ectl_cube_lookup_seconds_sum {self.latency_sum:.6f}")
        lines.append(f"ectl_cube_lookup_seconds_count {self.latency_count}")
        lines += [
            "# HELP ectl_cube_version_loaded Versions held by this shard (1 = committed).",
            "# TYPE ectl_cube_version_loaded gauge",
        ]
        committed = state.committed.version if state.committed else None
        for v in sorted(state.versions):
            flag = "true" if v == committed else "false"
            lines.append(f'ectl_cube_version_loaded{{version="{v}",committed="{flag}"}} 1')
        lines += [
            "# HELP ectl_cube_version_keys Keys in this shard of the committed version.",
            "# TYPE ectl_cube_version_keys gauge",
            f"ectl_cube_version_keys {state.committed.count if state.committed else 0}",
            "# HELP ectl_cube_ready 1 when a version is committed and serving.",
            "# TYPE ectl_cube_ready gauge",
            f"ectl_cube_ready {1 if committed else 0}",
            "# HELP ectl_cube_loads_total Version loads by result.",
            "# TYPE ectl_cube_loads_total counter",
            f'ectl_cube_loads_total{{result="ok"}} {state.loads_ok}',
            f'ectl_cube_loads_total{{result="rejected"}} {state.loads_rejected}',
            "# HELP ectl_cube_commits_total Version commits (switches).",
            "# TYPE ectl_cube_commits_total counter",
            f"ectl_cube_commits_total {state.commits}",
        ]
        return "\n".join(lines) + "\n"


class CubeApp:
    """Routing and handlers; transport-independent (HttpProtocol feeds it Requests)."""

    def __init__(self, state: ShardState, admin_token: str | None = None):
        self.state = state
        self.metrics = Metrics()
        self.admin_token = admin_token
        self._admin_lock = asyncio.Lock()
        self._sync: dict[tuple[str, str], Callable[[Request], Response]] = {
            ("POST", LOOKUP_PATH): self.lookup,
            ("POST", LOOKUP_JSON_PATH): self.lookup_json,
            ("GET", "/healthz"): lambda r: Response(200, b"ok\n", "text/plain"),
            ("GET", "/readyz"): self.readyz,
            ("GET", "/metrics"): self.prometheus,
            ("GET", "/v1/status"): lambda r: json_response(200, self.state.status()),
        }
        self._async: dict[tuple[str, str], Callable[[Request], Awaitable[Response]]] = {
            ("POST", "/admin/load"): self.admin_load,
            ("POST", "/admin/commit"): self.admin_commit,
            ("POST", "/admin/unload"): self.admin_unload,
        }
        self._paths = {p for _, p in (*self._sync, *self._async)}

    def route(self, req: Request) -> Response | Awaitable[Response]:
        key = (req.method, req.path)
        handler = self._sync.get(key)
        try:
            if handler is not None:
                return handler(req)
            ahandler = self._async.get(key)
            if ahandler is not None:
                self._check_admin(req)
                return ahandler(req)
        except HttpError as exc:
            return error_response(exc.status, exc.message)
        except Exception as exc:  # a bug: answer 500 and keep serving
            log.exception("handler failed")
            return error_response(500, f"internal error: {type(exc).__name__}: {exc}")
        if req.path in self._paths:
            return error_response(405, f"{req.method} not allowed on {req.path}")
        return error_response(404, f"no route {req.path}")

    def _check_admin(self, req: Request) -> None:
        if self.admin_token and req.headers.get("authorization") != f"Bearer {self.admin_token}":
            raise HttpError(401, "admin routes need 'Authorization: Bearer <token>'")

    # --- lookups ------------------------------------------------------------------------
    def _pinned(self, req: Request, body_version: str | None = None) -> str | None:
        version = body_version or req.headers.get("x-cube-version")
        if not version and req.query:
            version = parse_qs(req.query).get("version", [None])[0]
        if version:
            try:
                check_version_id(version)
            except EctlError as exc:
                raise HttpError(400, str(exc)) from exc
        return version or None

    def _pick(self, version: str | None):
        try:
            return self.state.pick(version)
        except VersionNotLoaded as exc:
            status = 409 if version else 503
            raise HttpError(status, str(exc)) from exc

    def lookup(self, req: Request) -> Response:
        t0 = time.perf_counter()
        if len(req.body) % 8:
            raise HttpError(
                400, f"body of {len(req.body)} bytes is not a whole number of uint64 keys"
            )
        lv = self._pick(self._pinned(req))  # read once: the whole answer comes from lv
        keys = np.frombuffer(req.body, dtype="<u8")
        rows, missing = lv.shard.lookup(keys)
        body = encode_response(rows, missing, self.state.shard, lv.version)
        self.metrics.observe_lookup(time.perf_counter() - t0, keys.size, missing)
        return Response(
            200,
            body,
            CONTENT_TYPE,
            (("X-Cube-Version", lv.version), ("X-Cube-Missing", str(missing))),
        )

    def lookup_json(self, req: Request) -> Response:
        t0 = time.perf_counter()
        obj = _parse_json(req.body)
        if not isinstance(obj, dict) or not isinstance(obj.get("keys"), list):
            raise HttpError(400, 'expected a JSON object {"keys": [uint64, ...]}')
        raw = obj["keys"]
        if len(raw) > MAX_JSON_KEYS:
            raise HttpError(413, f"{len(raw)} keys; the JSON API takes at most {MAX_JSON_KEYS}")
        keys = np.empty(len(raw), dtype=np.uint64)
        for i, k in enumerate(raw):
            try:
                v = int(k) if isinstance(k, int | str) and not isinstance(k, bool) else None
            except ValueError:
                v = None
            if v is None or not (0 <= v < 2**64):
                raise HttpError(
                    400, f"keys[{i}] = {k!r} is not a uint64 (integer or decimal string)"
                )
            keys[i] = v
        version = obj.get("version")
        if version is not None and not isinstance(version, str):
            raise HttpError(400, "version must be a string YYYYMMDD/HH")
        lv = self._pick(self._pinned(req, version))
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
            return error_response(503, f"not ready: {state.restore_error}")
        if state.committed is None:
            return json_response(
                200, {"ready": True, "version": None, "detail": "no model version committed yet"}
            )
        return json_response(200, {"ready": True, "version": state.committed.version})

    def prometheus(self, req: Request) -> Response:
        return Response(200, self.metrics.render(self.state).encode(), "text/plain; version=0.0.4")

    # --- admin --------------------------------------------------------------------------
    def _admin_version(self, req: Request) -> str:
        obj = _parse_json(req.body)
        if not isinstance(obj, dict) or not isinstance(obj.get("version"), str):
            raise HttpError(400, 'expected a JSON object {"version": "YYYYMMDD/HH"}')
        try:
            return check_version_id(obj["version"])
        except EctlError as exc:
            raise HttpError(400, str(exc)) from exc

    async def admin_load(self, req: Request) -> Response:
        try:
            version = self._admin_version(req)
        except HttpError as exc:
            return error_response(exc.status, exc.message)
        async with self._admin_lock:
            loop = asyncio.get_running_loop()
            try:
                # sha256 + mmap off the event loop: lookups keep flowing during a load.
                lv = await loop.run_in_executor(None, self.state.load, version)
            except VersionRejected as exc:
                return error_response(422, f"version {version} rejected: {exc}")
        return json_response(
            200, {"loaded": version, "keys": lv.count, "dim": lv.dim, "sha256": lv.sha256}
        )

    async def admin_commit(self, req: Request) -> Response:
        try:
            version = self._admin_version(req)
        except HttpError as exc:
            return error_response(exc.status, exc.message)
        async with self._admin_lock:
            try:
                self.state.commit(version)
            except VersionNotLoaded as exc:
                return error_response(409, str(exc))
        return json_response(200, {"committed": version, "shard": self.state.shard})

    async def admin_unload(self, req: Request) -> Response:
        try:
            version = self._admin_version(req)
        except HttpError as exc:
            return error_response(exc.status, exc.message)
        async with self._admin_lock:
            try:
                self.state.unload(version)
            except VersionNotLoaded as exc:
                return error_response(409, str(exc))
        return json_response(200, {"unloaded": version})


def _parse_json(body: bytes):
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"body is not valid JSON: {exc}") from exc


class HttpProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive and pipelining; Content-Length bodies only."""

    def __init__(self, app: CubeApp):
        self.app = app
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.closing = False
        self.sent_continue = False

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closing = True

    def data_received(self, data: bytes):
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        while not self.closing and not self.busy:
            try:
                parsed = self._parse()
            except HttpError as exc:
                self._send(error_response(exc.status, exc.message), keep_alive=False, route="-")
                return
            if parsed is None:
                return
            req, keep_alive = parsed
            result = self.app.route(req)
            if isinstance(result, Response):
                self._send(result, keep_alive, req.path)
            else:
                self.busy = True
                self.transport.pause_reading()  # no unbounded buffering behind a slow admin call
                task = asyncio.ensure_future(result)
                task.add_done_callback(lambda t, r=req, k=keep_alive: self._finish(t, r, k))
                return

    def _finish(self, task: asyncio.Future, req: Request, keep_alive: bool) -> None:
        self.busy = False
        if not self.closing and not self.transport.is_closing():
            self.transport.resume_reading()
        try:
            resp = task.result()
        except Exception as exc:  # a bug: answer 500 and keep the server up
            log.exception("handler failed")
            resp = error_response(500, f"internal error: {type(exc).__name__}: {exc}")
        self._send(resp, keep_alive, req.path)
        if self.buf and not self.closing:
            self._process()

    def _parse(self) -> tuple[Request, bool] | None:
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEADER_BYTES:
                raise HttpError(431, "request headers too large")
            return None
        if end > MAX_HEADER_BYTES:
            raise HttpError(431, "request headers too large")
        try:
            head = bytes(buf[:end]).decode("latin-1")
        except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes any byte
            raise HttpError(400, "bad request head") from exc
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            if len(parts) == 3 and parts[2].startswith("HTTP/"):
                raise HttpError(505, f"{parts[2]} not supported; use HTTP/1.1")
            raise HttpError(400, f"bad request line {lines[0][:80]!r}")
        method, target, proto = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise HttpError(400, f"bad header line {line[:80]!r}")
            headers[name.lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise HttpError(411, "chunked bodies are not supported; send Content-Length")
        cl = headers.get("content-length", "0")
        if not cl.isdigit():
            raise HttpError(400, f"bad Content-Length {cl!r}")
        length = int(cl)
        if length > MAX_BODY_BYTES:
            raise HttpError(413, f"body of {length} bytes exceeds {MAX_BODY_BYTES}")
        total = end + 4 + length
        if len(buf) < total:
            if headers.get("expect", "").lower() == "100-continue" and not self.sent_continue:
                self.sent_continue = True
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return None
        body = bytes(buf[end + 4 : total])
        del buf[:total]
        self.sent_continue = False
        conn = headers.get("connection", "").lower()
        keep_alive = conn != "close" if proto == "HTTP/1.1" else conn == "keep-alive"
        path, _, query = target.partition("?")
        return Request(method, path, query, headers, body), keep_alive

    def _send(self, resp: Response, keep_alive: bool, route: str) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        body = resp.body if isinstance(resp.body, list) else [resp.body]
        length = sum(len(b) for b in body)
        head = [
            f"HTTP/1.1 {resp.status} {_REASONS.get(resp.status, 'Unknown')}\r\n"
            f"Content-Type: {resp.content_type}\r\nContent-Length: {length}\r\n"
        ]
        for name, value in resp.headers:
            head.append(f"{name}: {value}\r\n")
        if not keep_alive:
            head.append("Connection: close\r\n")
        head.append("\r\n")
        # One write, one syscall: separate writes cost a loopback TCP segment each.
        self.transport.write(b"".join([("".join(head)).encode("latin-1"), *body]))
        self.app.metrics.requests[
            (route if route in self.app._paths else "other", resp.status)
        ] += 1
        if not keep_alive:
            self.closing = True
            self.transport.close()


async def serve(app: CubeApp, host: str, port: int, ready: Callable[[], None] | None = None):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpProtocol(app), host, port, reuse_address=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "cube shard %d/%d listening on %s:%d", app.state.shard, app.state.num_shards, host, port
    )
    if ready:
        ready()
    async with server:
        await stop.wait()
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
) -> None:
    """Restore the committed version, then serve until SIGTERM/SIGINT."""
    state = ShardState(cube_root, state_dir, shard, num_shards, keep)
    state.restore()
    app_token = os.environ.get(ENV_ADMIN_TOKEN) or None

    async def main():
        await serve(CubeApp(state, app_token), host, port)

    try:
        import uvloop  # optional: a faster event loop when installed
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
