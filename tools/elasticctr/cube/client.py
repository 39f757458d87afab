"""Clients of cube shards: admin calls (transfer) and version-pinned lookups (serving).

`CubeClient.lookup` routes keys with `format.shard_of`, asks every shard in parallel,
pins all of them to one version, and refuses an answer assembled from two versions. A
shard may have several replicas (`protocol.parse_shards`): a lookup that a replica does
not answer (unreachable, timeout, 5xx, version not held) is asked of the next replica of
the same shard; admin calls (`each`) go to every replica.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np

from elasticctr.constants import ENV_CUBE_ADMIN_TOKEN as ENV_ADMIN_TOKEN
from elasticctr.cube.format import shard_of
from elasticctr.cube.protocol import (
    CONTENT_TYPE,
    LOOKUP_PATH,
    TABLE_HEADER,
    VERSION_HEADER,
    LookupResult,
    decode_response,
    encode_keys,
    parse_shards,
)
from elasticctr.errors import EctlError
from elasticctr.httpd import error_message
from elasticctr.scenarios import DEFAULT


class ShardError(EctlError):
    """A shard answered with an error status (kept: `status`) or could not be reached."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class ShardClient:
    def __init__(
        self, url: str, *, timeout: float = 60.0, token: str | None = None, label: str = ""
    ):
        self.url = url.rstrip("/")
        self.label = label or self.url
        """How messages name it: `shard I` (`shard I replica R` when it has replicas)."""
        token = token if token is not None else os.environ.get(ENV_ADMIN_TOKEN)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, timeout=timeout, headers=headers)
        self.reachable: bool | None = None
        """Whether the latest call got an answer (any status); None before the first."""

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kw) -> httpx.Response:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            self.reachable = False
            raise ShardError(f"cube shard {self.url}: {type(exc).__name__}: {exc}") from exc
        self.reachable = True
        if resp.status_code >= 400:
            msg = error_message(resp.text)
            raise ShardError(f"cube shard {self.url}: {resp.status_code} {msg}", resp.status_code)
        return resp

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/v1/status").json()

    @staticmethod
    def _body(version: str | None, table: str | None, **extra) -> dict[str, Any]:
        body: dict[str, Any] = {} if version is None else {"version": version}
        if table and table != DEFAULT:
            body["table"] = table
        body.update({k: v for k, v in extra.items() if v is not None})
        return body

    def table_status(self, table: str | None = None) -> dict[str, Any]:
        """The status of one table (the default one when None); {} when not held."""
        st = self.status()
        if not table or table == DEFAULT:
            return st
        return st.get("tables", {}).get(table, {})

    def load(
        self, version: str, table: str | None = None, budget_bytes: int | None = None
    ) -> dict[str, Any]:
        body = self._body(version, table, budget_bytes=budget_bytes)
        return self._call("POST", "/admin/load", json=body).json()

    def commit(self, version: str, table: str | None = None) -> dict[str, Any]:
        return self._call("POST", "/admin/commit", json=self._body(version, table)).json()

    def unload(self, version: str, table: str | None = None) -> dict[str, Any]:
        return self._call("POST", "/admin/unload", json=self._body(version, table)).json()

    def drop(self, table: str) -> dict[str, Any]:
        return self._call("POST", "/admin/drop", json=self._body(None, table)).json()

    def lookup(
        self, keys: np.ndarray, version: str | None = None, table: str | None = None
    ) -> LookupResult:
        headers = {"Content-Type": CONTENT_TYPE}
        if version:
            headers[VERSION_HEADER] = version
        if table and table != DEFAULT:
            headers[TABLE_HEADER] = table
        resp = self._call("POST", LOOKUP_PATH, content=encode_keys(keys), headers=headers)
        return decode_response(resp.content)


class CubeClient:
    """All shards of one cube: `urls` as `protocol.parse_shards` reads them (shard i is the
    i-th entry; its replicas separated by `|`). `shards` is every replica, shard order
    first; `shard_index[j]` is the shard `shards[j]` serves."""

    def __init__(self, urls: list[str] | str, **kw):
        groups = parse_shards(urls)
        if not groups:
            raise EctlError("no cube shard URLs given")
        self.num_shards = len(groups)
        self.replicas: list[list[ShardClient]] = [
            [
                ShardClient(
                    u, label=f"shard {i}" if len(g) == 1 else f"shard {i} replica {r}", **kw
                )
                for r, u in enumerate(g)
            ]
            for i, g in enumerate(groups)
        ]
        self.shards = [c for g in self.replicas for c in g]
        self.shard_index = [i for i, g in enumerate(self.replicas) for _ in g]
        self._pool = ThreadPoolExecutor(max_workers=len(self.shards))
        self._next = 0  # the replica a lookup asks first, in turn

    def close(self) -> None:
        self._pool.shutdown()
        for s in self.shards:
            s.close()

    def each(self, fn) -> list[Any]:
        """fn(shard_client) on every replica of every shard in parallel; results in
        `shards` order."""
        return list(self._pool.map(fn, self.shards))

    def _lookup_shard(self, i: int, keys: np.ndarray, version: str, table: str | None):
        """One shard's rows, from its first replica that answers them; the last error when
        none does. A replica's refusal other than 5xx/409 (bad request) is final."""
        group = self.replicas[i]
        start = self._next % len(group)
        last: ShardError | None = None
        for r in range(len(group)):
            replica = group[(start + r) % len(group)]
            try:
                return replica.lookup(keys, version, table)
            except ShardError as exc:
                if exc.status is not None and exc.status < 500 and exc.status != 409:
                    raise
                last = exc
        assert last is not None
        raise last

    def lookup(
        self, keys: np.ndarray, version: str, table: str | None = None
    ) -> tuple[np.ndarray, int]:
        """Rows of `keys` from `version` (of `table`) on every shard; (rows [n, dim], missing)."""
        keys = np.asarray(keys, dtype=np.uint64)
        owner = shard_of(keys, self.num_shards)
        groups = [np.flatnonzero(owner == i) for i in range(self.num_shards)]
        self._next += 1
        results = list(
            self._pool.map(
                lambda i: self._lookup_shard(i, keys[groups[i]], version, table),
                range(self.num_shards),
            )
        )
        dims = {r.rows.shape[1] for r in results}
        if (
            len({r.version for r in results}) != 1
            or results[0].version != version
            or len(dims) != 1
        ):
            raise EctlError(
                f"cube shards answered from mixed versions: {[r.version for r in results]}"
            )
        rows = np.zeros((keys.size, dims.pop()), dtype=np.float32)
        for idx, r in zip(groups, results, strict=True):
            rows[idx] = r.rows
        return rows, sum(r.missing for r in results)
