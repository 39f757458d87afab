"""The MLflow run of a training job, kept by the trainer that exports (the chief).

`Tracker` logs each exported hour's metrics and registers the published version in the
model registry (`elasticctr.train.registry`). Every MLflow call runs on the tracker's own
thread, so training never waits for the tracking server.
"""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path

import numpy as np

from elasticctr import constants as C
from elasticctr import versions
from elasticctr.errors import EctlError
from elasticctr.train import env as role_env
from elasticctr.train.config import TrainConfig
from elasticctr.train.program import log


class Tracker:
    """MLflow run of this training job (the exporting trainer's); a no-op without a
    tracking URI.

    The run starts at the first logged partition, not at start-up. `submit` runs MLflow
    calls on the tracker's own thread, in order, so training never waits for the tracking
    server: with MLflow down (seen on the one-node cluster: its pod OOM-killed) the client
    retries each call for minutes, which stalled every trainer behind the chief's export.
    """

    def __init__(self, cfg: TrainConfig, renv: role_env.RoleEnv):
        self.cfg, self.renv = cfg, renv
        self.run = None
        self._queue: queue.Queue | None = None
        self._worker: threading.Thread | None = None

    def submit(self, what: str, fn, *args) -> None:
        """Run fn(*args) on the tracker's thread; a failure is logged as a warning."""
        if not self.cfg.mlflow_uri:
            return
        if self._worker is None:
            self._queue = queue.Queue()
            self._worker = threading.Thread(target=self._drain, name="mlflow", daemon=True)
            self._worker.start()
        self._queue.put((what, fn, args))

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            what, fn, args = item
            try:
                fn(*args)
            except Exception as exc:  # noqa: BLE001 - tracking must not stop training
                log(f"WARNING: MLflow {what} failed: {type(exc).__name__}: {exc}")

    def _start(self) -> None:
        import mlflow

        cfg, renv = self.cfg, self.renv
        if cfg.mlflow_uri.startswith(("http://", "https://")):
            # A server that is still starting (local mode starts it beside training):
            # poll /health every 0.5 s instead of mlflow's exponential retry backoff,
            # which waits up to twice as long as the server took to come up.
            from elasticctr.net import wait_http_ok

            try:
                wait_http_ok(f"{cfg.mlflow_uri.rstrip('/')}/health", timeout=300, what="MLflow")
            except EctlError as exc:
                log(f"{exc}; trying MLflow's own client")
        mlflow.set_tracking_uri(cfg.mlflow_uri)
        experiment = mlflow.set_experiment(os.environ.get(C.ENV_MLFLOW_EXPERIMENT, "elasticctr"))
        if C.MLFLOW_EXPERIMENT_KIND_TAG not in experiment.tags:  # a person's choice stays
            mlflow.set_experiment_tag(C.MLFLOW_EXPERIMENT_KIND_TAG, C.MLFLOW_EXPERIMENT_KIND)
        self.mlflow = mlflow
        self.run = mlflow.start_run(run_name=f"train-{cfg.model.name}")
        params = {f"model.{k}": str(v) for k, v in cfg.model.params.items()}
        params.update(
            {
                "model.name": cfg.model.name,
                "slots": len(cfg.slots),
                "pservers": len(renv.pserver_endpoints),
                "trainers": renv.trainers_num,
                "data.path": cfg.data_path or "(synthetic)",
            }
        )
        mlflow.log_params(params)

    def log(self, version_id: str, step: int, result: dict) -> None:
        """The numeric entries of `result` as metrics at `step`; tag `last_version`."""
        if not self.cfg.mlflow_uri:
            return
        if self.run is None:
            self._start()
        numeric = {
            k: float(v)
            for k, v in result.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v)
        }
        self.mlflow.log_metrics(numeric, step=step)
        self.mlflow.set_tag("last_version", version_id)

    def register(self, version_id: str, result: dict, version_dir: Path):
        """Register the published version (`result["exported_to"]`) in the MLflow model
        registry under this run (elasticctr.train.registry); None when there is nothing
        to register or registration failed (logged as a warning, never raised)."""
        if not self.cfg.mlflow_uri or not result.get("exported_to"):
            return None
        from elasticctr.train import registry

        run_id = self.run.info.run_id if self.run is not None else None
        return registry.register_version(
            self.cfg.mlflow_uri,
            version_id,
            result["exported_to"],
            Path(version_dir) / versions.MANIFEST,
            run_id=run_id,
            log=log,
        )

    def close(self, timeout: float | None = None) -> None:
        """End the run after the queued updates; wait at most `timeout` seconds
        ($ELASTICCTR_MLFLOW_FLUSH_SECONDS, 120) for them, then give up with a warning."""
        if self._worker is not None:
            if timeout is None:
                timeout = float(
                    os.environ.get(C.ENV_MLFLOW_FLUSH_SECONDS, C.DEFAULT_MLFLOW_FLUSH_SECONDS)
                )
            self._queue.put(("end of run", self._end, ()))
            self._queue.put(None)
            self._worker.join(timeout)
            if self._worker.is_alive():
                log(
                    f"WARNING: MLflow at {self.cfg.mlflow_uri} did not take "
                    f"{self._queue.qsize()} queued update(s) within {timeout:.0f}s; "
                    "they are dropped (the model versions stay published)"
                )
            return
        self._end()

    def _end(self) -> None:
        if self.run is not None:
            self.mlflow.end_run()
            self.run = None
