"""Coordinator HTTP API served on loopback, driven by the real trainer client."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from elasticctr.coordinator import Coordinator, PartitionSpec
from elasticctr.coordinator.client import CoordinatorClient
from elasticctr.coordinator.server import CoordinatorServer, feed
from elasticctr.errors import EctlError

pytestmark = pytest.mark.fast


@pytest.fixture()
def api():
    coord = Coordinator(task_bytes=100, lease_seconds=30)
    server = CoordinatorServer(("127.0.0.1", 0), coord)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield coord, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_full_cycle_through_client(api):
    coord, url = api
    errors: list[Exception] = []
    specs = [PartitionSpec("20200401/00", (("file:///x/part-0", 150),))]
    feed(coord, specs, errors.append).join(timeout=5)
    assert not errors
    client = CoordinatorClient(url, "0")
    tasks = []
    while (got := client.lease())["kind"] == "task":
        assert client.heartbeat(got["lease"])
        tasks.append(got["task"])
        assert client.complete(got["lease"], 5)["accepted"]
    assert [(t["start"], t["end"]) for t in tasks] == [(0, 100), (100, 150)]
    assert json.loads(got.pop("state"))["exported"] == ["20200401/00"]
    assert set(got.pop("timeline")) == {"data_found_at", "trained_at"}
    assert got == {"kind": "export", "partition": "20200401/00", "checkpoint": True}
    client.exported("20200401/00", "20200401/00", checkpoint=True)
    assert client.lease() == {"kind": "finished"}
    progress = client.progress()
    assert progress["samples"] == 10 and progress["finished"]
    metrics = httpx.get(url + "/metrics", timeout=5).text
    assert 'elasticctr_coordinator_tasks{scenario="default",state="done"} 2.0' in metrics
    assert 'elasticctr_coordinator_partitions_exported{scenario="default"} 1.0' in metrics


@pytest.mark.parametrize(
    "path,body,message",
    [
        ("/v1/lease", b"{not json", "bad request"),
        ("/v1/lease", b"[1]", "JSON object"),
        ("/v1/lease", b"{}", "'trainer'"),
        ("/v1/complete", b'{"trainer":"0","lease":"x","samples":"many"}', "'samples'"),
        ("/v1/nope", b'{"trainer":"0"}', "no such endpoint"),
    ],
)
def test_bad_requests_get_4xx_with_message(api, path, body, message):
    _, url = api
    resp = httpx.post(url + path, content=body, timeout=5)
    assert 400 <= resp.status_code < 500
    assert message in resp.json()["error"]["message"]


def test_export_of_incomplete_partition_is_conflict(api):
    coord, url = api
    coord.add_partition(PartitionSpec("20200401/00", (("file:///x/part-0", 10),)))
    client = CoordinatorClient(url, "0")
    with pytest.raises(EctlError, match="409.*not complete"):
        client.exported("20200401/00", "v", checkpoint=False)


def test_client_gives_up_with_clear_error_when_unreachable():
    client = CoordinatorClient("http://127.0.0.1:9", "0", retry_seconds=0.5)
    with pytest.raises(EctlError, match="unreachable"):
        client.lease()
    with pytest.raises(EctlError, match="unreachable"):
        client.progress()


def test_progress_waits_for_a_coordinator_that_starts_late():
    """In a Volcano Job the trainers start with the coordinator pod: the first progress
    call (before any lease) must wait for it to listen, not fail the trainer (seen on the
    one-node cluster: both trainers restarted twice with 'Connection refused')."""
    from elasticctr.net import free_port

    port = free_port()
    coord = Coordinator(task_bytes=100, lease_seconds=30)
    started: dict = {}

    def start_late():
        server = CoordinatorServer(("127.0.0.1", port), coord)
        started["server"] = server
        server.serve_forever(poll_interval=0.05)

    timer = threading.Timer(0.6, start_late)
    timer.start()
    try:
        progress = CoordinatorClient(f"http://127.0.0.1:{port}", "0", retry_seconds=20).progress()
        assert progress["samples"] == 0 and not progress["finished"]
    finally:
        while timer.is_alive() and "server" not in started:
            timer.join(0.05)
        started["server"].shutdown()
        started["server"].server_close()
        timer.join()


def test_progress_from_the_stored_state_matches_the_live_one(api):
    """`ectl status` of a completed job (coordinator pod gone) reads the durable state."""
    from elasticctr.coordinator.core import progress_from_state

    coord, url = api
    errors: list[Exception] = []
    specs = [
        PartitionSpec("20200401/00", (("file:///x/part-0", 150),)),
        PartitionSpec("20200401/01", (("file:///x/part-0", 50),)),
    ]
    feed(coord, specs, errors.append).join(timeout=5)
    client = CoordinatorClient(url, "0")
    while (got := client.lease())["kind"] != "finished":
        if got["kind"] == "task":
            client.complete(got["lease"], 7)
        elif got["kind"] == "export":
            client.exported(got["partition"], got["partition"], checkpoint=False)
    live, stored = coord.progress(), progress_from_state(coord.snapshot())
    assert stored["stored"] and not errors
    for key in ("tasks_done", "tasks_retried", "samples"):
        assert stored[key] == live[key], key
    assert [
        (p["partition"], p["done"], p["samples"], p["exported"]) for p in stored["partitions"]
    ] == [(p["partition"], p["done"], p["samples"], p["exported"]) for p in live["partitions"]]
    with pytest.raises(EctlError, match="not valid JSON"):
        progress_from_state("{truncated")
