"""Parameter-server smoke test: 1 pserver + 2 trainers as real processes (`ectl train ...`).

The launcher starts the same entry points pods run, on loopback with free ports. The
model is the default zoo DNN on `paddle.static.nn.sparse_embedding` with raw uint64
feasigns, async Fleet PS; data are in-memory synthetic batches with a logistic ground
truth. Checks: training loss falls, the exported version verifies and its held-out AUC
(scored from the exported files, like serving does) is well above chance, metrics land
in a real MLflow server, the version is registered in its model registry (source, run,
tags), every process exits and nothing is left running. An http store URL as the
registered source: test_registry_mlflow.py.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from _static_roles import launch

from elasticctr import constants as C
from elasticctr.errors import EctlError
from elasticctr.train import registry
from elasticctr.versions import MANIFEST, sha256_file, verify_version

pytestmark = pytest.mark.integration

SLOTS = [0, 1, 2, 3, 4, 5]


def _values(tmp_path: Path, **extra) -> Path:
    values = {
        "global": {"data": {"slots": SLOTS}, "modelStore": str(tmp_path / "store"), **extra},
        "trainer": {"model": {"name": "dnn", "batchSize": 256}},
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _left_running(values: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-f", str(values)], capture_output=True, text=True, check=False)
    return out.stdout.split()


def test_ps_smoke_one_pserver_two_trainers(tmp_path: Path, mlflow_server) -> None:
    mlflow_uri, mlflow_ready = mlflow_server
    values = _values(tmp_path, mlflow={"trackingUri": mlflow_uri})
    results = tmp_path / "results.jsonl"
    lines: list[str] = []
    t0 = time.monotonic()
    result = launch(
        values,
        pservers=1,
        trainers=2,
        log_dir=tmp_path / "logs",
        extra_trainer_args=["--synthetic-samples", "60000", "--results", str(results)],
        timeout=420,
        echo=lines.append,
    )
    elapsed = time.monotonic() - t0
    assert result.exit_codes["trainer-0"] == 0 and result.exit_codes["trainer-1"] == 0
    assert "pserver-0" in result.exit_codes  # stopped by the launcher after the trainers
    assert any(line.startswith("[trainer-1] ") for line in lines), "logs are not prefixed"

    (row,) = [json.loads(x) for x in results.read_text().splitlines()]
    assert row["version"] == "20200401/00"
    # Loss must fall; by how much varies with scheduling under load (0.008-0.04 seen).
    assert row["train_loss_last"] < row["train_loss_first"] - 0.002, row
    # Chance is 0.5 (on ~2,800 held-out samples a chance model stays below 0.53); the
    # logistic truth allows ~0.75. Measured 0.67-0.70 (quiet and at load average 11), but
    # 0.5595 once in a CI run on a heavily loaded machine, where the trainer's own
    # last-quarter AUC was 0.629: this static path dumps without flushing the queued
    # pushes, so the export lags the trainers most when the pserver is starved.
    assert row["auc"] > 0.55, row
    assert row["logloss"] < 0.69, row
    assert row["samples"] >= 50000, row
    # speed is measured by bench/train, not asserted here (a loaded machine is slow)
    assert row["samples_per_sec_per_trainer"] > 0, row

    version = tmp_path / "store" / "versions" / "20200401" / "00"
    manifest = verify_version(version)
    assert manifest["model"]["name"] == "dnn"
    assert manifest["slots"] == SLOTS and manifest["embedding_dim"] == 9
    assert manifest["sparse"]["rows"] > 1000
    assert manifest["metrics"]["auc"] == pytest.approx(row["auc"])

    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=mlflow_ready())
    exp = client.get_experiment_by_name("elasticctr")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.params["model.name"] == "dnn"
    assert run.data.metrics["auc"] == pytest.approx(row["auc"])
    assert run.data.metrics["samples_per_sec"] > 0
    # Trainer 0's CPU (cores busy over the partition) and peak memory.
    assert 0.05 < run.data.metrics["trainer_cpu_cores"] < 8
    assert run.data.metrics["trainer_rss_peak_mb"] > 100  # Paddle alone is several hundred MB
    assert run.data.tags["last_version"] == "20200401/00"

    # The version is registered under the training run; MLflow's server refuses a
    # local-path source, so the source is the run's copy of the manifest and the tag
    # names the model-store URL (an http/hdfs store is the source itself: next test).
    (mv,) = client.search_model_versions(f"name = '{C.DEFAULT_MLFLOW_REGISTERED_MODEL}'")
    assert row["registered_version"] == mv.version
    assert mv.run_id == run.info.run_id
    assert mv.source == f"runs:/{run.info.run_id}/versions/20200401/00"
    sha = sha256_file(version / MANIFEST)
    assert mv.tags == {
        C.MLFLOW_TAG_VERSION: "20200401/00",
        registry.TAG_MODEL: "dnn",
        registry.TAG_AUC: repr(row["auc"]),
        registry.TAG_LOGLOSS: repr(row["logloss"]),
        registry.TAG_MANIFEST_SHA256: sha,
        registry.TAG_SPARSE_ROWS: str(manifest["sparse"]["rows"]),
        registry.TAG_STORE_URL: version.resolve().as_uri(),
        registry.TAG_SOURCE_KIND: registry.SOURCE_RUN,
    }
    assert row["manifest_sha256"] == sha
    copied = client.download_artifacts(run.info.run_id, "versions/20200401/00", str(tmp_path))
    assert sha256_file(Path(copied) / MANIFEST) == sha  # the manifest only, byte for byte
    assert sorted(p.name for p in Path(copied).iterdir()) == [MANIFEST]
    assert _left_running(values) == []
    print(f"smoke: {elapsed:.0f}s, {json.dumps(row)}")


def test_launcher_fails_fast_and_names_the_role(tmp_path: Path) -> None:
    """A trainer that exits non-zero stops the job; the error names it and its log."""
    values = _values(tmp_path)
    with pytest.raises(EctlError) as err:
        launch(
            values,
            pservers=1,
            trainers=2,
            log_dir=tmp_path / "logs",
            extra_trainer_args=["--synthetic-samples", "not-a-number"],
            timeout=120,
            echo=lambda _m: None,
        )
    message = str(err.value)
    assert "trainer-" in message and "exited with code 2" in message, message
    assert str(tmp_path / "logs") in message
    # nothing survives the failed launch
    assert _left_running(values) == []
