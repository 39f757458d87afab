"""The one HTTP/1.1 server layer of every ElasticCTR service (docs/http.md).

Two front ends share one set of rules (limits, request framing, error body, token check):

- `serve_async` / `HttpProtocol`: asyncio, keep-alive, pipelining; for the per-request
  hot paths (cube lookups, serving predictions), where a framework's 15-30 µs of CPU per
  request would cost 5-10% of a 1000-key lookup (bench/http/compare.py).
- `ThreadedServer` / `HardenedHandler`: `http.server` with a thread per connection, for
  services that stream large files (fileserver) or answer a few control calls
  (coordinator).

The rules, whichever front end serves:
- a request head must arrive within `header_timeout` (30 s) of its first byte, an idle
  keep-alive connection is closed after `idle_timeout` (60 s), a body must make progress
  within `idle_timeout`; all configurable (ELASTICCTR_HTTP_HEADER_TIMEOUT,
  ELASTICCTR_HTTP_IDLE_TIMEOUT);
- at most `max_connections` (1024, ELASTICCTR_HTTP_MAX_CONNECTIONS) open connections; one more
  gets 503 and is closed;
- a head over `max_header_bytes` gets 431, a body over `max_body_bytes` 413;
- framing (RFC 9112 §6): two different Content-Length values, Content-Length together
  with Transfer-Encoding, or a transfer coding other than `chunked` are refused (400/501)
  and the connection closed (the request-smuggling cases); malformed chunking gets 400;
- tokens are compared in constant time (`bearer_ok`);
- every error body is `{"error": {"code": "<stable_code>", "message": "<text>"}}`, never
  exception text (a handler bug answers 500 "internal error (see the server log)").
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from elasticctr import constants as C
from elasticctr.errors import EctlError

log = logging.getLogger("elasticctr.httpd")

ENV_HEADER_TIMEOUT = C.ENV_HTTP_HEADER_TIMEOUT
ENV_IDLE_TIMEOUT = C.ENV_HTTP_IDLE_TIMEOUT
ENV_MAX_CONNECTIONS = C.ENV_HTTP_MAX_CONNECTIONS

CHUNKED = -1
_now = time.monotonic
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_TOKEN_CHARS = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")

REASONS = {
    100: "Continue", 200: "OK", 201: "Created", 204: "No Content", 206: "Partial Content",
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict", 411: "Length Required",
    413: "Content Too Large", 414: "URI Too Long", 415: "Unsupported Media Type",
    416: "Range Not Satisfiable", 422: "Unprocessable Content", 429: "Too Many Requests",
    431: "Request Header Fields Too Large", 500: "Internal Server Error",
    501: "Not Implemented", 503: "Service Unavailable", 504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}  # fmt: skip

# Stable codes for statuses the layer itself answers (handlers pass their own).
_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 408: "request_timeout", 411: "length_required",
    413: "too_large", 414: "uri_too_long", 416: "range_not_satisfiable",
    431: "headers_too_large", 500: "internal", 501: "not_implemented", 503: "unavailable",
    505: "bad_http_version",
}  # fmt: skip

INTERNAL_MESSAGE = "internal error (see the server log)"


@dataclass(frozen=True)
class Limits:
    header_timeout: float = 30.0
    idle_timeout: float = 60.0
    max_connections: int = 1024
    max_header_bytes: int = 16 << 10
    max_body_bytes: int = 4 << 20

    @classmethod
    def from_env(cls, **overrides) -> Limits:
        """Defaults, then the service's own values (`overrides`), then the environment
        (timeouts and the connection cap: operators and tests tune them per process)."""
        lim = replace(cls(), **overrides)
        env = {}
        for name, attr, kind in (
            (ENV_HEADER_TIMEOUT, "header_timeout", float),
            (ENV_IDLE_TIMEOUT, "idle_timeout", float),
            (ENV_MAX_CONNECTIONS, "max_connections", int),
        ):
            raw = os.environ.get(name)
            if raw:
                try:
                    value = kind(raw)
                except ValueError:
                    value = 0
                if value <= 0:
                    raise EctlError(f"{name}={raw!r} must be a positive {kind.__name__}")
                env[attr] = value
        return replace(lim, **env)


class HttpError(Exception):
    """A client error the layer or a handler answers as the one error body."""

    def __init__(self, status: int, code: str, message: str, *, close: bool = False, **extra):
        super().__init__(message)
        self.status, self.code, self.message, self.close = status, code, message, close
        self.extra = extra

    def response(self) -> Response:
        return Response.error(self.status, self.code, self.message, **self.extra)


def error_body(status: int, code: str | None, message: str, **extra) -> bytes:
    err = {"code": code or _CODES.get(status, "error"), "message": message, **extra}
    return json.dumps({"error": err}, separators=(",", ":")).encode()


def error_message(text: str) -> str:
    """The message of an error body (for clients' exceptions); the raw text otherwise."""
    try:
        err = json.loads(text)["error"]
        return f"{err['message']} ({err['code']})"
    except (ValueError, KeyError, TypeError):
        return text[:300]


def bearer_ok(header: str | None, token: str | None) -> bool:
    """`Authorization: Bearer <token>` check in constant time (True when no token is set)."""
    if not token:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode("utf-8", "surrogateescape"), token.encode()
    )


def framing(cl: list[str], te: list[str], *, head_only: bool = False) -> int:
    """Body length of a request from its Content-Length / Transfer-Encoding values, or
    CHUNKED. Raises HttpError (close=True) for the ambiguous cases smuggling relies on."""
    if te:
        if cl:
            raise HttpError(
                400, "bad_framing", "Content-Length together with Transfer-Encoding", close=True
            )
        codings = [c.strip().lower() for v in te for c in v.split(",") if c.strip()]
        if codings != ["chunked"]:
            raise HttpError(
                501,
                "unsupported_transfer_encoding",
                "only 'Transfer-Encoding: chunked' is supported",
                close=True,
            )
        return CHUNKED
    if not cl:
        return 0
    values = {v.strip() for v in cl for v in v.split(",")}
    if len(values) != 1:
        raise HttpError(400, "bad_framing", "conflicting Content-Length values", close=True)
    value = values.pop()
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise HttpError(400, "bad_framing", f"bad Content-Length {value[:20]!r}", close=True)
    return int(value)


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
    body: bytes | list[bytes] = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    error_code: str | None = None
    """The error body's code (`error`): what a service counts errors by on /metrics."""

    @staticmethod
    def json(status: int, doc) -> Response:
        return Response(status, json.dumps(doc, separators=(",", ":")).encode())

    @staticmethod
    def error(status: int, code: str, message: str, **extra) -> Response:
        resp = Response(status, error_body(status, code, message, **extra))
        resp.error_code = code
        return resp


@dataclass
class HttpStats:
    """What the layer did, for each service's /metrics (`elasticctr.metrics.http_families`)."""

    open: int = 0
    refused: int = 0
    header_timeouts: int = 0
    idle_timeouts: int = 0
    protocol_errors: int = 0


def encode_response(resp: Response, keep_alive: bool) -> bytes:
    body = resp.body if isinstance(resp.body, list) else [resp.body]
    head = [
        f"HTTP/1.1 {resp.status} {REASONS.get(resp.status, 'Unknown')}\r\n"
        f"Content-Type: {resp.content_type}\r\nContent-Length: {sum(len(b) for b in body)}\r\n"
    ]
    for name, value in resp.headers.items():
        head.append(f"{name}: {value}\r\n")
    if not keep_alive:
        head.append("Connection: close\r\n")
    head.append("\r\n")
    # One write, one syscall: separate writes cost a loopback TCP segment each.
    return b"".join([("".join(head)).encode("latin-1"), *body])


# ----------------------------------------------------------------------------------------
# asyncio front end
# ----------------------------------------------------------------------------------------

Handler = Callable[[Request], "Response | Awaitable[Response]"]
FastPath = Callable[[bytearray], "tuple[int, bytes] | None"]
"""A service's native shortcut for its hot request: given the connection buffer, either
None (the layer parses and routes the request with every rule) or (bytes consumed, the
whole HTTP response) for a complete, plain, keep-alive request it answered itself."""


class _ChunkedDecoder:
    """Incremental chunked-body decoder over the connection buffer."""

    def __init__(self, limit: int, max_line: int):
        self.limit, self.max_line = limit, max_line
        self.parts: list[bytes] = []
        self.total = 0
        self.in_trailer = False

    def feed(self, buf: bytearray, pos: int) -> tuple[int, bytes | None]:
        """Consume what it can from buf[pos:]; (new pos, body when complete)."""
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if len(buf) - pos > self.max_line:
                    raise HttpError(400, "bad_chunking", "chunk line too long", close=True)
                return pos, None
            if eol - pos > self.max_line:
                raise HttpError(400, "bad_chunking", "chunk line too long", close=True)
            if self.in_trailer:
                if eol == pos:
                    return eol + 2, b"".join(self.parts)
                pos = eol + 2
                continue
            size_field = bytes(buf[pos:eol]).split(b";", 1)[0]
            if not _HEX.fullmatch(size_field):
                raise HttpError(400, "bad_chunking", "malformed chunk size", close=True)
            size = int(size_field, 16)
            if size == 0:
                self.in_trailer = True
                pos = eol + 2
                continue
            if self.total + size > self.limit:
                raise HttpError(
                    413, "too_large", f"request body over the limit of {self.limit} bytes",
                    close=True,
                )  # fmt: skip
            end = eol + 2 + size
            if len(buf) < end + 2:
                return pos, None
            if buf[end : end + 2] != b"\r\n":
                raise HttpError(400, "bad_chunking", "chunk data not followed by CRLF", close=True)
            self.parts.append(bytes(buf[eol + 2 : end]))
            self.total += size
            pos = end + 2


class _Pending:
    __slots__ = ("method", "target", "headers", "keep", "length", "start", "chunks")

    def __init__(self, method, target, headers, keep, length, start, chunks):
        self.method, self.target, self.headers = method, target, headers
        self.keep, self.length, self.start, self.chunks = keep, length, start, chunks


class _ServerState:
    def __init__(self, handler: Handler, limits: Limits, fast: FastPath | None = None):
        self.handler = handler
        self.fast = fast
        self.limits = limits
        self.conns: set[HttpProtocol] = set()
        self.stats = HttpStats()
        # Set by `AsyncServer.drain`: every answer closes its connection, so that a
        # keep-alive client (or a Service's conntrack entry) opens a new one elsewhere.
        self.draining = False


class HttpProtocol(asyncio.Protocol):
    """One connection: parse, route (sync handlers answer inline), respond, repeat."""

    def __init__(self, st: _ServerState):
        self.st = st
        self.lim = st.limits
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.closing = False
        self.paused = False
        self.pending: _Pending | None = None
        self.task: asyncio.Future | None = None
        self.deadline = 0.0
        self.in_head = False
        self.sent_continue = False
        self.last_active = 0.0  # connection made or the latest answer sent (drain)

    # --- connection lifecycle -----------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        st = self.st
        if len(st.conns) >= self.lim.max_connections:
            st.stats.refused += 1
            self.closing = True
            body = error_body(503, "too_many_connections", "connection limit reached")
            transport.write(encode_response(Response(503, body), False))
            transport.close()
            return
        st.conns.add(self)
        st.stats.open = len(st.conns)
        self.last_active = _now()
        self.deadline = self.last_active + self.lim.idle_timeout

    def connection_lost(self, exc):
        self.closing = True
        self.st.conns.discard(self)
        self.st.stats.open = len(self.st.conns)
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def expire(self, now: float) -> None:
        """Called by the sweeper: close a connection past its deadline."""
        if self.closing or self.busy or not self.deadline or now < self.deadline:
            return
        if self.buf or self.pending is not None:
            self.st.stats.header_timeouts += 1
            self._fail(HttpError(408, "request_timeout", "request not received in time"))
        else:
            self.st.stats.idle_timeouts += 1
            self.closing = True
            self.transport.close()

    # --- input --------------------------------------------------------------------------
    def data_received(self, data: bytes):
        if self.closing:
            return
        if not self.buf and not self.busy and self.pending is None:
            self.deadline = _now() + self.lim.header_timeout  # a new request begins
            self.in_head = True
        self.buf += data
        if self.busy:
            if len(self.buf) > self.lim.max_body_bytes + self.lim.max_header_bytes:
                if not self.paused:
                    self.transport.pause_reading()
                    self.paused = True
            return
        self._next()

    def _fail(self, exc: HttpError) -> None:
        """Answer a protocol-level error and close (the stream position is unknown)."""
        self.st.stats.protocol_errors += 1
        self.closing = True
        self.transport.write(encode_response(exc.response(), False))
        self.transport.close()

    def _next(self) -> None:
        fast = self.st.fast
        while not self.busy and not self.closing:
            if fast is not None and self.pending is None and self.buf:
                try:
                    done = fast(self.buf)
                except Exception:  # a bug in the shortcut: the layer answers instead
                    log.exception("fast path failed; answering through the handler")
                    done = None
                if done is not None:
                    del self.buf[: done[0]]
                    self.deadline = 0.0
                    if self.transport.is_closing():
                        self.closing = True
                        return
                    self.transport.write(done[1])
                    if not self.buf:
                        self.deadline = _now() + self.lim.idle_timeout
                    continue
            try:
                if self.pending is None and not self._parse_head():
                    if self.buf and not self.deadline:  # a pipelined request's partial head
                        self.deadline = _now() + self.lim.header_timeout
                    return
                req = self._body()
            except HttpError as exc:
                self._fail(exc)
                return
            if req is None:
                return
            keep = self.pending.keep
            self.pending = None
            self.deadline = 0.0
            try:
                result = self.st.handler(req)
            except HttpError as exc:
                result = exc.response()
            except Exception:  # a bug: answer 500 and keep serving
                log.exception("handler failed for %s %s", req.method, req.path)
                result = Response.error(500, "internal", INTERNAL_MESSAGE)
            if isinstance(result, Response):
                self._send(result, keep)
            else:
                self.busy = True
                self.task = asyncio.ensure_future(result)
                self.task.add_done_callback(lambda t, r=req, k=keep: self._finish(t, r, k))
                return

    def _parse_head(self) -> bool:
        buf, lim = self.buf, self.lim
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > lim.max_header_bytes:
                raise HttpError(431, "headers_too_large", "request head over the limit")
            return False
        if end > lim.max_header_bytes:
            raise HttpError(431, "headers_too_large", "request head over the limit")
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            raise HttpError(400, "bad_http", f"bad request line {lines[0][:80]!r}")
        method, target, version = parts
        if version != "HTTP/1.1" and version != "HTTP/1.0":
            if version.startswith("HTTP/"):
                raise HttpError(505, "bad_http_version", f"{version[:20]!r}: use HTTP/1.1")
            raise HttpError(400, "bad_http", f"bad request line {lines[0][:80]!r}")
        if not method or not _TOKEN_CHARS.fullmatch(method) or not target:
            raise HttpError(400, "bad_http", f"bad request line {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        cl: list[str] = []
        te: list[str] = []
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not _TOKEN_CHARS.fullmatch(name):
                raise HttpError(400, "bad_http", f"bad header line {line[:80]!r}")
            name = name.lower()
            value = value.strip(" \t")
            if name == "content-length":
                cl.append(value)
            elif name == "transfer-encoding":
                te.append(value)
            old = headers.get(name)
            headers[name] = value if old is None else f"{old}, {value}"
        length = framing(cl, te)
        if length > lim.max_body_bytes:
            raise HttpError(
                413, "too_large", f"request body has {length} bytes, limit {lim.max_body_bytes}"
            )
        conn = headers.get("connection", "").lower()
        keep = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
        chunks = (
            _ChunkedDecoder(lim.max_body_bytes, lim.max_header_bytes) if length == CHUNKED else None
        )
        self.pending = _Pending(method, target, headers, keep, length, end + 4, chunks)
        self.in_head = False
        # A body must arrive within the idle timeout of its head.
        self.deadline = _now() + lim.idle_timeout
        return True

    def _body(self) -> Request | None:
        p, buf = self.pending, self.buf
        if p.chunks is not None:
            p.start, body = p.chunks.feed(buf, p.start)
            if body is None:
                self._maybe_continue()
                return None
            del buf[: p.start]
        else:
            total = p.start + p.length
            if len(buf) < total:
                self._maybe_continue()
                return None
            body = bytes(buf[p.start : total])
            del buf[:total]
        self.sent_continue = False
        path, _, query = p.target.partition("?")
        return Request(p.method, path, query, p.headers, body)

    def _maybe_continue(self) -> None:
        if not self.sent_continue and self.pending.headers.get("expect", "") == "100-continue":
            self.sent_continue = True
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _finish(self, task: asyncio.Future, req: Request, keep: bool) -> None:
        self.busy = False
        self.task = None
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            resp = task.result()
        elif isinstance(exc, HttpError):
            resp = exc.response()
        else:  # a bug: answer 500 and keep the server up
            log.error("handler failed for %s %s", req.method, req.path, exc_info=exc)
            resp = Response.error(500, "internal", INTERNAL_MESSAGE)
        if self.closing:
            return
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        self._send(resp, keep)
        if self.buf and not self.closing:
            self.deadline = _now() + self.lim.header_timeout
            self._next()

    def _send(self, resp: Response, keep: bool) -> None:
        if self.transport.is_closing():
            self.closing = True
            return
        keep = keep and not self.st.draining
        self.last_active = _now()
        self.transport.write(encode_response(resp, keep))
        if not keep:
            self.closing = True
            self.transport.close()
        elif not self.buf:
            self.deadline = _now() + self.lim.idle_timeout


async def _sweep(st: _ServerState) -> None:
    lim = st.limits
    period = min(max(min(lim.header_timeout, lim.idle_timeout) / 4, 0.05), 1.0)
    while True:
        await asyncio.sleep(period)
        now = _now()
        for conn in list(st.conns):
            conn.expire(now)


_DRAIN_IDLE = 0.5


class AsyncServer:
    """A listening asyncio server plus its sweeper; `close()` stops both."""

    def __init__(self, server: asyncio.Server, st: _ServerState, sweeper: asyncio.Task):
        self.server, self.state, self._sweeper = server, st, sweeper
        self.sockets = server.sockets

    @property
    def stats(self) -> HttpStats:
        return self.state.stats

    @property
    def port(self) -> int:
        return self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        self._sweeper.cancel()
        self.server.close()
        for conn in list(self.state.conns):
            if conn.transport is not None:
                conn.transport.close()

    def start_draining(self) -> None:
        """From now on every answer says `Connection: close` (new connections are still
        accepted and answered)."""
        self.state.draining = True

    async def drain(self, timeout: float) -> int:
        """Stop accepting connections, close the idle ones, let every request in progress
        finish (its answer closes its connection) for up to `timeout` seconds; returns the
        connections still open then (closed by `close()`). A connection idle for less than
        `_DRAIN_IDLE` seconds (just accepted: its request may be on the way) is left open
        that long."""
        self.start_draining()
        self.server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            now = _now()
            for conn in list(self.state.conns):
                idle = not conn.busy and not conn.buf and conn.pending is None
                if idle and not conn.closing and now - conn.last_active >= _DRAIN_IDLE:
                    conn.closing = True
                    conn.transport.close()
            if not self.state.conns or loop.time() >= deadline:
                return len(self.state.conns)
            await asyncio.sleep(0.02)


async def serve_async(
    handler: Handler,
    host: str,
    port: int,
    limits: Limits,
    *,
    backlog: int = 1024,
    fast: FastPath | None = None,
) -> AsyncServer:
    """Listen on host:port; `handler(req)` returns a Response or an awaitable of one and
    may raise HttpError. `fast` (optional) answers the service's hot request first."""
    st = _ServerState(handler, limits, fast)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: HttpProtocol(st), host, port, backlog=backlog, reuse_address=True
    )
    return AsyncServer(server, st, loop.create_task(_sweep(st)))


# ----------------------------------------------------------------------------------------
# threaded front end (http.server)
# ----------------------------------------------------------------------------------------


class ThreadedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with the layer's limits: a connection cap and a watchdog that
    closes connections whose request head is overdue."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, handler_class, limits: Limits):
        self.limits = limits
        self.stats = HttpStats()
        self._lock = threading.Lock()
        self._deadlines: dict[socket.socket, float] = {}
        self._fired: set[socket.socket] = set()
        self._stop = threading.Event()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler_class)
        self._watchdog = threading.Thread(target=self._watch, name="http-watchdog", daemon=True)
        self._watchdog.start()
        self._serving: threading.Thread | None = None

    @property
    def url(self) -> str:
        """http://HOST:PORT the server listens on (IPv6 hosts bracketed)."""
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self, name: str = "http"):
        """Serve in a daemon thread; returns the server."""
        self._serving = threading.Thread(target=self.serve_forever, name=name, daemon=True)
        self._serving.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def watch(self, sock: socket.socket, seconds: float | None) -> bool:
        """Set (or with None clear) the deadline of `sock`; False when it already fired:
        the head read since was cut short and must not be acted on."""
        with self._lock:
            if seconds is None:
                self._deadlines.pop(sock, None)
            else:
                self._deadlines[sock] = _now() + seconds
            return sock not in self._fired

    def _watch(self) -> None:
        lim = self.limits
        period = min(max(lim.header_timeout / 4, 0.05), 1.0)
        while not self._stop.wait(period):
            now = _now()
            with self._lock:
                late = [s for s, d in self._deadlines.items() if now >= d]
                for s in late:
                    del self._deadlines[s]
                    self._fired.add(s)
            for sock in late:
                self.stats.header_timeouts += 1
                try:
                    sock.sendall(
                        encode_response(
                            Response(408, error_body(408, None, "request not received in time")),
                            False,
                        )
                    )
                except OSError:
                    pass
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # the handler's read returns: it ends
                except OSError:
                    pass

    def process_request(self, request, client_address):
        with self._lock:
            over = self.stats.open >= self.limits.max_connections
            if not over:
                self.stats.open += 1
        if over:
            self.stats.refused += 1
            try:
                request.settimeout(1.0)
                body = error_body(503, "too_many_connections", "connection limit reached")
                request.sendall(encode_response(Response(503, body), False))
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            with self._lock:
                self.stats.open -= 1
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self.stats.open -= 1
                self._deadlines.pop(request, None)
                self._fired.discard(request)

    def server_close(self):
        self._stop.set()
        super().server_close()


class HardenedHandler(BaseHTTPRequestHandler):
    """BaseHTTPRequestHandler under the layer's rules. After `parse_request`,
    `self.body_length` is the Content-Length or CHUNKED; read bodies with `read_body` or
    `iter_body`; answer errors with `send_json_error`."""

    server: ThreadedServer
    protocol_version = "HTTP/1.1"
    body_length = 0
    body_read = False

    def setup(self):
        super().setup()
        self.connection.settimeout(self.server.limits.idle_timeout)

    def log_message(self, format, *args):  # noqa: A002 - quiet by default
        if os.environ.get(C.ENV_HTTP_ACCESS_LOG) == "1":
            super().log_message(format, *args)

    def handle_one_request(self) -> None:
        srv = self.server
        try:
            try:
                first = self.rfile.peek(1)  # idle keep-alive: the socket timeout ends it
            except TimeoutError:
                srv.stats.idle_timeouts += 1
                first = b""
            if not first:
                self.close_connection = True
                return
            srv.watch(self.connection, srv.limits.header_timeout)
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            self.body_read = False
            if not self.parse_request():
                return
            if not srv.watch(self.connection, None):  # the watchdog cut the head short
                self.close_connection = True
                return
            method = getattr(self, "do_" + self.command, None)
            if method is None:
                self.send_json_error(501, "not_implemented", f"{self.command} not supported")
                self.close_connection = True
                return
            try:
                method()
            except HttpError as exc:
                self.close_connection = True
                if not getattr(self, "_headers_sent", False):
                    self.send_json_error(exc.status, exc.code, exc.message)
            except (ConnectionError, TimeoutError):
                self.close_connection = True
                return
            except Exception:
                log.exception("handler failed for %s %s", self.command, self.path)
                self.close_connection = True
                if not getattr(self, "_headers_sent", False):
                    self.send_json_error(500, "internal", INTERNAL_MESSAGE)
            if not self.body_read and self.body_length:
                self.close_connection = True  # an unread body would be parsed as a request
            self.wfile.flush()
        except (TimeoutError, ConnectionError, OSError):
            self.close_connection = True
        finally:
            srv.watch(self.connection, None)

    def parse_request(self) -> bool:
        self._headers_sent = False
        if not super().parse_request():
            self.close_connection = True
            return False
        if self.headers.defects or any("\n" in v for v in self.headers.values()):
            # a line that is no header (e.g. whitespace before the colon) or a folded line
            self.server.stats.protocol_errors += 1
            self.close_connection = True
            self.send_json_error(400, "bad_http", "malformed header line")
            return False
        size = len(self.raw_requestline) + sum(len(k) + len(v) + 4 for k, v in self.headers.items())
        if size > self.server.limits.max_header_bytes:
            self.close_connection = True
            self.send_json_error(431, "headers_too_large", "request head over the limit")
            return False
        try:
            self.body_length = framing(
                self.headers.get_all("Content-Length") or [],
                self.headers.get_all("Transfer-Encoding") or [],
            )
        except HttpError as exc:
            self.server.stats.protocol_errors += 1
            self.close_connection = True
            self.send_json_error(exc.status, exc.code, exc.message)
            return False
        return True

    def send_error(self, code, message=None, explain=None):
        """The stdlib's protocol errors, in the layer's error body; the connection closes."""
        self.server.stats.protocol_errors += 1
        self.close_connection = True
        self.send_json_error(int(code), None, message or REASONS.get(int(code), "error"))

    def send_json_error(
        self, status: int, code: str | None, message: str, headers: dict | None = None
    ) -> None:
        body = error_body(status, code, message)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, doc, ctype: str = "application/json") -> None:
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def end_headers(self):
        self._headers_sent = True
        super().end_headers()

    def iter_body(self, limit: int, step: int = 1 << 20) -> Iterator[bytes]:
        """The request body in pieces; HttpError 413 over `limit`, 400 when malformed or cut
        short (the connection then closes)."""
        if self.body_length == CHUNKED:
            yield from self._iter_chunked(limit)
        else:
            remaining = self.body_length
            if remaining > limit:
                raise HttpError(
                    413, "too_large", f"body of {remaining} bytes exceeds the limit of {limit}"
                )
            while remaining:
                chunk = self.rfile.read(min(step, remaining))
                if not chunk:
                    raise HttpError(400, "incomplete_body", "client closed before the whole body")
                remaining -= len(chunk)
                yield chunk
        self.body_read = True

    def _iter_chunked(self, limit: int) -> Iterator[bytes]:
        total = 0
        max_line = self.server.limits.max_header_bytes
        while True:
            line = self.rfile.readline(max_line + 1)
            if not line.endswith(b"\r\n"):
                raise HttpError(400, "bad_chunking", "malformed or truncated chunk size line")
            size_field = line[:-2].split(b";", 1)[0]
            if not _HEX.fullmatch(size_field):
                raise HttpError(400, "bad_chunking", "malformed chunk size")
            size = int(size_field, 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    t = self.rfile.readline(max_line + 1)
                    if t == b"\r\n":
                        return
                    if not t.endswith(b"\r\n"):
                        raise HttpError(400, "bad_chunking", "malformed chunk trailer")
            total += size
            if total > limit:
                raise HttpError(413, "too_large", f"body exceeds the limit of {limit} bytes")
            while size:
                data = self.rfile.read(min(size, 1 << 20))
                if not data:
                    raise HttpError(400, "incomplete_body", "client closed inside a chunk")
                size -= len(data)
                yield data
            if self.rfile.read(2) != b"\r\n":
                raise HttpError(400, "bad_chunking", "chunk data not followed by CRLF")

    def read_body(self, limit: int) -> bytes:
        return b"".join(self.iter_body(limit))

    def discard_body(self, max_bytes: int = 1 << 20) -> None:
        """Read and drop a small Content-Length body so the connection stays in sync; any
        other body (large, chunked) closes the connection after the answer."""
        if self.body_length == CHUNKED or self.body_length > max_bytes:
            self.close_connection = True
            return
        if self.body_length:
            self.rfile.read(self.body_length)
        self.body_read = True
