"""Serving against real cube shards and cube-transfer: lookups, commits, no mixing."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import httpx
import numpy as np
import pytest
from serving_helpers import ECTL, ServeProc
from test_serving import SLOTS, V1, V2, expected
from tests.conftest import shared_path

from elasticctr.net import free_port, wait_for_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from elasticctr.serving.testing import keys_of_file, write_version

    demo = shared_path("data", "elasticctr", "serving_demo_data.txt")
    tmp = tmp_path_factory.mktemp("cube")
    store = tmp / "store"
    keys = keys_of_file(demo, SLOTS)
    v1 = write_version(store, V1, slots=SLOTS, dim=8, keys=keys, seed=1)
    write_version(store, V2, slots=SLOTS, dim=8, keys=keys, seed=2, dense_from=v1)
    procs: list[subprocess.Popen] = []
    urls = []
    try:
        for shard in range(2):
            port = free_port()
            log = open(tmp / f"cube-{shard}.log", "wb")
            procs.append(subprocess.Popen(
                [*ECTL, "cube", "server", "--cube-root", str(tmp / "root"),
                 "--state-dir", str(tmp / f"state-{shard}"), "--shard", str(shard),
                 "--num-shards", "2", "--port", str(port)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            ))  # fmt: skip
            wait_for_port("127.0.0.1", port, timeout=60, what=f"cube shard {shard}")
            urls.append(f"http://127.0.0.1:{port}")
        # serving reads the store over HTTP from the fileserver (remote fetch of dense/)
        fs_port = free_port()
        log = open(tmp / "fileserver.log", "wb")
        procs.append(subprocess.Popen(
            [*ECTL, "fileserver", "--root", str(store), "--port", str(fs_port),
             "--allow-anonymous-writes"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        ))  # fmt: skip
        wait_for_port("127.0.0.1", fs_port, timeout=60, what="fileserver")
        yield {"store": store, "root": tmp / "root", "urls": urls, "demo": demo, "tmp": tmp,
               "store_url": f"http://127.0.0.1:{fs_port}"}  # fmt: skip
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(15)


def transfer(setup, version: str, notify: str | None = None) -> None:
    args = [*ECTL, "cube", "transfer", "--model-store", str(setup["store"]),
            "--cube-root", str(setup["root"]), "--version", version]  # fmt: skip
    for u in setup["urls"]:
        args += ["--shard-url", u]
    if notify:
        args += ["--notify", notify]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ready_with_no_model_version_yet_then_serves_the_first_one(setup):
    """Before cube has committed any version, serving is ready (an install waiting for
    readiness must not wait for training) and predictions get a clear 503 `no_model`; the
    first committed version is then loaded and served. Runs first: nothing committed yet."""
    proc = ServeProc(
        ["--store", setup["store_url"], "--cube", ",".join(setup["urls"]),
         "--poll-interval", "0.5", "--cache", str(setup["tmp"] / "cache-first")],
        setup["tmp"] / "serve-first.log",
    )  # fmt: skip
    try:
        ready = proc.wait_ready(loaded=False)
        assert ready["version"] is None and "no model version yet" in ready["detail"]
        r = httpx.post(proc.url + "/v1/predict", content=setup["demo"].read_bytes(),
                       headers={"Content-Type": "text/plain"})  # fmt: skip
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_model", r.text
        assert "no model version yet" in r.json()["error"]["message"]
        # `helm test` right after an install: `ectl predict --no-model-ok` passes, and says so.
        cmd = [*ECTL, "predict", str(setup["demo"]), "--url", proc.url, "-q"]
        strict = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert strict.returncode != 0 and "no model version yet" in strict.stderr
        lenient = subprocess.run(
            [*cmd, "--no-model-ok"], capture_output=True, text=True, timeout=120
        )
        assert lenient.returncode == 0, lenient.stderr
        assert "serving is up and has no model version yet" in lenient.stderr
        transfer(setup, V1)
        assert proc.wait_ready(timeout=60)["version"] == V1
        r = httpx.post(proc.url + "/v1/predict", content=setup["demo"].read_bytes(),
                       headers={"Content-Type": "text/plain"})  # fmt: skip
        assert r.status_code == 200 and r.json()["version"] == V1, r.text
    finally:
        proc.stop()


def test_cube_backed_serving_follows_transfer_and_never_mixes(setup):
    data = setup["demo"].read_bytes()
    want = {V1: expected(setup["store"], V1, data), V2: expected(setup["store"], V2, data)}
    transfer(setup, V1)
    proc = ServeProc(
        ["--store", setup["store_url"], "--cube", ",".join(setup["urls"]),
         "--poll-interval", "0.5", "--cache", str(setup["tmp"] / "cache")],
        setup["tmp"] / "serve.log",
    )  # fmt: skip
    try:
        proc.wait_ready()
        info = httpx.get(proc.url + "/v1/version").json()
        assert info["version"] == V1 and info["embeddings"] == "cube"
        cached = setup["tmp"] / "cache" / V1
        assert (cached / "dense").is_dir() and not (cached / "sparse").exists()
        r = httpx.post(proc.url + "/v1/predict", content=data,
                       headers={"Content-Type": "text/plain"})  # fmt: skip
        assert r.status_code == 200, r.text
        # cube rows (2 shards over HTTP) give exactly the local-table answer
        np.testing.assert_allclose(r.json()["probabilities"], want[V1], atol=1e-6)

        seen, errors, stop = [], [], threading.Event()

        def load():
            with httpx.Client() as client:
                while not stop.is_set():
                    r = client.post(proc.url + "/v1/predict", content=data,
                                    headers={"Content-Type": "text/plain"})  # fmt: skip
                    if r.status_code == 200:
                        seen.append((r.json()["version"], r.json()["probabilities"]))
                    else:
                        errors.append(r.text)

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            transfer(setup, V2, notify=proc.url + "/admin/version")
            for _ in range(50):
                if httpx.get(proc.url + "/v1/version").json()["version"] == V2:
                    break
                threading.Event().wait(0.2)
            threading.Event().wait(0.5)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors[:3]
        assert {v for v, _ in seen} == {V1, V2}
        for version, probs in seen:
            np.testing.assert_allclose(probs, want[version], atol=1e-6)
        # rollback through cube: the poller follows cube's committed version
        rb = subprocess.run(
            [*ECTL, "cube", "rollback", "--cube-root", str(setup["root"]), "--to", V1,
             *sum((["--shard-url", u] for u in setup["urls"]), [])],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert rb.returncode == 0, rb.stdout + rb.stderr
        for _ in range(50):
            if httpx.get(proc.url + "/v1/version").json()["version"] == V1:
                break
            threading.Event().wait(0.2)
        assert httpx.get(proc.url + "/v1/version").json()["version"] == V1
    finally:
        proc.stop()
