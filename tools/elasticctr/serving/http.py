"""A small HTTP/1.1 server on asyncio.Protocol: keep-alive, Content-Length bodies, limits.

Why not uvicorn+starlette: the whole request path of a prediction (parse, queue,
batch, respond) costs tens of microseconds, and an ASGI stack adds several times that
per request; on a 2-core machine the front end decides the QPS (measured in
docs/serving.md). The server speaks the subset clients use: one request at a time per
connection (pipelined requests wait in the buffer), bodies with Content-Length (chunked
bodies get 411), keep-alive by default for HTTP/1.1. Malformed requests get a 4xx and the
connection is closed; nothing a client sends can raise out of the protocol.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}


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
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def json(status: int, doc) -> Response:
        return Response(status, json.dumps(doc, separators=(",", ":")).encode())

    @staticmethod
    def error(status: int, code: str, message: str, **extra) -> Response:
        err = {"code": code, "message": message, **extra}
        return Response.json(status, {"error": err})


Handler = Callable[[Request], Awaitable[Response]]


def encode_response(resp: Response, keep_alive: bool) -> bytes:
    head = [
        f"HTTP/1.1 {resp.status} {REASONS.get(resp.status, 'Unknown')}",
        f"Content-Type: {resp.content_type}",
        f"Content-Length: {len(resp.body)}",
    ]
    for k, v in resp.headers.items():
        head.append(f"{k}: {v}")
    if not keep_alive:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + resp.body


class HttpProtocol(asyncio.Protocol):
    def __init__(self, handler: Handler, max_header_bytes: int, max_body_bytes: int):
        self.handler = handler
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.closing = False
        self.paused = False
        self.task: asyncio.Task | None = None

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closing = True
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def data_received(self, data: bytes):
        if self.closing:
            return
        self.buf += data
        if self.busy:
            if len(self.buf) > self.max_body_bytes + self.max_header_bytes and not self.paused:
                self.transport.pause_reading()
                self.paused = True
            return
        self._next()

    def _fail(self, status: int, code: str, message: str):
        """Answer a protocol-level error and close (the stream position is unknown)."""
        self.closing = True
        self.transport.write(encode_response(Response.error(status, code, message), False))
        self.transport.close()

    def _next(self):
        while not self.busy and not self.closing:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > self.max_header_bytes:
                    self._fail(431, "headers_too_large", "request head over the limit")
                return
            if end > self.max_header_bytes:
                self._fail(431, "headers_too_large", "request head over the limit")
                return
            try:
                head = bytes(self.buf[:end]).decode("latin-1")
                lines = head.split("\r\n")
                method, target, version = lines[0].split(" ")
                headers = {}
                for line in lines[1:]:
                    name, sep, value = line.partition(":")
                    if not sep or not name or name != name.strip():
                        raise ValueError(f"bad header line {line[:40]!r}")
                    headers[name.lower()] = value.strip()
            except ValueError:
                self._fail(400, "bad_http", "malformed HTTP request head")
                return
            if version not in ("HTTP/1.1", "HTTP/1.0"):
                self._fail(505, "bad_http_version", f"{version[:20]!r} is not supported")
                return
            if "transfer-encoding" in headers:
                self._fail(411, "length_required", "send the body with Content-Length")
                return
            cl = headers.get("content-length", "0")
            if not cl.isdigit() or len(cl) > 18:
                self._fail(400, "bad_http", f"bad Content-Length {cl[:20]!r}")
                return
            length = int(cl)
            if length > self.max_body_bytes:
                self._fail(
                    413,
                    "too_large",
                    f"request body has {length} bytes, limit {self.max_body_bytes}",
                )
                return
            total = end + 4 + length
            if len(self.buf) < total:
                return  # wait for the rest of the body
            body = bytes(self.buf[end + 4 : total])
            del self.buf[:total]
            conn = headers.get("connection", "").lower()
            keep = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
            path, _, query = target.partition("?")
            req = Request(method, path, query, headers, body)
            self.busy = True
            self.task = asyncio.get_running_loop().create_task(self._run(req, keep))

    async def _run(self, req: Request, keep: bool):
        try:
            resp = await self.handler(req)
        except asyncio.CancelledError:
            return
        except Exception:  # a bug, not the client's fault: say so without crashing
            log.exception("unhandled error for %s %s", req.method, req.path)
            resp = Response.error(500, "internal", "internal error (see the server log)")
        if self.closing:
            return
        self.transport.write(encode_response(resp, keep))
        if not keep:
            self.closing = True
            self.transport.close()
            return
        self.busy = False
        self.task = None
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        if self.buf:
            self._next()


async def start_server(
    handler: Handler,
    host: str,
    port: int,
    *,
    max_header_bytes: int = 16 << 10,
    max_body_bytes: int = 4 << 20,
    backlog: int = 1024,
) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: HttpProtocol(handler, max_header_bytes, max_body_bytes),
        host,
        port,
        backlog=backlog,
        reuse_address=True,
    )
