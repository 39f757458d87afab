"""`ectl completion SHELL`: print the shell-completion script (bash, zsh, fish, powershell)."""

from __future__ import annotations

import typer

SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")
PROG = "ectl"
COMPLETE_VAR = "_ECTL_COMPLETE"


def _shell(value: str) -> str:
    if value not in SHELLS:
        raise typer.BadParameter(f"choose one of {', '.join(SHELLS)}")
    return value


def completion(
    shell: str = typer.Argument(..., callback=_shell, help=f"One of {', '.join(SHELLS)}."),
) -> None:
    """Print the completion script for a shell; source it to complete verbs and options.

    Examples:

      source <(ectl completion bash)

      ectl completion zsh > "${fpath[1]}/_ectl"

      ectl completion fish > ~/.config/fish/completions/ectl.fish
    """
    from typer._completion_shared import get_completion_script

    typer.echo(get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell))


def register(app: typer.Typer) -> None:
    # typer's completion classes answer the script's requests (_ECTL_COMPLETE); typer
    # registers them only with its own completion options, which ectl leaves out.
    from typer._completion_classes import completion_init

    completion_init()
    app.command("completion")(completion)
