"""`ectl quickstart` and `ectl local up|run|status|down`: the system as local processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from elasticctr.cli._common import OUTPUT_OPTION, OutputFormat, print_data
from elasticctr.constants import ENV_HOME, repo_root
from elasticctr.errors import EctlError

local_app = typer.Typer(help="Run the whole system as local processes from a values file.")
console = Console()


def _default_home() -> Path:
    return Path(os.environ.get(ENV_HOME, ".elasticctr"))


def _demo_values() -> Path:
    return repo_root() / "values" / "demo.yaml"


def _read_values(path: Path) -> dict:
    from elasticctr.data import storage
    from elasticctr.values import load_files

    values = load_files([path])
    storage.apply_s3_values(values)  # global.s3, as the chart gives pods
    return values


def quickstart(
    values: Path = typer.Option(
        None, "--values", "-f", help="Values file (default values/demo.yaml)."
    ),
    workdir: Path = typer.Option(None, help=f"Work folder (default ${ENV_HOME}/quickstart)."),
    hours: int = typer.Option(4, min=2, help="Hours of demo data (the last one is held out)."),
    lines: int = typer.Option(40_000, min=100, help="Lines per hour."),
    slots: int = typer.Option(16, min=1, max=1000, help="Number of slots."),
    vocab: int = typer.Option(
        None,
        min=10,
        help="Distinct feasigns per slot (default: the demo data's, small enough that "
        "one pass learns it; elasticctr.data.generate.DEMO_VOCAB).",
    ),
    pservers: int = typer.Option(
        1, "--pservers", "-p", min=1, help="Parameter servers per scenario."
    ),
    trainers: int = typer.Option(2, "--trainers", "-t", min=1, help="Trainers per scenario."),
    shards: int = typer.Option(2, "--cube", "-b", min=1, help="Cube shards."),
    scenario_names: str = typer.Option(
        "feed,coupon",
        "--scenarios",
        help="Names of the platform's scenarios, comma-separated (one or two): the first "
        "trains the values' model on --slots slots, the second wide_deep on 8 other "
        "slots with half the lines.",
    ),
    keep_running: bool = typer.Option(False, help="Keep everything running until Ctrl-C."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Run ElasticCTR end to end on this machine: one platform (model store, MLflow, cube,
    serving) with two scenarios, each with its own data, slots, model and elastic PS
    training, both predicted through the one serving process.

    Example:

      ectl quickstart                  # about 3 minutes on 2 cores

      ectl quickstart --keep-running   # then open the MLflow URL it prints
    """
    from elasticctr.local.quickstart import QuickstartOptions, run_quickstart

    values_file = values or _demo_values()
    opts = QuickstartOptions(
        workdir=workdir or _default_home() / "quickstart",
        values=_read_values(values_file),
        hours=hours,
        lines_per_hour=lines,
        slots=slots,
        **({"vocab": vocab} if vocab is not None else {}),
        pservers=pservers,
        trainers=trainers,
        shards=shards,
        scenarios=tuple(n.strip() for n in scenario_names.split(",")),
        keep_running=keep_running,
    )
    out = Console(stderr=True) if output.for_scripts else console
    report = run_quickstart(opts, out)
    print_data(output, report.as_dict())


WORKDIR_HELP = (
    f"Work folder (default: the one running, ${ENV_HOME}/local from `local up` or "
    f"${ENV_HOME}/quickstart from `quickstart --keep-running`)."
)


def _running_workdir(workdir: Path | None) -> Path:
    """`workdir`, else the default folder of `local up` or of `quickstart` that holds a
    running deployment's state (one of them; both running needs --workdir)."""
    from elasticctr.local.stack import STATE_FILE

    if workdir is not None:
        return workdir
    candidates = [_default_home() / "local", _default_home() / "quickstart"]
    running = [c for c in candidates if (c / STATE_FILE).exists()]
    if len(running) > 1:
        raise EctlError(
            "local deployments run in " + " and ".join(map(str, running)),
            hint="name one with --workdir",
        )
    return running[0] if running else candidates[0]


@local_app.command("status")
def status(
    workdir: Path = typer.Option(None, help=WORKDIR_HELP),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Show the processes and endpoints of a running local deployment."""
    from elasticctr.local.stack import read_state

    state = read_state(_running_workdir(workdir))
    rows = []
    for name, pid in sorted(state["components"].items()):
        rows.append({"component": name, "pid": pid, "alive": _alive(pid)})
    if print_data(output, {**state, "processes": rows}):
        return
    table = Table(title=f"local deployment in {state['workdir']}")
    for col in ("component", "pid", "alive"):
        table.add_column(col)
    for row in rows:
        table.add_row(row["component"], str(row["pid"]), "yes" if row["alive"] else "[red]no[/red]")
    console.print(table)
    for key, url in state["endpoints"].items():
        console.print(f"{key}: {url}")
    if state.get("scenarios"):
        from elasticctr.scenarios import DirRegistry

        names = ", ".join(DirRegistry(state["scenarios"]).list()) or "none but the default"
        console.print(f"scenarios: {names} (folder {state['scenarios']})")


@local_app.command("down")
def down(
    workdir: Path = typer.Option(None, help=WORKDIR_HELP),
    timeout: float = typer.Option(20.0, help="Seconds to wait before SIGKILL."),
) -> None:
    """Stop a local deployment: the supervisor first, then any process left."""
    from elasticctr.local.stack import STATE_FILE, read_state

    folder = _running_workdir(workdir)
    state = read_state(folder)
    pids = [state["pid"], *state["components"].values()]
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if _alive(pid):
            _signal(pid, signal.SIGKILL)
    (Path(folder) / STATE_FILE).unlink(missing_ok=True)
    console.print(f"stopped the local deployment in {folder}")


@local_app.command("up")
def up(
    values: Path = typer.Option(
        ..., "--values", "-f", help="Values file (data on file:// or hdfs://)."
    ),
    workdir: Path = typer.Option(None, help=f"Work folder (default ${ENV_HOME}/local)."),
    pservers: int = typer.Option(1, "--pservers", "-p", min=1),
    trainers: int = typer.Option(2, "--trainers", "-t", min=1),
    shards: int = typer.Option(0, "--cube", "-b", min=0, help="Cube shards (0: cube.shards)."),
    wait: float = typer.Option(300.0, help="Seconds to wait for the services to be ready."),
) -> None:
    """Start a long-running local deployment in the background from any values file.

    Example:

      ectl local up -f myvalues.yaml && ectl local status && ectl local down
    """
    from elasticctr.local.stack import STATE_FILE

    folder = (workdir or _default_home() / "local").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / STATE_FILE).exists():
        raise EctlError(f"a local deployment already runs in {folder}", hint="ectl local down")
    _read_values(values)  # fail here, not in the background
    log = (folder / "supervisor.log").open("ab")
    cmd = [sys.executable, "-m", "elasticctr.cli.main", "local", "run", "-f", str(values.resolve())]
    cmd += ["--workdir", str(folder), "-p", str(pservers), "-t", str(trainers), "-b", str(shards)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if (folder / STATE_FILE).exists():
            console.print(
                f"local deployment running in {folder} (ectl local status --workdir {folder})"
            )
            return
        if proc.poll() is not None:
            raise EctlError(
                "the local deployment failed to start", hint=f"see {folder}/supervisor.log"
            )
        time.sleep(0.5)
    raise EctlError(f"not ready after {wait:.0f}s", hint=f"see {folder}/supervisor.log")


@local_app.command("run")
def run(
    values: Path = typer.Option(..., "--values", "-f"),
    workdir: Path = typer.Option(..., help="Work folder."),
    pservers: int = typer.Option(1, "--pservers", "-p", min=1),
    trainers: int = typer.Option(2, "--trainers", "-t", min=1),
    shards: int = typer.Option(0, "--cube", "-b", min=0),
) -> None:
    """Run a local deployment in the foreground (what `local up` starts in the background)."""
    from elasticctr.local.runner import run_local

    run_local(_read_values(values), workdir, pservers, trainers, shards, console)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    for target in (lambda: os.killpg(pid, sig), lambda: os.kill(pid, sig)):
        try:
            target()
            return
        except (ProcessLookupError, PermissionError):
            continue


def register(app: typer.Typer) -> None:
    app.command("quickstart")(quickstart)
    app.add_typer(local_app, name="local")
