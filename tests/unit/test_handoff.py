"""The hand-off of an exported hour to serving (docs/cube.md "Hand-off"): the coordinator
stamps when an hour's data was found and when its last task was done, the exporter writes
them into the manifest's `timeline` with `exported_at`, the coordinator pokes cube-transfer
(POST /v1/poke) so the watcher polls at once instead of at its interval's end, and serving
measures each step to the moment it serves the version
(`elasticctr_serving_handoff_seconds`)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from elasticctr.coordinator.core import Coordinator, PartitionSpec
from elasticctr.coordinator.runtime import TransferPoke
from elasticctr.cube.transfer import Transfer, _watch
from elasticctr.cube.transfer_server import TransferStatusServer
from elasticctr.serving.model import VersionInfo

pytestmark = pytest.mark.fast


class _Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _train_hour(coord: Coordinator, wall: _Clock) -> dict:
    """Lease and complete every task of the one partition; returns the export answer."""
    while True:
        got = coord.lease("0")
        if got["kind"] == "export":
            return got
        assert got["kind"] == "task", got
        wall.now += 10
        coord.complete(got["lease"], "0", 5)


def test_export_answer_carries_when_the_hour_was_found_and_trained():
    wall, exported = _Clock(1_000.0), []
    coord = Coordinator(task_bytes=10, wallclock=wall, on_exported=exported.append)
    coord.add_partition(PartitionSpec("20200401/00", (("file:///a", 25),)))  # 3 tasks
    answer = _train_hour(coord, wall)
    assert answer["timeline"] == {"data_found_at": 1_000.0, "trained_at": 1_030.0}
    assert exported == []  # told only once the export is recorded
    coord.exported("20200401/00", "0", "20200401/00", checkpoint=False)
    assert exported == ["20200401/00"]


def test_a_failing_hook_never_fails_the_export_record():
    def broken(partition: str) -> None:
        raise RuntimeError("transfer gone")

    wall = _Clock(5.0)
    coord = Coordinator(task_bytes=100, wallclock=wall, on_exported=broken)
    coord.add_partition(PartitionSpec("20200401/00", (("file:///a", 10),)))
    _train_hour(coord, wall)
    coord.exported("20200401/00", "0", "20200401/00", checkpoint=False)
    assert coord.progress()["partitions"][0]["exported"]


def test_restored_hours_have_no_trained_time():
    """Tasks done before a restart: when they were done is not known, so not claimed."""
    wall = _Clock(50.0)
    first = Coordinator(task_bytes=100, wallclock=wall)
    first.add_partition(PartitionSpec("20200401/00", (("file:///a", 10),)))
    _train_hour(first, wall)
    again = Coordinator(task_bytes=100, wallclock=_Clock(90.0))
    again.restore(first.snapshot())
    again.add_partition(PartitionSpec("20200401/00", (("file:///a", 10),)))
    assert again.lease("0")["timeline"] == {"data_found_at": 90.0}


def test_manifest_timeline_is_read_leniently():
    manifest = {"slots": [1], "embedding_dim": 4, "sparse_dim": None, "model": "lr"}
    assert VersionInfo.from_manifest(manifest).timeline == {}
    manifest["timeline"] = {"trained_at": 10, "exported_at": 12.5, "bad": "x", "nan": float("nan")}
    assert VersionInfo.from_manifest(manifest).timeline == {"trained_at": 10.0, "exported_at": 12.5}
    manifest["timeline"] = ["not", "a", "mapping"]
    assert VersionInfo.from_manifest(manifest).timeline == {}


@pytest.fixture
def transfer(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    t = Transfer(cube_root=tmp_path / "cube", shard_urls=["http://127.0.0.1:9"], store=str(store))
    server = TransferStatusServer(("127.0.0.1", 0), t).start()
    yield t, server
    server.stop()
    t.close()


def test_a_poke_wakes_the_watcher_before_its_interval(transfer):
    t, server = transfer
    polls: list[float] = []
    t.check_shards = lambda: None  # type: ignore[method-assign]
    t.poll_once = lambda **kw: polls.append(time.monotonic())  # type: ignore[method-assign]
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(t, 3600.0, stop.is_set), daemon=True)
    watcher.start()
    deadline = time.monotonic() + 10
    while not polls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(polls) == 1  # the first poll at start; the next one an hour later
    poked_at = time.monotonic()
    r = httpx.post(f"{server.url}/v1/poke", json={"scenario": "default"}, timeout=10)
    assert r.status_code == 202 and r.json() == {"poked": True}
    while len(polls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(polls) == 2 and polls[1] - poked_at < 5
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert "elasticctr_cube_transfer_pokes_total 1.0" in metrics
    stop.set()
    t.poke()  # let the watcher see stop
    watcher.join(10)
    assert not watcher.is_alive()


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b'{"scenario": 7}', 400, "'scenario' must be a string"),
        (b"[1]", 400, "must be a JSON object"),
        (b"{not json", 400, "not JSON"),
        (b"x" * 2048, 413, ""),
    ],
)
def test_a_bad_poke_is_refused_and_wakes_nothing(transfer, body, status, says):
    t, server = transfer
    r = httpx.post(f"{server.url}/v1/poke", content=body, timeout=10)
    assert r.status_code == status and says in r.text
    assert t.pokes == 0 and not t.wake.is_set()
    assert httpx.post(f"{server.url}/v1/other", content=b"{}", timeout=10).status_code == 404


def test_transfer_poke_reaches_the_server_and_survives_its_absence(transfer):
    t, server = transfer
    poke = TransferPoke(server.url, "feed")
    assert poke.send("20200401/00") and t.pokes == 1 and t.wake.is_set()
    gone = TransferPoke("http://127.0.0.1:9", "feed", timeout=2)
    assert not gone.send("20200401/00") and gone.failed == 1
