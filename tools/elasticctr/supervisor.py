"""A small process supervisor: local mode, local training jobs, tests.

Neutral: it knows nothing of what a component does (callers describe components with
`Component`) and imports no other part of elasticctr but errors and net.

Each component runs in its own session (process group) so that stopping it also stops
whatever it spawned; output goes to `<log_dir>/<name>.log`. Restart policies mirror the
chart: `never` (a failure is final), `on-failure` (restart up to `max_restarts`, like a
Volcano task's RestartTask) — the caller decides what a final failure means for the rest.
"""

from __future__ import annotations

import enum
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from elasticctr.errors import EctlError
from elasticctr.net import listening_pids, port_open


class RestartPolicy(enum.StrEnum):
    NEVER = "never"
    ON_FAILURE = "on-failure"


@dataclass
class Component:
    """One process: its command, environment and how to tell it is ready."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    ready_port: tuple[str, int] | None = None
    restart: RestartPolicy = RestartPolicy.NEVER
    max_restarts: int = 3
    cwd: str | None = None


@dataclass
class _Running:
    component: Component
    proc: subprocess.Popen
    log_path: Path
    restarts: int = 0
    started_at: float = field(default_factory=time.monotonic)
    exit_codes: list[int] = field(default_factory=list)


class Supervisor:
    """Starts components, restarts them by policy, and always stops them all on exit.

    Use as a context manager: leaving the block (normally, by exception or Ctrl-C)
    terminates every process group it started, SIGKILL after `grace` seconds.
    """

    def __init__(
        self, log_dir: Path, *, grace: float = 10.0, echo: Callable[[str], None] | None = None
    ):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.grace = grace
        self.echo = echo or (lambda _msg: None)
        self._running: dict[str, _Running] = {}
        self.finished: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()

    def start(self, component: Component) -> None:
        if component.name in self._running:
            raise EctlError(f"component {component.name} is already running")
        self._running[component.name] = self._spawn(component, restarts=0)

    def _spawn(self, component: Component, *, restarts: int) -> _Running:
        log_path = self.log_dir / f"{component.name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **component.env}
        with log_path.open("ab") as log:
            header = (
                f"--- start {component.name} (restart {restarts}): {' '.join(component.argv)}\n"
            )
            log.write(header.encode())
            log.flush()
            proc = subprocess.Popen(
                _with_parent_death_signal(list(component.argv)),
                env=env,
                cwd=component.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return _Running(component, proc, log_path, restarts=restarts)

    def wait_ready(self, name: str, timeout: float = 60.0) -> None:
        """Block until the component's ready port accepts connections."""
        running = self._running[name]
        host, port = running.component.ready_port or (None, None)
        if host is None:
            return
        deadline = time.monotonic() + timeout
        foreign: set[int] = set()
        while time.monotonic() < deadline:
            if port_open(host, port):
                owners = listening_pids(port)
                # Another program's listener answers too: only this component's counts
                # (its clients would otherwise talk to the other program).
                if not owners or any(_in_session(pid, running.proc.pid) for pid in owners):
                    return
                foreign = owners
            if running.proc.poll() is not None:
                held = f" (held by pid {', '.join(map(str, sorted(foreign)))})" if foreign else ""
                raise EctlError(
                    f"{name} exited with code {running.proc.returncode} before listening on "
                    f"{host}:{port}{held}",
                    hint=f"see {running.log_path}",
                )
            time.sleep(0.1)
        held = f"; another process holds it (pid {', '.join(map(str, sorted(foreign)))})"
        raise EctlError(
            f"{name} did not listen on {host}:{port} within {timeout:.0f}s"
            + (held if foreign else ""),
            hint=f"see {running.log_path}",
        )

    def poll(self) -> list[tuple[str, int]]:
        """Reap exited processes, restart by policy; return final (name, exit code) pairs."""
        finals: list[tuple[str, int]] = []
        for name, running in list(self._running.items()):
            code = running.proc.poll()
            if code is None:
                continue
            running.exit_codes.append(code)
            comp = running.component
            if (
                code != 0
                and comp.restart == RestartPolicy.ON_FAILURE
                and running.restarts < comp.max_restarts
            ):
                self.echo(f"{name} exited with code {code}; restarting ({running.restarts + 1})")
                fresh = self._spawn(comp, restarts=running.restarts + 1)
                fresh.exit_codes = running.exit_codes
                self._running[name] = fresh
                continue
            del self._running[name]
            self.finished[name] = code
            finals.append((name, code))
        return finals

    def wait(self, name: str, timeout: float) -> int:
        """Wait for a component to exit (no restart); return its exit code."""
        running = self._running[name]
        try:
            code = running.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise EctlError(f"{name} still running after {timeout:.0f}s") from None
        del self._running[name]
        self.finished[name] = code
        return code

    def pid(self, name: str) -> int:
        return self._running[name].proc.pid

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def log_tail(self, name: str, lines: int = 25) -> str:
        """The last `lines` lines of a component's log, for error messages."""
        try:
            text = self.log_path(name).read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def running(self) -> list[str]:
        return list(self._running)

    def kill(self, name: str, sig: int = signal.SIGKILL, *, keep_down: bool = False) -> None:
        """Send a signal to a component's whole process group (fault-injection, shutdown);
        `keep_down`: its restart policy does not bring it back."""
        running = self._running[name]
        if keep_down:
            running.component = replace(running.component, restart=RestartPolicy.NEVER)
        try:
            os.killpg(running.proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, name: str) -> int | None:
        running = self._running.pop(name, None)
        if running is None:
            return self.finished.get(name)
        code = _terminate_group(running.proc, self.grace)
        self.finished[name] = code
        return code

    def stop_all(self) -> None:
        """SIGTERM every process group, then SIGKILL whatever is left after the grace time."""
        for running in self._running.values():
            try:
                os.killpg(running.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.grace
        for name, running in list(self._running.items()):
            remaining = max(deadline - time.monotonic(), 0.1)
            try:
                code = running.proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                code = _kill_group(running.proc)
            _kill_group_quietly(running.proc.pid)  # children that outlived their parent
            self.finished[name] = code
        self._running.clear()


def _terminate_group(proc: subprocess.Popen, grace: float) -> int:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        code = proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        code = _kill_group(proc)
    _kill_group_quietly(proc.pid)
    return code


def _kill_group(proc: subprocess.Popen) -> int:
    _kill_group_quietly(proc.pid)
    return proc.wait()


def _kill_group_quietly(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_DEATHSIG = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(0)  # the supervisor died before prctl took effect\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def _in_session(pid: int, session: int) -> bool:
    """Whether `pid` runs in session `session` (each component leads its own)."""
    try:
        return os.getsid(pid) == session
    except OSError:
        return False


def _with_parent_death_signal(argv: list[str]) -> list[str]:
    """On Linux, run `argv` so that it gets SIGTERM when the supervising process dies,
    even by SIGKILL: a tiny wrapper sets PR_SET_PDEATHSIG and execs `argv` (the setting
    survives exec). Without it a killed `ectl train --local` left its pservers serving
    forever. (It fires when the spawning *thread* ends: spawn from long-lived threads.)"""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-c", _DEATHSIG, str(os.getpid()), *argv]


def python_entry(*args: str) -> list[str]:
    """argv that runs `ectl <args>` with this interpreter (works without the console script)."""
    return [sys.executable, "-m", "elasticctr.cli.main", *args]
