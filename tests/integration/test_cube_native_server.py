"""The native lookup path in real shard processes: a shard serving through cubefast.c and
one forced onto the numpy path (ELASTICCTR_CUBE_NATIVE=0) answer every request with the
same bytes (lookups, pinned and unknown versions, tables, errors, pipelining) and count
the same metrics."""

from __future__ import annotations

import re
import socket

import httpx
import numpy as np
import pytest
from _cube_procs import ShardProc, make_version, random_keys

from elasticctr import scenarios
from elasticctr.cube import native
from elasticctr.cube.builder import build_version
from elasticctr.cube.modelstore import verify_version

pytestmark = pytest.mark.integration

V1, V2, V3 = "20200401/00", "20200401/01", "20200401/02"
N = 20_000


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if native.module() is None:
        pytest.skip(f"native cube lookups unavailable: {native.unavailable()}")
    root = tmp_path_factory.mktemp("native")
    store, cube_root = root / "store", root / "cube"
    keys = random_keys(N, seed=3)
    for v, tag in ((V1, 1), (V2, 2)):
        build_version(verify_version(make_version(store, v, keys, tag), v), cube_root, 1)
    feed_store = root / "feed-store"
    feed_root = scenarios.subdir(cube_root, "feed")
    build_version(verify_version(make_version(feed_store, V1, keys[::2], 7), V1), feed_root, 1)
    for name in ("native", "numpy"):
        (root / name).mkdir()
    procs = {
        name: ShardProc(cube_root, root / name / "state", 0, 1, env=env).start()
        for name, env in (("native", {}), ("numpy", {"ELASTICCTR_CUBE_NATIVE": "0"}))
    }
    for p in procs.values():
        for step, body in (
            ("load", {"version": V1}), ("commit", {"version": V1}),
            ("load", {"version": V1, "table": "feed"}),
            ("commit", {"version": V1, "table": "feed"}),
            ("load", {"version": V2}),  # staged, not committed: pinned lookups only
        ):  # fmt: skip
            httpx.post(f"{p.url}/admin/{step}", json=body, timeout=60).raise_for_status()
    yield procs, keys
    for p in procs.values():
        p.stop()


def _read_response(sock: socket.socket, buf: bytearray) -> bytes:
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(1 << 20)
        assert chunk, "connection closed"
        buf += chunk
    end = buf.index(b"\r\n\r\n") + 4
    m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", bytes(buf[:end]))
    total = end + int(m.group(1))
    while len(buf) < total:
        chunk = sock.recv(1 << 20)
        assert chunk, "connection closed"
        buf += chunk
    out = bytes(buf[:total])
    del buf[:total]
    return out


def _exchange(port: int, requests: list[bytes], pipelined: bool) -> list[bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        buf = bytearray()
        if pipelined:
            sock.sendall(b"".join(requests))
            return [_read_response(sock, buf) for _ in requests]
        out = []
        for req in requests:
            sock.sendall(req)
            out.append(_read_response(sock, buf))
        return out


def _post(body: bytes, *headers: str, target: str = "/v1/lookup") -> bytes:
    head = [f"POST {target} HTTP/1.1", "Host: cube", *headers, f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _requests(keys: np.ndarray) -> list[bytes]:
    rng = np.random.default_rng(11)
    absent = rng.integers(1, 2**64 - 1, 100, dtype=np.uint64)
    absent = absent[~np.isin(absent, keys)]
    batch = np.concatenate([keys[rng.integers(0, keys.size, 1000)], absent])
    rng.shuffle(batch)
    body = batch.astype("<u8").tobytes()
    chunked = (
        b"POST /v1/lookup HTTP/1.1\r\nHost: cube\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % 800 + body[:800] + b"\r\n"
        + b"%x\r\n" % (len(body) - 800) + body[800:] + b"\r\n0\r\n\r\n"
    )  # fmt: skip
    return [
        _post(body),
        _post(body, "Content-Type: application/octet-stream", f"X-Cube-Version: {V2}"),
        _post(body, f"X-Cube-Version: {V1}", "X-Cube-Table: feed"),
        _post(body, "X-Cube-Table: default", "Connection: keep-alive"),
        _post(body[:16], f"X-Cube-Version: {V3}"),  # not held: 409
        _post(body[:16], "X-Cube-Version: 2020-04-01"),  # bad version: 400
        _post(body[:16], "X-Cube-Table: nosuch"),  # 404
        _post(body[:12]),  # not whole keys: 400
        _post(body, target=f"/v1/lookup?version={V2}"),
        _post(b""),
        _post(keys.astype("<u8").tobytes()),  # all 20k keys
        chunked,
        _post(body, "Expect: 100-continue"),
    ]


def test_native_and_numpy_shards_answer_with_the_same_bytes(pair):
    procs, keys = pair
    reqs = _requests(keys)
    for pipelined in (False, True):
        got = {name: _exchange(p.port, reqs, pipelined) for name, p in procs.items()}
        for i, (a, b) in enumerate(zip(got["native"], got["numpy"], strict=True)):
            assert a == b, f"request {i} (pipelined={pipelined}): {a[:300]!r} != {b[:300]!r}"
    answers = got["native"]
    statuses = [int(a[9:12]) for a in answers]
    assert statuses == [200, 200, 200, 200, 409, 400, 404, 400, 200, 200, 200, 200, 200]
    assert b"X-Cube-Missing: 0\r\n" in answers[10]
    assert f"X-Cube-Version: {V2}".encode() in answers[1]


def test_both_count_the_same_metrics_and_say_which_path_serves(pair):
    procs, _ = pair
    families = {}
    for name, p in procs.items():
        text = httpx.get(f"{p.url}/metrics").text
        families[name] = sorted(
            line
            for line in text.splitlines()
            if line.startswith(("elasticctr_cube_keys_total", "elasticctr_cube_missing_keys_total",
                                "elasticctr_cube_requests_total", "elasticctr_cube_errors_total",
                                "elasticctr_cube_lookup_seconds_count"))
        )  # fmt: skip
        log = p.log.read_text()
        assert f"({name} lookups)" in log, log[-2000:]
    assert families["native"] == families["numpy"]
    assert any('code="200",route="/v1/lookup"' in line for line in families["native"]), families
