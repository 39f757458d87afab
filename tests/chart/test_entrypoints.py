"""Every `ectl` command line the chart and the images run exists in the CLI and parses.

Sources: the containers of every rendered manifest (all shipped values sets, helm test hook
included), each image's ENTRYPOINT + CMD, and the entry-point table of docs/contracts.md.
Each command line is parsed by the real click command (`make_context`: names, types,
required options, choices) without running it. A contract command that the CLI does not
have yet is reported as xfail naming the missing command, never as a pass; a command in
neither the CLI nor the contract fails.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
import typer
import yaml
from chart_helpers import REPO, render, values_files

from elasticctr.cli import main as cli_main

pytestmark = pytest.mark.chart

DOCKERFILE = REPO / "images" / "Dockerfile"
# The targets of images/Dockerfile that run `ectl` (the mlflow target runs `mlflow`).
IMAGES = ["train", "serving", "cube", "fileserver"]
K8S_VAR = re.compile(r"\$\(([A-Z_][A-Z0-9_]*)\)")


@functools.cache
def _root():
    """The CLI's click command, built once: typer rebuilds it (type hints of every
    callback) on each call, which cost seconds per resolved command line."""
    cli_main._register()  # every verb (a test before may have registered one module)
    return typer.main.get_command(cli_main.app)


def contract_commands() -> list[tuple[str, ...]]:
    """`ectl ...` commands of the runtime entry-point table in docs/contracts.md."""
    text = (REPO / "docs" / "contracts.md").read_text()
    section = text.split("## Runtime entry points", 1)[1].split("\n## ", 1)[0]
    found = []
    for cell in re.findall(r"`ectl ([a-z][a-z -]*)`", section):
        found.append(tuple(cell.split()))
    assert found, "docs/contracts.md lists no runtime entry points"
    return found


def _rest(ctx) -> list[str]:
    """Arguments a group context left for its subcommand (click moved protected_args)."""
    protected = getattr(ctx, "_protected_args", None)
    if protected is None:
        protected = getattr(ctx, "protected_args", [])
    return [*protected, *ctx.args]


def _is_group(command) -> bool:
    return hasattr(command, "list_commands")


def resolve(argv: list[str], complete: bool = True):
    """Parse `argv` (after `ectl`) like the CLI would, without running anything.

    complete=False only finds the command (no required-option or type checks, `--help`
    ignored): for a Dockerfile's default CMD and the contract's bare command names.
    Returns (command path, leaf context or None, error message or None).
    """
    lenient = not complete
    path: list[str] = []
    try:
        command = _root()
        ctx = command.make_context("ectl", list(argv), resilient_parsing=lenient)
        args = _rest(ctx)
        while _is_group(command):
            if not args:  # a group alone prints its help: fine for a default CMD
                return tuple(path), (ctx if lenient else None), "no subcommand given"
            name = args[0]
            sub = command.get_command(ctx, name)
            if sub is None:
                return (*path, name), None, f"no command {' '.join([*path, name])!r}"
            path.append(name)
            ctx = sub.make_context(name, list(args[1:]), parent=ctx, resilient_parsing=lenient)
            command = sub
            args = _rest(ctx) if _is_group(sub) else []
    except Exception as exc:  # click's (typer-vendored) usage and parameter errors
        if not callable(getattr(exc, "format_message", None)):
            raise
        return tuple(path), None, exc.format_message()
    return tuple(path), ctx, None


def _container_commands(doc: dict) -> list[tuple[str, list[str]]]:
    spec = doc.get("spec") or {}
    pod_specs = []
    if doc.get("kind") == "Pod":
        pod_specs.append(spec)
    if "template" in spec:
        pod_specs.append(spec["template"].get("spec") or {})
    for task in spec.get("tasks") or []:  # Volcano Job
        pod_specs.append(task["template"]["spec"])
    found = []
    for pod in pod_specs:
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            found.append(
                (container["name"], container.get("command", []) + container.get("args", []))
            )
    return found


def rendered_command_lines(helm: str, values_file: Path) -> list[tuple[str, list[str]]]:
    rendered = render(helm, "-f", str(values_file))
    assert rendered.returncode == 0, rendered.stderr
    found = []
    for doc in yaml.safe_load_all(rendered.stdout):
        if doc:
            for container, argv in _container_commands(doc):
                found.append((f"{doc['kind']}/{doc['metadata']['name']}/{container}", argv))
    assert found, f"{values_file.name} renders no containers"
    return found


def dockerfile_command(target: str, path: Path = DOCKERFILE) -> list[str]:
    """ENTRYPOINT + CMD (exec form) of one target stage."""
    text = re.sub(r"\\\n", " ", path.read_text())
    entry, cmd, inside = [], [], False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("FROM "):
            inside = line.endswith(f" AS {target}")
        elif inside and line.startswith("ENTRYPOINT "):
            entry = json.loads(line[len("ENTRYPOINT ") :])
        elif inside and line.startswith("CMD "):
            cmd = json.loads(line[len("CMD ") :])
    assert entry, f"no target {target} with an ENTRYPOINT in {path}"
    return entry + cmd


def _problem(argv: list[str], where: str, complete: bool = True) -> tuple[str, str] | None:
    """None when `argv` parses; else ("missing", why) for a contract command the CLI lacks
    yet, or ("error", why)."""
    if not argv or argv[0] != "ectl":
        return "error", f"{where}: runs {argv[:1]}, not ectl"
    args = [K8S_VAR.sub("0", a) for a in argv[1:]]  # $(VAR) is expanded by the kubelet
    path, ctx, error = resolve(args, complete)
    if ctx is not None:
        return None
    if error and error.startswith("no command"):
        if path in {c[: len(path)] for c in contract_commands()}:
            why = f"{where}: `ectl {' '.join(path)}` is in docs/contracts.md, not in the CLI yet"
            return "missing", why
        return "error", f"{where}: `ectl {' '.join(path)}` is neither in the CLI nor in contracts"
    return "error", f"{where}: `{' '.join(argv)}` does not parse: {error}"


def _report(problems: list[tuple[str, str]]) -> None:
    errors = [why for kind, why in problems if kind == "error"]
    assert not errors, "\n".join(errors)
    missing = [why for kind, why in problems if kind == "missing"]
    if missing:
        pytest.xfail("; ".join(missing))


def _check(argv: list[str], where: str, complete: bool = True) -> None:
    problem = _problem(argv, where, complete)
    _report([problem] if problem else [])


@pytest.mark.parametrize("values_file", values_files(), ids=lambda p: p.name)
def test_chart_command_lines_parse(helm, values_file):
    problems = []
    for where, argv in rendered_command_lines(helm, values_file):
        if where.endswith("/volume-permissions"):
            # global.volumePermissions' init step: a shell script, not an entry point
            assert argv[:2] == ["/bin/sh", "-c"], f"{where}: {argv}"
            continue
        if argv[:1] != ["ectl"]:
            assert "mlflow" in where and argv[:2] == ["mlflow", "server"], f"{where}: {argv}"
            continue  # the elasticctr-mlflow image runs `mlflow server`
        problem = _problem(argv, where)
        if problem:
            problems.append(problem)
    _report(problems)


@pytest.mark.parametrize("target", IMAGES)
def test_image_entry_points_parse(target):
    argv = dockerfile_command(target)
    assert argv[0] == "ectl", argv
    _check(argv, f"images/Dockerfile target {target}", complete=False)


@pytest.mark.parametrize("command", contract_commands(), ids=" ".join)
def test_contract_entry_points_exist(command):
    _check(["ectl", *command], "docs/contracts.md", complete=False)


@pytest.mark.parametrize("values_file", values_files(), ids=lambda p: p.name)
def test_every_chart_entry_point_is_a_contract_entry_point(helm, values_file):
    """The chart runs only documented entry points (plus the helm test's `ectl predict`)."""
    contract = set(contract_commands())
    for where, argv in rendered_command_lines(helm, values_file):
        if argv[:1] != ["ectl"]:
            continue
        path, _, _ = resolve([K8S_VAR.sub("0", a) for a in argv[1:]])
        assert path in contract or path == ("predict",), f"{where}: ectl {' '.join(path)}"


def test_parser_rejects_unknown_options():
    """The check has teeth: a misspelt option or a wrong type does not parse."""
    assert resolve(["fileserver", "--root", "/x", "--bogus"])[2]
    assert resolve(["fileserver", "--root", "/x", "--port", "eighty"])[2]
    assert resolve(["nosuchverb"])[2].startswith("no command")
