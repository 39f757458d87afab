"""`ectl --help` in panels (operator verbs first, the images' entry points last) and one
completion path (`ectl completion SHELL`, no typer --install-completion)."""

from __future__ import annotations

import pytest

from elasticctr.cli import main

pytestmark = pytest.mark.fast


def test_every_verb_is_in_exactly_one_panel_in_order(ectl_here):
    done = ectl_here("--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    verbs = [v for vs in main.HELP_PANELS.values() for v in vs]
    assert len(verbs) == len(set(verbs))
    registered = {i.name for i in main.app.registered_commands + main.app.registered_groups}
    assert registered == set(verbs)  # _register() refuses a verb without a panel
    positions = [text.index(f"─ {title} ") for title in main.HELP_PANELS]
    assert positions == sorted(positions), "panels out of order"
    lines = [
        line.split()[1] for line in text.splitlines() if line.startswith("│ ") and line.split()[1:2]
    ]
    listed = [word for word in lines if word in registered]
    assert listed == verbs, listed


def test_one_completion_path(ectl_here):
    done = ectl_here("--help")
    assert "--install-completion" not in done.stdout and "--show-completion" not in done.stdout
    assert ectl_here("completion", "bash").returncode == 0
