"""Checks of the test servers' own lifecycle (MiniHdfs in test_minihdfs.py, SeaweedS3 in
test_seaweedfs.py): processes and ports gone after a stop, and a server that dies with
the test process when that is killed outright (no teardown runs then)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

from tests.conftest import REPO


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie counts as gone: it no longer runs, only its exit status waits to be read.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def check_dies_with_its_parent(start: str, what: str) -> None:
    """Run `start` (Python that starts a server and sets `group`, its process group, `pid`,
    the process that must go, and `port`) in a helper process, SIGKILL that process, and
    check that the server goes and its port closes."""
    script = (
        f"import sys, time\nsys.path.insert(0, {str(REPO)!r})\n"
        + textwrap.dedent(start)
        + "\nprint(group, pid, port, flush=True)\ntime.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    line = ""
    try:
        line = parent.stdout.readline()
        assert line, f"the helper process did not start {what}"
        _group, pid, port = (int(x) for x in line.split())
        assert alive(pid) and port_open(port)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert wait_gone(pid, 30), f"{what} outlived its killed parent"
        assert not port_open(port)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if line:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(line.split()[0]), signal.SIGKILL)
