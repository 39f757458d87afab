"""`ectl init`: write a values file from ElasticCTR-style flags or from questions.

Accepts `elastic-control.sh -r`'s options unchanged (-u/--cpu, -m/--mem, -t/--trainer,
-p/--pserver, -b/--cube, -s/--slot_conf, -f/--datafile, -hd/--hdfs_address), reads
data.config and slot.conf through `elasticctr.data.config`, checks the result with the
chart's validation (`elasticctr.values`) and only then writes the file. Owns nothing else.
"""

from __future__ import annotations

import copy
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from elasticctr import zoo
from elasticctr.cli._common import console
from elasticctr.errors import EctlError, ValidationError

MODELS = tuple(zoo.DEFAULTS)  # the zoo is the one list of model names
"""The model zoo names of the trainer chart (`trainer.model.name`)."""


def merge_values(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    from elasticctr.values import merge

    return merge(base, override, drop_nulls=False)


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise EctlError(
            f"cannot read {what} {path}: {exc.strerror or exc}",
            hint=f"pass the path of an existing {what}",
        ) from exc


def _cpu(value: str | None) -> str | None:
    """ElasticCTR's -u is a core count; Kubernetes quantities like 500m are accepted too."""
    if value is None:
        return None
    text = value.strip()
    try:
        number = float(text.removesuffix("m"))
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a CPU amount (e.g. 4, 0.5 or 500m)") from None
    if number <= 0:
        raise typer.BadParameter("must be positive")
    return text


def _mem(value: str | None) -> str | None:
    """ElasticCTR's -m is GiB; a Kubernetes quantity (512Mi, 2Gi) is accepted too."""
    if value is None:
        return None
    text = value.strip()
    if text.replace(".", "", 1).isdigit():
        if float(text) <= 0:
            raise typer.BadParameter("must be positive")
        return f"{text}Gi"
    for suffix in ("Ki", "Mi", "Gi", "Ti", "K", "M", "G", "T"):
        number = text.removesuffix(suffix)
        if number != text and number.replace(".", "", 1).isdigit() and float(number) > 0:
            return text
    raise typer.BadParameter(f"{value!r} is not a memory size (GiB like 20, or 512Mi / 2Gi)")


def _positive(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise typer.BadParameter("must be at least 1")
    return value


def _model(value: str | None) -> str | None:
    if value is not None and value not in MODELS:
        raise typer.BadParameter(f"choose one of {', '.join(MODELS)}")
    return value


def build_values(
    *,
    cpu: str | None,
    mem: str | None,
    trainers: int | None,
    pservers: int | None,
    cube_shards: int | None,
    slot_conf: Path | None,
    data_config: Path | None,
    hdfs_address: str | None,
    model: str | None,
    model_store: str | None,
) -> dict[str, Any]:
    """The values the given options set (and nothing else: chart defaults stay defaults)."""
    from elasticctr.data.config import dataset_url, parse_data_config, parse_slot_conf

    problems: list[str] = []
    slots = None
    if slot_conf is not None:
        try:
            slots = parse_slot_conf(_read(slot_conf, "slot.conf"), source=str(slot_conf))
        except ValidationError as exc:
            problems += exc.problems or [exc.message]
    address = None
    if hdfs_address:
        from elasticctr.data.config import normalize_hdfs_address

        try:
            address = normalize_hdfs_address(hdfs_address)
        except ValueError as exc:
            raise ValidationError(f"-hd/--hdfs_address: {exc}") from exc
    data: dict[str, Any] = {}
    if data_config is not None:
        try:
            # -hd replaces data.config's HDFS_ADDRESS line (often `hdfs://${IP}:9000` with
            # IP undefined), and the dataset URL is built with it.
            cfg = parse_data_config(
                _read(data_config, "data.config"),
                source=str(data_config),
                overrides={"HDFS_ADDRESS": address} if address else None,
            )
            data = cfg.to_values(slots)
        except ValidationError as exc:
            found = exc.problems or [exc.message]
            if not address and any("HDFS_ADDRESS" in p or "not defined" in p for p in found):
                found.append("hint: -hd/--hdfs_address hdfs://HOST:PORT replaces HDFS_ADDRESS")
            problems += found
    elif slots is not None:
        data = {"slots": slots}
    if problems:
        raise ValidationError(
            f"cannot use the ElasticCTR inputs: {len(problems)} problem(s)", problems=problems
        )
    if address:
        data["hdfsAddress"] = address
        if data_config is not None:
            data["path"] = dataset_url(cfg.dataset_path, address)

    values: dict[str, Any] = {}
    if data:
        values["global"] = {"data": data}
    if model_store:
        values = merge_values(values, {"global": {"modelStore": model_store}})
    trainer: dict[str, Any] = {}
    resources: dict[str, Any] = {}
    if cpu is not None:
        resources = merge_values(resources, {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}})
    if mem is not None:
        resources = merge_values(
            resources, {"requests": {"memory": mem}, "limits": {"memory": mem}}
        )
    for role, count in (("pserver", pservers), ("trainer", trainers)):
        section: dict[str, Any] = {}
        if count is not None:
            section["replicas"] = count
        if resources:
            section["resources"] = copy.deepcopy(resources)  # no YAML anchors in the file
        if section:
            trainer[role] = section
    if model:
        trainer["model"] = {"name": model}
    if trainer:
        values["trainer"] = trainer
    if cube_shards is not None:
        values["cube"] = {"shards": cube_shards}
    return values


def _ask(values: dict[str, Any]) -> dict[str, Any]:
    """Questions for what the flags left open; Enter keeps the chart default."""
    answers: dict[str, Any] = {}
    data_config = typer.prompt(
        "ElasticCTR data.config file (empty: give the data location instead)",
        default="",
        show_default=False,
    )
    slot_conf = typer.prompt(
        "slot.conf file (empty: chart default slots)", default="", show_default=False
    )
    if not data_config:
        path = typer.prompt(
            "Training data URL (hdfs://, s3://, file://, http://; empty: the release's fileserver)",
            default="",
            show_default=False,
        )
        start = typer.prompt("First hour to train on (YYYYMMDD/HH)", default="")
        if path:
            answers = merge_values(answers, {"global": {"data": {"path": path}}})
        if start:
            from elasticctr.versions import format_date_hour, parse_date_hour

            try:
                start = format_date_hour(parse_date_hour(start))
            except ValueError as exc:
                raise ValidationError(f"first hour: {exc}") from exc
            answers = merge_values(answers, {"global": {"data": {"startDateHour": start}}})
    model = typer.prompt(f"Model ({', '.join(MODELS)})", default=zoo.DEFAULT_MODEL)
    trainers = typer.prompt("Trainers (-t)", default=2, type=int)
    pservers = typer.prompt("Parameter servers (-p)", default=2, type=int)
    shards = typer.prompt("Cube shards (-b)", default=2, type=int)
    cpu = typer.prompt("CPU cores per trainer/pserver (-u)", default="2")
    mem = typer.prompt("Memory GiB per trainer/pserver (-m)", default="4")
    built = build_values(
        cpu=_cpu(cpu),
        mem=_mem(mem),
        trainers=_positive(trainers),
        pservers=_positive(pservers),
        cube_shards=_positive(shards),
        slot_conf=Path(slot_conf) if slot_conf else None,
        data_config=Path(data_config) if data_config else None,
        hdfs_address=None,
        model=_model(model),
        model_store=None,
    )
    return merge_values(merge_values(values, answers), built)


def init(
    cpu: str | None = typer.Option(
        None, "-u", "--cpu", callback=_cpu, help="CPU cores per trainer and pserver pod."
    ),
    mem: str | None = typer.Option(
        None, "-m", "--mem", callback=_mem, help="Memory per trainer and pserver pod (GiB)."
    ),
    trainers: int | None = typer.Option(
        None, "-t", "--trainer", callback=_positive, help="Number of trainers."
    ),
    pservers: int | None = typer.Option(
        None, "-p", "--pserver", callback=_positive, help="Number of parameter servers."
    ),
    cube_shards: int | None = typer.Option(
        None, "-b", "--cube", callback=_positive, help="Number of cube (embedding) shards."
    ),
    slot_conf: Path | None = typer.Option(
        None, "-s", "--slot_conf", "--slot-conf", help="ElasticCTR slot.conf (one slot id a line)."
    ),
    data_config: Path | None = typer.Option(
        None, "-f", "--datafile", help="ElasticCTR data.config (HDFS_ADDRESS, DATASET_PATH, ...)."
    ),
    hdfs_address: str | None = typer.Option(
        None,
        "-hd",
        "--hdfs_address",
        "--hdfs-address",
        help="HDFS namenode (hdfs://host:port); overrides data.config's HDFS_ADDRESS.",
    ),
    model: str | None = typer.Option(
        None, "--model", callback=_model, help=f"Model from the zoo: {', '.join(MODELS)}."
    ),
    model_store: str | None = typer.Option(
        None, "--model-store", help="Model store URL (default: the release's fileserver)."
    ),
    out: Path = typer.Option(Path("values.yaml"), "--out", "-O", help="Values file to write."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --out file."),
    interactive: bool | None = typer.Option(
        None,
        "--interactive/--no-interactive",
        "-i",
        help="Ask for what the flags leave open (default: ask only on a terminal without flags).",
    ),
) -> None:
    """Write a values file from ElasticCTR's options (elastic-control.sh -r) or questions.

    Only what you give is written; everything else keeps the chart's defaults. The file is
    checked against the chart before it is written, and an existing file is never replaced
    without --force.

    Examples:

      ectl init -u 4 -m 20 -t 2 -p 2 -b 5 -s slot.conf -f data.config

      ectl init -f data.config -hd hdfs://namenode:9000 --model deepfm -O ctr.yaml

      ectl init --interactive
    """
    if out.exists() and not force:
        raise EctlError(f"{out} exists", hint="pass --force to replace it, or --out another file")
    values = build_values(
        cpu=cpu,
        mem=mem,
        trainers=trainers,
        pservers=pservers,
        cube_shards=cube_shards,
        slot_conf=slot_conf,
        data_config=data_config,
        hdfs_address=hdfs_address,
        model=model,
        model_store=model_store,
    )
    if interactive is None:
        interactive = not values and sys.stdin.isatty()
    if interactive:
        values = _ask(values)  # answers may come from a pipe too (explicit --interactive)
    if not values:
        raise EctlError(
            "nothing to write: no options given and no terminal to ask questions on",
            hint="give ElasticCTR's flags (e.g. ectl init -f data.config -s slot.conf) or run "
            "it on a terminal; the chart's defaults need no values file at all",
            exit_code=2,
        )
    _check(values)
    command = (
        "ectl init " + " ".join(shlex.quote(a) for a in sys.argv[2:])
        if len(sys.argv) > 1 and sys.argv[1] == "init"
        else "ectl init"
    )
    header = (
        "# yaml-language-server: $schema=" + _schema_hint(out) + "\n"
        f"# Written by: {command}\n"
        "# Check with `ectl validate`, deploy with `ectl install -f` or run locally.\n"
    )
    from elasticctr.values import dump_values

    body = dump_values(values)
    secret = bool(values.get("global", {}).get("data", {}).get("hdfsUgi"))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    # A file holding the HDFS password is created owner-only (0600) before any byte of it
    # is written; others get the usual mode (0666 minus the umask).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o666)
    if secret:
        os.fchmod(fd, 0o600)  # an old .tmp file keeps its mode otherwise
    with os.fdopen(fd, "w") as fh:
        fh.write(header + body)
    tmp.replace(out)
    console.print(f"[green]wrote[/green] {out}")
    if secret:
        console.print(
            "[yellow]note:[/yellow] it holds HDFS_UGI (a password) from data.config, so it is "
            "readable by you only (0600); or keep it in a Secret named by "
            "global.data.hdfsUgiSecret.name and drop global.data.hdfsUgi"
        )
    console.print(f"next: ectl validate -f {out} && ectl install -f {out}")


def _schema_hint(out: Path) -> str:
    """The chart's schema, relative to the values file so editors find it in a checkout."""
    from elasticctr.constants import chart_dir

    schema = chart_dir().resolve() / "values.schema.json"
    try:
        return os.path.relpath(schema, out.resolve().parent)
    except ValueError:
        return str(schema)


def _check(values: dict[str, Any]) -> None:
    """The chart's own validation (schemas + cross-field rules) of what would be written."""
    from elasticctr import values as chart_values

    problems = chart_values.validate(values)
    if problems:
        raise ValidationError(
            f"the values would not pass `ectl validate`: {len(problems)} problem(s)",
            problems=list(problems),
        )


def register(app: typer.Typer) -> None:
    app.command("init")(init)
