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
        # A verb starts its line; a wrapped description is indented (and may start with
        # a word that is also a verb, "model").
        line.split()[1]
        for line in text.splitlines()
        if line.startswith("│ ") and line[2:3].strip() and line.split()[1:2]
    ]
    listed = [word for word in lines if word in registered]
    assert listed == verbs, listed


def test_one_completion_path(ectl_here):
    done = ectl_here("--help")
    assert "--install-completion" not in done.stdout and "--show-completion" not in done.stdout
    assert ectl_here("completion", "bash").returncode == 0


def test_verb_module_names_what_each_module_registers():
    """VERB_MODULE (what `ectl VERB` imports) says exactly which module adds each verb."""
    import importlib

    import typer

    owner = {}
    for module in sorted(set(main.VERB_MODULE.values())):
        alone = typer.Typer()
        importlib.import_module(f"elasticctr.cli.{module}").register(alone)
        for info in alone.registered_commands + alone.registered_groups:
            assert info.name not in owner, f"{info.name}: {owner.get(info.name)} and {module}"
            owner[info.name] = module
    assert owner == main.VERB_MODULE


def test_a_verb_imports_only_its_own_module():
    """`ectl validate` registers validate alone, so it does not import kubernetes clients,
    helm bindings or training code (the reason it starts fast)."""
    code = (
        "import sys; sys.argv = ['ectl', 'validate', '--help']\n"
        "from elasticctr.cli import main\n"
        "try:\n    main.run()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('kubernetes', 'pyhelm3', 'paddle', 'elasticctr.cli.release',"
        " 'elasticctr.cli.train', 'elasticctr.httpd') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in done.stdout, done.stdout + done.stderr
