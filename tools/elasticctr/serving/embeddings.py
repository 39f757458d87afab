"""Where embedding rows come from: cube shards (production) or a local table.

`CubeEmbeddings` speaks cube's binary protocol (`elasticctr.cube.protocol`) and routes
keys with cube's own `shard_of`, over asyncio keep-alive connections: cube's
`CubeClient` is synchronous (httpx + a thread per shard), and a thread hop per batch on
the serving event loop costs more than the lookup itself. Every shard is asked in
parallel with the version pinned (`X-Cube-Version`); every answer must carry that
version, or the whole lookup fails with `VersionUnavailable` (never mixed rows).

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


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer


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
        try:
            return await asyncio.wait_for(self._request(method, path, body, headers), self.timeout)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise CubeUnavailable(
                f"cube shard {self.url}: {type(exc).__name__}: {exc or 'timeout'}"
            ) from exc

    async def _request(self, method, path, body, headers) -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(body)}\r\n"
        for k, v in (headers or {}).items():
            head += f"{k}: {v}\r\n"
        data = head.encode("latin-1") + b"\r\n" + body
        for attempt in (0, 1):
            fresh = not self.idle
            conn = self.idle.pop() if self.idle else await self._open()
            try:
                conn.writer.write(data)
                status_line = await conn.reader.readline()
                if not status_line:
                    raise ConnectionResetError("connection closed by the shard")
                status = int(status_line.split(b" ", 2)[1])
                length, close = 0, False
                while True:
                    line = await conn.reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"connection" and value.strip().lower() == b"close":
                        close = True
                payload = await conn.reader.readexactly(length)
            except (OSError, asyncio.IncompleteReadError):
                conn.writer.close()
                if fresh or attempt:
                    raise
                continue  # a stale keep-alive connection: retry once on a new one
            except BaseException:
                conn.writer.close()
                raise
            if close or len(self.idle) >= self.max_idle:
                conn.writer.close()
            else:
                self.idle.append(conn)
            return status, payload
        raise AssertionError("unreachable")

    async def _open(self) -> _Conn:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port), min(self.timeout, CONNECT_TIMEOUT)
        )
        return _Conn(reader, writer)

    def close(self) -> None:
        for conn in self.idle:
            conn.writer.close()
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
        """(status, body, replica) of the first replica that answers other than with one of
        `RETRY_STATUSES`; else the last answer, or CubeUnavailable when none answered."""
        last: tuple[int, bytes, _Shard] | None = None
        error: CubeUnavailable | None = None
        for k, r in enumerate(self.order()):
            replica = self.replicas[r]
            try:
                status, payload = await replica.request(method, path, body, headers)
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
        calls = [
            shard.request("POST", LOOKUP_PATH, encode_keys(keys[idx]), headers)
            for shard, idx in zip(self.shards, groups, strict=True)
            if idx.size
        ]
        answers = await asyncio.gather(*calls)
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
