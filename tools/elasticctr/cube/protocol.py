"""The cube binary lookup protocol (shared by the server, transfer, serving and bench).

Request:  `POST /v1/lookup`, `Content-Type: application/octet-stream`, body = the keys
          as little-endian uint64; optional `X-Cube-Version: YYYYMMDD/HH` pins the version
          (409 if the shard does not hold it); optional `X-Cube-Table: <scenario>` picks
          the scenario's table (404 if the shard holds none; absent = the default table).
Response: 200, body = 32-byte header + float32 rows [count, dim] (little-endian)

    header  "<4sIIII12s": magic b"CUB1", dim, count, missing, shard, version (ASCII, NUL-padded)

The version in the header is the one that produced every row of this response.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from elasticctr.constants import CUBE_REPLICA_SEPARATOR
from elasticctr.errors import EctlError

RESPONSE_MAGIC = b"CUB1"
RESPONSE_HEADER = struct.Struct("<4sIIII12s")
LOOKUP_PATH = "/v1/lookup"
LOOKUP_JSON_PATH = "/v1/lookup.json"
VERSION_HEADER = "X-Cube-Version"
TABLE_HEADER = "X-Cube-Table"
CONTENT_TYPE = "application/octet-stream"

assert RESPONSE_HEADER.size == 32


def encode_keys(keys: np.ndarray) -> bytes:
    return np.ascontiguousarray(keys, dtype="<u8").tobytes()


def encode_response(rows: np.ndarray, missing: int, shard: int, version: str) -> list[bytes]:
    count, dim = rows.shape
    head = RESPONSE_HEADER.pack(RESPONSE_MAGIC, dim, count, missing, shard, version.encode())
    return [head, rows.astype("<f4", copy=False).tobytes()]


@dataclass(frozen=True)
class LookupResult:
    version: str
    shard: int
    missing: int
    rows: np.ndarray  # float32 [count, dim]


def decode_response(body: bytes) -> LookupResult:
    if len(body) < RESPONSE_HEADER.size:
        raise EctlError(f"cube response too short ({len(body)} bytes)")
    magic, dim, count, missing, shard, version = RESPONSE_HEADER.unpack_from(body, 0)
    if magic != RESPONSE_MAGIC:
        raise EctlError("cube response has a bad magic")
    expect = RESPONSE_HEADER.size + 4 * dim * count
    if len(body) != expect:
        raise EctlError(f"cube response is {len(body)} bytes, header promises {expect}")
    rows = np.frombuffer(body, dtype="<f4", offset=RESPONSE_HEADER.size).reshape(count, dim)
    return LookupResult(version.rstrip(b"\0").decode(), shard, missing, rows)


def parse_shards(spec: str | list[str]) -> list[list[str]]:
    """The shard URL contract (ELASTICCTR_CUBE_SHARDS, `--shard-url`, `--cube`): shards in
    order, shard 0 first, comma-separated (or one list item each); the replicas of a shard
    separated by `CUBE_REPLICA_SEPARATOR`. Returns, per shard, its replicas' URLs."""
    items = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in s.split(",")]
    shards = []
    for item in items:
        if not item.strip():
            continue
        replicas = [u.strip() for u in item.split(CUBE_REPLICA_SEPARATOR)]
        if not all(replicas):
            raise EctlError(f"cube shard {item.strip()!r}: an empty replica URL")
        shards.append(replicas)
    return shards


def format_shards(shards: list[list[str]]) -> list[str]:
    """One string per shard (its replicas joined), the inverse of `parse_shards`."""
    return [CUBE_REPLICA_SEPARATOR.join(replicas) for replicas in shards]
