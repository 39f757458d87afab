"""`ectl data`: generate synthetic partitions, profile data, convert raw tables.

Thin wrappers over `elasticctr.data`: option parsing, progress bars and tables here,
the work in the library (so trainers and tests call the same code).
"""

from __future__ import annotations

import json
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
from rich.table import Table

from elasticctr.cli._common import OUTPUT_OPTION, OutputFormat
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


@data_app.command("profile")
def profile_cmd(
    url: str = typer.Argument(
        ..., help="A data file, a partition folder, or a dataset root (all ready partitions)."
    ),
    max_lines: int | None = typer.Option(None, min=1, help="Read at most this many lines."),
    top: int = typer.Option(1, min=0, help="Top feasigns shown per slot (json: at least 10)."),
    min_coverage: float = typer.Option(
        0.01, help="Slots present in fewer lines than this share are not recommended."
    ),
    slot_conf_out: str | None = typer.Option(
        None, "--write-slot-conf", help="Write the recommended slot.conf here."
    ),
    output: OutputFormat = OUTPUT_OPTION,
    hdfs_ugi: str | None = typer.Option(None, envvar="HDFS_UGI", help="HDFS user,password."),
) -> None:
    """Per-slot coverage, cardinality, top feasigns and CTR; recommends slot.conf and SPARSE_DIM.

    Example:

      ectl data profile ./demo-data --max-lines 1000000 --write-slot-conf slot.conf
    """
    from elasticctr.data import storage
    from elasticctr.data.config import format_slot_conf
    from elasticctr.data.profile import profile, resolve_files

    files = resolve_files(url, hdfs_ugi)
    if output == OutputFormat.json:
        prof = profile(files, max_lines=max_lines, hdfs_ugi=hdfs_ugi)
    else:
        with _progress() as progress:
            task = progress.add_task("profiling", total=max_lines, rate=f"{len(files)} files")
            prof = profile(
                files,
                max_lines=max_lines,
                hdfs_ugi=hdfs_ugi,
                progress=lambda n: progress.advance(task, n),
            )
    report = prof.to_dict(
        top_k=top if output != OutputFormat.json else max(top, 10), min_coverage=min_coverage
    )
    rec = report["recommendation"]
    if slot_conf_out:
        if not rec["slots"]:
            raise EctlError("no slot qualifies for slot.conf; nothing written")
        storage.write_text(slot_conf_out, format_slot_conf(rec["slots"]), hdfs_ugi)
    if output == OutputFormat.json:
        typer.echo(json.dumps(report, indent=2))
        return
    _print_profile(report, top)
    if slot_conf_out:
        console.print(f"wrote the recommended slot.conf to {slot_conf_out}")


def _print_profile(report: dict, top: int) -> None:
    table = Table(title=f"{report['samples']:,} samples, CTR {report['ctr']:.4f}")
    table.add_column("slot", justify="right")
    table.add_column("coverage", justify="right")
    table.add_column("ids/line", justify="right")
    table.add_column("distinct", justify="right")
    table.add_column("CTR present", justify="right")
    if top:
        table.add_column(f"top {top} feasigns (count, CTR)")
    for row in report["slots"]:
        distinct = f"{row['cardinality']:,}" + ("" if row["cardinality_exact"] else " ~")
        cells = [
            str(row["slot"]),
            f"{row['coverage']:.1%}",
            f"{row['values_per_line']:.2f}",
            distinct,
            f"{row['ctr_when_present']:.4f}",
        ]
        if top:
            cells.append(
                ", ".join(f"{t['feasign']} ({t['count']:,}, {t['ctr']:.2f})" for t in row["top"])
            )
        table.add_row(*cells)
    console.print(table)
    bad = report["malformed"]
    line = (
        f"{report['lines']:,} lines read ({report['blank_lines']:,} blank), "
        f"{bad['lines']:,} malformed ({bad['rate']:.2%})"
    )
    if report["truncated"]:
        line += ", stopped at --max-lines"
    console.print(line, highlight=False)
    if bad["lines"]:
        console.print("  reasons: " + ", ".join(f"{k} {v}" for k, v in bad["reasons"].items()))
        for example in bad["examples"]:
            console.print(f"  {example}", markup=False, highlight=False)
    rec = report["recommendation"]
    console.print(
        f"recommended slot.conf: {len(rec['slots'])} slots "
        f"{_compact(rec['slots'])}; SPARSE_DIM {rec['sparse_dim']:,} "
        f"({rec['distinct_feasigns']:,} distinct feasigns, "
        f"~{rec['expected_collision_share']:.1%} share a bucket; 0 keeps raw feasigns)",
        highlight=False,
    )
    for slot, why in rec["dropped"].items():
        console.print(f"  slot {slot} left out: {why}", highlight=False)


def _compact(slots: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    parts, i = [], 0
    while i < len(slots):
        j = i
        while j + 1 < len(slots) and slots[j + 1] == slots[j] + 1:
            j += 1
        parts.append(str(slots[i]) if i == j else f"{slots[i]}-{slots[j]}")
        i = j + 1
    return ",".join(parts)


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
