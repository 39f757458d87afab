"""cube-transfer's status server (issue 24): a model store the transfer cannot read shows
in its /readyz and /v1/status, not only in its log. Real processes: `ectl cube transfer`,
an `ectl cube server` shard and the project's fileserver as the model store, which is
down at first and started (and stopped again) under the running transfer; `ectl status`'s
model store row is made from the transfer's real answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from _cube_procs import ShardProc, make_version, random_keys
from tests.fileserver_fixture import running_fileserver

from elasticctr.cli.status import store_from_transfer, store_row
from elasticctr.constants import ENV_FILESERVER_TOKEN, ENV_HDFS_UGI
from elasticctr.cube.transfer import Transfer
from elasticctr.modelstore import open_store
from elasticctr.net import free_port, wait_for_port
from elasticctr.scenarios import SCENARIOS_DIR, DirRegistry, Scenario

pytestmark = pytest.mark.integration

TOKEN = "read-token-4f1c"
V0, V1 = "20200601/00", "20200601/01"


class TransferProc:
    """`ectl cube transfer` watching `store_url`, its status server on a free port."""

    def __init__(self, tmp: Path, store_url: str, shard: ShardProc, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "transfer.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "elasticctr.cli.main", "cube", "transfer",
                 "--model-store", store_url, "--cube-root", str(tmp / "cube"),
                 "--shard-url", shard.url, "--interval", "0.3",
                 "--listen", f"127.0.0.1:{self.port}", *extra],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, ENV_FILESERVER_TOKEN: TOKEN, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        wait_for_port("127.0.0.1", self.port, timeout=60, what="cube transfer",
                      alive=lambda: self.proc.poll() is None)  # fmt: skip

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", timeout=5)

    def wait(self, what: str, check: Callable[[dict], bool], timeout: float = 30) -> dict:
        """Poll /v1/status until `check(status)`; fail with the last status and the log."""
        deadline = time.monotonic() + timeout
        status: dict = {}
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            status = self.get("/v1/status").json()
            if check(status):
                return status
            time.sleep(0.1)
        raise AssertionError(f"{what}: {status}\n{self.log.read_text()[-3000:]}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@pytest.fixture()
def shard(tmp_path):
    proc = ShardProc(tmp_path / "cube", tmp_path / "state0", 0, 1)
    proc.port = free_port()
    yield proc
    proc.stop()


def test_unreachable_store_is_not_ready_until_it_can_be_read(tmp_path, shard):
    store, fs_port = tmp_path / "store", free_port()
    store.mkdir()
    store_url = f"http://127.0.0.1:{fs_port}"  # nothing listens there yet
    t0 = time.monotonic()
    transfer = TransferProc(tmp_path, store_url, shard)
    try:
        assert transfer.get("/healthz").status_code == 200
        # (a) no store and no shard yet: the watcher waits for its shard and reads the
        # store meanwhile; every read fails.
        status = transfer.wait("a failed read", lambda s: s["lastError"] is not None)
        assert status["shardsError"] and "Connect" in status["shardsError"]
        ready = transfer.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert ready.json()["ready"] is False
        detail = ready.json()["detail"]
        assert detail.startswith(store_url) and "cannot reach the server" in detail, detail
        assert status["modelStore"] == store_url and status["lastOkAt"] is None
        assert status["newestVersion"] is None and status["committed"] is None
        assert TOKEN not in transfer.get("/v1/status").text
        # `ectl status`'s model store row, from this very answer.
        seen = store_from_transfer(transfer.get("/v1/status").json())
        assert seen["readable"] is False and seen["error"].startswith(store_url)
        assert store_row(seen).startswith(f"[red]not readable[/red]: {store_url}")

        # The shard comes up: the watcher polls (and fails) through its main loop now.
        shard.start()
        first = status["lastPollAt"]
        status = transfer.wait(
            "polling after the shard answered",
            lambda s: s["shardsError"] is None and s["lastPollAt"] != first,
        )
        assert status["lastError"] and transfer.get("/readyz").status_code == 503

        # (b) a version is published and the store comes up: ready, newest version seen,
        # and committed on the shard.
        make_version(store, V0, random_keys(500, seed=11), 1)
        with running_fileserver(store, fs_port, TOKEN) as fileserver:
            status = transfer.wait(
                "the version committed", lambda s: s["committed"] == V0, timeout=60
            )
            assert status["ready"] is True and status["detail"] is None
            assert status["lastError"] is None and status["newestVersion"] == V0
            assert status["lastOkAt"] is not None
            ready = transfer.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json() == {"ready": True, "modelStore": store_url, "newestVersion": V0}
            row = store_row(store_from_transfer(transfer.get("/v1/status").json()))
            assert row.startswith(f"{store_url}: readable at ") and row.endswith(V0), row
            assert shard.wait_ready(V0, timeout=30)
            fileserver.kill()
            fileserver.wait()
        # (c) the store goes away again: not ready, the last good read is kept.
        status = transfer.wait("the store gone", lambda s: s["lastError"] is not None)
        assert transfer.get("/readyz").status_code == 503
        assert status["newestVersion"] == V0 and status["committed"] == V0
        assert status["lastOkAt"] is not None
        row = store_row(store_from_transfer(transfer.get("/v1/status").json()))
        assert f"last good read {status['lastOkAt']}, newest version then {V0}" in row, row
        elapsed = time.monotonic() - t0
    finally:
        code = transfer.stop()
    assert code == 0, transfer.log.read_text()
    assert "model store unreadable" in transfer.log.read_text()
    print(f"\nunreachable -> ready -> unreachable: {elapsed:.1f} s")


def test_a_scenario_error_leaves_the_platform_transfer_ready(tmp_path, shard):
    store, fs_port = tmp_path / "store", free_port()
    keys = random_keys(500, seed=12)
    make_version(store, V0, keys, 1)
    registry = DirRegistry(tmp_path / "scenarios")
    registry.add(Scenario("steady", slots=(0, 1, 2)))
    registry.add(Scenario("broken", slots=(0, 1, 2)))
    make_version(store / SCENARIOS_DIR / "steady", V1, keys, 2)
    vdir = make_version(store / SCENARIOS_DIR / "broken", V1, keys, 3)
    part = next((vdir / "sparse").glob("part-*.values.npy"))
    part.write_bytes(part.read_bytes()[:-8] + b"\0" * 8)  # same size, other sha256
    store_url = f"http://127.0.0.1:{fs_port}"
    shard.start()
    with running_fileserver(store, fs_port, TOKEN) as fileserver:
        transfer = TransferProc(tmp_path, store_url, shard, "--scenarios", str(registry.root))
        try:
            status = transfer.wait(
                "every scenario polled",
                lambda s: (
                    s["committed"] == V0
                    and s["scenarios"].get("steady", {}).get("committed") == V1
                    and s["scenarios"].get("broken", {}).get("error") is not None
                ),
            )
            broken = status["scenarios"]["broken"]
            assert "sha256" in broken["error"] and broken["committed"] is None
            # Its store prefix was read fine: only the version is bad.
            assert broken["lastError"] is None and broken["newestVersion"] == V1
            assert broken["modelStore"] == f"{store_url}/{SCENARIOS_DIR}/broken"
            assert status["scenarios"]["steady"]["error"] is None
            assert status["ready"] is True and transfer.get("/readyz").status_code == 200
            assert status["registry"] == f"folder {registry.root}"
            assert status["registryError"] is None

            # The platform's store itself unreachable: not ready, every scenario says so.
            fileserver.kill()
            fileserver.wait()
            # (each scenario's own poll notices on its next round, after the platform's)
            status = transfer.wait(
                "the store gone",
                lambda s: (
                    s["ready"] is False and all(sc["lastError"] for sc in s["scenarios"].values())
                ),
            )
            assert status["detail"].startswith(store_url)
            assert transfer.get("/readyz").status_code == 503
        finally:
            code = transfer.stop()
    assert code == 0, transfer.log.read_text()


def test_an_hdfs_store_the_hdfs_user_may_not_read_is_not_ready(minihdfs, tmp_path, monkeypatch):
    """The real test HDFS; a model store folder only its owner may open. The store is read
    with HDFS_UGI's user at every poll, so fixing the user fixes readiness."""
    store = minihdfs.make_open_dir(f"/models-{uuid.uuid4().hex[:8]}", mode=0o700)
    monkeypatch.setenv(ENV_HDFS_UGI, "intruder,pw-9d2e")
    transfer = Transfer(  # its shard is never asked: only the store is read here
        cube_root=tmp_path / "cube", shard_urls=["http://127.0.0.1:9"], store=store
    )
    try:
        transfer.probe_store()
        ready, detail = transfer.readiness()
        assert not ready and detail.startswith(store), detail
        assert "permission denied on HDFS" in detail and "user=intruder" in detail, detail
        status = transfer.status_doc()
        assert status["lastError"] and status["modelStore"] == store
        assert "pw-9d2e" not in json.dumps(status)

        owner = f"{minihdfs.superuser},x"
        keys = random_keys(200, seed=13)
        local = make_version(tmp_path / "local", V0, keys, 1)
        open_store(store, hdfs_ugi=owner).publish(local, V0)
        monkeypatch.setenv(ENV_HDFS_UGI, owner)
        transfer.probe_store()
        assert transfer.readiness() == (True, None)
        assert transfer.status_doc()["newestVersion"] == V0
    finally:
        transfer.close()
