"""`ectl local status|down` find the deployment `local up` or `quickstart --keep-running`
started, without --workdir (they used to look in the quickstart's folder only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from elasticctr.constants import ENV_HOME
from elasticctr.local.stack import STATE_FILE

pytestmark = pytest.mark.fast


def state(folder, pid):
    folder.mkdir(parents=True)
    doc = {"workdir": str(folder), "pid": pid, "components": {"fileserver": pid},
           "endpoints": {"serving": "http://127.0.0.1:1"}}  # fmt: skip
    (folder / STATE_FILE).write_text(json.dumps(doc))


def ectl(home, *args):
    env = {**os.environ, ENV_HOME: str(home)}
    return subprocess.run([sys.executable, "-m", "elasticctr.cli.main", *args],
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip


@pytest.mark.parametrize("started_by", ["local", "quickstart"])
def test_status_finds_the_one_running_deployment(tmp_path, started_by):
    state(tmp_path / started_by, os.getpid())
    out = ectl(tmp_path, "local", "status", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["workdir"] == str(tmp_path / started_by)


def test_none_running_names_the_folder_and_the_fix(tmp_path):
    out = ectl(tmp_path, "local", "status")
    assert out.returncode != 0
    assert f"no local deployment in {tmp_path / 'local'}" in out.stderr
    assert "ectl local up -f VALUES" in out.stderr


def test_two_running_need_a_workdir(tmp_path):
    state(tmp_path / "local", os.getpid())
    state(tmp_path / "quickstart", os.getpid())
    out = ectl(tmp_path, "local", "down")
    assert out.returncode != 0
    assert "local deployments run in" in out.stderr and "--workdir" in out.stderr
    assert (tmp_path / "local" / STATE_FILE).exists()  # nothing stopped
    out = ectl(tmp_path, "local", "status", "--workdir", str(tmp_path / "quickstart"))
    assert out.returncode == 0, out.stderr
