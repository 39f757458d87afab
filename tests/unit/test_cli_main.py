"""The root `ectl` app: version, help, error handling, driven through the real entry point."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from elasticctr import __version__
from elasticctr.cli.main import _register, app

pytestmark = pytest.mark.fast
runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def registered():
    _register()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"ectl {__version__}"


def test_help_lists_examples():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "Examples" in result.output
    assert "--verbose" in result.output


def test_console_script_unknown_command_is_usage_error():
    proc = subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "no-such-verb"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "No such command" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_console_script_version():
    proc = subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"ectl {__version__}"
