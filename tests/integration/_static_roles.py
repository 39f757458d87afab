"""The trainer runtime's static mode, for its tests: P pservers + T trainers without a
coordinator (`ectl train pserver|trainer` alone: each trainer takes whole files of each
hour; in-memory synthetic data with `--synthetic-samples`; `--resume` from a checkpoint).

No ectl command launches this any more: `ectl train --local`, the quickstart and the
local deployment train elastic (elasticctr.local.training). The static mode stays in the
trainer runtime (the image smoke test runs it in containers) and these tests cover it.
Logs go to `<log_dir>/<role>-<i>.log` and are echoed with a `[role-i]` prefix; if any role
exits non-zero (or a pserver exits while trainers still need it) the rest is stopped and
the launch fails naming the role and its log; when all trainers succeed the pservers are
stopped.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from elasticctr.errors import EctlError
from elasticctr.local.training import _Tail, role_components
from elasticctr.supervisor import Supervisor


@dataclass
class LaunchResult:
    log_dir: Path
    exit_codes: dict[str, int]
    seconds: float


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
