"""`ectl data`: generate synthetic partitions, profile data, convert raw tables.

Thin wrappers over `elasticctr.data`: option parsing, progress bars and tables here,
the work in the library (so trainers and tests call the same code).
"""

from __future__ import annotations

import time

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from elasticctr.errors import EctlError, ValidationError

console = Console()
data_app = typer.Typer(
    name="data",
    help="Data tools: synthetic partitions, profiling, conversion of raw tables.",
    no_args_is_help=True,
)


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def _slots(slots: str | None, slot_conf: str | None, default: str | None = "27") -> list[int]:
    from elasticctr.data.config import read_slot_conf
    from elasticctr.data.generate import parse_slot_spec

    if slot_conf:
        return read_slot_conf(slot_conf)
    if slots:
        return parse_slot_spec(slots)
    if default is None:
        raise EctlError("give --slots or --slot-conf")
    return parse_slot_spec(default)


@data_app.command("generate")
def generate_cmd(
    output: str = typer.Argument(..., help="Where to write: path, file://, hdfs:// or http(s)://"),
    start: str = typer.Option("20200401/00", help="First hour, YYYYMMDD/HH."),
    hours: int = typer.Option(2, min=1, help="Number of hourly partitions."),
    lines: int = typer.Option(10_000, "--lines", "--lines-per-hour", min=1, help="Lines per hour."),
    slots: str | None = typer.Option(None, help="Slot count (27) or ids (0-9,12); default 27."),
    slot_conf: str | None = typer.Option(None, help="Take the slots from this slot.conf."),
    seed: int = typer.Option(0, help="Seed: same seed and options, same bytes."),
    files: int = typer.Option(1, min=1, help="Data files (part-NNNNN) per partition."),
    vocab: int = typer.Option(10_000, min=1, help="Distinct feasigns per slot."),
    zipf: float = typer.Option(1.1, min=0.0, help="Popularity exponent: p(rank) ~ 1/rank^zipf."),
    coverage: float = typer.Option(0.9, help="Probability that a slot is present in a line."),
    ctr: float = typer.Option(0.2, help="Target mean click-through rate."),
    interactions: int = typer.Option(4, min=0, help="Random slot pairs that interact."),
    workers: int = typer.Option(1, min=1, help="Processes writing files in parallel."),
    hdfs_ugi: str | None = typer.Option(None, envvar="HDFS_UGI", help="HDFS user,password."),
) -> None:
    """Write synthetic hourly partitions from a known logistic model (oracle AUC known).

    The last hour is the held-out one: the oracle AUC (true probabilities vs. sampled
    clicks there) is printed and saved in OUTPUT/generator.json with all parameters.

    Example:

      ectl data generate ./demo-data --hours 3 --lines 100000 --files 2 --workers 2
    """
    from elasticctr.data.config import parse_date_hour
    from elasticctr.data.generate import GeneratorSpec, generate

    try:
        first = parse_date_hour(start)
    except ValueError as exc:
        raise ValidationError(f"--start: {exc}") from None
    spec = GeneratorSpec(
        slots=_slots(slots, slot_conf),
        seed=seed,
        vocab=vocab,
        zipf=zipf,
        coverage=coverage,
        ctr=ctr,
        interactions=interactions,
    )
    total = hours * lines
    with _progress() as progress:
        task = progress.add_task("generating", total=total, rate="")
        began = time.perf_counter()

        def advance(n: int) -> None:
            progress.advance(task, n)
            done = progress.tasks[0].completed
            elapsed = time.perf_counter() - began
            if elapsed > 0:
                progress.update(task, rate=f"{done / elapsed:,.0f} lines/s")

        result = generate(
            output,
            spec,
            start=first,
            hours=hours,
            lines_per_hour=lines,
            files_per_partition=files,
            workers=workers,
            hdfs_ugi=hdfs_ugi,
            progress=advance,
        )
    console.print(
        f"wrote {result.lines:,} lines in {len(result.hours)} partitions "
        f"({result.hours[0]} .. {result.hours[-1]}) to {output}: "
        f"{result.lines_per_second:,.0f} lines/s, CTR {result.clicks / result.lines:.4f}"
    )
    console.print(
        f"oracle AUC on held-out hour {result.heldout}: [bold]{result.oracle_auc:.4f}[/bold] "
        f"(log loss {result.oracle_logloss:.4f}); saved to {result.summary_url}"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
