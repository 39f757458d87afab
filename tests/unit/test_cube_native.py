"""The native lookup path (cube/cubefast.c) against the numpy one, in-process: the same
bytes for every key, dim and table shape; its strict request parser; the fallback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import elasticctr.cube.format as fmt
from elasticctr.cube import native
from elasticctr.cube.format import ShardFile, write_shard
from elasticctr.cube.protocol import CONTENT_TYPE, encode_response
from elasticctr.httpd import Response
from elasticctr.httpd import encode_response as http_response

pytestmark = pytest.mark.fast

VERSION = "20200401/07"


@pytest.fixture(scope="module")
def mod():
    m = native.module()
    if m is None:
        pytest.skip(f"native cube lookups unavailable: {native.unavailable()}")
    return m


def _shard(
    tmp_path: Path, keys: np.ndarray, dim: int, seed: int = 0
) -> tuple[ShardFile, np.ndarray]:
    keys = np.sort(keys)
    values = np.random.default_rng(seed).standard_normal((keys.size, dim), dtype=np.float32)
    path = tmp_path / f"s-{dim}-{keys.size}.cube"
    write_shard(path, keys, values, shard=3, num_shards=5)
    return ShardFile(path), values


def _same(mod, shard: ShardFile, query: np.ndarray) -> int:
    """Native body == numpy body (bytes), and the HTTP answer == server.py's; the missing count."""
    query = np.ascontiguousarray(query, dtype="<u8")
    rows, missing = shard.lookup(query)
    expect = b"".join(encode_response(rows, missing, 3, VERSION))
    body, n_missing = mod.lookup(
        shard.native, query.tobytes(), 0, query.size, 3, VERSION.encode(), False
    )
    assert n_missing == missing
    assert body == expect
    whole, _ = mod.lookup(
        shard.native, b"xx" + query.tobytes(), 2, query.size, 3, VERSION.encode(), True
    )
    headers = {"X-Cube-Version": VERSION, "X-Cube-Missing": str(missing)}
    assert whole == http_response(Response(200, expect, CONTENT_TYPE, headers), True)
    return missing


@pytest.mark.parametrize("dim", [1, 3, 8, 17, 64])
def test_native_rows_equal_numpy_rows_for_present_and_absent_keys(tmp_path, mod, dim):
    rng = np.random.default_rng(dim)
    keys = np.unique(rng.integers(1, 2**64 - 1, 30_000, dtype=np.uint64))
    shard, _ = _shard(tmp_path, keys, dim)
    absent = rng.integers(1, 2**64 - 1, 3000, dtype=np.uint64)
    absent = absent[~np.isin(absent, keys)]
    edge = np.array([0, 2**64 - 1], dtype=np.uint64)
    query = np.concatenate([keys[rng.integers(0, keys.size, 5000)], absent, edge])
    rng.shuffle(query)
    assert _same(mod, shard, query) == absent.size + 2
    assert _same(mod, shard, keys) == 0  # every key of the shard
    assert _same(mod, shard, query[:0]) == 0  # no keys: a header alone
    assert _same(mod, shard, query[:1]) in (0, 1)


def test_dense_keys_and_the_sentinel_value(tmp_path, mod):
    keys = np.arange(5000, dtype=np.uint64)  # the sentinel (empty slot) is 5000
    shard, _ = _shard(tmp_path, keys, 4)
    assert shard.header.sentinel == 5000
    assert _same(mod, shard, np.array([5000, 4999, 5000, 0, 5001, 2**63], dtype=np.uint64)) == 4
    assert _same(mod, shard, np.arange(6000, dtype=np.uint64)) == 1000


@pytest.mark.parametrize(("count", "slots"), [(32, 16), (300, 64)])
def test_keys_past_their_window_and_past_long_runs(tmp_path, mod, monkeypatch, count, slots):
    # Overfull tables: keys far from home (the run scan) and runs longer than 8 windows
    # (the binary search of the sorted keys) must answer as numpy's sorted-key fallback.
    monkeypatch.setattr(fmt, "_table_slots", lambda n: slots)
    shard, _ = _shard(tmp_path, np.arange(1, count + 1, dtype=np.uint64) * 7919, 2)
    monkeypatch.undo()
    home = fmt._home(shard.keys, slots)
    slot_of = {int(k): i for i, k in enumerate(shard.tkeys) if shard.trows[i] != fmt.EMPTY}
    assert (
        max(slot_of[int(k)] - h for k, h in zip(shard.keys, home, strict=True)) >= 8 * 8
        or count < 64
    )
    query = np.concatenate([shard.keys, np.arange(0, 7919 * (count + 3), 3, dtype=np.uint64)])
    _same(mod, shard, query)


def test_big_batches_and_batches_of_other_shapes(tmp_path, mod):
    rng = np.random.default_rng(5)
    keys = np.unique(rng.integers(1, 2**64 - 1, 50_000, dtype=np.uint64))
    shard, _ = _shard(tmp_path, keys, 8)
    for n in (15, 16, 17, 2047, 2048, 2049, 4097, 40_000):  # prefetch ring, stack, no GIL
        q = keys[rng.integers(0, keys.size, n)]
        q[::7] = rng.integers(1, 2**64 - 1, q[::7].size, dtype=np.uint64)
        _same(mod, shard, q)


def test_empty_shard_and_dim_zero_use_numpy(tmp_path, mod):
    shard, _ = _shard(tmp_path, np.zeros(0, np.uint64), 4)
    assert shard.native is None
    assert shard.lookup(np.array([1, 2], dtype=np.uint64))[1] == 2


def test_keys_outside_the_buffer_and_a_corrupt_index_are_errors(tmp_path, mod):
    keys = np.arange(10, 1010, dtype=np.uint64)
    shard, _ = _shard(tmp_path, keys, 2)
    q = keys[:4].tobytes()
    with pytest.raises(ValueError, match="out of the buffer"):
        mod.lookup(shard.native, q, 8, 4, 0, b"v", False)
    with pytest.raises(ValueError, match="out of the buffer"):
        mod.lookup(shard.native, q, -1, 1, 0, b"v", False)
    # A row number past the end in the index (never built; a damaged file): an error, as
    # numpy's take raises, not a read outside the mapping.
    path = tmp_path / "bad.cube"
    data = bytearray(shard.path.read_bytes())
    h = shard.header
    slot = int(np.flatnonzero(shard.trows != fmt.EMPTY)[0])
    data[h.trows_offset + 4 * slot : h.trows_offset + 4 * slot + 4] = (10**6).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    bad = ShardFile(path)
    key = bad.tkeys[slot : slot + 1].copy()
    with pytest.raises(IndexError, match="corrupt"):
        mod.lookup(bad.native, key.tobytes(), 0, 1, 0, b"v", False)
    with pytest.raises(IndexError):
        bad.lookup(key)


def _req(body: bytes = b"\0" * 16, *headers: str, line: str = "POST /v1/lookup HTTP/1.1") -> bytes:
    head = [line, "Host: x", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def test_parse_takes_only_plain_complete_lookups(mod):
    plain = _req()
    assert mod.parse(bytearray(plain), 16384, 1 << 20) == (
        len(plain),
        len(plain) - 16,
        16,
        None,
        None,
    )
    both = _req(
        b"\1" * 8, "x-cube-version:  20200401/00 ", "X-Cube-Table: feed", "Connection: Keep-Alive"
    )
    assert mod.parse(both + plain, 16384, 1 << 20) == (
        len(both),
        len(both) - 8,
        8,
        "20200401/00",
        "feed",
    )
    refused = [
        _req(line="POST /v1/lookup?version=20200401/00 HTTP/1.1"),
        _req(line="POST /v1/lookup HTTP/1.0"),
        _req(line="GET /v1/lookup HTTP/1.1"),
        _req(line="POST /v1/lookup.json HTTP/1.1"),
        _req(b"\0" * 12),  # not whole keys: the handler answers 400
        _req(b"", "Content-Length: 8", "Content-Length: 8"),
        _req(b"\0" * 8, "Content-Length: 8, 8"),
        _req(b"\0" * 8, "Content-Length: +8"),
        _req(b"\0" * 8, "Transfer-Encoding: chunked"),
        _req(b"", "Transfer-Encoding: chunked", "Content-Length: 8"),
        _req(b"\0" * 8, "Expect: 100-continue"),
        _req(b"\0" * 8, "Connection: close"),
        _req(b"\0" * 8, "X-Cube-Version: a", "X-Cube-Version: b"),
        _req(b"\0" * 8, "X-Cube-Table: a", "X-Cube-Table: b"),
        _req(b"\0" * 8, "Bad Header: x"),
        _req(b"\0" * 8, " folded"),
        _req(b"\0" * 8, "NoColon"),
        _req(b"\0" * 8, "X-Pad: " + "a" * 20_000),  # head over max_header
        _req(b"\0" * 4096),  # body over max_body (below)
        _req(b"\0" * 16)[:-1],  # body not complete yet
        _req(b"\0" * 16).split(b"\r\n\r\n")[0],  # head not complete yet
        b"",
    ]
    for raw in refused:
        assert mod.parse(bytearray(raw), 16384, 2048) is None, raw[:120]
    assert mod.parse(_req(b""), 16384, 2048) == (len(_req(b"")), len(_req(b"")), 0, None, None)


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, **env},
    )  # fmt: skip


def test_without_a_compiler_or_when_disabled_lookups_use_numpy(tmp_path):
    code = (
        "import logging; logging.basicConfig(level=logging.WARNING)\n"
        "from elasticctr.cube import native\n"
        "print('MODULE', native.module())\n"
    )
    out = _python(code, ELASTICCTR_CUBE_NATIVE="0")
    assert "MODULE None" in out.stdout and "disabled by ELASTICCTR_CUBE_NATIVE" in out.stderr
    assert "serving from the numpy path" in out.stderr
    out = _python(
        code, CC=str(tmp_path / "no-such-cc"), ELASTICCTR_NATIVE_CACHE=str(tmp_path / "cache"),
        ELASTICCTR_CUBEFAST="",
    )  # fmt: skip
    assert "MODULE None" in out.stdout, out.stderr
    assert "cube native lookup unavailable" in out.stderr and "no-such-cc" in out.stderr


def test_build_is_cached_by_source_and_abi(tmp_path, mod):
    first = native.build(tmp_path)
    assert first.name.startswith("cubefast-") and first.is_file()
    mtime = first.stat().st_mtime_ns
    assert native.build(tmp_path) == first and first.stat().st_mtime_ns == mtime
    loaded = native.load(first)
    assert {"table", "lookup", "parse"} <= set(dir(loaded))
