"""The prediction service as real processes: API, bad input, auth, version switching."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
from serving_helpers import ServeProc
from tests.conftest import shared_path

pytestmark = pytest.mark.integration

SLOTS = list(range(27))
V1, V2, V3, V4 = "20261130/00", "20261130/01", "20261130/02", "20261130/03"


@pytest.fixture(scope="module")
def demo() -> Path:
    return shared_path("data", "elasticctr", "serving_demo_data.txt")


@pytest.fixture(scope="module")
def store(tmp_path_factory, demo) -> Path:
    from elasticctr.serving.testing import keys_of_file, write_version

    root = tmp_path_factory.mktemp("store")
    keys = keys_of_file(demo, SLOTS)
    v1 = write_version(root, V1, slots=SLOTS, dim=8, keys=keys, seed=1)
    write_version(root, V2, slots=SLOTS, dim=8, keys=keys, seed=2, dense_from=v1)
    return root


def expected(store: Path, version: str, data: bytes) -> np.ndarray:
    """Reference probabilities, computed in this process from the version's files."""
    from elasticctr.data.parser import parse_bytes
    from elasticctr.serving.model import (
        DenseModel,
        LocalTable,
        Scorer,
        VersionInfo,
        read_manifest,
        sparse_parts,
    )

    vdir = store / "versions" / version
    manifest = read_manifest(vdir)
    info = VersionInfo.from_manifest(manifest, version)
    scorer = Scorer(info, DenseModel(vdir / "dense", len(info.slots), info.dim))
    table = LocalTable.from_parts(sparse_parts(vdir, manifest), info.dim)
    batch, _ = parse_bytes(data, info.slots)
    return scorer.predict(batch, table.lookup)


@pytest.fixture(scope="module")
def server(store, tmp_path_factory):
    log = tmp_path_factory.mktemp("logs") / "serve.log"
    proc = ServeProc(
        ["--store", str(store), "--version", V1, "--poll-interval", "0",
         "--max-request-samples", "200", "--max-body-bytes", "200000",
         "--cache", str(tmp_path_factory.mktemp("cache"))],
        log,
    )  # fmt: skip
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def post(server, body: bytes | str, ctype: str | None = "text/plain", **kw) -> httpx.Response:
    headers = {"Content-Type": ctype} if ctype else {}
    headers.update(kw.pop("headers", {}))
    return httpx.post(server.url + "/v1/predict", content=body, headers=headers, **kw)


def test_predict_lines_and_json_match_reference(server, store, demo):
    data = demo.read_bytes()
    want = expected(store, V1, data)
    resp = post(server, data)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["version"] == V1
    got = np.array(doc["probabilities"])
    assert got.shape == (100,)
    np.testing.assert_allclose(got, want, atol=1e-6)
    # the same samples as JSON (feasigns as decimal strings and as integers)
    from elasticctr.data.parser import parse_bytes

    batch, _ = parse_bytes(data, SLOTS)
    samples = []
    for i in range(len(batch)):
        s = batch.sample(i)
        samples.append({"slots": {str(k): (v if i % 2 else [str(x) for x in v])
                                  for k, v in s.items()}})  # fmt: skip
    resp = post(server, json.dumps({"samples": samples}), "application/json")
    assert resp.status_code == 200, resp.text
    np.testing.assert_allclose(resp.json()["probabilities"], want, atol=1e-6)


def test_dense_model_small_batches_without_onednn_agree_with_large(store):
    """A batch of up to SMALL_BATCH samples runs on the predictor without oneDNN (cheaper
    for a lone request), a larger one on the oneDNN predictor: same probabilities."""
    from elasticctr.serving import model as M

    dense = M.DenseModel(store / "versions" / V1 / "dense", len(SLOTS), 8)
    n = 2 * M.SMALL_BATCH + 3
    pooled = np.random.default_rng(3).normal(size=(n, len(SLOTS), 8)).astype(np.float32)
    ran = []
    run = dense._run
    dense._run = lambda handles, x: ran.append(handles) or run(handles, x)
    whole = dense.run(pooled)
    parts = np.concatenate([dense.run(pooled[i : i + 7]) for i in range(0, n, 7)])
    np.testing.assert_allclose(parts, whole, atol=1e-6)
    assert ran[0] is dense._large and all(h is dense._small for h in ran[1:])
    ran.clear()
    dense.run(pooled[: M.SMALL_BATCH])
    dense.run(pooled[: M.SMALL_BATCH + 1])
    assert ran == [dense._small, dense._large]


def test_concurrent_requests_are_batched_and_answered_in_order(server, store, demo):
    lines = demo.read_bytes().splitlines()
    want = expected(store, V1, b"\n".join(lines) + b"\n")
    results: dict[int, list[float]] = {}

    def worker(i: int):
        with httpx.Client() as client:
            for j in range(i, len(lines), 16):
                r = client.post(server.url + "/v1/predict", content=lines[j],
                                headers={"Content-Type": "text/plain"})  # fmt: skip
                assert r.status_code == 200, r.text
                results[j] = r.json()["probabilities"]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = np.array([results[j][0] for j in range(len(lines))])
    np.testing.assert_allclose(got, want, atol=1e-6)
    metrics = httpx.get(server.url + "/metrics").text
    assert "elasticctr_serving_batch_samples_count" in metrics


BAD = [
    # (body, content type, status, code, words in the message)
    (b"1 0 12a:3\n", "text/plain", 400, "malformed", "line:1"),
    (b"1 0 1:0\n1 2 5:1\n", "text/plain", 400, "malformed", "line:2: click 2 > show 1"),
    (b"1 0 5:99\n", "text/plain", 400, "unknown_slot", "[99]"),
    (b"", "text/plain", 400, "empty", "no samples"),
    (b"\n\n  \n", "text/plain", 400, "empty", "no samples"),
    (b"1 0 1:0\n" * 201, "text/plain", 413, "too_many_samples", "limit 200"),
    (b"1 0 1:0", "application/x-www-form-urlencoded", 415, "unsupported_media_type", "text/plain"),
    (b"1 0 1:0", None, 415, "unsupported_media_type", "(none)"),
    (b"{", "application/json", 400, "bad_json", "not valid JSON"),
    (b"[]", "application/json", 400, "bad_json", "JSON object"),
    (b'{"samples": []}', "application/json", 400, "empty", "no samples"),
    (b'{"samples": [{"slots": {"99": [1]}}]}', "application/json", 400, "unknown_slot",
     "samples[0]: unknown slot 99"),
    (b'{"samples": [{"slots": {"0": [-1]}}]}', "application/json", 400, "bad_feasign", "-1"),
    (b'{"samples": [{"slots": {"0": [18446744073709551616]}}]}', "application/json", 400,
     "bad_feasign", "2^64"),
    (b'{"samples": [{"slots": {"0": ["99999999999999999999"]}}]}', "application/json", 400,
     "bad_feasign", ">= 2^64"),
    (b'{"samples": [{"slots": {"x": [1]}}]}', "application/json", 400, "bad_json", "'x'"),
    (b'{"samples": [{"slots": {"0": 5}}]}', "application/json", 400, "bad_json", "list"),
    (b'{"samples": [{"slot": {}}]}', "application/json", 400, "bad_json", "samples[0]"),
    (b'{"samples": [1], "x": 2}', "application/json", 400, "bad_json", "'x'"),
    (b"\xff\xfe", "application/json", 400, "bad_json", "UTF-8"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "ctype", "status", "code", "words"), BAD)
def test_bad_input_gets_precise_4xx(server, body, ctype, status, code, words):
    resp = post(server, body, ctype)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["code"] == code
    assert words in err["message"], err["message"]


def test_http_level_errors(server):
    big = b"1 0 1:0\n" * 40000
    r = post(server, big)
    assert r.status_code == 413 and "limit 200000" in r.json()["error"]["message"]
    assert httpx.get(server.url + "/v1/predict").status_code == 405
    assert httpx.get(server.url + "/nope").status_code == 404
    r = httpx.post(server.url + "/v1/predict", content=iter([b"1 0 1:0\n"]),
                   headers={"Content-Type": "text/plain"})  # fmt: skip
    assert r.status_code == 200, r.text  # a chunked body is decoded like a sized one
    assert r.json() == post(server, b"1 0 1:0\n").json()
    r = httpx.post(server.url + "/v1/predict", content=iter([big]),
                   headers={"Content-Type": "text/plain"})  # fmt: skip
    assert r.status_code == 413 and "limit of 200000" in r.json()["error"]["message"]
    r = post(server, b"1 0 1:0\n", params={"version": "20000101/00"})
    assert r.status_code == 409 and V1 in r.json()["error"]["message"]
    # the server is still fine after all of that
    assert httpx.get(server.url + "/healthz").status_code == 200
    assert post(server, b"1 0 1:0\n").status_code == 200


def test_raw_garbage_on_the_socket_never_kills_the_server(server):
    import socket

    for junk in (b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"\x00" * 70000,
                 b"POST /v1/predict HTTP/1.1\r\nContent-Length: x\r\n\r\n"):  # fmt: skip
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            reply = s.recv(4096)
            assert reply.startswith(b"HTTP/1.1 4") or reply.startswith(b"HTTP/1.1 505"), reply
    assert httpx.get(server.url + "/healthz").status_code == 200


def test_openapi_and_version(server):
    spec = httpx.get(server.url + "/openapi.json").json()
    assert "/v1/predict" in spec["paths"]
    info = httpx.get(server.url + "/v1/version").json()
    assert info["version"] == V1 and info["slots"] == SLOTS and info["embedding_dim"] == 8


def test_version_switch_under_load_never_mixes(server, store, demo):
    data = demo.read_bytes()
    want = {V1: expected(store, V1, data), V2: expected(store, V2, data)}
    assert np.abs(want[V1] - want[V2]).max() > 1e-3  # the versions really differ
    seen: list[tuple[str, list[float]]] = []
    stop = threading.Event()
    errors: list[str] = []

    def load():
        with httpx.Client() as client:
            while not stop.is_set():
                r = client.post(server.url + "/v1/predict", content=data,
                                headers={"Content-Type": "text/plain"})  # fmt: skip
                if r.status_code != 200:
                    errors.append(r.text)
                    continue
                doc = r.json()
                seen.append((doc["version"], doc["probabilities"]))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for target in (V2, V1, V2):
            r = httpx.post(server.url + "/admin/version", json={"version": target}, timeout=60)
            assert r.status_code == 200, r.text
            assert r.json()["changed"] is True
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    versions = {v for v, _ in seen}
    assert versions == {V1, V2}
    for version, probs in seen:  # every response is entirely one version's answer
        np.testing.assert_allclose(probs, want[version], atol=1e-6)
    assert httpx.get(server.url + "/v1/version").json()["version"] == V2


def test_corrupt_or_missing_version_is_rejected_and_previous_keeps_serving(server, store):
    from elasticctr.serving.testing import keys_of_file, write_version

    current = httpx.get(server.url + "/v1/version").json()["version"]
    keys = np.arange(1, 100, dtype=np.uint64)
    vdir = write_version(store, V3, slots=SLOTS, dim=8, keys=keys, seed=3,
                         dense_from=store / "versions" / V1)  # fmt: skip
    params = vdir / "dense" / "model.pdiparams"
    raw = bytearray(params.read_bytes())
    raw[-1] ^= 0xFF
    params.write_bytes(bytes(raw))
    r = httpx.post(server.url + "/admin/version", json={"version": V3}, timeout=60)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    text = err["message"] + " ".join(err.get("problems", []))
    assert "dense/model.pdiparams: sha256 differs" in text, err
    r = httpx.post(server.url + "/admin/version", json={"version": "20990101/00"}, timeout=60)
    assert r.status_code == 422 and "no" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/admin/version", json={"version": "yesterday"})
    assert r.status_code == 422 and "YYYYMMDD/HH" in r.json()["error"]["message"]
    assert httpx.get(server.url + "/v1/version").json()["version"] == current
    assert post(server, b"1 0 1:0\n").status_code == 200
    del keys_of_file


def test_bearer_token(store, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    proc = ServeProc(["--store", str(store), "--version", V1, "--poll-interval", "0",
                      "--token-file", str(token), "--cache", str(tmp_path / "c")],
                     tmp_path / "serve.log")  # fmt: skip
    try:
        proc.wait_ready()
        assert post(proc, b"1 0 1:0\n").status_code == 401
        r = post(proc, b"1 0 1:0\n", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        r = post(proc, b"1 0 1:0\n", headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200
        assert httpx.post(proc.url + "/admin/version", json={"version": V2}).status_code == 401
        assert httpx.get(proc.url + "/healthz").status_code == 200  # probes stay open
    finally:
        proc.stop()


def test_ectl_predict_prints_probabilities_auc_and_logloss(
    server, store, demo, tmp_path, ectl_here
):
    import subprocess
    import sys

    from sklearn.metrics import log_loss, roc_auc_score

    from elasticctr.data.parser import parse_bytes

    cli = [sys.executable, "-m", "elasticctr.cli.main", "predict", "--url", server.url]
    out = subprocess.run([*cli, str(demo), "--chunk", "30"], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    probs = np.array([float(x) for x in out.stdout.split()])
    current = httpx.get(server.url + "/v1/version").json()["version"]
    np.testing.assert_allclose(probs, expected(store, current, demo.read_bytes()), atol=1e-6)
    labels = parse_bytes(demo.read_bytes(), SLOTS)[0].click
    summary = out.stderr.strip().splitlines()[-1]
    assert f"samples=100 version={current}" in summary
    assert f"auc={roc_auc_score(labels, probs):.6f}" in summary
    assert f"logloss={log_loss(labels, probs):.6f}" in summary

    # the same entry point in this process for the other cases (faster)
    def here(*args, stdin=b""):
        done = ectl_here("predict", "--url", server.url, *args, stdin=stdin)
        return done.returncode, done.stdout, " ".join(done.stderr.split())

    code, out, err = here("-", "-q", stdin=demo.read_bytes())
    assert code == 0 and out == "" and "samples=100" in err, err
    bad = tmp_path / "bad.txt"
    bad.write_text("1 0 1:0\n1 0 1:0 x\n")
    code, out, err = here(str(bad))  # reported with file:line, nothing sent
    assert code == 2 and f"{bad}:2" in err and "nothing was sent" in err, err
    code, out, err = here(str(demo), "--url", "http://127.0.0.1:1")
    assert code == 1 and "cannot reach the prediction service" in err, err


def _handoff(server) -> dict[tuple[str, str], float]:
    """elasticctr_serving_handoff_seconds' _count and _sum series by `since`."""
    out = {}
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if line.startswith("elasticctr_serving_handoff_seconds_") and "_bucket" not in line:
            name, value = line.rsplit(" ", 1)
            since = name.split('since="', 1)[1].split('"', 1)[0]
            out[(since, name.split("{", 1)[0].rsplit("_", 1)[1])] = float(value)
    return out


def test_a_version_exported_while_serving_ran_measures_its_hand_off(server, store):
    """The manifest's timeline (the coordinator's times and the export's) to the switch:
    one observation per step for a version exported while serving ran; none for the
    versions without a timeline (V1, V2) or exported before it started."""
    import time

    from elasticctr.serving.testing import write_version

    before = _handoff(server)
    assert all(since not in ("data_found", "trained") for since, _ in before), before
    now = time.time()
    keys = np.arange(1, 100, dtype=np.uint64)
    old = {"data_found_at": 100.0, "trained_at": 110.0, "exported_at": 120.0}  # 1970
    write_version(store, "20261129/23", slots=SLOTS, dim=8, keys=keys, seed=5,
                  dense_from=store / "versions" / V1, timeline=old)  # fmt: skip
    r = httpx.post(server.url + "/admin/version", json={"version": "20261129/23"}, timeout=60)
    assert r.status_code == 200, r.text
    assert _handoff(server) == before  # exported before this process started: nothing
    timeline = {"data_found_at": now - 40, "trained_at": now - 7, "exported_at": now - 2}
    write_version(store, V4, slots=SLOTS, dim=8, keys=keys, seed=4,
                  dense_from=store / "versions" / V1, timeline=timeline)  # fmt: skip
    r = httpx.post(server.url + "/admin/version", json={"version": V4}, timeout=60)
    assert r.status_code == 200, r.text
    switched = time.time()
    got = _handoff(server)
    for since, key in (("data_found", "data_found_at"), ("trained", "trained_at"),
                       ("exported", "exported_at")):  # fmt: skip
        assert got[(since, "count")] == 1, got
        assert now - timeline[key] <= got[(since, "sum")] <= switched - timeline[key], since
