"""bench/train/treecpu.py: exact CPU of a command's whole process tree (the training
bench's measure), including children that exited before the end and orphans."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.fast

BUSY = 0.3  # CPU seconds each busy process burns
SPIN = f"import time\nt = time.process_time()\nwhile time.process_time() - t < {BUSY}: pass\n"


def _treecpu():
    name = "bench_train_treecpu"
    if name not in sys.modules:  # dataclasses look their module up there
        spec = importlib.util.spec_from_file_location(name, REPO / "bench/train/treecpu.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_a_child_that_exited_before_the_end_is_counted(tmp_path):
    """The parent waits for a busy child, then idles: the child's CPU is in the total
    and in the window that ends after it exited; the idle part adds next to nothing."""
    treecpu = _treecpu()
    flag = tmp_path / "child-done"
    parent = (
        "import pathlib, subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {SPIN!r}], check=True)\n"
        f"pathlib.Path({str(flag)!r}).write_text('x')\n"
        "time.sleep(0.5)\n"
    )
    run = treecpu.run_tree([sys.executable, "-c", parent], marks={"done": flag.exists})
    assert run.returncode == 0 and not run.late
    assert run.cpu >= BUSY * 0.9
    wall, cpu = run.window(None, "done")
    assert cpu >= BUSY * 0.9  # the reaped child is in its parent's cutime by then
    after_wall, after_cpu = run.window("done", None)
    assert after_wall >= 0.2 and 0 <= after_cpu < BUSY / 2  # sleeping costs ~nothing
    assert run.cpu == pytest.approx(cpu + after_cpu)
    assert run.wall >= wall + after_wall - 1e-6


def test_an_orphan_still_running_after_its_parent_is_counted():
    """A grandchild whose parent exited at once (re-parented: not to init but to the
    reaper) and which outlives the command is still counted, and waited for."""
    treecpu = _treecpu()
    command = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    if os.fork() == 0:\n"
        f"        time.sleep(0.2)\n        exec({SPIN!r})\n        os._exit(0)\n"
        "    os._exit(0)\n"
        "os.wait()\n"
    )
    run = treecpu.run_tree([sys.executable, "-c", command])
    assert run.returncode == 0
    assert run.cpu >= BUSY * 0.9
    assert run.wall > run.exit_wall  # the command exited before its grandchild
    assert run.killed == 0


def test_tree_cpu_of_a_live_tree_grows_and_a_failure_is_reported():
    treecpu = _treecpu()
    import subprocess

    with pytest.raises(subprocess.CalledProcessError):
        treecpu.run_tree([sys.executable, "-c", "raise SystemExit(3)"])
    run = treecpu.run_tree([sys.executable, "-c", "raise SystemExit(3)"], check=False)
    assert run.returncode == 3
    assert treecpu.tree_cpu(1 << 30) == 0.0  # no such process: nothing
