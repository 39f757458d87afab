"""Entry point of `ectl`: the root app, global options and error handling.

Verb groups live in sibling modules and are registered in `_register()`; this module
owns only option parsing shared by all of them and turning errors into messages.
"""

from __future__ import annotations

import os
import sys

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from elasticctr import __version__
from elasticctr.constants import ENV_VERBOSE, adopt_legacy_env, current_env_name
from elasticctr.errors import EctlError, ValidationError

err_console = Console(stderr=True)


class _PanelOrder(TyperGroup):
    """Verbs listed in HELP_PANELS' order (typer lists verbs before verb groups)."""

    def list_commands(self, ctx) -> list[str]:
        order = [verb for verbs in HELP_PANELS.values() for verb in verbs]
        return sorted(super().list_commands(ctx), key=order.index)


app = typer.Typer(
    cls=_PanelOrder,
    name="ectl",
    help=(
        "ElasticCTR: distributed CTR training and online serving on Kubernetes, "
        "or on this machine.\n\n"
        "Examples:\n\n"
        "  ectl quickstart            # whole system locally, demo data\n\n"
        "  ectl --help                # all verbs"
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # One completion path: `ectl completion SHELL` (typer's --install-completion and
    # --show-completion options would be a second one).
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ectl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help=f"Show tracebacks for errors (or set {ENV_VERBOSE}=1)."
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print version."
    ),
) -> None:
    """ElasticCTR operator CLI."""
    if verbose:
        os.environ[ENV_VERBOSE] = "1"


_REGISTERED: set[str] = set()


def _register(verb: str | None = None) -> None:
    """Attach the verb groups; each module defines `register(app)`. With `verb`, only the
    module that owns it (VERB_MODULE): `ectl validate` imports what validate needs, not
    kubernetes clients and training code (docs/cli.md, Measured). Without, every module,
    each verb in its panel of `ectl --help` (HELP_PANELS)."""
    import importlib

    modules = (
        [VERB_MODULE[verb]] if verb in VERB_MODULE else list(dict.fromkeys(VERB_MODULE.values()))
    )
    for name in modules:
        if name not in _REGISTERED:  # once per process: run() and tests may come again
            importlib.import_module(f"elasticctr.cli.{name}").register(app)
            _REGISTERED.add(name)
    panel = {verb: title for title, verbs in HELP_PANELS.items() for verb in verbs}
    for infos in (app.registered_commands, app.registered_groups):
        missing = [i.name for i in infos if i.name not in panel]
        if missing:  # a new verb must say where it belongs (tests/unit/test_cli_help.py)
            raise RuntimeError(f"verbs without a help panel: {missing}")
        for info in infos:
            info.rich_help_panel = panel[info.name]


def _verb_of(argv: list[str]) -> str | None:
    """The verb a command line runs (the first word after the root options), or None for
    `ectl --help`, `ectl --version`, shell completion and anything unknown."""
    from elasticctr.cli.completion import COMPLETE_VAR  # typer only: cheap

    if os.environ.get(COMPLETE_VAR):
        return None
    for word in argv:
        if word in ("-v", "--verbose"):
            continue
        return word if word in VERB_MODULE else None
    return None


HELP_PANELS: dict[str, tuple[str, ...]] = {
    "Start here": ("quickstart", "init", "validate", "doctor", "completion"),
    "Releases on a cluster (helm, kubectl)": (
        "install",
        "upgrade",
        "status",
        "logs",
        "predict",
        "port-forward",
        "scenario",
        "model",
        "console",
        "template",
        "history",
        "rollback",
        "uninstall",
    ),
    "On this machine": ("local", "train", "data"),
    "Components (what the images run)": ("serve", "cube", "coordinator", "fileserver"),
}
"""`ectl --help` groups: operator verbs first, the components' entry points last."""


VERB_MODULE: dict[str, str] = {
    "quickstart": "local",
    "local": "local",
    "init": "init",
    "validate": "validate",
    "doctor": "doctor",
    "completion": "completion",
    "install": "release",
    "upgrade": "release",
    "template": "release",
    "history": "release",
    "rollback": "release",
    "uninstall": "release",
    "status": "status",
    "logs": "status",
    "predict": "serve",
    "serve": "serve",
    "port-forward": "forward",
    "scenario": "scenario",
    "model": "model",
    "console": "console",
    "train": "train",
    "data": "data",
    "cube": "cube",
    "coordinator": "coordinator",
    "fileserver": "fileserver",
}
"""Each root verb and the module under elasticctr/cli/ whose `register(app)` adds it
(tests/unit/test_cli_help.py checks it against what the modules register)."""


def _maybe_traceback() -> None:
    if os.environ.get(ENV_VERBOSE) == "1":
        import traceback

        traceback.print_exc()


def run() -> None:
    """Console-script entry: run the app, print user errors as one red line."""
    for legacy in adopt_legacy_env():
        err_console.print(
            f"[yellow]warning:[/] {legacy} is deprecated: set {current_env_name(legacy)} (the"
            " old name is read until ElasticCTR 0.3)",
            highlight=False,
        )
    _register(_verb_of(sys.argv[1:]))
    try:
        # Without standalone mode click returns (not raises) the code of typer.Exit(n).
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except ValidationError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        for problem in exc.problems:
            err_console.print(f"  {problem}", markup=False, highlight=False, soft_wrap=True)
        _maybe_traceback()
        sys.exit(exc.exit_code)
    except EctlError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        _maybe_traceback()
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as exc:
        # Usage errors (click's, or the copy typer vendors) know how to show themselves.
        if callable(getattr(exc, "show", None)) and isinstance(
            getattr(exc, "exit_code", None), int
        ):
            exc.show()
            sys.exit(exc.exit_code)
        if os.environ.get(ENV_VERBOSE) == "1":
            raise
        err_console.print(
            f"[red]internal error:[/red] {type(exc).__name__}: {exc} "
            "(run with --verbose for the traceback)",
            highlight=False,
        )
        sys.exit(70)


if __name__ == "__main__":
    run()
