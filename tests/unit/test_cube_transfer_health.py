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
