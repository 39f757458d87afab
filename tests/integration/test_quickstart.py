"""`ectl quickstart` end to end with small settings: every service as a real process,
real Paddle PS training, cube + serving switch to the newest version, MLflow holds the run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_quickstart_serves_newest_version_and_logs_to_mlflow(tmp_path):
    workdir = tmp_path / "qs"
    proc = subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "quickstart", "--workdir", str(workdir)]
        + ["--hours", "3", "--lines", "6000", "--slots", "8", "--vocab", "500", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    # Two training hours exported, the newest one is what serving answers with.
    assert report["versions"] == ["20200401/00", "20200401/01"]
    assert report["served_version"] == "20200401/01"
    assert report["heldout"] == "20200401/02"
    # Predictions of the held-out hour are better than chance (oracle is ~0.78).
    assert 0.5 < report["auc"] <= report["oracle_auc"] + 0.02
    assert report["samples"] > 0 and report["latency_ms_p50"] > 0
    # MLflow holds the training run with its per-partition metrics.
    assert report["mlflow_run"]
    assert {"auc", "logloss"} <= set(report["mlflow_metrics"])
    # Everything was stopped: no process of this work folder is left.
    leftover = subprocess.run(["pgrep", "-f", str(workdir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""


def test_local_status_without_deployment_is_a_clear_error(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "elasticctr.cli.main",
            "local",
            "status",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "no local deployment" in proc.stderr
    assert "Traceback" not in proc.stderr
