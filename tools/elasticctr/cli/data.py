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
from rich.table import Table

from elasticctr.cli._common import OUTPUT_OPTION, OutputFormat, print_data
from elasticctr.constants import DEFAULT_MAX_ERROR_RATE
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
    output: str = typer.Argument(
        ..., help="Where to write: path, file://, hdfs://, s3:// or http(s)://"
    ),
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
    from elasticctr.data.generate import GeneratorSpec, generate
    from elasticctr.versions import parse_date_hour

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
    train_end = result.hours[-2] if len(result.hours) > 1 else result.hours[-1]
    console.print(
        f"values for training on it: global.data.path={output} "
        f"startDateHour={result.hours[0]} endDateHour={train_end} "
        f"slots={_compact(spec.slots)} (slot.conf is beside the data"
        + (f"; {result.heldout} is the held-out hour)" if len(result.hours) > 1 else ")"),
        highlight=False,
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
    if output.for_scripts:
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
        top_k=max(top, 10) if output.for_scripts else top, min_coverage=min_coverage
    )
    rec = report["recommendation"]
    if slot_conf_out:
        if not rec["slots"]:
            raise EctlError("no slot qualifies for slot.conf; nothing written")
        storage.write_text(slot_conf_out, format_slot_conf(rec["slots"]), hdfs_ugi)
    if print_data(output, report):
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
    # Whole lines, never wrapped at the console width: examples name FILE:LINE for grep.
    console.print(line, highlight=False, soft_wrap=True)
    if bad["lines"]:
        console.print(
            "  reasons: " + ", ".join(f"{k} {v}" for k, v in bad["reasons"].items()), soft_wrap=True
        )
        for example in bad["examples"]:
            console.print(f"  {example}", markup=False, highlight=False, soft_wrap=True)
    rec = report["recommendation"]
    console.print(
        f"recommended slot.conf: {len(rec['slots'])} slots "
        f"{_compact(rec['slots'])}; SPARSE_DIM {rec['sparse_dim']:,} "
        f"({rec['distinct_feasigns']:,} distinct feasigns, "
        f"~{rec['expected_collision_share']:.1%} share a bucket; 0 keeps raw feasigns)",
        highlight=False,
        soft_wrap=True,
    )
    for slot, why in rec["dropped"].items():
        console.print(f"  slot {slot} left out: {why}", highlight=False, soft_wrap=True)


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


def _names(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [name.strip() for name in text.split(",") if name.strip()]


def _parent(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[0] if "/" in url.rstrip("/") else "."


@data_app.command("convert")
def convert_cmd(
    inputs: list[str] = typer.Argument(..., help="Raw files (path or URL), converted in order."),
    kind: str = typer.Option(..., "--from", help="Input format: criteo (TSV, 40 fields) or csv."),
    out: str = typer.Option(..., "--out", help="Output data file, or dataset root with --hour."),
    hour: str | None = typer.Option(
        None, help="Write OUT/YYYYMMDD/HH/part-00000 + donefile (a ready partition)."
    ),
    spec_in: str | None = typer.Option(
        None, help="Reuse this features.json (same buckets and feasigns as before): no fitting."
    ),
    spec_out: str | None = typer.Option(
        None, help="Where to save the fitted features.json (default: beside the output)."
    ),
    label: str = typer.Option("label", help="Label column (0/1)."),
    numeric: str | None = typer.Option(None, help="Numeric columns, comma-separated."),
    categorical: str | None = typer.Option(None, help="Categorical columns, comma-separated."),
    drop: str | None = typer.Option(None, help="Columns to ignore, comma-separated."),
    columns: str | None = typer.Option(None, help="Column names of a CSV without header."),
    header: bool = typer.Option(True, help="The CSV's first row names the columns."),
    delimiter: str | None = typer.Option(None, help="CSV delimiter (default ',')."),
    buckets: int = typer.Option(16, help="Quantile buckets per numeric column."),
    max_error_rate: float = typer.Option(
        DEFAULT_MAX_ERROR_RATE, help="Share of bad rows a file may have."
    ),
    hdfs_ugi: str | None = typer.Option(None, envvar="HDFS_UGI", help="HDFS user,password."),
) -> None:
    """Convert raw tables to ElasticCTR lines: categorical values hashed per slot, numeric
    values bucketized by quantiles; the feature spec (features.json) is what serving reuses.

    Numeric vs. categorical: fixed for criteo (I1-I13, C1-C26); for csv from --numeric /
    --categorical, else inferred (a column whose values all parse as numbers is numeric).

    Examples:

      ectl data convert train.tsv --from criteo --out ./data --hour 20200401/00

      ectl data convert day2.csv --from csv --out ./data --hour 20200402/00 \\
        --spec-in ./data/features.json
    """
    from elasticctr.data import storage
    from elasticctr.data.config import format_slot_conf
    from elasticctr.data.convert import ConvertOptions, convert, fit
    from elasticctr.data.features import FEATURES_JSON, read_spec
    from elasticctr.data.partitions import partition_url
    from elasticctr.versions import parse_date_hour

    opts = ConvertOptions(
        kind=kind,
        delimiter=delimiter,
        header=header,
        columns=_names(columns),
        label=label,
        numeric=_names(numeric),
        categorical=_names(categorical),
        drop=_names(drop) or [],
        buckets=buckets,
        max_error_rate=max_error_rate,
    )
    opts.validate()
    if hour is not None:
        try:
            parse_date_hour(hour)
        except ValueError as exc:
            raise ValidationError(f"--hour: {exc}") from None
        folder = partition_url(out, hour)
        data_url = storage.join(folder, "part-00000")
        root = out
    else:
        folder, data_url, root = None, out, _parent(out)
    with _progress() as progress:
        if spec_in:
            # A spec fitted on another layout (e.g. Criteo TSV, then a CSV with a header)
            # is fine: rows are matched to the spec's columns by name, and a file that
            # lacks one of them is refused naming it.
            spec = read_spec(spec_in, hdfs_ugi)
        else:
            task = progress.add_task("fitting", total=None, rate="")
            spec = fit(
                inputs, opts, hdfs_ugi=hdfs_ugi, progress=lambda n: progress.advance(task, n)
            )
            progress.update(task, total=progress.tasks[task].completed, rate="done")
        task = progress.add_task("converting", total=None, rate="")
        result = convert(
            inputs,
            spec,
            data_url,
            opts,
            hdfs_ugi=hdfs_ugi,
            progress=lambda n: progress.advance(task, n),
        )
    written_spec = None
    if not spec_in or spec_out:
        written_spec = spec_out or storage.join(root, FEATURES_JSON)
        storage.write_text(written_spec, spec.to_json(), hdfs_ugi)
    storage.write_text(storage.join(root, "slot.conf"), format_slot_conf(spec.slots), hdfs_ugi)
    if folder is not None:
        from elasticctr.data.convert import mark_done

        mark_done(folder, hdfs_ugi)
    numeric_n = sum(1 for f in spec.features if f.kind == "numeric")
    console.print(
        f"wrote {result.rows:,} lines to {data_url} "
        f"(CTR {result.clicks / max(1, result.rows):.4f}); "
        f"{len(spec.features)} slots: {numeric_n} numeric (bucketized), "
        f"{len(spec.features) - numeric_n} categorical (hashed)",
        highlight=False,
    )
    for stats in result.files:
        if stats.malformed:
            console.print(
                f"  {stats.source}: {stats.malformed} bad rows skipped "
                f"({', '.join(f'{k} {v}' for k, v in stats.reasons.items())})",
                highlight=False,
            )
            for example in stats.examples[:3]:
                console.print(f"    {example}", markup=False, highlight=False)
    if written_spec:
        console.print(f"feature spec: {written_spec}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
