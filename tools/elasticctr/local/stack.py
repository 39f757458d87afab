"""The whole system as local processes: the same entry points the images run, wired
together on loopback from one values file (docs/local.md).

The platform (long-running): fileserver, MLflow tracking server, N cube shards, one
cube-transfer for every scenario registered in `<workdir>/scenarios` (a
`scenarios.DirRegistry`) and one serving process routing by scenario. Training
(a coordinator, pservers and trainers per scenario) runs as jobs beside them; a single
values file is the `default` scenario (the store root, `/v1/predict`).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from elasticctr import constants as C
from elasticctr import scenarios
from elasticctr.errors import EctlError
from elasticctr.net import free_port
from elasticctr.supervisor import Component, RestartPolicy, Supervisor, python_entry

LOOPBACK = "127.0.0.1"
STATE_FILE = "local.json"
TOKENS_FILE = "tokens.json"
"""The running platform's tokens (fileserver, cube admin), readable by its owner only, for
the CLI's verbs on it (`ectl model --local`); not in STATE_FILE, which `local status` prints."""
"""Written into the work folder while a local deployment runs (ports, pids, URLs)."""


@dataclass
class Endpoints:
    fileserver: str
    mlflow: str
    serving: str
    cube: list[str]
    transfer: str
    """cube-transfer's status server (/readyz, /v1/status)."""
    console: str = ""
    """The console (elasticctr.console): the platform's scenarios in a browser."""

    @classmethod
    def allocate(cls, shards: int) -> Endpoints:
        return cls(
            fileserver=f"http://{LOOPBACK}:{free_port()}",
            mlflow=f"http://{LOOPBACK}:{free_port()}",
            serving=f"http://{LOOPBACK}:{free_port()}",
            cube=[f"http://{LOOPBACK}:{free_port()}" for _ in range(shards)],
            transfer=f"http://{LOOPBACK}:{free_port()}",
            console=f"http://{LOOPBACK}:{free_port()}",
        )


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@dataclass
class LocalStack:
    """Folders and endpoints of one local deployment under `workdir`."""

    workdir: Path
    shards: int
    endpoints: Endpoints
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def store(self) -> Path:
        return self.workdir / "store"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def registry(self) -> scenarios.DirRegistry:
        """The platform's scenario folder (cube-transfer and serving follow it)."""
        return scenarios.DirRegistry(self.workdir / scenarios.SCENARIOS_DIR)

    @classmethod
    def create(cls, workdir: Path, shards: int, *, fresh: bool) -> LocalStack:
        workdir = Path(workdir).resolve()
        if fresh and workdir.exists():
            shutil.rmtree(workdir)
        for sub in ("store", "logs", "cube", "mlflow"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        tokens = {name: secrets.token_hex(16) for name in ("fileserver", "cube", "console")}
        return cls(workdir, shards, Endpoints.allocate(shards), tokens)

    # -- the values the roles read -----------------------------------------------------
    def values_for_roles(
        self, user: dict[str, Any], scenario: str = scenarios.DEFAULT
    ) -> dict[str, Any]:
        """The user's values with the local endpoints filled in: the scenario's prefix of
        the model store on disk (`scenarios.store_url`), the local MLflow server."""
        values = json.loads(json.dumps(user))  # deep copy, plain types
        glob = values.setdefault("global", {})
        glob["modelStore"] = scenarios.store_url(str(self.store), scenario)
        glob.setdefault("mlflow", {})["trackingUri"] = self.endpoints.mlflow
        return values

    def write_values(self, values: dict[str, Any], scenario: str = scenarios.DEFAULT) -> Path:
        """`values.local.yaml` (the default scenario) or `values.<scenario>.yaml`."""
        name = "local" if scenario == scenarios.DEFAULT else scenarios.check_name(scenario)
        path = self.workdir / f"values.{name}.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=False))
        return path

    # -- services ----------------------------------------------------------------------
    def services(self, *, transfer_interval: float = 2.0, notify: bool = True) -> list[Component]:
        """Every service of the local platform, not started. `notify`: cube-transfer tells
        serving of each commit (off: serving finds it at its 2 s poll, as in the chart)."""
        env = {
            C.ENV_FILESERVER_TOKEN: self.tokens["fileserver"],
            C.ENV_CUBE_ADMIN_TOKEN: self.tokens["cube"],
        }
        ep = self.endpoints
        comps = [
            Component(
                "fileserver",
                python_entry(
                    "fileserver", "--root", str(self.store), "--port", str(_port(ep.fileserver))
                ),
                env=env,
                ready_port=(LOOPBACK, _port(ep.fileserver)),
                restart=RestartPolicy.ON_FAILURE,
            ),
            Component(
                "mlflow",
                [
                    str(Path(sys.executable).with_name("mlflow")),
                    "server",
                    "--backend-store-uri",
                    f"sqlite:///{self.workdir / 'mlflow' / 'mlflow.db'}",
                    "--artifacts-destination",
                    str(self.workdir / "mlflow" / "artifacts"),
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(_port(ep.mlflow)),
                    "--workers",
                    "1",
                ],
                # No GenAI job runner (a second process importing MLflow while it starts;
                # training needs none of its jobs).
                env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                ready_port=(LOOPBACK, _port(ep.mlflow)),
                restart=RestartPolicy.ON_FAILURE,
            ),
        ]
        for i, url in enumerate(ep.cube):
            comps.append(
                Component(
                    f"cube-{i}",
                    python_entry(
                        "cube", "server",
                        "--cube-root", str(self.workdir / "cube"),
                        "--state-dir", str(self.workdir / f"cube-state-{i}"),
                        "--shard", str(i),
                        "--num-shards", str(self.shards),
                        "--port", str(_port(url)),
                    ),
                    env=env,
                    ready_port=(LOOPBACK, _port(url)),
                    restart=RestartPolicy.ON_FAILURE,
                )
            )  # fmt: skip
        comps.append(
            Component(
                "serving",
                python_entry(
                    "serve",
                    "--store", str(self.store),
                    "--cube", ",".join(ep.cube),
                    "--port", str(_port(ep.serving)),
                    "--poll-interval", "2",
                    "--cache", str(self.workdir / "serving-cache"),
                    "--scenarios",
                ),
                env=env,
                ready_port=(LOOPBACK, _port(ep.serving)),
                restart=RestartPolicy.ON_FAILURE,
            )
        )  # fmt: skip
        transfer = [
            "cube", "transfer",
            "--model-store", str(self.store),
            "--cube-root", str(self.workdir / "cube"),
            "--interval", str(transfer_interval),
            *(("--notify", f"{ep.serving}/admin/version") if notify else ()),
            "--scenarios", str(self.registry.root),
            "--listen", f"{LOOPBACK}:{_port(ep.transfer)}",
        ]  # fmt: skip
        for url in ep.cube:
            transfer += ["--shard-url", url]
        comps.append(
            Component(
                "cube-transfer",
                python_entry(*transfer),
                env=env,
                restart=RestartPolicy.ON_FAILURE,
            )
        )
        comps.append(
            Component(
                "console",
                python_entry(
                    "console", "--local", "--workdir", str(self.workdir),
                    "--listen", f"{LOOPBACK}:{_port(ep.console)}", "--mlflow-ui", ep.mlflow,
                ),
                env={C.ENV_CONSOLE_TOKEN: self.tokens["console"]},
                ready_port=(LOOPBACK, _port(ep.console)),
                restart=RestartPolicy.ON_FAILURE,
            )
        )  # fmt: skip
        return comps

    @property
    def console_link(self) -> str:
        """The console's URL with its token (the page keeps it for the session)."""
        return f"{self.endpoints.console}/#token={self.tokens['console']}"

    def write_state(self, supervisor: Supervisor, extra: dict[str, Any] | None = None) -> None:
        state = {
            "pid": os.getpid(),
            "workdir": str(self.workdir),
            "endpoints": asdict(self.endpoints),
            "store": str(self.store),
            "logs": str(self.logs),
            "scenarios": str(self.registry.root),
            "components": {name: supervisor.pid(name) for name in supervisor.running()},
            "updated": time.time(),
            **(extra or {}),
        }
        secret = self.workdir / f".{TOKENS_FILE}.tmp"
        secret.unlink(missing_ok=True)
        with os.fdopen(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            json.dump(self.tokens, fh)
        secret.replace(self.workdir / TOKENS_FILE)
        tmp = self.workdir / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.workdir / STATE_FILE)


def read_tokens(workdir: Path) -> dict[str, str]:
    """The tokens of the local platform running in `workdir` (empty when it wrote none)."""
    try:
        return json.loads((Path(workdir) / TOKENS_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def read_state(workdir: Path) -> dict[str, Any]:
    path = Path(workdir) / STATE_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise EctlError(
            f"no local deployment in {workdir}", hint="start one with `ectl local up -f VALUES`"
        ) from None
    except json.JSONDecodeError as exc:
        raise EctlError(
            f"{path} is damaged ({exc}); run `ectl local down` and start again"
        ) from exc
