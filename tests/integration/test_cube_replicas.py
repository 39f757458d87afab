"""Cube shards with replicas (docs/cube.md "Replicas"), as real processes: two shards of two
replicas each, cube-transfer, and a real `ectl serve` under constant prediction load. A
replica killed while cube-transfer switches versions, or while it serves, costs no
prediction; once restarted on its own state dir it comes back on its committed version and
the transfer's reconcile brings it onto the new one."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from _cube_procs import ShardProc
from serving_helpers import ServeProc
from test_serving import SLOTS, V1, V2, V3
from tests.conftest import shared_path
from tests.prediction_load import PredictionLoad

from elasticctr.cube.builder import built_versions
from elasticctr.cube.client import CubeClient
from elasticctr.cube.transfer import Transfer

pytestmark = pytest.mark.integration

SHARDS, REPLICAS = 2, 2


@pytest.fixture(scope="module")
def cube(tmp_path_factory):
    from elasticctr.serving.testing import keys_of_file, write_version

    demo = shared_path("data", "elasticctr", "serving_demo_data.txt")
    tmp = tmp_path_factory.mktemp("replicas")
    store = tmp / "store"
    keys = keys_of_file(demo, SLOTS)
    v1 = write_version(store, V1, slots=SLOTS, dim=8, keys=keys, seed=1)
    for seed, v in ((2, V2), (3, V3)):
        write_version(store, v, slots=SLOTS, dim=8, keys=keys, seed=seed, dense_from=v1)
    root = tmp / "root"
    # replica r of shard i: its own state dir (a pod's own claim)
    procs = [
        [ShardProc(root, tmp / f"r{r}" / f"state-{i}", i, SHARDS) for r in range(REPLICAS)]
        for i in range(SHARDS)
    ]
    try:
        for group in procs:
            for p in group:
                p.state_dir.mkdir(parents=True)
                p.start()
        urls = ["|".join(p.url for p in group) for group in procs]
        transfer = Transfer(cube_root=root, shard_urls=urls, store=str(store), timeout=30)
        transfer.publish(V1)
        serve = ServeProc(
            ["--store", str(store), "--cube", ",".join(urls), "--poll-interval", "0.5",
             "--cache", str(tmp / "cache")],
            tmp / "serve.log",
        )  # fmt: skip
        try:
            serve.wait_ready()
            yield {"procs": procs, "urls": urls, "transfer": transfer, "serve": serve,
                   "root": root, "lines": demo.read_bytes().splitlines()}  # fmt: skip
        finally:
            serve.stop()
            transfer.close()
    finally:
        for group in procs:
            for p in group:
                p.stop()


def wait_for(cond, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def committed(url: str) -> str | None:
    try:
        return httpx.get(url + "/v1/status", timeout=5).json().get("committed")
    except httpx.HTTPError:
        return None


def test_sync_client_lookups_fail_over_to_another_replica(cube):
    """`CubeClient.lookup` (ectl cube tools, bench) asks the other replica of a shard when
    one is down, and answers the same rows."""
    keys = np.arange(1, 2000, dtype=np.uint64)
    client = CubeClient(cube["urls"], timeout=5)
    try:
        want, _ = client.lookup(keys, V1)
        victim = cube["procs"][1][0]
        victim.kill()
        try:
            for _ in range(4):  # every replica takes its turn first
                got, _ = client.lookup(keys, V1)
                np.testing.assert_array_equal(got, want)
        finally:
            victim.start()
            victim.wait_ready(V1)
    finally:
        client.close()


def test_a_replica_killed_mid_switch_costs_no_prediction(cube):
    """Under constant prediction load: a replica is frozen (SIGSTOP: cube-transfer's load
    request reaches it and waits) and SIGKILLed once the new version is built and being
    loaded; the switch commits on the other replicas and serving follows; the replica
    restarts on its state dir with the old version, the
    transfer's reconcile brings it onto the new one. Then a replica of the other shard is
    killed and restarted while serving only. No prediction fails."""
    transfer, serve = cube["transfer"], cube["serve"]
    victim = cube["procs"][0][1]
    timings = {}
    with PredictionLoad(serve.url, cube["lines"], threads=4, pause=0) as load:
        time.sleep(1.0)

        def killer():
            wait_for(lambda: V2 in built_versions(cube["root"]), "the build of V2", 60)
            time.sleep(0.5)  # the load requests are out; the victim's waits in its socket
            victim.kill()
            timings["killed"] = time.monotonic()

        victim.proc.send_signal(signal.SIGSTOP)

        k = threading.Thread(target=killer)
        k.start()
        t0 = time.monotonic()
        transfer.publish(V2)
        assert "killed" in timings  # the switch waited for the frozen replica until it died
        timings["switch_s"] = time.monotonic() - t0
        k.join(30)
        assert "killed" in timings
        wait_for(lambda: httpx.get(serve.url + "/v1/version").json()["version"] == V2,
                 "serving on V2")  # fmt: skip
        sent_switch = load.sent
        victim.start()
        t1 = time.monotonic()
        assert committed(victim.url) == V1  # its own state: the version it had committed
        assert transfer.reconcile() == [1]  # what every poll of the watcher runs first
        timings["catch_up_s"] = time.monotonic() - t1
        assert committed(victim.url) == V2
        # a replica of shard 1 dies while serving only, and comes back
        other = cube["procs"][1][1]
        other.kill()
        time.sleep(2.0)
        other.start()
        other.wait_ready(V2)
        time.sleep(1.0)
    print(
        f"replicas: {load.sent} predictions ({sent_switch} until serving was on V2), "
        f"{len(load.failed)} failed; switch with a replica killed {timings['switch_s']:.2f}s, "
        f"restarted replica caught up in {timings['catch_up_s']:.2f}s; "
        f"versions {sorted(load.versions)}"
    )
    assert not load.failed, load.failed[:5]
    assert load.sent > 50
    assert {V1, V2} <= load.versions


def test_a_switch_with_every_replica_of_a_shard_down_changes_nothing(cube):
    """Both replicas of shard 0 down: the switch fails in phase 1 and every replica keeps
    the committed version; serving keeps answering from it once they are back."""
    transfer = cube["transfer"]
    group = cube["procs"][0]
    for p in group:
        p.kill()
    try:
        with pytest.raises(Exception, match="phase 1 failed"):
            transfer.publish(V3)
    finally:
        for p in group:
            p.start()
    for p in (*group, *cube["procs"][1]):
        assert committed(p.url) == V2
    serve = cube["serve"]
    r = httpx.post(serve.url + "/v1/predict", content=cube["lines"][0] + b"\n",
                   headers={"Content-Type": "text/plain"}, timeout=30)  # fmt: skip
    assert r.status_code == 200 and r.json()["version"] == V2, r.text


def test_ordinals_name_replicas_of_shards(tmp_path: Path):
    """`ectl cube server --ordinal i --num-shards n` serves shard i % n (the StatefulSet's
    pod i); `--shard` and `--ordinal` together are refused."""
    import subprocess
    import sys

    from elasticctr.net import free_port, wait_for_port

    port = free_port()
    cmd = [sys.executable, "-m", "elasticctr.cli.main", "cube", "server",
           "--cube-root", str(tmp_path / "root"), "--state-dir", str(tmp_path / "s"),
           "--num-shards", "2", "--port", str(port)]  # fmt: skip
    both = subprocess.run([*cmd, "--shard", "1", "--ordinal", "3"], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert both.returncode != 0 and "one of --shard and --ordinal" in both.stdout + both.stderr
    p = subprocess.Popen([*cmd, "--ordinal", "3"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for_port("127.0.0.1", port, timeout=60, what="cube server")
        st = httpx.get(f"http://127.0.0.1:{port}/v1/status", timeout=5).json()
        assert (st["shard"], st["num_shards"]) == (1, 2)
    finally:
        p.terminate()
        p.wait(15)
