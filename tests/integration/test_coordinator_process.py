"""`ectl coordinator` as a real process over file:// partitions: discovery, streaming,
SIGKILL and restart with resumption from the durable record."""

from __future__ import annotations

import json
import signal
import time

import pytest

from elasticctr.coordinator.client import CoordinatorClient
from elasticctr.net import free_port
from elasticctr.supervisor import Component, Supervisor, python_entry

pytestmark = pytest.mark.integration


def write_hour(root, hour: str, files: int = 2, ready: bool = True) -> None:
    day, hh = hour.split("/")
    folder = root / day / hh
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (folder / f"part-{i:05d}").write_text("1 0 11:0 12:1\n" * 10)
    if ready:
        (folder / "donefile").write_text("")


def start(sup: Supervisor, root, store, port: int, end: str = "") -> CoordinatorClient:
    sup.start(
        Component(
            "coordinator",
            python_entry(
                "coordinator",
                "--dataset-path", str(root),
                "--start", "20200401/00",
                "--end", end,
                "--state-url", str(store / "progress.json"),
                "--port", str(port),
                "--poll-seconds", "0.2",
                "--lease-seconds", "3",
            ),
            ready_port=("127.0.0.1", port),
        )
    )  # fmt: skip
    sup.wait_ready("coordinator", timeout=60)
    return CoordinatorClient(f"http://127.0.0.1:{port}", "0", retry_seconds=30)


def next_kind(client: CoordinatorClient, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = client.lease()
        if got["kind"] != "wait":
            return got
        time.sleep(0.2)
    raise AssertionError("only 'wait' answers")


def test_streaming_discovery_and_resume_after_sigkill(tmp_path):
    root, store = tmp_path / "data", tmp_path / "store"
    write_hour(root, "20200401/00")
    write_hour(root, "20200401/01", ready=False)  # no donefile yet: not trainable
    port = free_port()
    with Supervisor(tmp_path / "logs") as sup:
        client = start(sup, root, store, port)
        first = next_kind(client)
        assert first["kind"] == "task" and first["task"]["partition"] == "20200401/00"
        assert client.complete(first["lease"], 10)["accepted"]
        held = next_kind(client)  # leased, never completed: the coordinator dies now
        state = json.loads((store / "progress.json").read_text())
        assert list(state["done"]) == [first["task"]["id"]]

        sup.kill("coordinator", signal.SIGKILL)
        assert sup.wait("coordinator", timeout=10) == -signal.SIGKILL
        client = start(sup, root, store, port)
        again = next_kind(client)
        # The done task is not handed out again; the one leased at the crash is.
        assert again["task"]["id"] == held["task"]["id"]
        assert client.complete(again["lease"], 10)["accepted"]
        export = next_kind(client)
        # A checkpoint export carries the progress the checkpoint will hold.
        state = json.loads(export.pop("state"))
        assert sorted(state["done"]) == sorted([first["task"]["id"], held["task"]["id"]])
        # Found again by the restarted process; its last task done after that.
        timeline = export.pop("timeline")
        assert timeline["data_found_at"] <= timeline["trained_at"] <= time.time()
        assert export == {"kind": "export", "partition": "20200401/00", "checkpoint": True}
        client.exported("20200401/00", "20200401/00", checkpoint=True)

        # Hour 01 becomes ready while the coordinator runs (end is empty: follow).
        write_hour(root, "20200401/01", files=1)
        nxt = next_kind(client)
        assert nxt["task"]["partition"] == "20200401/01"
        progress = client.progress()
        assert progress["partitions"][0]["exported"]
        assert progress["finished"] is False


def test_bounded_range_finishes(tmp_path):
    root, store = tmp_path / "data", tmp_path / "store"
    write_hour(root, "20200401/00", files=1)
    port = free_port()
    with Supervisor(tmp_path / "logs") as sup:
        client = start(sup, root, store, port, end="20200401/00")
        got = next_kind(client)
        client.complete(got["lease"], 10)
        export = next_kind(client)
        client.exported(export["partition"], export["partition"], checkpoint=export["checkpoint"])
        assert next_kind(client) == {"kind": "finished"}


def test_bad_dataset_path_is_a_clear_error(tmp_path):
    port = free_port()
    with Supervisor(tmp_path / "logs") as sup:
        sup.start(
            Component(
                "coordinator",
                python_entry("coordinator", "--start", "20200401/00", "--port", str(port)),
            )
        )
        deadline = time.monotonic() + 30
        finals = []
        while not finals and time.monotonic() < deadline:
            finals = sup.poll()
            time.sleep(0.1)
    assert finals == [("coordinator", 1)]
    assert "no dataset path" in (tmp_path / "logs" / "coordinator.log").read_text()
