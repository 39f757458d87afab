"""`ectl coordinator`: the data-task coordinator (the Volcano `coordinator` task)."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from elasticctr import constants as C
from elasticctr import scenarios
from elasticctr.errors import EctlError


def coordinator(
    values: Path | None = typer.Option(
        None, "--values", "-f", help="Values file: global.data.* and global.modelStore."
    ),
    dataset_path: str | None = typer.Option(None, help="DATASET_PATH URL (overrides values)."),
    start: str | None = typer.Option(None, help="First hour YYYYMMDD/HH (overrides values)."),
    end: str | None = typer.Option(
        None, help="Last hour YYYYMMDD/HH; empty = follow new hours (overrides values)."
    ),
    state_url: str | None = typer.Option(
        None, help="Durable progress file (default: <modelStore>/progress/coordinator.json)."
    ),
    hdfs_ugi: str | None = typer.Option(None, help="HDFS_UGI 'user,group' for hdfs:// URLs."),
    host: str = typer.Option("127.0.0.1", help="Address to bind (0.0.0.0 in a pod)."),
    port: int = typer.Option(C.DEFAULT_COORDINATOR_PORT, help="Port of the JSON API."),
    lease_seconds: float = typer.Option(
        C.DEFAULT_COORDINATOR_LEASE_SECONDS, min=1, help="Lease length without heartbeat."
    ),
    task_mb: float = typer.Option(
        float(C.DEFAULT_COORDINATOR_TASK_MIB),
        min=0.001,
        help="Split files into tasks of this size.",
    ),
    window: int = typer.Option(
        C.DEFAULT_COORDINATOR_WINDOW, min=1, help="Partitions trained at the same time."
    ),
    checkpoint_every: int = typer.Option(
        C.DEFAULT_COORDINATOR_CHECKPOINT_EVERY, min=1, help="Checkpoint every N exports."
    ),
    poll_seconds: float = typer.Option(
        C.DEFAULT_COORDINATOR_POLL_SECONDS, min=0.05, help="How often to look for new hours."
    ),
    transfer_url: str | None = typer.Option(
        None,
        envvar=C.ENV_CUBE_TRANSFER_URL,
        help="cube-transfer's status server, poked after each export so the new version "
        "is published at once (without it the transfer finds it at its next poll).",
    ),
    from_checkpoint: str | None = typer.Option(
        None,
        help="This start is a job (re)start: take progress from this checkpoint folder "
        "(the trainers' --checkpoint-dir), not from the state file.",
    ),
) -> None:
    """Hand out leased data tasks to trainers and record progress durably.

    Example:

      ectl coordinator -f values/demo.yaml --port 8300
    """
    from elasticctr.coordinator.runtime import (
        STATE_FILE,
        CoordinatorSettings,
        restart_from_checkpoint,
        run,
    )
    from elasticctr.data import storage

    data: dict = {}
    model_store = ""
    scenario, utc_offset = scenarios.DEFAULT, None
    if values is not None:
        from elasticctr.train.config import from_values, load_values

        raw = load_values(values)
        cfg = from_values(raw)
        glob = raw.get("global") if isinstance(raw.get("global"), dict) else {}
        scen, dat = glob.get("scenario"), glob.get("data")
        scenario = (scen.get("name") if isinstance(scen, dict) else None) or scenarios.DEFAULT
        utc_offset = (dat.get("utcOffset") if isinstance(dat, dict) else None) or None
        data = {
            "path": cfg.data_path,
            "start": cfg.start_date_hour,
            "end": cfg.end_date_hour,
            "ugi": cfg.hdfs_ugi,
        }
        model_store = cfg.model_store
    dataset = dataset_path or data.get("path")
    first = start or data.get("start")
    if not dataset:
        raise EctlError("no dataset path", hint="pass --dataset-path or global.data.path")
    if not first:
        raise EctlError("no start hour", hint="pass --start or global.data.startDateHour")
    if not state_url:
        if not model_store:
            raise EctlError("no place for progress", hint="pass --state-url or global.modelStore")
        state_url = storage.join(model_store, STATE_FILE)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if from_checkpoint:
        ugi = hdfs_ugi or data.get("ugi")
        logging.info("%s", restart_from_checkpoint(from_checkpoint, state_url, ugi)["message"])
    settings = CoordinatorSettings(
        dataset_path=dataset,
        start=first,
        end=(end if end is not None else data.get("end")) or None,
        state_url=state_url,
        hdfs_ugi=hdfs_ugi or data.get("ugi"),
        lease_seconds=lease_seconds,
        task_bytes=int(task_mb * (1 << 20)),
        window=window,
        checkpoint_every=checkpoint_every,
        poll_seconds=poll_seconds,
        scenario=scenario,
        utc_offset=utc_offset,
        transfer_url=transfer_url or None,
    )
    run(settings, host, port)


def register(app: typer.Typer) -> None:
    app.command("coordinator")(coordinator)
