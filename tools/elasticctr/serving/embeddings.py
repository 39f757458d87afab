"""Where embedding rows come from: cube shards (production) or a local table.

`CubeEmbeddings` speaks cube's binary protocol (`elasticctr.cube.protocol`) and routes
keys with cube's own `shard_of`, over asyncio keep-alive connections: cube's
`CubeClient` is synchronous (httpx + a thread per shard), and a thread hop per batch on
the serving event loop costs more than the lookup itself. Every shard is asked in
parallel with the version pinned (`X-Cube-Version`); every answer must carry that
version, or the whole lookup fails with `VersionUnavailable` (never mixed rows).

Cheap per lookup (it is a third of a lone request's CPU): a connection is an
`asyncio.Protocol` that parses the answer as it arrives and resolves one future (stream
reads wake the caller once per header line), and a lookup writes its request to every
shard first and then awaits the answers in turn -- no task per shard, one timer each.

A shard with replicas (`protocol.parse_shards`) is asked through one replica at a time, in
turn; a lookup is idempotent, so when that replica cannot answer it (unreachable, timeout,
5xx, or it does not hold the pinned version or table: 409/404) the next replica of the same
shard is asked, and a replica that failed is asked last for `DOWN_SECONDS` (doubled at
each failure in a row). Only when every replica fails does the lookup fail.
"""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlsplit

import numpy as np

from elasticctr.cube.format import shard_of
from elasticctr.cube.protocol import (
    CONTENT_TYPE,
    LOOKUP_PATH,
    TABLE_HEADER,
    VERSION_HEADER,
    decode_response,
    encode_keys,
    parse_shards,
)
from elasticctr.errors import EctlError
from elasticctr.httpd import error_message
from elasticctr.scenarios import DEFAULT
from elasticctr.serving.model import LocalTable


class VersionUnavailable(EctlError):
    """A shard does not hold the pinned version (it was unloaded or not yet loaded)."""


class CubeUnavailable(EctlError):
    """A shard could not be reached or answered an error."""


CONNECT_TIMEOUT = 1.0
"""Seconds to open a connection to a shard replica (a pod that is gone may never answer
the SYN): the lookup moves on to another replica instead of waiting out the timeout."""
DOWN_SECONDS = 2.0
"""A replica that failed is asked last for this long, doubled at each failure in a row
(at most DOWN_MAX_SECONDS): a replica that is gone costs a connect timeout rarely."""
DOWN_MAX_SECONDS = 30.0
RETRY_STATUSES = frozenset({404, 409, 500, 502, 503, 504})
"""Answers another replica of the shard may not give: not holding the table (404) or the
pinned version (409: not loaded yet after a restart), or a server error."""


MAX_RESPONSE_HEAD = 64 << 10
"""A shard's response head over this many bytes is an error (cube answers ~100 bytes)."""


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to a shard replica, one request at a time: the
    request is written at once and the answer parsed in `data_received`, which resolves
    the request's future -- one wake-up per answer (stream reads cost one per line)."""

    def __init__(self):
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None
        self.head: tuple[int, int, int, bool] | None = None  # status, body start, end, close
        self.lost = False

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.lost = True
        self._fail(exc or ConnectionResetError("connection closed by the shard"))

    def data_received(self, data: bytes):
        self.buf += data
        if self.waiter is None:  # a shard never speaks first: the stream is out of step
            self.close()
            return
        try:
            answer = self._answer()
        except (ValueError, IndexError) as exc:  # not an HTTP answer
            self.close()
            self._fail(ValueError(f"bad answer: {exc}"))
            return
        if answer is not None:
            waiter, self.waiter = self.waiter, None
            if not waiter.done():
                waiter.set_result(answer)

    def _answer(self) -> tuple[int, bytes, bool] | None:
        """(status, body, close) once the whole answer is in the buffer."""
        buf = self.buf
        if self.head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_RESPONSE_HEAD:
                    raise ValueError("response head too large")
                return None
            lines = bytes(buf[:end]).split(b"\r\n")
            status = int(lines[0].split(b" ", 2)[1])
            length, close = 0, False
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
            self.head = (status, end + 4, end + 4 + length, close)
        status, start, stop, close = self.head
        if len(buf) < stop:
            return None
        body = bytes(buf[start:stop])
        del buf[:stop]
        self.head = None
        return status, body, close

    def _fail(self, exc: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def send(self, data: bytes) -> asyncio.Future:
        """Write one request; the future gets (status, body, close) or the connection's error."""
        self.waiter = fut = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return fut

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()


class _Pending:
    """A request `_Shard.begin` started: what to send, its deadline, and the connection and
    answer future when it was written at once."""

    __slots__ = ("args", "data", "deadline", "conn", "future")

    def __init__(self, args: tuple, data: bytes):
        self.args, self.data = args, data
        self.deadline = 0.0
        self.conn: _Conn | None = None
        self.future: asyncio.Future | None = None

    def abandon(self) -> None:
        """Nobody will `finish` it (another shard failed first, or the caller was
        cancelled): close its connection, whose answer would be out of step."""
        conn, fut = self.conn, self.future
        self.conn = self.future = None
        if conn is not None:
            conn.close()
        if fut is not None and fut.done() and not fut.cancelled():
            fut.exception()  # retrieved: no "exception was never retrieved" at GC
        elif fut is not None:
            fut.cancel()


class _Shard:
    """Keep-alive HTTP/1.1 connections to one shard (a small pool, opened on demand)."""

    def __init__(self, url: str, timeout: float, max_idle: int = 16):
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname:
            raise EctlError(f"cube shard URL {url!r}: expected http://host:port")
        self.url = url
        self.host, self.port = parts.hostname, parts.port or 80
        self.timeout = timeout
        self.idle: list[_Conn] = []
        self.max_idle = max_idle

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        return await self.finish(self.begin(method, path, body, headers))

    def begin(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> _Pending:
        """Start a request: written at once on an idle connection (else when `finish` opens
        one), so that every shard of a lookup is asked before the first answer is awaited
        -- in parallel without a task per shard. `finish` (or `abandon`) must follow."""
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(body)}\r\n"
        for k, v in (headers or {}).items():
            head += f"{k}: {v}\r\n"
        pending = _Pending((method, path, body, headers), head.encode("latin-1") + b"\r\n" + body)
        pending.deadline = asyncio.get_running_loop().time() + self.timeout
        conn = self._idle_conn()
        if conn is not None:
            pending.conn, pending.future = conn, conn.send(pending.data)
        return pending

    async def finish(self, pending: _Pending) -> tuple[int, bytes]:
        """(status, body) of a request `begin` started; CubeUnavailable when the replica
        cannot answer within the timeout (counted from `begin`)."""
        try:
            async with asyncio.timeout_at(pending.deadline):
                return await self._exchange(pending)
        except (TimeoutError, OSError, ValueError) as exc:
            raise CubeUnavailable(
                f"cube shard {self.url}: {type(exc).__name__}: {exc or 'timeout'}"
            ) from exc

    def _idle_conn(self) -> _Conn | None:
        while self.idle:
            conn = self.idle.pop()
            if not conn.lost:  # else closed by the shard while idle
                return conn
        return None

    async def _exchange(self, pending: _Pending) -> tuple[int, bytes]:
        conn, fut = pending.conn, pending.future
        pending.conn = pending.future = None  # this call owns them now
        for attempt in (0, 1):
            fresh = False
            if fut is None:
                conn = self._idle_conn()
                if conn is None:
                    conn, fresh = await self._open(), True
                fut = conn.send(pending.data)
            try:
                status, payload, close = await fut
            except OSError:
                conn.close()
                if fresh or attempt:
                    raise
                fut = None
                continue  # a stale keep-alive connection: retry once on a new one
            except BaseException:  # timeout, cancelled, a bad answer: the stream is lost
                conn.close()
                raise
            if close or conn.lost or len(self.idle) >= self.max_idle:
                conn.close()
            else:
                self.idle.append(conn)
            return status, payload
        raise AssertionError("unreachable")

    async def _open(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(_Conn, self.host, self.port), min(self.timeout, CONNECT_TIMEOUT)
        )
        return conn

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


class _ShardGroup:
    """The replicas of one shard (one `_Shard` each): see the module's docstring."""

    def __init__(self, urls: list[str], timeout: float):
        self.replicas = [_Shard(u, timeout) for u in urls]
        self.down_until = [0.0] * len(urls)
        self.fails = [0] * len(urls)  # failures in a row
        self.turn = 0
        self.url = "|".join(urls)
        self.retries = 0  # lookups answered by another replica after one failed

    def order(self) -> list[int]:
        """Replicas to ask, in turn; the ones that failed lately last."""
        n = len(self.replicas)
        self.turn = (self.turn + 1) % n
        turn = [(self.turn + k) % n for k in range(n)]
        now = time.monotonic()
        return [r for r in turn if self.down_until[r] <= now] + [
            r for r in turn if self.down_until[r] > now
        ]

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes, _Shard]:
        return await self.finish(self.begin(method, path, body, headers))

    def begin(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[list[int], _Pending]:
        """Start the request on the replica whose turn it is (`_Shard.begin`)."""
        order = self.order()
        return order, self.replicas[order[0]].begin(method, path, body, headers)

    async def finish(self, call: tuple[list[int], _Pending]) -> tuple[int, bytes, _Shard]:
        """(status, body, replica) of the first replica that answers other than with one of
        `RETRY_STATUSES`; else the last answer, or CubeUnavailable when none answered."""
        order, first = call
        last: tuple[int, bytes, _Shard] | None = None
        error: CubeUnavailable | None = None
        for k, r in enumerate(order):
            replica = self.replicas[r]
            try:
                pending = first if k == 0 else replica.begin(*first.args)
                status, payload = await replica.finish(pending)
            except CubeUnavailable as exc:
                self._down(r)
                error = exc
                continue
            if status in RETRY_STATUSES and len(self.replicas) > 1:
                if status >= 500:
                    self._down(r)
                last = (status, payload, replica)
                continue
            self.fails[r] = 0
            if k:
                self.retries += 1
            return status, payload, replica
        if last is not None:
            return last
        assert error is not None
        raise error

    def _down(self, r: int) -> None:
        self.fails[r] += 1
        wait = min(DOWN_SECONDS * 2 ** (self.fails[r] - 1), DOWN_MAX_SECONDS)
        self.down_until[r] = time.monotonic() + wait

    def close(self) -> None:
        for r in self.replicas:
            r.close()


class CubeEmbeddings:
    """All shards of one cube, shard i at urls[i] (the order cube-transfer built them in;
    a shard's replicas joined by `|`: `protocol.parse_shards`)."""

    kind = "cube"

    def __init__(self, urls: list[str], timeout: float = 5.0):
        groups = parse_shards(urls)
        if not groups:
            raise EctlError("no cube shard URLs given")
        self.shards = [_ShardGroup(g, timeout) for g in groups]

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.shards]

    async def lookup(
        self, keys: np.ndarray, version: str, dim: int, table: str | None = None
    ) -> np.ndarray:
        """float32 [len(keys), dim]: rows of `keys` in `version` of `table` (a scenario;
        None = the default table), zeros for unknown keys."""
        n = len(self.shards)
        owner = shard_of(keys, n) if n > 1 else np.zeros(keys.size, np.int64)
        groups = [np.flatnonzero(owner == i) for i in range(n)]
        headers = {"Content-Type": CONTENT_TYPE, VERSION_HEADER: version}
        if table and table != DEFAULT:
            headers[TABLE_HEADER] = table
        # Every shard is asked first (written at once on a keep-alive connection), then the
        # answers are awaited in turn: parallel without a task per shard. A shard without
        # an idle connection yet (the first lookups, after a failure) needs one opened:
        # then a task per shard, so the shards are still asked in parallel.
        calls = [
            (shard, shard.begin("POST", LOOKUP_PATH, encode_keys(keys[idx]), headers))
            for shard, idx in zip(self.shards, groups, strict=True)
            if idx.size
        ]
        try:
            if all(call[1].future is not None for _, call in calls):
                answers = [await shard.finish(call) for shard, call in calls]
            else:
                answers = await asyncio.gather(*(shard.finish(call) for shard, call in calls))
        finally:
            for _, (_, pending) in calls:
                pending.abandon()  # (a no-op for the ones finished)
        rows = np.empty((keys.size, dim), dtype=np.float32)
        asked = [idx for idx in groups if idx.size]
        for idx, (status, body, shard) in zip(asked, answers, strict=True):
            if status in (404, 409):  # 404: the table is gone (scenario removed)
                raise VersionUnavailable(
                    f"cube shard {shard.url} does not hold version {version}: {_msg(body)}"
                )
            if status != 200:
                raise CubeUnavailable(f"cube shard {shard.url}: {status} {_msg(body)}")
            result = decode_response(body)
            if result.version != version:  # the pin was ignored: never mix versions
                raise VersionUnavailable(
                    f"cube shard {shard.url} answered version {result.version}, not {version}"
                )
            if result.rows.shape != (idx.size, dim):
                raise CubeUnavailable(
                    f"cube shard {shard.url}: rows {result.rows.shape}, expected {(idx.size, dim)}"
                )
            rows[idx] = result.rows
        return rows

    async def statuses(self) -> list[dict]:
        """/v1/status of every replica that answers (CubeUnavailable when no replica of
        some shard can tell). Replicas of a shard that disagree read as a switch in
        progress (`committed_of`)."""

        async def status(shard: _Shard) -> dict:
            status, body = await shard.request("GET", "/v1/status")
            if status != 200:
                raise CubeUnavailable(f"cube shard {shard.url} answered {status}: {_msg(body)}")
            try:
                return json.loads(body)
            except ValueError:
                raise CubeUnavailable(f"cube shard {shard.url}: /v1/status is not JSON") from None

        replicas = [r for g in self.shards for r in g.replicas]
        answers = await asyncio.gather(*(status(r) for r in replicas), return_exceptions=True)
        out, k = [], 0
        for group in self.shards:
            mine = answers[k : k + len(group.replicas)]
            k += len(group.replicas)
            good = [a for a in mine if not isinstance(a, BaseException)]
            if not good:
                err = mine[0]
                if isinstance(err, CubeUnavailable):
                    raise err
                raise CubeUnavailable(str(err)) from err
            out.extend(good)
        return out

    async def committed(self, table: str | None = None) -> str | None:
        """The version every shard has committed (in `table`); None when no shard has
        committed one yet. Raises CubeUnavailable when a shard cannot tell, or while the
        shards disagree (a switch in progress), so that None really means "no model
        version yet"."""
        return committed_of(await self.statuses(), table)

    def close(self) -> None:
        for s in self.shards:
            s.close()


def committed_of(statuses: list[dict], table: str | None) -> str | None:
    """The committed version of `table` that all shard statuses agree on (see committed)."""
    seen = set()
    for st in statuses:
        if table and table != DEFAULT:
            st = st.get("tables", {}).get(table, {})
        seen.add(st.get("committed"))
    if len(seen) > 1:
        where = f" of table {table}" if table and table != DEFAULT else ""
        raise CubeUnavailable(
            f"cube shards disagree on the committed version{where}: {sorted(map(str, seen))}"
        )
    return seen.pop() if seen else None


def tables_of(statuses: list[dict]) -> set[str]:
    """Scenario tables every shard status lists (not the default one)."""
    held = [set(st.get("tables", {})) for st in statuses]
    return set.intersection(*held) - {DEFAULT} if held else set()


class TableEmbeddings:
    """One scenario's table of a shared cube: what a scenario's versions look rows up in."""

    kind = "cube"

    def __init__(self, cube: CubeEmbeddings, table: str):
        self.cube = cube
        self.table = table

    @property
    def urls(self) -> list[str]:
        return self.cube.urls

    async def lookup(self, keys: np.ndarray, version: str, dim: int) -> np.ndarray:
        return await self.cube.lookup(keys, version, dim, self.table)

    async def committed(self) -> str | None:
        return await self.cube.committed(self.table)

    def close(self) -> None:  # the shared cube is closed by its owner
        pass


def _msg(body: bytes) -> str:
    return error_message(body.decode(errors="replace"))


class LocalEmbeddings:
    """A version's sparse table in this process (`ectl serve` without `--cube`)."""

    kind = "local"

    def __init__(self, table: LocalTable):
        self.table = table

    async def lookup(self, keys: np.ndarray, version: str, dim: int) -> np.ndarray:
        return self.table.lookup(keys)
