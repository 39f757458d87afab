"""MLflow model registration of exported versions (elasticctr.train.registry): source and
tags, the fallback source when MLflow refuses the store URL, and failures that must leave
the published version alone and never raise. The real-server path is in
tests/integration/test_ps_smoke.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import (
    INVALID_PARAMETER_VALUE,
    RESOURCE_ALREADY_EXISTS,
    RESOURCE_DOES_NOT_EXIST,
)

from elasticctr import constants as C
from elasticctr import versions
from elasticctr.modelstore import open_store
from elasticctr.net import free_port
from elasticctr.train import export, registry
from elasticctr.train.config import from_values
from elasticctr.train.tracking import Tracker

pytestmark = pytest.mark.fast

VERSION = "20200401/07"


def _published(tmp_path: Path) -> tuple[Path, str, Path]:
    """A version built and published to a local store: (built dir, target, store dir)."""
    dense = tmp_path / "dense-src"
    dense.mkdir()
    (dense / "model.pdmodel").write_bytes(b"program")
    export.build_version(
        tmp_path / "built",
        version_id=VERSION,
        dense_dir=dense,
        keys=np.array([1, 2, 3], dtype=np.uint64),
        values=np.ones((3, 9), dtype=np.float32),
        meta={"model": {"name": "dnn"}, "slots": [0, 1], "metrics": {"auc": 0.71, "logloss": 0.52}},
    )
    target = open_store(str(tmp_path / "store")).publish(tmp_path / "built", VERSION)
    return tmp_path / "built", target, tmp_path / "store"


class FakeClient:
    """The MlflowClient calls register_version makes, recorded; errors injectable."""

    def __init__(self, *, exists=False, refuse_source=False, fail=None, registered=None):
        self.exists, self.refuse_source, self.fail = exists, refuse_source, fail
        self.registered = registered or []
        self.calls: list[tuple] = []

    def get_registered_model(self, name):
        self.calls.append(("get", name))
        if not self.exists:
            raise MlflowException("no such model", error_code=RESOURCE_DOES_NOT_EXIST)
        return SimpleNamespace(name=name)

    def create_registered_model(self, name, tags=None, description=None):
        self.calls.append(("create_model", name))
        self.exists = True

    def search_model_versions(self, filter_string):
        self.calls.append(("search", filter_string))
        return self.registered

    def log_artifact(self, run_id, local_path, artifact_path):
        self.calls.append(("artifact", run_id, Path(local_path).name, artifact_path))

    def create_model_version(self, name, source, run_id=None, tags=None, description=None):
        self.calls.append(("version", name, source, run_id, tags))
        if self.fail is not None:
            raise self.fail
        if self.refuse_source and not source.startswith("runs:/"):
            raise MlflowException(
                f"Invalid model version source: '{source}'.", error_code=INVALID_PARAMETER_VALUE
            )
        return SimpleNamespace(version="1", source=source, tags=tags, run_id=run_id)


def test_registers_the_store_url_with_run_and_tags(tmp_path: Path) -> None:
    built, target, store = _published(tmp_path)
    client, lines = FakeClient(), []
    mv = registry.register_version(
        "http://mlflow", VERSION, target, built / versions.MANIFEST, run_id="r1",
        client=client, log=lines.append,
    )  # fmt: skip
    assert mv is not None
    version_dir = store / "versions" / "20200401" / "07"
    assert mv.source == version_dir.resolve().as_uri()
    assert ("create_model", C.DEFAULT_MLFLOW_REGISTERED_MODEL) in client.calls
    manifest = json.loads((version_dir / versions.MANIFEST).read_text())
    assert mv.run_id == "r1"
    assert mv.tags == {
        C.MLFLOW_TAG_VERSION: VERSION,
        registry.TAG_MODEL: "dnn",
        registry.TAG_AUC: "0.71",
        registry.TAG_LOGLOSS: "0.52",
        registry.TAG_MANIFEST_SHA256: versions.sha256_file(version_dir / versions.MANIFEST),
        registry.TAG_SPARSE_ROWS: str(manifest["sparse"]["rows"]),
        registry.TAG_STORE_URL: mv.source,
        registry.TAG_SOURCE_KIND: registry.SOURCE_STORE,
    }
    assert not any(c[0] == "artifact" for c in client.calls)  # nothing uploaded
    assert any("registered as MLflow model elasticctr version 1" in line for line in lines)


def test_name_comes_from_the_environment_and_urls_stay_urls(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(C.ENV_MLFLOW_REGISTERED_MODEL, "ctr-shop")
    built, _target, _ = _published(tmp_path)
    client = FakeClient(exists=True)
    url = "http://fileserver:8080/models/versions/20200401/07"
    mv = registry.register_version(
        "", VERSION, url, built / versions.MANIFEST, client=client, log=lambda _m: None
    )
    assert mv.source == url
    assert ("version", "ctr-shop", url, None, mv.tags) in client.calls
    assert not any(c[0] == "create_model" for c in client.calls)


def test_refused_source_falls_back_to_the_runs_manifest(tmp_path: Path) -> None:
    built, target, _ = _published(tmp_path)
    client, lines = FakeClient(refuse_source=True), []
    mv = registry.register_version(
        "http://mlflow", VERSION, target, built / versions.MANIFEST, run_id="r1",
        client=client, log=lines.append,
    )  # fmt: skip
    assert mv.source == f"runs:/r1/versions/{VERSION}"
    assert ("artifact", "r1", "manifest.json", f"versions/{VERSION}") in client.calls
    assert mv.tags[registry.TAG_SOURCE_KIND] == registry.SOURCE_RUN
    assert mv.tags[registry.TAG_STORE_URL] == Path(target).resolve().as_uri()
    assert any("MLFLOW_ALLOWED_HOST_ADDRESSED_ARTIFACT_SCHEMES" in line for line in lines)


def test_an_already_registered_version_is_not_registered_twice(tmp_path: Path) -> None:
    built, target, _ = _published(tmp_path)
    old = SimpleNamespace(version="4", source="x")
    client = FakeClient(exists=True, registered=[old])
    mv = registry.register_version(
        "", VERSION, target, built / versions.MANIFEST, client=client, log=lambda _m: None
    )
    assert mv is old
    assert not any(c[0] == "version" for c in client.calls)
    assert any(f"tags.`{C.MLFLOW_TAG_VERSION}` = '{VERSION}'" in str(c) for c in client.calls)


def test_a_model_created_meanwhile_by_another_job_is_fine(tmp_path: Path) -> None:
    built, target, _ = _published(tmp_path)
    client = FakeClient()

    def create(name, tags=None, description=None):
        raise MlflowException("exists", error_code=RESOURCE_ALREADY_EXISTS)

    client.create_registered_model = create
    mv = registry.register_version(
        "", VERSION, target, built / versions.MANIFEST, client=client, log=lambda _m: None
    )
    assert mv is not None and mv.version == "1"


@pytest.mark.parametrize(
    "fail",
    [
        RuntimeError("registry database is locked"),
        MlflowException("Invalid model version source: 'x'", error_code=INVALID_PARAMETER_VALUE),
    ],
    ids=["registry-error", "refused-without-run"],
)
def test_registration_failure_warns_and_keeps_the_published_version(tmp_path, fail) -> None:
    built, target, store = _published(tmp_path)
    lines: list[str] = []
    mv = registry.register_version(
        "http://mlflow", VERSION, target, built / versions.MANIFEST,
        client=FakeClient(fail=fail), log=lines.append,
    )  # fmt: skip
    assert mv is None
    (warning,) = [line for line in lines if line.startswith("WARNING")]
    assert f"MLflow registration of {VERSION} failed" in warning
    assert Path(target).resolve().as_uri() in warning and str(fail) in warning
    assert "python -m elasticctr.train.registry" in warning
    versions.verify_version(store / "versions" / "20200401" / "07")  # untouched


def test_trainer_registration_with_mlflow_down_warns_and_carries_on(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Trainer 0's call (`Tracker.register`) against a tracking server that is not there:
    no exception, a warning in the trainer log, the version stays published."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    built, target, store = _published(tmp_path)
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = from_values(
        {"global": {"data": {"slots": [0, 1]}, "mlflow": {"trackingUri": dead}}, "trainer": {}}
    )
    tracker = Tracker(cfg, renv=None)
    assert tracker.register(VERSION, {"exported_to": target}, built) is None
    out = capsys.readouterr().out
    assert f"WARNING: MLflow registration of {VERSION} failed" in out
    versions.verify_version(store / "versions" / "20200401" / "07")
    # nothing published or no tracking server: nothing to register, nothing said
    assert tracker.register(VERSION, {"exported_to": ""}, built) is None
    quiet = Tracker(from_values({"global": {"data": {"slots": [0]}}, "trainer": {}}), None)
    assert quiet.register(VERSION, {"exported_to": target}, built) is None


def test_tracking_with_mlflow_down_never_holds_up_training(tmp_path: Path, monkeypatch, capsys):
    """MLflow calls run on the tracker's thread: with the tracking server down (its pod
    OOM-killed on the one-node cluster held trainer 0, and so the job, for minutes) a
    submitted update returns at once, and exit waits only the flush timeout, then warns."""
    import time

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "2")
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = from_values(
        {"global": {"data": {"slots": [0, 1]}, "mlflow": {"trackingUri": dead}}, "trainer": {}}
    )
    renv = SimpleNamespace(pserver_endpoints=["127.0.0.1:1"], trainers_num=1)
    tracker = Tracker(cfg, renv)
    t0 = time.monotonic()
    for hour in range(3):
        tracker.submit("logging", tracker.log, "x", hour, {})
    assert time.monotonic() - t0 < 0.5
    t0 = time.monotonic()
    tracker.close(timeout=1.0)
    assert time.monotonic() - t0 < 3
    out = capsys.readouterr().out
    assert f"MLflow at {dead} did not take" in out and "dropped" in out


def test_tracker_thread_logs_a_failing_call_and_goes_on(capsys):
    cfg = from_values(
        {"global": {"data": {"slots": [0]}, "mlflow": {"trackingUri": "http://x"}}, "trainer": {}}
    )
    tracker, done = Tracker(cfg, None), []

    def boom():
        raise RuntimeError("tracking server said no")

    tracker.submit("first update", boom)
    tracker.submit("second update", done.append, 2)
    tracker._queue.put(None)
    tracker._worker.join(10)
    assert done == [2]
    assert "WARNING: MLflow first update failed: RuntimeError: tracking server said no" in (
        capsys.readouterr().out
    )
