"""Coordinator HTTP API served on loopback, driven by the real trainer client."""

from __future__ import annotations

import json
import threading

import pytest
import requests

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
    assert got == {"kind": "export", "partition": "20200401/00", "checkpoint": True}
    client.exported("20200401/00", "20200401/00", checkpoint=True)
    assert client.lease() == {"kind": "finished"}
    progress = client.progress()
    assert progress["samples"] == 10 and progress["finished"]
    metrics = requests.get(url + "/metrics", timeout=5).text
    assert 'elasticctr_coordinator_tasks{state="done"} 2.0' in metrics
    assert "elasticctr_coordinator_partitions_exported 1.0" in metrics


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
    resp = requests.post(url + path, data=body, timeout=5)
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
