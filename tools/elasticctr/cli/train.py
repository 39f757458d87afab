"""`ectl train`: the parameter-server roles and local training.

ectl train pserver -f values.yaml      # one pserver (env contract: docs/training.md)
ectl train trainer -f values.yaml --coordinator URL   # one elastic trainer
ectl train --local -p 1 -t 2 -f values.yaml   # coordinator + P pservers + T elastic
                                              # trainers on this machine
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import typer

from elasticctr import constants as C
from elasticctr.errors import EctlError

train_app = typer.Typer(
    name="train",
    help="Train with Paddle Fleet parameter servers (roles, or all locally with --local).",
    invoke_without_command=True,
    no_args_is_help=False,
)

VALUES_HELP = f"Values file (trainer.model, global.data, ...); or set {C.ENV_TRAIN_VALUES}."


def _values_path(values: Path | None) -> Path:
    if values is None:
        env = os.environ.get(C.ENV_TRAIN_VALUES)
        if not env:
            raise EctlError(
                "no values file: pass -f values.yaml", hint=f"or set {C.ENV_TRAIN_VALUES}"
            )
        values = Path(env)
    if not values.is_file():
        raise EctlError(f"values file {values} does not exist")
    return values


@train_app.callback()
def train(
    ctx: typer.Context,
    local: bool = typer.Option(False, "--local", help="Run P pservers + T trainers here."),
    pservers: int = typer.Option(1, "--pservers", "-p", min=1, help="Number of pservers."),
    trainers: int = typer.Option(2, "--trainers", "-t", min=1, help="Number of trainers."),
    values: Path = typer.Option(None, "--values", "-f", help=VALUES_HELP),
    log_dir: Path = typer.Option(
        None, "--log-dir", help="Where role logs go (default $ELASTICCTR_HOME/train/<time>)."
    ),
    synthetic_samples: int = typer.Option(
        0, "--synthetic-samples", help="Train on N in-memory synthetic samples per partition."
    ),
    synthetic_partitions: int = typer.Option(1, "--synthetic-partitions", min=1),
    timeout: float = typer.Option(None, "--timeout", help="Fail if not done in this many s."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not echo role logs."),
    checkpoint_dir: Path = typer.Option(
        None, "--checkpoint-dir", help="Default $ELASTICCTR_HOME/train/checkpoint."
    ),
    checkpoint_every: int = typer.Option(
        None,
        "--checkpoint-every",
        min=1,
        help="Partitions between checkpoints (default trainer.coordinator.checkpointEvery).",
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue from the checkpoint."),
    elastic: bool = typer.Option(
        False,
        "--elastic",
        help="Accepted for older scripts: --local always trains elastic (a local `ectl "
        "coordinator` leases byte ranges of the files to the trainers; a pserver exit "
        "restarts the job from the checkpoint).",
    ),
) -> None:
    """Train with Paddle Fleet parameter servers."""
    if ctx.invoked_subcommand is not None:
        return
    if not local:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    from elasticctr.local.training import run_elastic
    from elasticctr.train import config

    del elastic  # the only local path
    path = _values_path(values)
    config.load(path)  # fail fast, before any process starts
    home = Path(os.environ.get(C.ENV_HOME, ".elasticctr"))
    log_dir = log_dir or home / "train" / time.strftime("%Y%m%d-%H%M%S")
    ckpt = (checkpoint_dir or home / "train" / "checkpoint").resolve()
    if synthetic_samples > 0:
        path = _synthetic_values(path, synthetic_samples, synthetic_partitions, Path(log_dir))
    echo = (lambda _m: None) if quiet else typer.echo
    result = run_elastic(
        path.resolve(), Path(log_dir), pservers, trainers, ckpt,
        resume=resume, timeout=timeout, echo=echo, checkpoint_every=checkpoint_every,
        stream=not quiet,
    )  # fmt: skip
    typer.echo(f"{result.summary()}; logs in {log_dir}")


def _synthetic_values(values: Path, samples: int, partitions: int, log_dir: Path) -> Path:
    """--synthetic-samples with --local: write `partitions` hours of `samples` lines of
    the demo data model (elasticctr.data.generate.demo_spec, the values' slots) under
    LOG_DIR/synthetic-data and a copy of the values that trains on them."""
    import datetime as dt

    import yaml

    from elasticctr.data.generate import demo_spec, generate
    from elasticctr.local.training import train_on_generated
    from elasticctr.train import config

    raw = config.load_values(values)
    slots = config.load(values).slots
    root = (log_dir / "synthetic-data").resolve()
    result = generate(
        str(root), demo_spec(slots), start=dt.datetime(2020, 4, 1),
        hours=partitions, lines_per_hour=samples,
    )  # fmt: skip
    train_on_generated(raw, root, result.hours)
    out = log_dir / "values.synthetic.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


@train_app.command("pserver")
def pserver(values: Path = typer.Option(None, "--values", "-f", help=VALUES_HELP)) -> None:
    """Run one parameter server (until stopped)."""
    from elasticctr.train import config
    from elasticctr.train import pserver as role

    role.main(config.load(_values_path(values)))


NO_COORDINATOR = (
    f"ectl train trainer needs a coordinator: pass --coordinator URL or set "
    f"{C.ENV_COORDINATOR_URL}; `ectl train --local` starts one"
)


@train_app.command("trainer")
def trainer(
    values: Path = typer.Option(None, "--values", "-f", help=VALUES_HELP),
    results: Path = typer.Option(
        None,
        "--results",
        help="Append one JSON line of metrics per partition this trainer exports.",
    ),
    checkpoint_dir: Path = typer.Option(
        None, "--checkpoint-dir", help=f"Checkpoint folder (or {C.ENV_TRAIN_CHECKPOINT})."
    ),
    coordinator: str = typer.Option(
        None,
        "--coordinator",
        help=f"Lease data tasks from this coordinator URL (or {C.ENV_COORDINATOR_URL}; in a "
        f"Volcano job {C.ENV_VC_COORDINATOR_HOSTS}).",
    ),
) -> None:
    """Run one elastic trainer: lease data tasks from the coordinator until it says the
    job is finished; export an hour when the coordinator asks."""
    from elasticctr.train.env import coordinator_url

    coordinator = coordinator or coordinator_url()
    if not coordinator:
        raise EctlError(NO_COORDINATOR, exit_code=2)
    from elasticctr.train import config

    cfg = config.load(_values_path(values))
    _exit_on_sigterm_until_leasing()
    from elasticctr.train import elastic

    ckpt = checkpoint_dir or (
        Path(os.environ[C.ENV_TRAIN_CHECKPOINT]) if os.environ.get(C.ENV_TRAIN_CHECKPOINT) else None
    )
    elastic.main(cfg, elastic.ElasticOptions(coordinator, results=results, checkpoint_dir=ckpt))
    _exit_after_training()


def _exit_on_sigterm_until_leasing() -> None:
    """An elastic trainer told to stop before it holds a lease (preempted while it starts:
    importing Paddle, waiting for the coordinator or the pservers) has nothing to give back:
    exit at once (C.EXIT_STOPPED, not 0: see there). Without a handler, a trainer that is
    PID 1 in its container ignores SIGTERM until the kubelet kills it after the grace
    period (30 s on the one-node cluster, docs/coordinator.md). `elastic.run` replaces this
    handler with the one that leaves the job."""
    import signal

    signal.signal(signal.SIGTERM, lambda _signum, _frame: os._exit(C.EXIT_STOPPED))


def _exit_after_training() -> None:
    """Exit 0 without the interpreter's teardown of Paddle's C++ state.

    PS workers can crash in static destructors at exit after a successful run (seen
    once in CI: an elastic trainer exited -11 after finishing; the same as
    PaddleFleetX issue 59). Everything is written and flushed by now."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")
