"""`ectl quickstart`: one platform with two scenarios on this machine.

The platform: fileserver (model store), MLflow, cube shards, one cube-transfer for every
scenario in the scenario folder and one serving process routing by scenario, all as local
processes (`elasticctr.local.stack`). Two scenarios with their own data, slot config and
model (the first from the values, dnn by default; the second a smaller lr scenario on
other slots): each gets generated hourly demo data, trains hour by hour with real Paddle
parameter servers the way the chart does (elastic: its own coordinator leases byte ranges
of each hour to its trainers, `elasticctr.local.training`), exports to its own prefix of
the model store with its own MLflow experiment and registered model, and is registered in
the scenario folder. The quickstart waits until cube and serving carry each scenario's
newest version, predicts each held-out hour at `/v1/scenarios/NAME/predict` and reports
what the user should look at, with the samples each trainer trained.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from elasticctr import constants as C
from elasticctr import scenarios
from elasticctr.data import storage
from elasticctr.data.generate import DEMO_VOCAB, demo_spec, generate
from elasticctr.errors import EctlError
from elasticctr.local.stack import STATE_FILE, TOKENS_FILE, LocalStack
from elasticctr.modelstore import open_store
from elasticctr.net import wait_http_ok
from elasticctr.supervisor import Supervisor

SCENARIOS = ("feed", "coupon")
"""Default names of the quickstart's two scenarios."""
SECOND_MODEL: dict[str, Any] = {
    "name": "wide_deep",
    "embeddingDim": 8,
    "hiddenUnits": [32, 16],
    "batchSize": 256,
}
"""The second scenario's model (trainer.model): another zoo model than the first's."""
SECOND_SLOTS = tuple(range(100, 108))
"""The second scenario's slot config: 8 slots, other ids than the first's (0..--slots-1)."""
SECOND_LINES_SHARE = 2
"""The second scenario is the smaller one: 1/SECOND_LINES_SHARE of the first's lines."""


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
    scenarios: tuple[str, ...] = SCENARIOS
    keep_running: bool = False
    timeout: float = 900.0


@dataclass
class ScenarioPlan:
    """One scenario of the quickstart: its data model, values and training job."""

    name: str
    values: dict[str, Any]
    slots: list[int]
    lines_per_hour: int
    seed: int

    @property
    def model(self) -> str:
        return str(((self.values.get("trainer") or {}).get("model") or {}).get("name") or "dnn")

    @property
    def env(self) -> dict[str, str]:
        """The training roles' MLflow names (the scenario's experiment and model)."""
        return {
            C.ENV_MLFLOW_EXPERIMENT: scenarios.experiment_name(self.name),
            C.ENV_MLFLOW_REGISTERED_MODEL: scenarios.registered_model_name(self.name),
        }


def plan_scenarios(opts: QuickstartOptions) -> list[ScenarioPlan]:
    """The scenarios of `opts.scenarios` (one or two names, checked here): the first
    trains the values' model on `opts.slots` slots, the second SECOND_MODEL on
    SECOND_SLOTS with fewer lines."""
    names = list(opts.scenarios)
    if not 1 <= len(names) <= 2:
        raise EctlError(
            f"--scenarios: expected one or two scenario names, got {len(names)}",
            hint=f"e.g. --scenarios {','.join(SCENARIOS)}",
        )
    for name in names:
        scenarios.check_name(name, field_name="--scenarios:")
        if name == scenarios.DEFAULT:
            raise EctlError(
                f"--scenarios: {name!r} is the single release's scenario (the store root, "
                "/v1/predict), not one of a platform's",
                hint=f"name it otherwise, e.g. --scenarios {','.join(SCENARIOS)}",
            )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise EctlError(f"--scenarios: scenario {twice[0]!r} is named twice; names are unique")
    plans = [ScenarioPlan(names[0], opts.values, list(range(opts.slots)), opts.lines_per_hour,
                          opts.seed)]  # fmt: skip
    if len(names) == 2:
        values = json.loads(json.dumps(opts.values))
        values.setdefault("trainer", {})["model"] = dict(SECOND_MODEL)
        lines = max(opts.lines_per_hour // SECOND_LINES_SHARE, 100)
        plans.append(ScenarioPlan(names[1], values, list(SECOND_SLOTS), lines, opts.seed + 1))
    return plans


@dataclass
class ScenarioReport:
    name: str
    model: str
    slots: list[int]
    store: str
    versions: list[str]
    served_version: str
    heldout: str
    predicted: int
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
    mlflow_experiment: str
    mlflow_registered_model: str
    mlflow_run: str
    mlflow_metrics: dict[str, float]
    mlflow_run_url: str
    predict_url: str


@dataclass
class QuickstartReport:
    scenarios: dict[str, ScenarioReport]
    registry: str
    endpoints: dict[str, Any]
    wall_seconds: float
    logs: str
    phases: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_quickstart(opts: QuickstartOptions, console: Console) -> QuickstartReport:
    started = time.monotonic()
    plans = plan_scenarios(opts)  # bad names fail before anything starts
    stack = LocalStack.create(opts.workdir, opts.shards, fresh=True)
    ep = stack.endpoints
    phases: dict[str, float] = {}
    with Supervisor(stack.logs, grace=10.0, echo=console.log) as sup:
        services = {c.name: c for c in stack.services()}
        # MLflow takes the longest to start: let it migrate its database meanwhile.
        sup.start(services.pop("mlflow"))
        sup.start(services.pop("fileserver"))

        data = {p.name: _generate(opts, p, stack.workdir / "data" / p.name, console) for p in plans}
        phases["data"] = time.monotonic() - started
        for comp in services.values():
            sup.start(comp)

        # Training starts while the services come up (MLflow's first start takes the
        # longest): the roles read and write the model store directly, each chief starts
        # its MLflow run at its first export (waiting until MLflow answers), and
        # cube-transfer loads each registered scenario's newest version once it runs.
        from elasticctr.local.training import train_on_generated

        values_files = {}
        for plan in plans:
            root = stack.workdir / "data" / plan.name
            values = stack.values_for_roles(plan.values, plan.name)
            values = train_on_generated(values, root, data[plan.name].hours[:-1])
            values["global"]["data"]["slots"] = plan.slots
            values_files[plan.name] = stack.write_values(values, plan.name)
            stack.registry.add(
                scenarios.Scenario(plan.name, team="quickstart", model=plan.model,
                                   slots=tuple(plan.slots))
            )  # fmt: skip
        state = {"values": {n: str(v) for n, v in values_files.items()}}
        stack.write_state(sup, state)
        # Training can end before MLflow's first start does (a loaded machine): each
        # chief then waits this long for its queued MLflow updates instead of 120 s.
        os.environ.setdefault(C.ENV_MLFLOW_FLUSH_SECONDS, "600")

        t_train = time.monotonic()
        trained = _train(opts, plans, values_files, stack, console, sup)
        phases["training"] = time.monotonic() - t_train
        with console.status("waiting for the services (fileserver, mlflow, cube, serving) ..."):
            for name in ("fileserver", *(f"cube-{i}" for i in range(opts.shards)), "serving"):
                sup.wait_ready(name, timeout=120)
            wait_http_ok(
                f"{ep.mlflow}/health", timeout=180, what="mlflow",
                alive=lambda: "mlflow" in sup.running(),
            )  # fmt: skip
        console.log(f"services up: serving {ep.serving}, MLflow {ep.mlflow}")
        t_serve = time.monotonic()
        reports = {}
        for plan in plans:
            result = data[plan.name]
            newest = result.hours[-2]
            served = _wait_served(ep.serving, plan.name, newest, console, sup, timeout=180)
            auc, logloss, p50, p99, n = _predict_heldout(
                ep.serving, plan.name, stack.workdir / "data" / plan.name, result.heldout
            )
            experiment = scenarios.experiment_name(plan.name)
            run_id, metrics, run_url = _mlflow_record(
                ep.mlflow,
                experiment,
                {"heldout_auc": auc, "heldout_logloss": logloss, "oracle_auc": result.oracle_auc},
            )
            run = trained[plan.name]
            store = scenarios.store_url(str(stack.store), plan.name)
            reports[plan.name] = ScenarioReport(
                name=plan.name,
                model=plan.model,
                slots=plan.slots,
                store=store,
                versions=_versions(store),
                served_version=served,
                heldout=result.heldout,
                predicted=n,
                auc=auc,
                logloss=logloss,
                oracle_auc=result.oracle_auc,
                samples=int(run.progress["samples"]),
                trainer_samples=run.trainer_samples(),
                tasks=int(run.progress["tasks_done"]),
                tasks_retried=int(run.progress["tasks_retried"]),
                train_seconds=run.seconds,
                samples_per_second=run.progress["samples"] / max(run.seconds, 1e-9),
                latency_ms_p50=p50,
                latency_ms_p99=p99,
                mlflow_experiment=experiment,
                mlflow_registered_model=scenarios.registered_model_name(plan.name),
                mlflow_run=run_id,
                mlflow_metrics=metrics,
                mlflow_run_url=run_url,
                predict_url=f"{ep.serving}/v1/scenarios/{plan.name}/predict",
            )
        phases["serve_and_predict"] = time.monotonic() - t_serve
        report = QuickstartReport(
            scenarios=reports,
            registry=str(stack.registry.root),
            endpoints={
                "serving": ep.serving,
                "mlflow": ep.mlflow,
                "fileserver": ep.fileserver,
                "console": stack.console_link,
            },
            wall_seconds=time.monotonic() - started,
            logs=str(stack.logs),
            phases={k: round(v, 1) for k, v in phases.items()},
        )
        (stack.workdir / "quickstart.json").write_text(json.dumps(report.as_dict(), indent=2))
        print_report(report, console)
        if opts.keep_running:
            stack.write_state(sup, state)
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
    for done in (STATE_FILE, TOKENS_FILE):  # nothing runs any more
        (stack.workdir / done).unlink(missing_ok=True)
    return report


def _generate(opts: QuickstartOptions, plan: ScenarioPlan, root: Path, console: Console):
    spec = demo_spec(plan.slots, seed=plan.seed, vocab=opts.vocab)
    total = opts.hours * plan.lines_per_hour
    with _progress(console) as progress:
        task = progress.add_task(f"generating {plan.name}'s demo data", total=total)
        result = generate(
            str(root),
            spec,
            start=dt.datetime(2020, 4, 1),
            hours=opts.hours,
            lines_per_hour=plan.lines_per_hour,
            progress=lambda n: progress.advance(task, n),
        )
    console.log(
        f"{plan.name}: {result.lines:,} lines in {len(result.hours)} hours, "
        f"{len(plan.slots)} slots (oracle AUC {result.oracle_auc:.4f} on held-out {result.heldout})"
    )
    return result


def _train(opts, plans, values_files, stack: LocalStack, console: Console, sup):
    """Every scenario's elastic job side by side, on every hour but the held-out one;
    per scenario the coordinator's final progress."""
    from elasticctr.local.training import elastic_job, run_jobs

    hours = opts.hours - 1
    stores = {p.name: scenarios.store_url(str(stack.store), p.name) for p in plans}
    jobs = {
        p.name: elastic_job(
            values_files[p.name],
            stack.logs / f"train-{p.name}",
            opts.pservers,
            opts.trainers,
            stack.workdir / "train" / p.name / "checkpoint",
            echo=lambda msg, name=p.name: console.log(f"{name}: {msg}", markup=False),
            # The coordinator pokes cube-transfer after each export (docs/cube.md "Hand-off").
            env={**p.env, C.ENV_CUBE_TRANSFER_URL: stack.endpoints.transfer},
        )
        for p in plans
    }
    with _progress(console) as progress:
        tasks = {
            p.name: progress.add_task(
                f"{p.name}: training hour by hour ({p.model}, Paddle PS, elastic)", total=hours
            )
            for p in plans
        }

        def on_tick() -> None:
            for name, task in tasks.items():
                progress.update(task, completed=len(_versions(stores[name])))
            for name, code in sup.poll():  # keep services restarting while we train
                console.log(f"{name} exited with code {code}")

        runs = run_jobs(jobs, timeout=opts.timeout, on_tick=on_tick)
        on_tick()
    for name, run in runs.items():
        console.log(f"{name}: {run.summary()}; versions {', '.join(_versions(stores[name]))}")
    return runs


def _versions(store: str) -> list[str]:
    """Complete versions in a (scenario's) model store, as cube-transfer sees them."""
    return open_store(store).list_versions()


def _wait_served(url: str, scenario: str, version: str, console: Console, sup, timeout: float):
    from elasticctr.serving.client import ServingClient

    client = ServingClient(url, scenario=scenario)
    deadline = time.monotonic() + timeout
    current = ""
    with console.status(f"waiting for cube and serving to switch {scenario} to {version} ..."):
        while time.monotonic() < deadline:
            sup.poll()
            try:
                current = client.version().get("version") or ""
            except EctlError:  # not served yet: 404 unknown_scenario or 503 no_model
                current = ""
            if current == version:
                client.close()
                return current
            time.sleep(0.5)
    client.close()
    raise EctlError(
        f"serving still answers for scenario {scenario} with version {current or 'none'} "
        f"{timeout:.0f}s after training exported {version}",
        hint="see the cube-transfer and serving logs",
    )


def _predict_heldout(url: str, scenario: str, data_root: Path, heldout: str):
    """AUC/logloss on the held-out hour (batches of 500) and single-sample latency,
    through the scenario's route of the one serving process."""
    from elasticctr.data import partitions
    from elasticctr.serving.client import ServingClient

    client = ServingClient(url, scenario=scenario)
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


def _mlflow_record(
    tracking_uri: str, experiment: str, final: dict[str, float]
) -> tuple[str, dict[str, float], str]:
    """Log the quickstart's own figures (held-out AUC/logloss as served, the oracle AUC)
    to the scenario's training run (its experiment's newest), which its chief already
    ended; the run's id, latest metrics and the UI link that opens it in MLflow's
    model-training view (C.MLFLOW_UI_QUERY)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    runs = (
        client.search_runs(
            [exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=1
        )
        if exp is not None
        else []
    )
    if not runs:
        raise EctlError(f"MLflow at {tracking_uri} has no training run in experiment {experiment}")
    run = runs[0]
    for key, value in final.items():
        client.log_metric(run.info.run_id, key, float(value))
    metrics = dict(client.get_run(run.info.run_id).data.metrics)
    url = (
        f"{tracking_uri}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
        f"?{C.MLFLOW_UI_QUERY}"
    )
    return run.info.run_id, metrics, url


def print_report(report: QuickstartReport, console: Console) -> None:
    for sc in report.scenarios.values():
        table = Table(
            title=f"scenario {sc.name}: {sc.model}, {len(sc.slots)} slots", show_header=False
        )
        table.add_column(style="bold")
        table.add_column(overflow="fold")  # URLs whole, not cut short
        table.add_row("model versions", ", ".join(sc.versions))
        table.add_row("served version", sc.served_version)
        table.add_row(
            f"held-out AUC ({sc.heldout}, {sc.predicted:,} samples)",
            f"{sc.auc:.4f} (oracle {sc.oracle_auc:.4f}); logloss {sc.logloss:.4f}",
        )
        table.add_row(
            "training",
            f"{sc.samples:,} samples in {sc.train_seconds:.0f}s "
            f"({sc.samples_per_second:,.0f}/s), {sc.tasks} tasks ({sc.tasks_retried} retried)",
        )
        table.add_row(
            "samples per trainer",
            ", ".join(f"trainer-{n} {s:,}" for n, s in sc.trainer_samples.items()),
        )
        table.add_row(
            "prediction latency (1 sample)",
            f"p50 {sc.latency_ms_p50:.1f} ms, p99 {sc.latency_ms_p99:.1f} ms",
        )
        table.add_row(
            "MLflow run",
            f"{sc.mlflow_run} ({len(sc.mlflow_metrics)} metrics; experiment "
            f"{sc.mlflow_experiment}, registered model {sc.mlflow_registered_model})",
        )
        table.add_row("MLflow UI", sc.mlflow_run_url)
        table.add_row("serving", sc.predict_url)
        table.add_row("model store", sc.store)
        console.print(table)
    table = Table(title="ElasticCTR quickstart: one platform", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("scenarios", f"{', '.join(report.scenarios)} (registered in {report.registry})")
    table.add_row("serving", f"{report.endpoints['serving']}/v1/scenarios")
    table.add_row("MLflow", report.endpoints["mlflow"])
    table.add_row("console", report.endpoints["console"])
    table.add_row("model store (fileserver)", report.endpoints["fileserver"])
    table.add_row("logs", report.logs)
    phases = ", ".join(f"{k} {v:.0f}s" for k, v in report.phases.items())
    table.add_row("wall time", f"{report.wall_seconds:.0f}s ({phases})")
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
