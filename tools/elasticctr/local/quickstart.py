"""`ectl quickstart`: the whole system on this machine from the demo values.

Generates hourly demo data, starts every service as a local process (fileserver, MLflow,
cube shards, cube-transfer, serving), trains hour by hour with real Paddle parameter
servers the way the chart does (elastic: a coordinator leases byte ranges of each hour to
the trainers, `elasticctr.local.training.run_elastic`, as `ectl local run` does), waits
until cube and serving carry the newest version, predicts the held-out hour and reports
what the user should look at, with the samples each trainer trained.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from elasticctr import constants as C
from elasticctr.data import storage
from elasticctr.data.generate import DEMO_VOCAB, demo_spec, generate
from elasticctr.errors import EctlError
from elasticctr.local.stack import STATE_FILE, LocalStack
from elasticctr.modelstore import open_store
from elasticctr.net import wait_http_ok
from elasticctr.supervisor import Supervisor


@dataclass
class QuickstartOptions:
    workdir: Path
    values: dict[str, Any]
    hours: int = 4
    lines_per_hour: int = 40_000
    slots: int = 16
    vocab: int = DEMO_VOCAB
    pservers: int = 1
    trainers: int = 2
    shards: int = 2
    seed: int = 0
    keep_running: bool = False
    timeout: float = 900.0


@dataclass
class QuickstartReport:
    versions: list[str]
    served_version: str
    heldout: str
    auc: float
    logloss: float
    oracle_auc: float
    samples: int
    trainer_samples: dict[str, int]
    tasks: int
    tasks_retried: int
    train_seconds: float
    samples_per_second: float
    latency_ms_p50: float
    latency_ms_p99: float
    mlflow_run: str
    mlflow_metrics: dict[str, float]
    mlflow_run_url: str
    endpoints: dict[str, Any]
    wall_seconds: float
    logs: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_quickstart(opts: QuickstartOptions, console: Console) -> QuickstartReport:
    started = time.monotonic()
    stack = LocalStack.create(opts.workdir, opts.shards, fresh=True)
    ep = stack.endpoints
    data_root = stack.workdir / "data"
    with Supervisor(stack.logs, grace=10.0, echo=console.log) as sup:
        services = {c.name: c for c in stack.services()}
        # MLflow takes the longest to start: let it migrate its database meanwhile.
        sup.start(services.pop("mlflow"))
        sup.start(services.pop("fileserver"))

        result = _generate(opts, data_root, console)
        for comp in services.values():
            sup.start(comp)

        # Training starts while the services come up (MLflow's first start takes the
        # longest): the roles read and write the model store directly, trainer 0 starts
        # its MLflow run at the first export (its client retries until MLflow answers),
        # and cube-transfer loads whatever version is newest once it runs.
        train_hours = result.hours[:-1]
        from elasticctr.local.training import train_on_generated

        values = train_on_generated(stack.values_for_roles(opts.values), data_root, train_hours)
        values["global"]["data"]["slots"] = list(range(opts.slots))
        values_file = stack.write_values(values)
        stack.write_state(sup, {"values": str(values_file)})
        # Training can end before MLflow's first start does (a loaded machine): trainer 0
        # then waits this long for its queued MLflow updates instead of the default 120 s.
        os.environ.setdefault(C.ENV_MLFLOW_FLUSH_SECONDS, "600")

        trained = _train(opts, values_file, stack, console, sup)
        with console.status("waiting for the services (fileserver, mlflow, cube, serving) ..."):
            for name in ("fileserver", *(f"cube-{i}" for i in range(opts.shards)), "serving"):
                sup.wait_ready(name, timeout=120)
            wait_http_ok(
                f"{ep.mlflow}/health", timeout=180, what="mlflow",
                alive=lambda: "mlflow" in sup.running(),
            )  # fmt: skip
        console.log(f"services up: serving {ep.serving}, MLflow {ep.mlflow}")
        newest = train_hours[-1]
        served = _wait_served(ep.serving, newest, console, sup, timeout=180)
        auc, logloss, p50, p99, n = _predict_heldout(ep.serving, data_root, result.heldout)
        run_id, metrics, run_url = _mlflow_record(
            ep.mlflow,
            {"heldout_auc": auc, "heldout_logloss": logloss, "oracle_auc": result.oracle_auc},
        )
        report = QuickstartReport(
            versions=_versions(stack.store),
            served_version=served,
            heldout=result.heldout,
            auc=auc,
            logloss=logloss,
            oracle_auc=result.oracle_auc,
            samples=int(trained.progress["samples"]),
            trainer_samples=trained.trainer_samples(),
            tasks=int(trained.progress["tasks_done"]),
            tasks_retried=int(trained.progress["tasks_retried"]),
            train_seconds=trained.seconds,
            samples_per_second=trained.progress["samples"] / max(trained.seconds, 1e-9),
            latency_ms_p50=p50,
            latency_ms_p99=p99,
            mlflow_run=run_id,
            mlflow_metrics=metrics,
            mlflow_run_url=run_url,
            endpoints={"serving": ep.serving, "mlflow": ep.mlflow, "fileserver": ep.fileserver},
            wall_seconds=time.monotonic() - started,
            logs=str(stack.logs),
        )
        (stack.workdir / "quickstart.json").write_text(json.dumps(report.as_dict(), indent=2))
        print_report(report, n, console)
        if opts.keep_running:
            stack.write_state(sup, {"values": str(values_file)})
            console.print("[bold]running; press Ctrl-C to stop everything[/bold]")
            # Ctrl-C even when started with SIGINT ignored (a background job of a script
            # inherits that), and SIGTERM from a service manager: both stop everything.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.default_int_handler)
            try:
                while True:
                    for name, code in sup.poll():
                        console.log(f"{name} stopped with exit code {code}")
                    time.sleep(1)
            except KeyboardInterrupt:
                console.print("stopping ...")
    (stack.workdir / STATE_FILE).unlink(missing_ok=True)  # nothing runs any more
    return report


def _generate(opts: QuickstartOptions, root: Path, console: Console):
    spec = demo_spec(range(opts.slots), seed=opts.seed, vocab=opts.vocab)
    total = opts.hours * opts.lines_per_hour
    with _progress(console) as progress:
        task = progress.add_task("generating demo data", total=total)
        result = generate(
            str(root),
            spec,
            start=dt.datetime(2020, 4, 1),
            hours=opts.hours,
            lines_per_hour=opts.lines_per_hour,
            progress=lambda n: progress.advance(task, n),
        )
    console.log(
        f"demo data: {result.lines:,} lines in {len(result.hours)} hours "
        f"(oracle AUC {result.oracle_auc:.4f} on held-out {result.heldout})"
    )
    return result


def _train(opts, values_file: Path, stack: LocalStack, console: Console, sup):
    """Elastic training of every hour but the held-out one; the coordinator's progress."""
    from elasticctr.local.training import run_elastic

    hours = opts.hours - 1
    with _progress(console) as progress:
        task = progress.add_task("training hour by hour (Paddle PS, elastic)", total=hours)

        def on_tick() -> None:
            progress.update(task, completed=len(_versions(stack.store)))
            for name, code in sup.poll():  # keep services restarting while we train
                console.log(f"{name} exited with code {code}")

        result = run_elastic(
            values_file,
            stack.logs / "train",
            opts.pservers,
            opts.trainers,
            stack.workdir / "train" / "checkpoint",
            timeout=opts.timeout,
            echo=console.log,
            on_tick=on_tick,
        )
        progress.update(task, completed=len(_versions(stack.store)))
    console.log(f"{result.summary()}; versions {', '.join(_versions(stack.store))}")
    return result


def _versions(store: Path) -> list[str]:
    """Complete versions in the model store (the store's own listing, as cube-transfer sees it)."""
    return open_store(str(store)).list_versions()


def _wait_served(url: str, version: str, console: Console, sup, timeout: float) -> str:
    from elasticctr.serving.client import ServingClient

    client = ServingClient(url)
    deadline = time.monotonic() + timeout
    current = ""
    with console.status(f"waiting for cube and serving to switch to {version} ..."):
        while time.monotonic() < deadline:
            sup.poll()
            try:
                current = client.version().get("version") or ""
            except EctlError:
                current = ""
            if current == version:
                return current
            time.sleep(0.5)
    raise EctlError(
        f"serving still answers with version {current or 'none'} {timeout:.0f}s after "
        f"training exported {version}",
        hint="see the cube-transfer and serving logs",
    )


def _predict_heldout(url: str, data_root: Path, heldout: str):
    """AUC/logloss on the held-out hour (batches of 500) and single-sample latency."""
    from elasticctr.data import partitions
    from elasticctr.serving.client import ServingClient

    client = ServingClient(url)
    files = partitions.data_files(partitions.partition(str(data_root), heldout))
    data = b"".join(storage.read_bytes(f) for f in files)
    result = client.predict_file(data, source=heldout, chunk=500)
    lines = [ln for ln in data.split(b"\n") if ln.strip()][:300]
    latencies = []
    for line in lines:
        t0 = time.perf_counter()
        client.predict_lines(line + b"\n")
        latencies.append((time.perf_counter() - t0) * 1000)
    client.close()
    p50, p99 = np.percentile(latencies, [50, 99])
    return result.auc, result.logloss, float(p50), float(p99), len(result.probabilities)


def _mlflow_record(tracking_uri: str, final: dict[str, float]) -> tuple[str, dict[str, float], str]:
    """Log the quickstart's own figures (held-out AUC/logloss as served, the oracle AUC)
    to the training run, which trainer 0 already ended; its id, latest metrics and the
    UI link that opens it in MLflow's model-training view (C.MLFLOW_UI_QUERY)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs:
        raise EctlError(f"MLflow at {tracking_uri} has no training run")
    run = runs[0]
    for key, value in final.items():
        client.log_metric(run.info.run_id, key, float(value))
    metrics = dict(client.get_run(run.info.run_id).data.metrics)
    url = (
        f"{tracking_uri}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
        f"?{C.MLFLOW_UI_QUERY}"
    )
    return run.info.run_id, metrics, url


def print_report(report: QuickstartReport, predicted: int, console: Console) -> None:
    table = Table(title="ElasticCTR quickstart", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("model versions", ", ".join(report.versions))
    table.add_row("served version", report.served_version)
    table.add_row(
        f"held-out AUC ({report.heldout}, {predicted:,} samples)",
        f"{report.auc:.4f} (oracle {report.oracle_auc:.4f}); logloss {report.logloss:.4f}",
    )
    table.add_row(
        "training",
        f"{report.samples:,} samples in {report.train_seconds:.0f}s "
        f"({report.samples_per_second:,.0f}/s), {report.tasks} tasks "
        f"({report.tasks_retried} retried)",
    )
    table.add_row(
        "samples per trainer",
        ", ".join(f"trainer-{n} {s:,}" for n, s in report.trainer_samples.items()),
    )
    table.add_row(
        "prediction latency (1 sample)",
        f"p50 {report.latency_ms_p50:.1f} ms, p99 {report.latency_ms_p99:.1f} ms",
    )
    table.add_row("MLflow run", f"{report.mlflow_run} ({len(report.mlflow_metrics)} metrics)")
    table.add_row("MLflow UI", report.mlflow_run_url)
    table.add_row("serving", f"{report.endpoints['serving']}/v1/predict")
    table.add_row("logs", report.logs)
    table.add_row("wall time", f"{report.wall_seconds:.0f}s")
    console.print(table)


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
