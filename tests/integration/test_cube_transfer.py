"""cube-transfer as a real process driving real shard processes through version switches."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pytest
from _cube_procs import ShardProc, make_version, random_keys, version_rows

from elasticctr.constants import ENV_FILESERVER_TOKEN
from elasticctr.cube.builder import built_versions, version_dir
from elasticctr.cube.client import CubeClient, ShardClient
from elasticctr.cube.modelstore import list_versions
from elasticctr.cube.transfer import Transfer
from elasticctr.errors import EctlError
from elasticctr.net import free_port, wait_for_port

pytestmark = pytest.mark.integration

SHARDS = 2
N = 3000


def ectl(*args: str, check: bool = True, timeout: float = 120, env=None):
    proc = subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "cube", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"ectl cube {args[0]} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def model(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`ectl model ...` as a user runs it."""
    proc = subprocess.run([sys.executable, "-m", "elasticctr.cli.main", "model", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(f"ectl model {args[0]} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


class Notified(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Notified.received.append(json.loads(body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("cube")
    cube_root = root / "cube"
    procs = [ShardProc(cube_root, root / f"state{i}", i, SHARDS).start() for i in range(SHARDS)]
    notify = HTTPServer(("127.0.0.1", 0), Notified)
    thread = threading.Thread(target=notify.serve_forever, daemon=True)
    thread.start()
    yield cube_root, procs, f"http://127.0.0.1:{notify.server_port}/cube"
    notify.shutdown()
    notify.server_close()
    for p in procs:
        p.stop()


_DAYS = iter(range(1, 29))


@pytest.fixture()
def env(shards, tmp_path):
    """A fresh model store and transfer state per test; the shard processes are shared,
    so each test uses its own day in version ids (shards may still hold older ones)."""
    cube_root, procs, notify = shards
    shutil.rmtree(cube_root / "versions", ignore_errors=True)
    (cube_root / "transfer.json").unlink(missing_ok=True)
    store = tmp_path / "store"
    store.mkdir()
    Notified.received = []
    urls = [arg for p in procs for arg in ("--shard-url", p.url)]
    day = f"202004{next(_DAYS):02d}"
    return {
        "store": store,
        "cube_root": cube_root,
        "procs": procs,
        "keys": random_keys(N, seed=7),
        "transfer": ["--model-store", str(store), "--cube-root", str(cube_root), *urls],
        "urls": urls,
        "notify": notify,
        "v": lambda hour: f"{day}/{hour:02d}",
    }


def committed(env) -> list[str | None]:
    return [ShardClient(p.url).status()["committed"] for p in env["procs"]]


def check_rows(env, version: str, tag: int) -> None:
    client = CubeClient([p.url for p in env["procs"]])
    try:
        rows, missing = client.lookup(env["keys"], version)
    finally:
        client.close()
    assert missing == 0 and np.array_equal(rows, version_rows(env["keys"], tag))


def test_publish_newest_version_to_all_shards_and_notify(env):
    V0, V1, V2, V3 = (env["v"](hour) for hour in range(4))
    make_version(env["store"], V0, env["keys"], 1)
    make_version(env["store"], V1, env["keys"], 2)
    out = ectl("transfer", *env["transfer"], "--once", "--notify", env["notify"]).stdout
    assert f"published {V1}" in out
    assert committed(env) == [V1] * SHARDS
    check_rows(env, V1, 2)
    state = json.loads((env["cube_root"] / "transfer.json").read_text())
    assert state["committed"] == V1 and state["notified"] == V1
    assert Notified.received == [
        {"version": V1, "scenario": "default", "cube_shards": [p.url for p in env["procs"]]}
    ]
    # Nothing new: a second poll changes nothing.
    assert "no new version" in ectl("transfer", *env["transfer"], "--once").stdout
    status = json.loads(ectl("status", "--cube-root", str(env["cube_root"]), *env["urls"]).stdout)
    assert status["transfer"]["committed"] == V1 and status["retained"] == [V1]
    assert [s["committed"] for s in status["shards"]] == [V1] * SHARDS


def test_corrupt_export_is_rejected_and_shards_keep_the_old_version(env):
    V0, V1, V2, V3 = (env["v"](hour) for hour in range(4))
    make_version(env["store"], V0, env["keys"], 1)
    ectl("transfer", *env["transfer"], "--once")
    vdir = make_version(env["store"], V1, env["keys"], 2)
    part = vdir / "sparse" / "part-00001.values.npy"
    part.write_bytes(part.read_bytes()[:-16])
    proc = ectl("transfer", *env["transfer"], "--once", check=False)
    assert proc.returncode != 0
    assert f"{V1} rejected" in proc.stdout and "bytes, manifest says" in proc.stderr
    assert committed(env) == [V0] * SHARDS
    check_rows(env, V0, 1)
    state = json.loads((env["cube_root"] / "transfer.json").read_text())
    assert V1 in state["failed"]


def test_phase_one_failure_on_one_shard_switches_no_shard(env):
    V0, V1, V2, V3 = (env["v"](hour) for hour in range(4))
    make_version(env["store"], V0, env["keys"], 1)
    make_version(env["store"], V1, env["keys"], 2)
    ectl("transfer", *env["transfer"], "--version", V0)
    ectl("build", "--model-store", str(env["store"]), "--version", V1,
         "--cube-root", str(env["cube_root"]), "--shards", str(SHARDS))  # fmt: skip
    shard1 = next(version_dir(env["cube_root"], V1).glob("shard-00001-*.cube"))
    data = bytearray(shard1.read_bytes())
    data[200] ^= 0x01
    shard1.write_bytes(bytes(data))
    proc = ectl("transfer", *env["transfer"], "--version", V1, check=False)
    assert proc.returncode != 0
    assert "phase 1 failed" in proc.stderr and "shard 1" in proc.stderr
    assert committed(env) == [V0] * SHARDS
    # Shard 0 loaded the version in phase 1; the abort unloaded it again.
    assert V1 not in ShardClient(env["procs"][0].url).status()["loaded"]
    check_rows(env, V0, 1)


def test_keep_k_versions_and_roll_back_on_command(env):
    V0, V1, V2, V3 = (env["v"](hour) for hour in range(4))
    # The publishes run in-process (same code as the CLI, fewer interpreter starts on a
    # loaded CI machine); the rollback below goes through the real CLI.
    transfer = Transfer(
        cube_root=env["cube_root"], shard_urls=[p.url for p in env["procs"]],
        store=str(env["store"]), keep=2,
    )  # fmt: skip
    try:
        for i in range(4):
            make_version(env["store"], env["v"](i), env["keys"], i + 1)
            assert transfer.poll_once(raise_errors=True) == env["v"](i)
    finally:
        transfer.close()
    assert built_versions(env["cube_root"]) == [V2, V3]
    assert committed(env) == [V3] * SHARDS
    proc = ectl("rollback", "--to", V0, "--cube-root", str(env["cube_root"]),
                *env["urls"], check=False)  # fmt: skip
    assert proc.returncode != 0 and "not retained" in proc.stderr
    ectl("rollback", "--to", V2, "--cube-root", str(env["cube_root"]), *env["urls"])
    assert committed(env) == [V2] * SHARDS
    check_rows(env, V2, 3)
    # The watcher does not undo a rollback by re-publishing a version it already published.
    transfer = Transfer(cube_root=env["cube_root"], shard_urls=[p.url for p in env["procs"]],
                        store=str(env["store"]), keep=2)  # fmt: skip
    try:
        assert transfer.poll_once(raise_errors=True) is None
    finally:
        transfer.close()
    assert committed(env) == [V2] * SHARDS


def test_watcher_publishes_new_versions_and_repairs_a_restarted_shard(env, tmp_path):
    V0, V1, V2, V3 = (env["v"](hour) for hour in range(4))
    make_version(env["store"], V0, env["keys"], 1)
    log = open(tmp_path / "transfer.log", "wb")  # noqa: SIM115 - closed below
    watcher = subprocess.Popen(
        [sys.executable, "-m", "elasticctr.cli.main", "cube", "transfer", *env["transfer"],
         "--interval", "0.3", "--listen", "127.0.0.1:0"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:

        def wait_for(version: str, timeout: float = 60) -> None:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if committed(env) == [version] * SHARDS:
                    return
                assert watcher.poll() is None, (tmp_path / "transfer.log").read_text()
                time.sleep(0.2)
            raise AssertionError(f"not on {version}: {committed(env)}")

        wait_for(V0)
        make_version(env["store"], V1, env["keys"], 2)
        wait_for(V1)
        check_rows(env, V1, 2)
        # A shard that lost its state (new pod, empty volume) is brought back by reconcile.
        victim = env["procs"][0]
        victim.kill()
        for f in Path(victim.state_dir).iterdir():
            f.unlink()
        victim.start()
        wait_for(V1)
        check_rows(env, V1, 2)
    finally:
        watcher.send_signal(signal.SIGTERM)
        code = watcher.wait(timeout=30)
        log.close()
    assert code == 0, (tmp_path / "transfer.log").read_text()


def test_transfer_refuses_shards_listed_out_of_order(env):
    V0, V1, V2, V3 = (env["v"](hour) for hour in range(4))
    swapped = ["--shard-url", env["procs"][1].url, "--shard-url", env["procs"][0].url]
    proc = ectl("transfer", "--model-store", str(env["store"]), "--cube-root",
                str(env["cube_root"]), *swapped, "--once", check=False)  # fmt: skip
    assert proc.returncode != 0 and "expected shard 0 of 2" in proc.stderr


def test_transfer_reads_the_model_store_through_the_fileserver(env, tmp_path):
    V0, V1, V2, V3 = (env["v"](hour) for hour in range(4))
    make_version(env["store"], V0, env["keys"], 1)
    port = free_port()
    with_token = {**os.environ, ENV_FILESERVER_TOKEN: "read-token"}
    fileserver = subprocess.Popen(
        [sys.executable, "-m", "elasticctr.cli.main", "fileserver", "--root", str(env["store"]),
         "--port", str(port), "--protect-reads"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env=with_token,
    )  # fmt: skip
    try:
        wait_for_port("127.0.0.1", port, timeout=60, what="fileserver",
                      alive=lambda: fileserver.poll() is None)  # fmt: skip
        args = list(env["transfer"])
        args[args.index("--model-store") + 1] = f"http://127.0.0.1:{port}"
        # Reads are protected: without the token the store cannot be read.
        assert ENV_FILESERVER_TOKEN not in os.environ
        with pytest.raises(
            EctlError, match=r"versions: the fileserver refused the request \(HTTP 401\)"
        ):
            list_versions(f"http://127.0.0.1:{port}")
        assert f"published {V0}" in ectl("transfer", *args, "--once", env=with_token).stdout
    finally:
        fileserver.send_signal(signal.SIGTERM)
        fileserver.wait(timeout=15)
    assert committed(env) == [V0] * SHARDS
    check_rows(env, V0, 1)


def test_watcher_waits_for_shards_that_start_later(tmp_path):
    # Pods start in any order: the transfer must wait for its shards, not exit.
    store, cube_root = tmp_path / "store", tmp_path / "cube"
    keys = random_keys(500, seed=3)
    make_version(store, "20200501/00", keys, 7)
    shard = ShardProc(cube_root, tmp_path / "state0", 0, 1)
    shard.port = free_port()
    log_path = tmp_path / "transfer.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    watcher = subprocess.Popen(
        [sys.executable, "-m", "elasticctr.cli.main", "cube", "transfer", "--model-store",
         str(store), "--cube-root", str(cube_root), "--shard-url", shard.url,
         "--interval", "0.3", "--listen", "127.0.0.1:0"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "waiting for shards" not in log_path.read_text():
            assert watcher.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        shard.start()
        assert shard.wait_ready("20200501/00", timeout=60)
    finally:
        watcher.send_signal(signal.SIGTERM)
        code = watcher.wait(timeout=30)
        log.close()
        shard.stop()
    assert code == 0, log_path.read_text()


def test_pin_and_unpin_through_the_status_server(env):
    """`ectl model pin|unpin|list`'s endpoints on cube-transfer's status server, with the
    real shards: a pin switches every shard (rebuilding from the store a version whose
    build was not retained), holds while newer versions land and goes on only after unpin;
    bad pins change nothing."""
    import httpx

    from elasticctr.cube.modelstore import write_version
    from elasticctr.cube.transfer_server import TransferStatusServer

    V0, V1, V2, V3 = (env["v"](hour) for hour in range(4))
    transfer = Transfer(cube_root=env["cube_root"], shard_urls=[p.url for p in env["procs"]],
                        store=str(env["store"]), keep=2)  # fmt: skip
    server = TransferStatusServer(("127.0.0.1", 0), transfer, admin_token="pin-token").start()
    auth = {"Authorization": "Bearer pin-token"}

    def pin(version, headers=auth, **body):
        return httpx.post(f"{server.url}/v1/pin", json={"version": version, **body},
                          headers=headers, timeout=60)  # fmt: skip

    try:
        for i, v in enumerate((V0, V1, V2)):
            make_version(env["store"], v, env["keys"], i + 1)
            assert transfer.poll_once(raise_errors=True) == v
        listed = httpx.get(f"{server.url}/v1/versions", timeout=30).json()
        assert listed["store"] == [V0, V1, V2] and listed["retained"] == [V1, V2]
        assert listed["committed"] == V2 and listed["pinned"] is None

        denied = pin(V0, headers={})
        assert denied.status_code == 401 and committed(env) == [V2] * SHARDS
        wrong = pin(V0, headers={"X-Elasticctr-Admin-Token": "guess"})
        assert wrong.status_code == 401 and committed(env) == [V2] * SHARDS
        got = pin(V0, headers={"X-Elasticctr-Admin-Token": "pin-token"})  # as via the proxy
        # V0's build was not retained: fetched, verified and built again
        assert got.status_code == 200, got.text
        assert got.json() == {"committed": V0, "pinned": V0, "previous": V2}
        assert committed(env) == [V0] * SHARDS
        check_rows(env, V0, 1)
        make_version(env["store"], V3, env["keys"], 4)
        assert transfer.poll_once(raise_errors=True) is None  # pinned: V3 waits
        assert committed(env) == [V0] * SHARDS

        # Bad pins: one clear error each, V0 keeps serving.
        corrupt = make_version(env["store"], env["v"](10), env["keys"], 9)
        part = corrupt / "sparse" / "part-00000.values.npy"
        part.write_bytes(part.read_bytes()[:-8])
        other = env["v"](11)
        write_version(env["store"], other, [(env["keys"], version_rows(env["keys"], 5))],
                      slots=[0, 1])  # fmt: skip
        for version, status, words in [
            ("20990101/00", 409, "not in the model store"),
            (env["v"](10), 409, "bytes, manifest says"),
            (other, 409, "slots [0, 1]"),
            ("yesterday", 409, "YYYYMMDD/HH"),
        ]:
            r = pin(version)
            assert r.status_code == status and words in r.text, (version, r.text)
            assert committed(env) == [V0] * SHARDS
        assert pin(None).status_code == 400
        assert pin(V1, scenario="nope").status_code == 404
        assert httpx.get(f"{server.url}/v1/versions?scenario=nope").status_code == 404

        shutil.rmtree(corrupt)
        shutil.rmtree(env["store"] / "versions" / other)
        r = httpx.post(f"{server.url}/v1/unpin", json={}, headers=auth, timeout=30)
        assert r.status_code == 200 and r.json()["was"] == V0, r.text
        assert transfer.wake.is_set()  # the watcher polls at once
        assert transfer.poll_once(raise_errors=True) == V3
        assert committed(env) == [V3] * SHARDS
        check_rows(env, V3, 4)
    finally:
        server.stop()
        transfer.close()


def test_ectl_model_verbs_against_the_status_server(env):
    """`ectl model list|rollback|pin|unpin --url` (a local platform's way; on a cluster the
    same calls go through the API server's pod proxy, tests/e2e/test_platform.py): a
    rollback pins the version before the committed one on every shard, bad input is one
    clear error with the committed version unchanged, unpin follows the newest again."""
    from elasticctr.cube.transfer_server import TransferStatusServer

    V0, V1, V2 = (env["v"](hour) for hour in range(3))
    transfer = Transfer(cube_root=env["cube_root"], shard_urls=[p.url for p in env["procs"]],
                        store=str(env["store"]), keep=2)  # fmt: skip
    server = TransferStatusServer(("127.0.0.1", 0), transfer, admin_token="m-token").start()
    at = ("--url", server.url)
    token = ("--admin-token", "m-token")
    try:
        for i, v in enumerate((V0, V1, V2)):
            make_version(env["store"], v, env["keys"], i + 1)
            assert transfer.poll_once(raise_errors=True) == v
        listed = json.loads(model("list", *at, "-o", "json").stdout)
        assert listed["store"] == [V0, V1, V2] and listed["committed"] == V2
        assert listed["pinned"] is None and listed["serving"] is None
        table = model("list", *at).stdout
        assert V2 in table and "committed" in table

        # Bad input: one clear error each, V2 serving on.
        for args, code, words in [
            (("rollback", *at), 1, "cube admin token"),  # no token
            (("pin", "20990101/00", *at, *token), 1, "not in the model store"),
            (("pin", "tomorrow", *at, *token), 2, "YYYYMMDD/HH"),
            (("list", "-s", "nope", *at), 1, "nope"),
            (("list", "--url", f"http://127.0.0.1:{free_port()}"), 1, "unreachable"),
        ]:
            r = model(*args, check=False)
            assert r.returncode == code and words in r.stderr, (args, r.stdout, r.stderr)
            assert committed(env) == [V2] * SHARDS

        done = json.loads(model("rollback", *at, *token, "-o", "json").stdout)
        assert done["committed"] == V1 and done["previous"] == V2 and done["pinned"] == V1
        assert committed(env) == [V1] * SHARDS
        check_rows(env, V1, 2)
        assert transfer.poll_once(raise_errors=True) is None  # pinned: V2 waits
        out = model("pin", V0, *at, *token).stdout
        assert f"pinned {V0} (was {V1})" in out
        assert committed(env) == [V0] * SHARDS

        out = model("unpin", *at, *token).stdout
        assert f"unpinned {V0}" in out
        assert transfer.poll_once(raise_errors=True) == V2
        assert committed(env) == [V2] * SHARDS
        check_rows(env, V2, 3)
    finally:
        server.stop()
        transfer.close()
