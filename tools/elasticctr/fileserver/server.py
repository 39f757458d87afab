"""A small threaded HTTP file server with token-authenticated atomic writes.

Served by the threaded front end of elasticctr.httpd (timeouts, connection cap, framing
checks, one error body): the fileserver moves whole artifacts (model versions, data
files), not many tiny requests; a thread per connection streams them to and from disk.
Two paths are reserved and never name a file: /healthz and /metrics (prometheus_client).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import tempfile
import threading
import urllib.parse
from http import HTTPStatus
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from elasticctr import constants as C
from elasticctr import metrics as M
from elasticctr.errors import EctlError
from elasticctr.httpd import (
    HardenedHandler,
    HttpError,
    Limits,
    ThreadedServer,
    bearer_ok,
)

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_CHUNK = 1 << 20


class FileServer(ThreadedServer):
    """Serves `root`; writes need `Authorization: Bearer <token>` when a token is set."""

    def __init__(
        self,
        address: tuple[str, int],
        root: Path,
        *,
        token: str | None,
        max_upload_bytes: int,
        read_token: bool = False,
        limits: Limits | None = None,
    ):
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise EctlError(f"fileserver root {self.root} is not a directory")
        self.token = token or None
        self.read_token = read_token
        self.max_upload_bytes = max_upload_bytes
        # Operation counters (handler threads add under the lock; read at scrape time).
        self.counts_lock = threading.Lock()
        self.counts = dict.fromkeys(M.FILESERVER_COUNTERS, 0)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        super().__init__(address, _Handler, limits or Limits.from_env())

    def count(self, **increments: int) -> None:
        with self.counts_lock:
            for name, n in increments.items():
                self.counts[name] += n


_RESERVED = ("/healthz", "/metrics")


class _Collector:
    """Fileserver counters and the HTTP layer's stats as Prometheus families."""

    def __init__(self, server: FileServer):
        self.server = server

    def collect(self):
        with self.server.counts_lock:
            counts = dict(self.server.counts)
        for key, spec in M.FILESERVER_COUNTERS.items():
            yield spec.family(counts[key])
        yield from M.http_families(M.FILESERVER_HTTP, self.server.stats)


class _Handler(HardenedHandler):
    server: FileServer
    server_version = "elasticctr-fileserver"

    # -- helpers ---------------------------------------------------------------------
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        if os.environ.get(C.ENV_FILESERVER_ACCESS_LOG) == "1":
            super().log_message(format, *args)

    def _send_error(self, status: HTTPStatus, message: str, code: str | None = None) -> None:
        headers = {}
        if status == HTTPStatus.UNAUTHORIZED:
            self.server.count(unauthorized=1)
            headers["WWW-Authenticate"] = 'Bearer realm="elasticctr"'
        self.send_json_error(int(status), code, message, headers)

    def _authorized(self) -> bool:
        return bearer_ok(self.headers.get("Authorization"), self.server.token)

    def _resolve(self) -> Path | None:
        """Map the URL path to a file under root; None (and a 400 sent) if it escapes."""
        raw = urllib.parse.urlsplit(self.path).path
        rel = urllib.parse.unquote(raw).lstrip("/")
        if "\x00" in rel or any(part == ".." for part in rel.split("/")):
            self._send_error(HTTPStatus.BAD_REQUEST, f"invalid path {raw!r}")
            return None
        target = (self.server.root / rel).resolve()
        if target != self.server.root and self.server.root not in target.parents:
            self._send_error(HTTPStatus.BAD_REQUEST, f"path {raw!r} is outside the store")
            return None
        return target

    # -- reads -----------------------------------------------------------------------
    def do_HEAD(self) -> None:  # noqa: N802 - stdlib naming
        self._get(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._get(head=False)

    def _get(self, *, head: bool) -> None:
        path = urllib.parse.urlsplit(self.path).path
        if path == "/healthz":
            return self._send_bytes(b"ok\n", "text/plain", head=head)
        if path == "/metrics":
            return self._send_bytes(
                generate_latest(self.server.registry), CONTENT_TYPE_LATEST, head=head
            )
        if self.server.read_token and not self._authorized():
            return self._send_error(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
        target = self._resolve()
        if target is None:
            return
        if target.is_dir():
            return self._send_listing(target, head=head)
        if not target.is_file():
            return self._send_error(HTTPStatus.NOT_FOUND, f"{path} not found")
        self._send_file(target, head=head)

    def _send_bytes(self, body: bytes, ctype: str, *, head: bool) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _send_listing(self, directory: Path, *, head: bool) -> None:
        rel = "/" + str(directory.relative_to(self.server.root)).strip(".")
        base = rel.rstrip("/") + "/"
        entries = []
        for child in sorted(directory.iterdir()):
            if child.name.startswith(".tmp-"):
                continue  # an upload in progress is not part of the store
            is_dir = child.is_dir()
            entries.append(
                {
                    "name": child.name + ("/" if is_dir else ""),
                    "type": "directory" if is_dir else "file",
                    "size": 0 if is_dir else child.stat().st_size,
                }
            )
        accept = self.headers.get("Accept", "")
        if "application/json" in accept:
            body = json.dumps({"path": base, "entries": entries}).encode()
            return self._send_bytes(body, "application/json", head=head)
        # HTML with absolute links: what fsspec's HTTPFileSystem.ls() parses.
        links = "\n".join(
            f'<li><a href="{html.escape(base + urllib.parse.quote(e["name"]))}">'
            f"{html.escape(e['name'])}</a></li>"
            for e in entries
        )
        page = (
            f"<!DOCTYPE html><html><body><h1>{html.escape(base)}</h1>"
            f"<ul>\n{links}\n</ul></body></html>\n"
        )
        self._send_bytes(page.encode(), "text/html; charset=utf-8", head=head)

    def _send_file(self, target: Path, *, head: bool) -> None:
        size = target.stat().st_size
        start, end = 0, size - 1
        status = HTTPStatus.OK
        range_header = self.headers.get("Range")
        if range_header:
            match = _RANGE.match(range_header.strip())
            if not match or (not match.group(1) and not match.group(2)):
                return self._send_error(
                    HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, f"bad Range {range_header!r}"
                )
            first, last = match.groups()
            if first:
                start = int(first)
                end = min(int(last), size - 1) if last else size - 1
            else:  # suffix range: the last N bytes
                start = max(size - int(last), 0)
            if start >= size or start > end:
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = HTTPStatus.PARTIAL_CONTENT
        length = max(end - start + 1, 0)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if status == HTTPStatus.PARTIAL_CONTENT:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if head or length == 0:
            return
        with target.open("rb") as fh:
            fh.seek(start)
            remaining = length
            while remaining:
                chunk = fh.read(min(_CHUNK, remaining))
                if not chunk:
                    break
                self.wfile.write(chunk)
                remaining -= len(chunk)
        self.server.count(files_served=1, bytes_served=length - remaining)

    # -- writes ----------------------------------------------------------------------
    def do_PUT(self) -> None:  # noqa: N802
        self._write()

    def do_POST(self) -> None:  # noqa: N802 - fsspec's put_file uses POST by default
        self._write()

    def _write(self) -> None:
        if not self._authorized():
            self.discard_body()
            return self._send_error(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
        target = self._resolve()
        if target is None:
            return
        if target == self.server.root or self.path.endswith("/"):
            return self._send_error(HTTPStatus.BAD_REQUEST, "cannot write to a directory path")
        if urllib.parse.urlsplit(self.path).path in _RESERVED:
            self.discard_body()
            return self._send_error(
                HTTPStatus.BAD_REQUEST, f"{self.path} is reserved by the fileserver"
            )
        if self.body_length == 0 and "Content-Length" not in self.headers:
            return self._send_error(
                HTTPStatus.LENGTH_REQUIRED, "Content-Length or chunked encoding is required"
            )
        self._store(target, self.iter_body(self.server.max_upload_bytes, _CHUNK))

    def _store(self, target: Path, chunks) -> None:
        """Write to a temp file beside the target, fsync, rename: readers never see a part."""
        if target.is_dir():
            self.close_connection = True
            return self._send_error(HTTPStatus.CONFLICT, f"{target.name} is a directory")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            self.close_connection = True
            return self._send_error(HTTPStatus.CONFLICT, "a parent of the path is a file")
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        written = 0
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    out.write(chunk)
                    written += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
            self.server.count(files_stored=1, bytes_stored=written)
        except HttpError as exc:
            os.unlink(tmp)
            self.close_connection = True
            return self._send_error(HTTPStatus(exc.status), exc.message, exc.code)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        body = json.dumps({"path": self.path, "bytes": written}).encode()
        self.send_response(HTTPStatus.CREATED)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_DELETE(self) -> None:  # noqa: N802
        if not self._authorized():
            self.discard_body()
            return self._send_error(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
        target = self._resolve()
        if target is None:
            return
        if target == self.server.root:
            return self._send_error(HTTPStatus.BAD_REQUEST, "refusing to delete the store root")
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        else:
            return self._send_error(HTTPStatus.NOT_FOUND, f"{self.path} not found")
        self.server.count(deletes=1)
        self.send_response(HTTPStatus.NO_CONTENT)
        self.send_header("Content-Length", "0")
        self.end_headers()


def serve(
    root: Path,
    host: str,
    port: int,
    *,
    token: str | None,
    max_upload_bytes: int,
    read_token: bool = False,
    ready: threading.Event | None = None,
) -> None:
    """Run the fileserver until interrupted (SIGTERM/SIGINT end it cleanly)."""
    server = FileServer(
        (host, port), root, token=token, max_upload_bytes=max_upload_bytes, read_token=read_token
    )
    print(f"fileserver serving {server.root} on {server.url}", flush=True)
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (Kubernetes, local-mode shutdown) ends serve_forever cleanly.
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    if ready is not None:
        ready.set()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
