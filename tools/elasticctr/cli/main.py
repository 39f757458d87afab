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
from elasticctr.constants import ENV_PREFIX, ENV_VERBOSE, LEGACY_ENV_PREFIX, adopt_legacy_env
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


def _register() -> None:
    """Attach each verb group; each module defines `register(app)`. Then put every verb
    in its panel of `ectl --help` (HELP_PANELS)."""
    import importlib

    for name in _VERB_MODULES:
        importlib.import_module(f"elasticctr.cli.{name}").register(app)
    panel = {verb: title for title, verbs in HELP_PANELS.items() for verb in verbs}
    for infos in (app.registered_commands, app.registered_groups):
        missing = [i.name for i in infos if i.name not in panel]
        if missing:  # a new verb must say where it belongs (tests/unit/test_cli_help.py)
            raise RuntimeError(f"verbs without a help panel: {missing}")
        for info in infos:
            info.rich_help_panel = panel[info.name]


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
        "template",
        "history",
        "rollback",
        "uninstall",
    ),
    "On this machine": ("local", "train", "data"),
    "Components (what the images run)": ("serve", "cube", "coordinator", "fileserver"),
}
"""`ectl --help` groups: operator verbs first, the components' entry points last."""


# Verb-group modules under elasticctr/cli/, each with a `register(app)` function.
_VERB_MODULES: list[str] = [
    "train",
    "fileserver",
    "local",
    "data",
    "coordinator",
    "cube",
    "release",
    "scenario",
    "status",
    "doctor",
    "completion",
    "serve",
    "forward",
    "init",
    "validate",
]


def _maybe_traceback() -> None:
    if os.environ.get(ENV_VERBOSE) == "1":
        import traceback

        traceback.print_exc()


def run() -> None:
    """Console-script entry: run the app, print user errors as one red line."""
    for legacy in adopt_legacy_env():
        new = ENV_PREFIX + legacy[len(LEGACY_ENV_PREFIX) :]
        err_console.print(
            f"[yellow]warning:[/] {legacy} is deprecated: set {new} (the old name is read"
            " until ElasticCTR 0.3)",
            highlight=False,
        )
    _register()
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
