"""`ectl validate -f FILE...`: check values files the way install would, list every problem.

The rules are the chart's (its values.schema.json files and cross-field rules, applied by
`elasticctr.values`); this verb only reads the files, asks, and reports.
"""

from __future__ import annotations

from pathlib import Path

import typer

from elasticctr.cli import _common as common
from elasticctr.cli._common import OutputFormat, console
from elasticctr.cli._values import (
    SET_FILE_OPTION,
    SET_JSON_OPTION,
    SET_LITERAL_OPTION,
    SET_OPTION,
    SET_STRING_OPTION,
    VALUES_OPTION,
    Overrides,
    load_user_values,
)
from elasticctr.errors import ValidationError
from elasticctr.values import split_problem


def validate(
    files: list[Path] | None = typer.Argument(
        None,
        help="Values files, merged in order (as -f; kept for compatibility).",
        metavar="FILE",
        show_default=False,
    ),
    values: list[Path] | None = VALUES_OPTION,
    sets: list[str] | None = SET_OPTION,
    set_strings: list[str] | None = SET_STRING_OPTION,
    set_files: list[str] | None = SET_FILE_OPTION,
    set_json: list[str] | None = SET_JSON_OPTION,
    set_literals: list[str] | None = SET_LITERAL_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
) -> None:
    """Check values files (and --set values) against the chart's schemas and cross-field rules.

    Exactly what `ectl install` / `helm install` would be given with the same -f and --set
    flags. Every problem is printed as `path: message`, all at once. Exit code 0 = valid,
    2 = problems found (or a file is not valid YAML, or a bad --set), 1 = a file cannot
    be read.

    Examples:

      ectl validate -f values.yaml

      ectl validate -f base.yaml -f prod.yaml    # as `ectl install -f base.yaml -f prod.yaml`

      ectl validate -f values.yaml --set cube.shards=4,serving.replicas=3

      ectl validate values.yaml -o json | jq -r '.problems[].path'
    """
    if files and values:
        raise typer.BadParameter(
            "give the values files either as arguments or with -f/--values, not both (their "
            "order would be ambiguous): ectl validate -f base.yaml -f prod.yaml",
            param_hint="'-f' / FILE",
        )
    from elasticctr.values import load_files

    files = list(files or values or [])
    overrides = Overrides.of(sets, set_strings, set_files, set_json, set_literals)
    problems: list[str] = []
    for path in files:  # every unparsable file at once, then the chart's rules
        try:
            load_files([path])
        except ValidationError as exc:
            problems += [exc.message, *exc.problems]
    error: ValidationError | None = None
    if problems:
        error = ValidationError(f"{len(problems)} file(s) cannot be read as YAML", problems)
    else:
        try:
            load_user_values(files, sets=overrides)
        except ValidationError as exc:
            error = exc
    names = [str(f) for f in files]
    report = {
        "files": names,
        "valid": error is None,
        "problems": [split_problem(p) for p in (error.problems if error else [])],
    }
    if common.print_data(output, report):
        if error:
            raise typer.Exit(error.exit_code)
        return
    if error:
        raise error
    given = len(list(overrides.flags()))
    console.print(
        f"[green]valid[/green]: {', '.join(names) or 'chart defaults'}"
        + (f" with {given} --set value(s)" if given else "")
    )


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
