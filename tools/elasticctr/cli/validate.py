"""`ectl validate FILE...`: check values files the way install would, list every problem.

The rules are the chart's (its values.schema.json files and cross-field rules, applied by
`elasticctr.values`); this verb only reads the files, asks, and reports.
"""

from __future__ import annotations

from pathlib import Path

import typer

from elasticctr.cli import _common as common
from elasticctr.cli._common import OutputFormat, console
from elasticctr.cli._values import load_user_values
from elasticctr.errors import ValidationError


def _split(problem: str) -> dict[str, str]:
    path, sep, message = problem.partition(": ")
    return {"path": path, "message": message} if sep else {"path": "", "message": problem}


def validate(
    files: list[Path] = typer.Argument(
        ..., help="Values files, merged in order like `helm -f a -f b`."
    ),
    sets: list[str] | None = typer.Option(
        None, "--set", help="dotted.key=value overrides applied after the files (repeatable)."
    ),
    output: OutputFormat = common.OUTPUT_OPTION,
) -> None:
    """Check values files against the chart's schemas and cross-field rules.

    Every problem is printed as `path: message`, all at once. Exit code 0 = valid,
    2 = problems found (or a file is not valid YAML), 1 = a file cannot be read.

    Examples:

      ectl validate values.yaml

      ectl validate base.yaml prod.yaml          # as `ectl install -f base.yaml -f prod.yaml`

      ectl validate values.yaml --set trainer.pserver.replicas=4

      ectl validate values.yaml -o json | jq -r '.problems[].path'
    """
    from elasticctr.values import load_files

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
            load_user_values(files, sets=sets)
        except ValidationError as exc:
            error = exc
    names = [str(f) for f in files]
    if output is OutputFormat.json:
        common.print_json(
            {
                "files": names,
                "valid": error is None,
                "problems": [_split(p) for p in (error.problems if error else [])],
            }
        )
        if error:
            raise typer.Exit(error.exit_code)
        return
    if error:
        raise error
    console.print(f"[green]valid[/green]: {', '.join(names)}")


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
