"""The MLflow model registry against a real tracking server: a version published to an
http(s) model store (the fileserver) is registered with the store URL of the version
itself as its source. Training's own registrations (a local store: the source is the
run's copy of the manifest) are checked by test_elastic_train.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from elasticctr.train import registry
from elasticctr.versions import MANIFEST, sha256_file

pytestmark = pytest.mark.integration


def test_registered_source_is_the_model_store_url(tmp_path: Path, mlflow_server) -> None:
    """A fileserver (http) model store: the registered version's source is the store URL
    of the version itself, under the given run, once (registering again finds it)."""
    import mlflow

    uri = mlflow_server[1]()
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    run = client.create_run(client.create_experiment("registry-http-store"))
    manifest = tmp_path / MANIFEST
    facts = {"model": {"name": "deepfm"}, "metrics": {"auc": 0.75, "logloss": 0.5}}
    manifest.write_text(json.dumps({**facts, "sparse": {"rows": 123}}) + "\n")
    target = "http://127.0.0.1:8080/models/versions/20200401/05"
    lines: list[str] = []
    mv = registry.register_version(
        uri, "20200401/05", target, manifest, run_id=run.info.run_id, name="ctr-http-store",
        log=lines.append,
    )  # fmt: skip
    assert mv is not None, lines
    (got,) = client.search_model_versions("name = 'ctr-http-store'")
    assert got.source == target and got.run_id == run.info.run_id
    assert got.tags[registry.TAG_SOURCE_KIND] == registry.SOURCE_STORE
    assert got.tags[registry.TAG_STORE_URL] == target
    assert got.tags[registry.TAG_MANIFEST_SHA256] == sha256_file(manifest)
    assert got.tags[registry.TAG_MODEL] == "deepfm" and got.tags[registry.TAG_AUC] == "0.75"
    assert got.tags[registry.TAG_SPARSE_ROWS] == "123"
    again = registry.register_version(
        uri, "20200401/05", target, manifest, name="ctr-http-store", log=lines.append
    )
    assert again.version == got.version
    assert len(client.search_model_versions("name = 'ctr-http-store'")) == 1
