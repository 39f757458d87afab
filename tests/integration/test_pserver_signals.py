"""A pserver stops at once on SIGTERM, also as PID 1 of its PID namespace (as in a pod).

Found on the one-node cluster (docs/cluster-tests.md, defects found): a deleted pserver pod
kept serving for the 30 s grace period, so Volcano's RestartJob came only at the kubelet's
SIGKILL (or never: the job had completed meanwhile). `ectl train pserver` is the
container's PID 1; Paddle's SIGTERM handler re-raises with the default action, which the
kernel ignores for a namespace's PID 1. Here the real `ectl train pserver` runs as PID 1
of a new PID namespace (`unshare --pid --fork`), like the container's entry point.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from elasticctr import constants as C
from elasticctr.net import free_port, wait_for_port

LOOPBACK = "127.0.0.1"

pytestmark = pytest.mark.integration


def _unshare() -> list[str]:
    tool = shutil.which("unshare")
    if tool is None:
        pytest.fail("unshare (util-linux) is missing")
    # Root (CI) may create a PID namespace; others need a user namespace too.
    return [tool, "--pid", "--fork"] + ([] if os.geteuid() == 0 else ["--user", "--map-root-user"])


def _ns_pid1(unshare_pid: int, timeout: float = 30) -> int:
    """Host pid of the process `unshare --fork` started (PID 1 of the new namespace)."""
    deadline = time.monotonic() + timeout
    children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children")
    while time.monotonic() < deadline:
        pids = children.read_text().split() if children.exists() else []
        if pids:
            return int(pids[0])
        time.sleep(0.05)
    raise AssertionError("unshare started no child")


def test_pserver_as_pid_1_exits_at_once_on_sigterm(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"global": {"data": {"slots": [0, 1, 2]}}}))
    port = free_port(LOOPBACK)
    env = {
        **os.environ,
        C.ENV_TRAINING_ROLE: C.ROLE_PSERVER,
        C.ENV_PADDLE_PORT: str(port),
        C.ENV_PSERVER_ENDPOINTS: f"{LOOPBACK}:{port}",
        C.ENV_TRAINERS_NUM: "1",
        C.ENV_POD_IP: LOOPBACK,
        C.ENV_TRAIN_STAGING: str(tmp_path / "staging"),
        C.ENV_TRAIN_ELASTIC: "1",
    }
    log = tmp_path / "pserver.log"
    argv = [sys.executable, "-m", "elasticctr.cli.main", "train", "pserver", "-f", str(values)]
    with open(log, "wb") as out:
        proc = subprocess.Popen([*_unshare(), *argv], env=env, stdout=out, stderr=out)
    pid = None
    try:
        pid = _ns_pid1(proc.pid)
        ns_pids = [
            line.split()[1:]
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("NSpid:")
        ]
        assert ns_pids and ns_pids[0][-1] == "1", ns_pids  # PID 1 in its namespace
        wait_for_port(
            LOOPBACK, port, timeout=240, what="the pserver", alive=lambda: proc.poll() is None
        )
        os.kill(pid, signal.SIGTERM)
        t0 = time.monotonic()
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(
                "the pserver (PID 1 of its namespace) ignored SIGTERM for 10 s:\n"
                + log.read_text(errors="replace")[-2000:]
            )
        print(f"\npserver exited {time.monotonic() - t0:.2f} s after SIGTERM")
        # unshare exits with its child's status: 15 (SIGTERM's number) from `_exit(15)`.
        assert code == signal.SIGTERM, (code, log.read_text(errors="replace")[-2000:])
    finally:
        if proc.poll() is None:
            if pid is not None:  # the namespace's PID 1: the namespace goes with it
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.kill()
            proc.wait(10)
