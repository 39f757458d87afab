"""`ectl quickstart` end to end with small settings: every service as a real process,
real Paddle PS training (elastic: leased byte ranges, every trainer gets work, every
sample counted once), cube + serving switch to the newest version, MLflow holds the run,
`ectl local status` sees it while it runs, and Ctrl-C stops everything."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from elasticctr import constants as C

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ECTL = [sys.executable, "-m", "elasticctr.cli.main"]


def test_quickstart_serves_newest_version_logs_to_mlflow_and_stops_on_ctrl_c(tmp_path):
    workdir = tmp_path / "qs"
    proc = subprocess.Popen(
        [*ECTL, "quickstart", "--workdir", str(workdir), "--keep-running", "-o", "json"]
        # The demo's data model (16 slots, the demo vocabulary) and sample count (108k
        # trained) in two training hours instead of three: one export less.
        + ["--hours", "3", "--lines", "60000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 900
        while not (workdir / "quickstart.json").exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "quickstart did not finish in 15 minutes"
            time.sleep(1)
        status = subprocess.run(
            [*ECTL, "local", "status", "--workdir", str(workdir), "-o", "json"],
            capture_output=True,
            text=True,
        )
        assert status.returncode == 0, status.stderr
        running = {p["component"] for p in json.loads(status.stdout)["processes"] if p["alive"]}
        assert {"serving", "mlflow", "cube-0", "cube-1", "cube-transfer"} <= running
        tracked = _mlflow_readback(workdir)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    report = json.loads(out)
    # Two training hours exported, the newest one is what serving answers with.
    assert report["versions"] == ["20200401/00", "20200401/01"]
    assert report["served_version"] == "20200401/01"
    assert report["heldout"] == "20200401/02"
    # The demo data is learnable: served predictions of the held-out hour come within
    # 0.03 of the oracle (the true click probabilities' AUC; docs/local.md).
    assert report["oracle_auc"] - 0.03 <= report["auc"] <= report["oracle_auc"] + 0.01, report
    assert report["latency_ms_p50"] > 0
    # Elastic training: both trainers trained, and every training line not held out (the
    # hash rule every trainer skips) was counted exactly once by the coordinator.
    assert sorted(report["trainer_samples"]) == ["0", "1"], report["trainer_samples"]
    assert all(n > 0 for n in report["trainer_samples"].values()), report["trainer_samples"]
    trained = _trained(workdir, ["20200401/00", "20200401/01"])
    assert sum(report["trainer_samples"].values()) == report["samples"] == trained["lines"]
    assert report["tasks"] >= 2 * 2  # each hour split into several tasks
    # Every export holds every row trained before it (the static launcher's could miss the
    # last sparse pushes); version 00's may hold more: hour 01 trains while it exports.
    # Nothing trains after the newest one, so it holds exactly the trained feasigns.
    rows = {v: _manifest(workdir, v)["sparse"]["rows"] for v in report["versions"]}
    assert rows["20200401/00"] >= trained["feasigns"]["20200401/00"], (rows, trained)
    assert rows["20200401/01"] == trained["feasigns"]["20200401/01"], (rows, trained)
    # MLflow (read back from the server while it ran) holds the training run with its
    # per-partition metrics and the quickstart's final figures, in an experiment of the
    # model-training kind; the printed link opens that view.
    assert tracked["run_id"] == report["mlflow_run"]
    assert {"auc", "logloss"} <= set(tracked["metrics"])
    assert tracked["metrics"]["heldout_auc"] == pytest.approx(report["auc"])
    assert tracked["metrics"]["heldout_logloss"] == pytest.approx(report["logloss"])
    assert tracked["metrics"]["oracle_auc"] == pytest.approx(report["oracle_auc"])
    assert tracked["kind"] == C.MLFLOW_EXPERIMENT_KIND
    assert report["mlflow_run_url"].endswith(
        f"/#/experiments/{tracked['experiment_id']}/runs/{report['mlflow_run']}?{C.MLFLOW_UI_QUERY}"
    )
    # Ctrl-C stopped everything: no process of this work folder is left.
    leftover = subprocess.run(["pgrep", "-f", str(workdir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
    assert not (workdir / "local.json").exists()


def _mlflow_readback(workdir) -> dict:
    """The newest run on the quickstart's MLflow server: id, metrics, experiment kind."""
    from mlflow.tracking import MlflowClient

    state = json.loads((workdir / "local.json").read_text())
    client = MlflowClient(state["endpoints"]["mlflow"])
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    (run,) = client.search_runs([experiment.experiment_id])
    return {
        "run_id": run.info.run_id,
        "metrics": run.data.metrics,
        "experiment_id": experiment.experiment_id,
        "kind": experiment.tags.get(C.MLFLOW_EXPERIMENT_KIND_TAG),
    }


def _trained(workdir, hours: list[str]) -> dict:
    """Read here from the files: the training hours' lines minus the held-out ones, and
    per hour the distinct feasigns trained up to and including it."""
    import numpy as np

    from elasticctr.train import config
    from elasticctr.train.elastic import _read, heldout_mask, take

    cfg = config.load(workdir / "values.local.yaml")
    lines = held = 0
    seen: set[int] = set()
    feasigns = {}
    for hour in hours:
        for path in sorted((workdir / "data" / hour).glob("part-*")):
            lines += sum(1 for ln in path.read_bytes().split(b"\n") if ln.strip())
            for batch in _read(cfg, f"file://{path}"):
                mask = heldout_mask(batch)
                held += int(mask.sum())
                for ids in take(batch, ~mask).ids:
                    seen.update(np.asarray(ids).tolist())
        feasigns[hour] = len(seen)
    assert lines > 0
    return {"lines": lines - held, "feasigns": feasigns}


def _manifest(workdir, version: str) -> dict:
    return json.loads((workdir / "store" / "versions" / version / "manifest.json").read_text())


def test_local_status_without_deployment_is_a_clear_error(tmp_path):
    proc = subprocess.run(
        [*ECTL, "local", "status", "--workdir", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "no local deployment" in proc.stderr
    assert "Traceback" not in proc.stderr
