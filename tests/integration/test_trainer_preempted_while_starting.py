"""An elastic trainer preempted while it starts exits at once (issue 16), with status 143.

On the one-node cluster (tests/e2e/test_preemption.py) kube-scheduler preempted trainers
Volcano had just recreated: still importing Paddle or waiting for the coordinator, they had
no SIGTERM handler, and as PID 1 of their container they ignored SIGTERM until the kubelet's
SIGKILL 30 s later. The pod ended Failed, the Volcano Job's RestartPod policy spent a retry
each time, and after five the whole job failed. Here the real `ectl train trainer` waits for
a coordinator that does not answer (a closed port: the client retries for 120 s); once it
has a SIGTERM handler (read from /proc, not guessed from timing) it is stopped and must exit
within seconds, as a preempted trainer holding no lease should, with 128 + SIGTERM: a trainer
pod that ended Succeeded would count towards Volcano's TaskCompleted and could complete the
whole job (constants.EXIT_STOPPED).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from elasticctr import constants as C
from elasticctr.net import free_port

pytestmark = pytest.mark.integration

LOOPBACK = "127.0.0.1"


def catches_sigterm(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def test_an_elastic_trainer_stopped_while_waiting_for_the_coordinator_exits_0(tmp_path):
    env = {
        **os.environ,
        C.ENV_TRAINING_ROLE: C.ROLE_TRAINER,
        C.ENV_TRAIN_ELASTIC: "1",
        C.ENV_PSERVER_ENDPOINTS: f"{LOOPBACK}:{free_port(LOOPBACK)}",
        C.ENV_TRAINERS_NUM: "2",
        C.ENV_TRAINER_ID: "1",
        C.ENV_PADDLE_PORT: str(free_port(LOOPBACK)),
        C.ENV_POD_IP: LOOPBACK,
    }
    values = tmp_path / "values.yaml"  # the release's values as the chart renders them
    values.write_text(json.dumps({"global": {"data": {"slots": list(range(27))}}}))
    coordinator = f"http://{LOOPBACK}:{free_port(LOOPBACK)}"  # nothing listens there
    proc = subprocess.Popen(
        [sys.executable, "-m", "elasticctr.cli.main", "train", "trainer",
         "-f", str(values), "--coordinator", coordinator],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not catches_sigterm(proc.pid):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the trainer never handled SIGTERM while starting"
            time.sleep(0.1)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == C.EXIT_STOPPED == 143, (proc.returncode, out[-2000:], err[-2000:])
    assert took < 10, took
