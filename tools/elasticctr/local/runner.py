"""`ectl local run`: services plus the training job from any values file, in the
foreground, until SIGTERM/Ctrl-C (what `ectl local up` starts in the background)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from elasticctr import constants as C
from elasticctr.errors import EctlError
from elasticctr.local.stack import STATE_FILE, TOKENS_FILE, LocalStack
from elasticctr.net import wait_http_ok
from elasticctr.supervisor import Supervisor


def _stop(*_args) -> None:
    raise KeyboardInterrupt


def run_local(
    values: dict[str, Any],
    workdir: Path,
    pservers: int,
    trainers: int,
    shards: int,
    console: Console,
) -> None:
    from elasticctr.local.training import run_elastic as train_elastic

    data = (values.get("global") or {}).get("data") or {}
    if not data.get("path"):
        raise EctlError("global.data.path is empty: a local deployment needs data to train on")
    shards = shards or int((values.get("cube") or {}).get("shards") or 1)
    signal.signal(signal.SIGTERM, _stop)
    stack = LocalStack.create(workdir, shards, fresh=False)
    try:
        with Supervisor(stack.logs, grace=10.0, echo=console.log) as sup:
            comps = stack.services()
            for comp in comps:
                sup.start(comp)
            for comp in comps:
                if comp.ready_port:
                    sup.wait_ready(comp.name, timeout=180)
            wait_http_ok(f"{stack.endpoints.mlflow}/health", timeout=180, what="mlflow")
            values_file = stack.write_values(stack.values_for_roles(values))
            stack.write_state(sup, {"values": str(values_file)})
            console.log(f"services ready; training from {data['path']}")
            try:
                # Elastic, as the chart runs it: coordinator, leased tasks, a pserver
                # death restarts the job from the checkpoint (docs/coordinator.md).
                result = train_elastic(
                    values_file,
                    stack.logs / "train",
                    pservers,
                    trainers,
                    Path(stack.workdir) / "train" / "checkpoint",
                    echo=console.log,
                    # Poked after each export (docs/cube.md "Hand-off").
                    env={C.ENV_CUBE_TRANSFER_URL: stack.endpoints.transfer},
                )
                console.log(f"{result.summary()}; services keep serving the newest version")
            except EctlError as exc:
                console.log(f"training failed: {exc}")
            while True:
                for name, code in sup.poll():
                    console.log(f"{name} stopped with exit code {code}")
                time.sleep(1)
    except KeyboardInterrupt:
        console.log("stopping")
    finally:
        for done in (STATE_FILE, TOKENS_FILE):
            (Path(stack.workdir) / done).unlink(missing_ok=True)
