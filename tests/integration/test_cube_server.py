"""Cube shard servers as real processes: lookups, health, bad requests, switch, restart."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import numpy as np
import pytest
from _cube_procs import DIM, ShardProc, make_version, random_keys, version_rows

from elasticctr import metrics as M
from elasticctr.cube.builder import build_version, version_dir
from elasticctr.cube.client import CubeClient, ShardClient, ShardError
from elasticctr.cube.format import shard_of
from elasticctr.cube.modelstore import verify_version
from elasticctr.cube.protocol import RESPONSE_HEADER, decode_response

pytestmark = pytest.mark.integration

V1, V2, V3 = "20200401/00", "20200401/01", "20200401/02"
TAGS = {V1: 1, V2: 2, V3: 3}
N = 4000
SHARDS = 2


@pytest.fixture(scope="module")
def cube(tmp_path_factory):
    root = tmp_path_factory.mktemp("cube")
    store, cube_root = root / "store", root / "cube"
    keys = random_keys(N)
    for v, tag in TAGS.items():
        vdir = make_version(store, v, keys, tag)
        build_version(verify_version(vdir, v), cube_root, SHARDS)
    procs = [ShardProc(cube_root, root / f"state{i}", i, SHARDS).start() for i in range(SHARDS)]
    client = CubeClient([p.url for p in procs])
    yield {"procs": procs, "client": client, "keys": keys, "cube_root": cube_root}
    client.close()
    for p in procs:
        p.stop()


def _switch_all(client: CubeClient, version: str) -> None:
    client.each(lambda s: s.load(version))
    client.each(lambda s: s.commit(version))


def test_ready_without_a_version_answers_503_until_one_is_committed_then_lookups(cube):
    """Ready = able to serve what the shard holds: with nothing committed yet it is ready
    (an install waiting for readiness must not wait for training) and lookups say why not."""
    procs, client, keys = cube["procs"], cube["client"], cube["keys"]
    assert httpx.get(f"{procs[0].url}/healthz").status_code == 200
    r = httpx.get(f"{procs[0].url}/readyz")
    assert r.status_code == 200 and r.json()["version"] is None
    assert "no model version" in r.json()["detail"]
    r = httpx.post(f"{procs[0].url}/v1/lookup", content=keys[:4].tobytes())
    assert r.status_code == 503 and "no committed version yet" in r.json()["error"]["message"]
    _switch_all(client, V1)
    for p in procs:
        assert p.wait_ready(V1)["version"] == V1
    unknown = np.array([0, 12345678901234567], dtype=np.uint64)
    unknown = unknown[~np.isin(unknown, keys)]
    query = np.concatenate([keys[:1000], unknown])
    rows, missing = client.lookup(query, V1)
    assert missing == unknown.size
    assert np.array_equal(rows[:1000], version_rows(keys[:1000], 1))
    assert not rows[1000:].any()


def test_binary_response_carries_version_and_missing(cube):
    procs, keys = cube["procs"], cube["keys"]
    _switch_all(cube["client"], V1)
    mine = keys[shard_of(keys, SHARDS) == 0][:100]
    body = np.concatenate([mine, np.array([0], np.uint64)]).astype("<u8").tobytes()
    r = httpx.post(
        f"{procs[0].url}/v1/lookup",
        content=body,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 200
    assert r.headers["X-Cube-Version"] == V1 and r.headers["X-Cube-Missing"] == "1"
    assert len(r.content) == RESPONSE_HEADER.size + 101 * DIM * 4
    res = decode_response(r.content)
    assert (res.version, res.shard, res.missing) == (V1, 0, 1)
    assert np.array_equal(res.rows[:100], version_rows(mine, 1))


def test_json_api_for_people(cube):
    procs, keys = cube["procs"], cube["keys"]
    _switch_all(cube["client"], V1)
    k = int(keys[shard_of(keys, SHARDS) == 1][0])
    r = httpx.post(f"{procs[1].url}/v1/lookup.json", json={"keys": [k, str(k), 0]})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["version"] == V1 and out["dim"] == DIM and out["missing"] == 1
    assert out["missing_keys"] == ["0"]
    expect = version_rows(np.array([k], np.uint64), 1)[0].tolist()
    assert out["rows"][0] == expect and out["rows"][1] == expect
    assert out["rows"][2] == [0.0] * DIM


def test_metrics_are_prometheus_text_and_count_keys(cube):
    procs = cube["procs"]
    _switch_all(cube["client"], V1)

    def scrape():
        text = httpx.get(f"{procs[0].url}/metrics").text
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return text, values

    _, before = scrape()
    ShardClient(procs[0].url).lookup(np.array([0, 1, 2], np.uint64))
    text, after = scrape()
    assert "# TYPE elasticctr_cube_lookup_seconds histogram" in text
    keys, missing = "elasticctr_cube_keys_total", "elasticctr_cube_missing_keys_total"
    assert after[keys] - before[keys] == 3
    assert after[missing] - before[missing] >= 2
    assert after["elasticctr_cube_ready"] == 1
    loaded = f'committed="true",scenario="default",version="{V1}"'
    assert after[f"elasticctr_cube_version_loaded{{{loaded}}}"] == 1
    stamp = M.version_timestamp(V1)
    assert after['elasticctr_cube_committed_version_timestamp_seconds{scenario="default"}'] == stamp


def _raw(port: int, data: bytes) -> bytes:
    """Send raw bytes, read until the server closes (every case here ends in a close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


@pytest.mark.parametrize(
    ("method", "path", "kw", "status", "message"),
    [
        ("POST", "/v1/lookup", {"content": b"1234567"}, 400, "whole number of uint64"),
        ("POST", "/v1/lookup.json", {"content": b"{nope"}, 400, "not valid JSON"),
        ("POST", "/v1/lookup.json", {"json": {"keys": 5}}, 400, '{"keys"'),
        ("POST", "/v1/lookup.json", {"json": {"keys": [-1]}}, 400, "not a uint64"),
        ("POST", "/v1/lookup.json", {"json": {"keys": [2**64]}}, 400, "not a uint64"),
        ("POST", "/v1/lookup.json", {"json": {"keys": ["x1"]}}, 400, "not a uint64"),
        ("POST", "/v1/lookup.json", {"json": {"keys": [True]}}, 400, "not a uint64"),
        ("POST", "/v1/lookup", {"headers": {"X-Cube-Version": "2020"}}, 400, "YYYYMMDD/HH"),
        ("POST", "/v1/lookup", {"headers": {"X-Cube-Version": "20991231/23"}}, 409, "not held"),
        ("GET", "/v1/lookup", {}, 405, "not allowed"),
        ("GET", "/nope", {}, 404, "no route"),
        ("POST", "/admin/load", {"json": {}}, 400, '{"version"'),
        ("POST", "/admin/load", {"json": {"version": "20991231/23"}}, 422, "not built"),
        ("POST", "/admin/commit", {"json": {"version": "20991231/22"}}, 409, "not loaded"),
        ("POST", "/admin/unload", {"json": {"version": "20991231/22"}}, 409, "not loaded"),
    ],
)
def test_bad_requests_get_4xx_with_a_message(cube, method, path, kw, status, message):
    _switch_all(cube["client"], V1)
    r = httpx.request(method, f"{cube['procs'][0].url}{path}", **kw)
    assert r.status_code == status, r.text
    assert message in r.json()["error"]["message"]
    assert httpx.get(f"{cube['procs'][0].url}/healthz").status_code == 200


def test_malformed_http_gets_4xx_and_the_server_survives(cube):
    port = cube["procs"][0].port
    chunked = b"8\r\n12345678\r\n0\r\n\r\n"
    head = b"POST /v1/lookup HTTP/1.1\r\nConnection: close\r\n"
    assert b" 200 " in _raw(port, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked)
    assert b" 501 " in _raw(port, head + b"Transfer-Encoding: gzip\r\n\r\n" + chunked)
    assert b" 400 " in _raw(port, b"POST /v1/lookup HTTP/1.1\r\nContent-Length: x\r\n\r\n")
    assert b" 400 " in _raw(port, b"garbage\r\n\r\n")
    assert b" 505 " in _raw(port, b"GET /healthz HTTP/2.0\r\n\r\n")
    assert b" 431 " in _raw(port, b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n")
    assert b" 413 " in _raw(port, b"POST /v1/lookup HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n")
    # Pipelined keep-alive requests are answered in order on one connection.
    reply = _raw(
        port, b"GET /healthz HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\nConnection: close\r\n\r\n"
    )
    assert reply.index(b" 200 OK") < reply.index(b" 404 ")
    assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200


@pytest.mark.parametrize("damage", ["corrupt", "truncate"])
def test_damaged_shard_is_rejected_and_the_old_version_keeps_serving(cube, damage):
    client, keys, cube_root = cube["client"], cube["keys"], cube["cube_root"]
    _switch_all(client, V1)
    shard0 = ShardClient(cube["procs"][0].url)
    try:
        shard0.unload(V3)
    except ShardError:
        pass  # not loaded yet
    path = next((version_dir(cube_root, V3)).glob("shard-00000-*.cube"))
    good = path.read_bytes()
    try:
        if damage == "corrupt":
            data = bytearray(good)
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
        else:
            path.write_bytes(good[: len(good) // 2])
        with pytest.raises(ShardError) as err:
            shard0.load(V3)
        assert err.value.status == 422
        assert ("sha256" if damage == "corrupt" else "truncated") in str(err.value)
        status = shard0.status()
        assert status["committed"] == V1 and V3 not in status["loaded"]
        rows, missing = client.lookup(keys[:500], V1)
        assert missing == 0 and np.array_equal(rows, version_rows(keys[:500], 1))
        assert httpx.get(f"{cube['procs'][0].url}/readyz").json()["version"] == V1
    finally:
        path.write_bytes(good)
    shard0.load(V3)  # repaired file loads


def test_pinned_version_answers_from_that_version_or_409(cube):
    client, keys, procs = cube["client"], cube["keys"], cube["procs"]
    _switch_all(client, V1)
    _switch_all(client, V2)  # keep=2: V1 retained for rollback
    rows, _ = client.lookup(keys[:50], V1)
    assert np.array_equal(rows, version_rows(keys[:50], 1))
    rows, _ = client.lookup(keys[:50], V2)
    assert np.array_equal(rows, version_rows(keys[:50], 2))
    _switch_all(client, V3)  # V1 evicted (keeps V3, V2)
    with pytest.raises(ShardError) as err:
        ShardClient(procs[0].url).lookup(keys[:5], V1)
    assert err.value.status == 409


def test_killed_shard_comes_back_on_the_committed_version(cube):
    client, keys, procs = cube["client"], cube["keys"], cube["procs"]
    _switch_all(client, V2)
    victim = procs[1]
    victim.kill()
    assert victim.proc.returncode == -9
    victim.start()
    victim.wait_ready(V2, timeout=60)
    status = ShardClient(victim.url).status()
    assert status["committed"] == V2
    client.close()
    cube["client"] = client = CubeClient([p.url for p in procs])
    rows, missing = client.lookup(keys[:800], V2)
    assert missing == 0 and np.array_equal(rows, version_rows(keys[:800], 2))


def test_lookups_during_switches_never_mix_versions(cube):
    procs, keys = cube["procs"], cube["keys"]
    client = CubeClient([p.url for p in procs])
    _switch_all(client, V1)
    mine = keys[shard_of(keys, SHARDS) == 0]
    stop = threading.Event()
    seen: dict[str, int] = {}
    errors: list[str] = []

    def hammer(seed: int):
        rng = np.random.default_rng(seed)
        shard = ShardClient(procs[0].url)
        while not stop.is_set():
            q = mine[rng.integers(0, mine.size, 1000)]
            res = shard.lookup(q)
            expect = version_rows(q, TAGS[res.version])
            if res.missing or not np.array_equal(res.rows, expect):
                errors.append(f"response claims {res.version} but rows differ")
            seen[res.version] = seen.get(res.version, 0) + 1
        shard.close()

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(12):
            v = (V1, V2, V3)[i % 3]
            _switch_all(client, v)
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        client.close()
    assert not errors, errors[:3]
    assert len(seen) >= 2, seen  # the switches really happened under load


def test_not_ready_when_the_committed_version_cannot_be_restored(cube, tmp_path):
    """A restarted shard whose state names a committed version it cannot load has lost what
    it served: not ready (cube-transfer's reconcile commits a version to it again). A state
    of another shard layout (re-sharding) is ignored: ready, nothing held."""
    lost = tmp_path / "lost"
    lost.mkdir()
    state = {"shard": 0, "num_shards": SHARDS, "committed": "20200409/09", "history": []}
    (lost / "state.json").write_text(json.dumps(state))
    resharded = tmp_path / "resharded"
    resharded.mkdir()
    (resharded / "state.json").write_text(json.dumps({**state, "committed": V1, "num_shards": 5}))
    procs = [
        ShardProc(cube["cube_root"], lost, 0, SHARDS).start(),
        ShardProc(cube["cube_root"], resharded, 0, SHARDS).start(),
    ]
    try:
        r = httpx.get(f"{procs[0].url}/readyz")
        assert r.status_code == 503 and "cannot be restored" in r.json()["error"]["message"]
        r = httpx.get(f"{procs[1].url}/readyz")
        assert r.status_code == 200 and r.json()["version"] is None
        shard = ShardClient(procs[0].url)
        shard.load(V1)
        shard.commit(V1)
        assert procs[0].wait_ready(V1, timeout=30)["version"] == V1
    finally:
        for p in procs:
            p.stop()
