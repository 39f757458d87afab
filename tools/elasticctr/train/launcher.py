"""`ectl train --local`: P pservers and T trainers as local processes on loopback.

The processes are exactly what pods run (`ectl train pserver|trainer`), with the role
environment of docs/training.md set here instead of by Volcano. Logs go to
`<log_dir>/<role>-<i>.log` and are echoed with a `[role-i]` prefix. If any role exits
non-zero (or a pserver exits while trainers still need it) everything else is stopped and
the launch fails naming the role and its log. When all trainers succeed the pservers
are stopped (they serve until told otherwise, like in a Volcano job).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from elasticctr import constants as C
from elasticctr.errors import EctlError
from elasticctr.local.supervisor import Component, Supervisor, python_entry
from elasticctr.net import free_port

LOOPBACK = "127.0.0.1"


@dataclass
class LaunchResult:
    log_dir: Path
    exit_codes: dict[str, int]
    seconds: float


def role_components(
    values: Path,
    pservers: int,
    trainers: int,
    staging: Path,
    extra_trainer_args: Sequence[str] = (),
) -> list[Component]:
    """The P + T components with their role environment (free loopback ports)."""
    if pservers < 1 or trainers < 1:
        raise EctlError("need at least one pserver and one trainer (-p/-t)")
    ps_ports = [free_port(LOOPBACK) for _ in range(pservers)]
    endpoints = ",".join(f"{LOOPBACK}:{p}" for p in ps_ports)
    common = {
        C.ENV_PSERVER_ENDPOINTS: endpoints,
        C.ENV_TRAINERS_NUM: str(trainers),
        C.ENV_GLOO_HTTP_ENDPOINT: f"{LOOPBACK}:{free_port(LOOPBACK)}",
        C.ENV_POD_IP: LOOPBACK,
        C.ENV_TRAIN_STAGING: str(staging),
        C.ENV_PIR_API: "0",
    }
    comps = []
    for i, port in enumerate(ps_ports):
        env = {**common, C.ENV_TRAINING_ROLE: C.ROLE_PSERVER, C.ENV_PADDLE_PORT: str(port)}
        argv = python_entry("train", "pserver", "-f", str(values))
        comps.append(Component(f"pserver-{i}", argv, env, ready_port=(LOOPBACK, port)))
    for i in range(trainers):
        env = {
            **common,
            C.ENV_TRAINING_ROLE: C.ROLE_TRAINER,
            C.ENV_TRAINER_ID: str(i),
            C.ENV_PADDLE_PORT: str(free_port(LOOPBACK)),
        }
        argv = python_entry("train", "trainer", "-f", str(values), *extra_trainer_args)
        comps.append(Component(f"trainer-{i}", argv, env))
    return comps


class _Tail:
    """Echo new lines of each log with a [name] prefix."""

    def __init__(self, echo: Callable[[str], None]):
        self.echo = echo
        self.offsets: dict[Path, int] = {}

    def pump(self, logs: dict[str, Path]) -> None:
        for name, path in logs.items():
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets.get(path, 0))
                    data = fh.read()
            except FileNotFoundError:
                continue
            cut = data.rfind(b"\n") + 1
            self.offsets[path] = self.offsets.get(path, 0) + cut
            for line in data[:cut].decode(errors="replace").splitlines():
                self.echo(f"[{name}] {line}")


def launch(
    values: Path,
    *,
    pservers: int,
    trainers: int,
    log_dir: Path,
    extra_trainer_args: Sequence[str] = (),
    timeout: float | None = None,
    echo: Callable[[str], None] | None = None,
    stream: bool = True,
) -> LaunchResult:
    """Run the job to completion; raise EctlError naming the failed role and its log."""
    echo = echo or (lambda msg: print(msg, file=sys.stderr, flush=True))
    log_dir = Path(log_dir)
    staging = log_dir / "staging"
    comps = role_components(values, pservers, trainers, staging, extra_trainer_args)
    start = time.monotonic()
    tail = _Tail(echo if stream else (lambda _m: None))
    with Supervisor(log_dir, grace=10.0, echo=echo) as sup:
        for comp in comps:
            sup.start(comp)
        logs = {c.name: sup.log_path(c.name) for c in comps}
        echo(f"started {pservers} pserver(s) and {trainers} trainer(s); logs in {log_dir}")
        trainers_left = {c.name for c in comps if c.name.startswith("trainer-")}
        try:
            while trainers_left:
                time.sleep(0.3)
                tail.pump(logs)
                for name, code in sup.poll():
                    if code != 0 or name.startswith("pserver-"):
                        tail.pump(logs)
                        why = f"exited with code {code}" if code else "exited early"
                        raise EctlError(
                            f"{name} {why}; stopped the other roles",
                            hint=f"see {logs[name]}",
                        )
                    trainers_left.discard(name)
                    echo(f"{name} finished")
                if timeout is not None and time.monotonic() - start > timeout:
                    raise EctlError(
                        f"training did not finish within {timeout:.0f}s; stopped all roles",
                        hint=f"logs in {log_dir}",
                    )
        finally:
            tail.pump(logs)
        # All trainers succeeded: pservers have nothing left to serve.
        for name in list(sup.running()):
            sup.stop(name)
        tail.pump(logs)
        codes = dict(sup.finished)
    return LaunchResult(log_dir, codes, time.monotonic() - start)
