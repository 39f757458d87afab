"""The local supervisor with real processes: restarts, readiness, no orphans."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from elasticctr.errors import EctlError
from elasticctr.net import free_port
from elasticctr.supervisor import Component, RestartPolicy, Supervisor

pytestmark = pytest.mark.integration
PY = sys.executable


def wait_finished(sup: Supervisor, name: str, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for final, code in sup.poll():
            if final == name:
                return code
        time.sleep(0.05)
    raise AssertionError(f"{name} did not finish")


def test_on_failure_restarts_until_success(tmp_path):
    counter = tmp_path / "n"
    script = (
        "import pathlib,sys; p=pathlib.Path(sys.argv[1]);"
        "n=int(p.read_text()) if p.exists() else 0; p.write_text(str(n+1));"
        "sys.exit(0 if n>=2 else 3)"
    )
    with Supervisor(tmp_path / "logs") as sup:
        sup.start(
            Component("flaky", [PY, "-c", script, str(counter)], restart=RestartPolicy.ON_FAILURE)
        )
        assert wait_finished(sup, "flaky") == 0
    assert counter.read_text() == "3"
    assert (tmp_path / "logs" / "flaky.log").read_text().count("--- start flaky") == 3


def test_never_policy_reports_failure_and_log(tmp_path):
    with Supervisor(tmp_path / "logs") as sup:
        sup.start(Component("bad", [PY, "-c", "print('boom'); raise SystemExit(7)"]))
        assert wait_finished(sup, "bad") == 7
    assert "boom" in (tmp_path / "logs" / "bad.log").read_text()


def test_restart_budget_is_bounded(tmp_path):
    with Supervisor(tmp_path / "logs") as sup:
        sup.start(
            Component(
                "crash",
                [PY, "-c", "raise SystemExit(1)"],
                restart=RestartPolicy.ON_FAILURE,
                max_restarts=2,
            )
        )
        assert wait_finished(sup, "crash") == 1
    assert (tmp_path / "logs" / "crash.log").read_text().count("--- start crash") == 3


def test_wait_ready_and_stop_all_leaves_no_orphans(tmp_path):
    port = free_port()
    # The server spawns a grandchild; stopping the group must take both down.
    server = (
        "import http.server,subprocess,sys;"
        "subprocess.Popen([sys.executable,'-c','import time; time.sleep(300)']);"
        f"http.server.HTTPServer(('127.0.0.1',{port}),http.server.BaseHTTPRequestHandler)"
        ".serve_forever()"
    )
    with Supervisor(tmp_path / "logs", grace=5) as sup:
        sup.start(Component("srv", [PY, "-c", server], ready_port=("127.0.0.1", port)))
        sup.wait_ready("srv", timeout=20)
        pgid = sup.pid("srv")
    deadline = time.monotonic() + 5
    while live_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_members(pgid) == []


def live_members(pgid: int) -> list[int]:
    """PIDs of the group that are not zombies (a zombie is dead, only not yet reaped)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def test_wait_ready_fails_clearly_when_process_dies(tmp_path):
    with Supervisor(tmp_path / "logs") as sup:
        sup.start(
            Component(
                "dies", [PY, "-c", "raise SystemExit(2)"], ready_port=("127.0.0.1", free_port())
            )
        )
        with pytest.raises(EctlError, match="exited with code 2 before listening"):
            sup.wait_ready("dies", timeout=20)


def test_kill_is_seen_as_failure_and_restarted(tmp_path):
    with Supervisor(tmp_path / "logs") as sup:
        sup.start(
            Component(
                "victim",
                [PY, "-c", "import time; time.sleep(60)"],
                restart=RestartPolicy.ON_FAILURE,
            )
        )
        time.sleep(0.3)
        first = sup.pid("victim")
        sup.kill("victim", signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sup.pid("victim") == first:
            sup.poll()
            time.sleep(0.05)
        assert sup.pid("victim") != first


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_components_die_with_a_sigkilled_supervisor(tmp_path):
    import subprocess

    pidfile = tmp_path / "child.pid"
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from elasticctr.supervisor import Component, Supervisor\n"
        f"sup = Supervisor(Path({str(tmp_path / 'logs')!r}))\n"
        "sup.start(Component('sleeper', [sys.executable, '-c', 'import time; time.sleep(300)']))\n"
        f"Path({str(pidfile)!r}).write_text(str(sup.pid('sleeper')))\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen([PY, "-c", script])
    deadline = time.monotonic() + 30
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    time.sleep(0.5)  # the wrapper has exec'd the component by now
    os.kill(child, 0)  # running
    parent.kill()  # SIGKILL: no cleanup code runs in the supervisor
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the component outlived its SIGKILLed supervisor")


def test_wait_ready_never_takes_another_programs_listener_for_the_component(tmp_path):
    """A component that lost its port to another program must fail loudly: before, its
    clients were let loose on the other program (CI: a local job's trainer leased tasks
    from another test's coordinator and trained on its pserver)."""
    import socket

    port = free_port()
    server = (
        "import http.server;"
        f"http.server.HTTPServer(('127.0.0.1',{port}),http.server.BaseHTTPRequestHandler)"
        ".serve_forever()"
    )
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))
        other.listen()
        with Supervisor(tmp_path / "logs") as sup:
            sup.start(Component("srv", [PY, "-c", server], ready_port=("127.0.0.1", port)))
            with pytest.raises(EctlError, match=rf"before listening on 127.0.0.1:{port} "
                               rf"\(held by pid {os.getpid()}\)"):  # fmt: skip
                sup.wait_ready("srv", timeout=20)
            assert "Address already in use" in sup.log_tail("srv")
            # one that neither listens nor exits: the timeout names the holder too
            sup.start(Component("idle", [PY, "-c", "import time; time.sleep(60)"],
                                ready_port=("127.0.0.1", port)))  # fmt: skip
            with pytest.raises(EctlError, match=f"another process holds it \\(pid {os.getpid()}"):
                sup.wait_ready("idle", timeout=1.5)
