"""cube-transfer's view of its model store (readiness rule, status fields, no credentials)
and `ectl status`'s choice of where to read the store from. The transfer against real
stores that go away and come back: tests/integration/test_cube_transfer_status.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from elasticctr.cube.transfer import StoreHealth, Transfer
from elasticctr.cube.transfer_server import parse_listen
from elasticctr.errors import EctlError
from elasticctr.modelstore import redact_url

pytestmark = pytest.mark.fast


def test_redact_url_hides_the_password_and_the_query_only():
    url = "http://reader:s3cr%40t@fs.ml.svc:8080/models?X-Amz-Signature=abc"
    assert redact_url(url) == "http://reader:***@fs.ml.svc:8080/models?***"
    error = "http://reader:s3cr%40t@fs.ml.svc:8080/models/versions: HTTP 500"
    assert redact_url(error, url) == "http://reader:***@fs.ml.svc:8080/models/versions: HTTP 500"
    for plain in ("hdfs://nn:9000/models", "s3://bucket/prefix", "/data/store", ""):
        assert redact_url(plain) == plain


def test_readiness_needs_a_successful_latest_read():
    health = StoreHealth("http://u:pw@fs:8080/models")
    assert not health.ok
    assert health.detail() == "http://u:***@fs:8080/models: not read yet"
    assert health.snapshot()["lastPollAt"] is None
    health.record_error(EctlError("http://u:pw@fs:8080/models/versions: cannot reach the server"))
    assert not health.ok
    assert health.detail() == "http://u:***@fs:8080/models/versions: cannot reach the server"
    health.record_ok(["20200401/00", "20200401/01"])
    assert health.ok and health.detail() is None
    snap = health.snapshot()
    assert snap["newestVersion"] == "20200401/01" and snap["lastError"] is None
    assert snap["lastOkAt"] == snap["lastPollAt"] and snap["lastOkAt"].endswith("Z")
    # A failure after a good read: not ready again; the last good read is kept.
    health.record_error(OSError(113, "No route to host"))
    assert not health.ok
    assert health.detail() == "http://u:***@fs:8080/models: OSError: [Errno 113] No route to host"
    snap = health.snapshot()
    assert snap["newestVersion"] == "20200401/01" and snap["lastOkAt"] is not None
    assert "pw" not in json.dumps(snap)


def test_a_local_store_is_read_and_reported(tmp_path):
    from elasticctr.versions import write_manifest

    vdir = tmp_path / "store" / "versions" / "20200401" / "03"
    (vdir / "sparse").mkdir(parents=True)
    (vdir / "sparse" / "x").write_text("x")
    write_manifest(vdir, "20200401/03", {})
    t = Transfer(  # the shard is never asked: probe_store reads the store alone
        cube_root=tmp_path / "cube",
        shard_urls=["http://127.0.0.1:9"],
        store=str(tmp_path / "store"),
    )
    try:
        assert t.readiness() == (False, f"{tmp_path / 'store'}: not read yet")
        t.probe_store()
        assert t.readiness() == (True, None)
        doc = t.status_doc()
        assert doc["newestVersion"] == "20200401/03" and doc["committed"] is None
        assert doc["scenario"] == "default" and doc["shardsError"] is None
    finally:
        t.close()


@pytest.mark.parametrize(
    ("text", "address"),
    [("0.0.0.0:8510", ("0.0.0.0", 8510)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::]:9", ("::", 9))],
)
def test_listen_address(text, address):
    assert parse_listen(text) == address


@pytest.mark.parametrize("text", ["8510", ":8510", "host:", "host:http", "host:70000"])
def test_listen_address_refused(text):
    with pytest.raises(EctlError, match="expected HOST:PORT"):
        parse_listen(text)


class _Core:
    """The two proxy calls `ectl status` makes, answering like the API server would."""

    def __init__(self, transfer_doc: dict | None = None):
        self.transfer_doc = transfer_doc
        self.calls: list[tuple[str, str]] = []

    def connect_get_namespaced_pod_proxy_with_path(self, name, namespace, path, **_):
        self.calls.append((name, path))
        return SimpleNamespace(data=json.dumps(self.transfer_doc).encode())

    def connect_get_namespaced_service_proxy_with_path(self, name, namespace, path, **_):
        self.calls.append((name, path))
        listing = {"models/versions/": ["20200401/"], "models/versions/20200401/": ["07/"]}
        entries = listing.get(path, ["donefile", "manifest.json"])
        return SimpleNamespace(
            data=json.dumps({"entries": [{"name": n} for n in entries]}).encode()
        )


def _pod(component: str, phase: str = "Running", port: int = 8510):
    return SimpleNamespace(
        metadata=SimpleNamespace(
            name=f"ctr-{component}-x", labels={"app.kubernetes.io/component": component}
        ),
        status=SimpleNamespace(phase=phase),
        spec=SimpleNamespace(
            containers=[SimpleNamespace(ports=[SimpleNamespace(container_port=port)])]
        ),
    )


def _service(name: str, port: int):
    return SimpleNamespace(
        metadata=SimpleNamespace(name=name),
        spec=SimpleNamespace(ports=[SimpleNamespace(port=port)]),
    )


def test_status_reads_the_store_through_cube_transfer_and_else_the_fileserver():
    from elasticctr.cli.status import _model

    fileserver = {"fileserver": _service("ctr-fileserver", 8080)}
    doc = {
        "ready": True,
        "detail": None,
        "modelStore": "s3://models/prod",
        "lastPollAt": "2026-12-01T10:00:00Z",
        "lastOkAt": "2026-12-01T10:00:00Z",
        "lastError": None,
        "newestVersion": "20200401/09",
        "committed": "20200401/09",
    }
    core = _Core(doc)
    model = _model(core, "ml", [_pod("cube-transfer")], fileserver)
    assert core.calls == [("ctr-cube-transfer-x:8510", "v1/status")]  # no fileserver listing
    assert model["newestVersion"] == "20200401/09"
    assert model["store"]["source"] == "cube-transfer" and model["store"]["readable"]
    assert model["cube"] == {"unavailable": "no cube service"}

    # No running cube-transfer (a training-only release, or its pod is pending): the
    # release fileserver's listing.
    core = _Core()
    model = _model(core, "ml", [_pod("cube-transfer", phase="Pending")], fileserver)
    assert model["newestVersion"] == "20200401/07"
    assert model["store"]["source"] == "fileserver"
    assert model["store"]["url"] == "http://ctr-fileserver.ml.svc:8080/models"
    assert all(name == "ctr-fileserver:8080" for name, _ in core.calls)

    # Neither: said so, in the same two places.
    model = _model(_Core(), "ml", [], {})
    assert "unavailable" in model["store"] and "unavailable" in model["newestVersion"]


def _stored_coordinator_state(store) -> str:
    """A coordinator's durable record after one hour trained and exported, written where
    the coordinator of a job keeps it (`<modelStore>/progress/coordinator.json`)."""
    from elasticctr.coordinator.core import Coordinator, PartitionSpec
    from elasticctr.coordinator.runtime import STATE_FILE as PROGRESS_FILE

    coord = Coordinator(lease_seconds=60, task_bytes=1 << 20, window=2, checkpoint_every=1)
    coord.add_partition(PartitionSpec("20200401/00", (("file:///x/part-0", 150),)))
    coord.close_input()
    while (got := coord.lease("0"))["kind"] != "finished":
        if got["kind"] == "task":
            coord.complete(got["lease"], "0", 7)
        elif got["kind"] == "export":
            coord.exported(got["partition"], "0", got["partition"], checkpoint=False)
    path = store / PROGRESS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(coord.snapshot())
    return str(path)


def test_stored_progress_is_served_from_any_store_the_transfer_reads(tmp_path):
    """GET /v1/progress: what a finished job trained, read from the model store by
    cube-transfer (so `ectl status` has it on HDFS and S3, not only on the fileserver);
    404 before any job ran, 502 with the reason for a corrupt record."""
    import httpx

    from elasticctr.cube.transfer_server import TransferStatusServer

    store = tmp_path / "store"
    store.mkdir()
    t = Transfer(cube_root=tmp_path / "cube", shard_urls=["http://127.0.0.1:9"], store=str(store))
    server = TransferStatusServer(("127.0.0.1", 0), t).start()
    try:
        missing = httpx.get(f"{server.url}/v1/progress", timeout=10)
        assert missing.status_code == 404 and "no stored training progress" in missing.text
        path = _stored_coordinator_state(store)
        got = httpx.get(f"{server.url}/v1/progress", timeout=10)
        assert got.status_code == 200, got.text
        doc = got.json()
        assert doc["stored"] and doc["samples"] == 7 and doc["input_closed"]
        assert [(p["partition"], p["exported"]) for p in doc["partitions"]] == [
            ("20200401/00", True)
        ]
        assert httpx.get(f"{server.url}/v1/progress?scenario=default", timeout=10).json() == doc
        other = httpx.get(f"{server.url}/v1/progress?scenario=ads", timeout=10)
        assert other.status_code == 404 and "one table" in other.text
        with open(path, "w") as fh:
            fh.write('{"done": ')  # a record cut short: an error with the reason
        bad = httpx.get(f"{server.url}/v1/progress", timeout=10)
        assert bad.status_code == 502 and "not valid JSON" in bad.text
    finally:
        server.stop()
        t.close()


def test_status_of_a_training_only_release_reads_the_stored_progress_itself(tmp_path):
    """No coordinator, cube-transfer or fileserver running (a bounded training-only job
    that ended): `ectl status` reads the record from the release's global.modelStore."""
    from elasticctr.cli.status import _stored_progress

    store = tmp_path / "models"
    values = {"global": {"modelStore": str(store)}}
    none_yet = _stored_progress(_Core(), "ml", [], None, values)
    assert none_yet == {"unavailable": "no running coordinator pod, and no stored progress"}
    path = _stored_coordinator_state(store)
    got = _stored_progress(_Core(), "ml", [], None, values)
    assert got["stored"] and got["samples"] == 7 and got["partitions"][0]["exported"]
    with open(path, "w") as fh:
        fh.write("[]")
    assert (
        "stored coordinator progress"
        in _stored_progress(_Core(), "ml", [], None, values)["unavailable"]
    )
    assert _stored_progress(_Core(), "ml", [], None, {"global": {}}) == {
        "unavailable": "no running coordinator pod"
    }
    helm_down = {"unavailable": "helm: cannot reach the cluster"}
    assert (
        "helm: cannot reach" in _stored_progress(_Core(), "ml", [], None, helm_down)["unavailable"]
    )
