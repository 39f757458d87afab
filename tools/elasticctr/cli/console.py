"""`ectl console`: the platform's scenarios in a browser (docs/console.md).

The console (elasticctr.console) reads the platform through a backend made here, from the
clients `ectl` itself uses (one source of truth for each figure: `scenarios.status_row`,
cube-transfer's `/v1/versions`, `/v1/pin`, `/v1/unpin` through `elasticctr.cli.model`'s
clients, serving's `/metrics`):

  LocalBackend    the local platform of `ectl quickstart --keep-running` / `ectl local up`
                  (its `local.json` endpoints and `tokens.json`)
  ClusterBackend  a platform release on Kubernetes, through the API server's proxies
                  (the kubeconfig's user, or the pod's service account in a cluster)
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import typer

from elasticctr import constants as C
from elasticctr import scenarios
from elasticctr.cli._common import CONTEXT_OPTION, KUBECONFIG_OPTION, NAMESPACE_OPTION, Target
from elasticctr.errors import EctlError


def _transfer_call(t, method: str, path: str, **kw) -> Any:
    """A cube-transfer call through `elasticctr.cli.model`'s clients; its refusals as
    EctlError with the transfer's own message (and its status in `.status`)."""
    from elasticctr.cli.model import TransferCallError

    try:
        return t.call(method, path, **kw)
    except TransferCallError as exc:
        err = EctlError(exc.message)
        err.status = exc.status  # type: ignore[attr-defined]
        raise err from exc


def _refused(message: str) -> EctlError:
    """A change this platform cannot make: the console answers 409 with `message`."""
    err = EctlError(message)
    err.status = 409  # type: ignore[attr-defined]
    return err


class _Backend:
    def versions(self, name: str) -> dict[str, Any]:
        raise NotImplementedError

    def rollback_target(self, name: str) -> str:
        """What a rollback pins: `ectl model rollback`'s choice."""
        from elasticctr.cli.model import previous_version

        return previous_version(self.versions(name))


class LocalBackend(_Backend):
    """The local platform running in `workdir`."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.platform = f"local ({self.workdir.resolve().name})"
        self._transfer = None

    @property
    def endpoints(self) -> dict[str, Any]:
        from elasticctr.local.stack import read_state

        return read_state(self.workdir)["endpoints"]  # written once the platform runs

    @property
    def registry(self) -> scenarios.DirRegistry:
        return scenarios.DirRegistry(self.workdir / scenarios.SCENARIOS_DIR)

    @property
    def transfer(self):
        if self._transfer is None:
            from elasticctr.cli.model import DirectTransfer
            from elasticctr.local.stack import read_tokens

            ep = self.endpoints
            token = read_tokens(self.workdir).get("cube")
            self._transfer = DirectTransfer(ep["transfer"], token, ep["serving"])
        return self._transfer

    def registered(self) -> dict[str, scenarios.Scenario]:
        return self.registry.list()

    def scenarios(self) -> list[dict[str, Any]]:
        from elasticctr.cli.status import store_from_transfer

        served = _get_json(f"{self.endpoints['serving']}/v1/scenarios", "serving")
        stored = store_from_transfer(_get_json(f"{self.transfer.url}/v1/status", "cube-transfer"))
        served_by = served.get("scenarios") or {}
        stored_by = stored.get("scenarios") or {}
        return [
            scenarios.status_row(name, sc, served_by.get(name) or {}, stored_by.get(name) or {}, {})
            for name, sc in sorted(self.registered().items())
        ]

    def versions(self, name: str) -> dict[str, Any]:
        doc = _transfer_call(self.transfer, "GET", "/v1/versions", query={"scenario": name})
        doc["serving"] = self.transfer.serving_versions(name)
        return doc

    def pin(self, name: str, version: str) -> dict[str, Any]:
        body = {"scenario": name, "version": version}
        return _transfer_call(self.transfer, "POST", "/v1/pin", body=body, timeout=600)

    def unpin(self, name: str) -> dict[str, Any]:
        return _transfer_call(self.transfer, "POST", "/v1/unpin", body={"scenario": name})

    def set_training(self, name: str, paused: bool) -> dict[str, Any]:
        raise _refused(
            f"scenario {name}: the local platform trains in the `ectl quickstart` / `ectl "
            f"local up` process; stop or start that process to {'pause' if paused else 'resume'}"
        )

    def remove(self, name: str) -> dict[str, Any]:
        raise _refused(
            f"scenario {name}: the local platform's scenarios are the ones `ectl quickstart` "
            "/ `ectl local up` was started with; start it again without this one"
        )

    def serving_metrics(self) -> list[str]:
        try:
            return [httpx.get(f"{self.endpoints['serving']}/metrics", timeout=10).text]
        except httpx.HTTPError:
            return []

    def layers(self, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """What `ectl scenario add` would put under and over a scenario's file on a
        platform like this one: its MLflow, the platform parts off (the form checks against
        it; installing is refused below)."""
        from elasticctr.cli.scenario import scenario_layers

        pv = {"global": {"mlflow": {"trackingUri": self.endpoints.get("mlflow") or ""}}}
        return scenario_layers(pv, name, "local")

    def add(self, name: str, values_yaml: str) -> dict[str, Any]:
        raise _refused(
            f"scenario {name}: the local platform trains the scenarios `ectl quickstart` / "
            "`ectl local up` was started with; download this YAML and add it to a platform "
            f"on Kubernetes: ectl scenario add {name} -f {name}.yaml --platform PLATFORM"
        )


def _get_json(url: str, what: str) -> dict[str, Any]:
    try:
        r = httpx.get(url, timeout=10)
        r.raise_for_status()
        return r.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise EctlError(f"{what} at {url}: {type(exc).__name__}: {exc}") from exc


def console(
    platform: str | None = typer.Option(
        None, "--platform", "-P", help="A platform release on Kubernetes (with -n)."
    ),
    local: bool = typer.Option(
        False, "--local", help="The local platform (`ectl quickstart --keep-running`, `local up`)."
    ),
    workdir: Path | None = typer.Option(
        None, help="With --local: the local platform's work folder (default: the running one)."
    ),
    listen: str = typer.Option(
        f"127.0.0.1:{C.CONSOLE_PORT}", help="HOST:PORT to serve on (port 0 picks a free one)."
    ),
    users: Path | None = typer.Option(
        None, help='YAML list of {user, token, teams}: per-team tokens (teams ["*"]: every one).'
    ),
    audit: Path | None = typer.Option(
        None,
        help="Audit log (JSON lines; default: console-audit.jsonl in the work folder, "
        "or in this directory for a cluster platform).",
    ),
    mlflow_ui: str | None = typer.Option(
        None,
        "--mlflow-ui",
        help="MLflow's web UI as the browser reaches it, for the cards' links (default: the "
        "local platform's MLflow; for --platform its global.mlflow.trackingUri when that is "
        "an http(s) URL; none else).",
    ),
    chart: str | None = typer.Option(
        None,
        "--chart",
        help="With --platform: the chart new scenarios are installed from (as `ectl scenario "
        "add --chart`; default: the chart packaged with this ectl).",
    ),
    namespace: str | None = NAMESPACE_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    """Serve the console: scenario cards, versions, roll back and pin, the change log.

    The administrator token is $ELASTICCTR_CONSOLE_TOKEN (a new one is made and printed in
    the URL when it is unset); --users adds per-team tokens.

      ectl console --local

      ectl console --platform elasticctr -n ml --users users.yaml
    """
    from elasticctr.console.server import Audit, ConsoleServer, Users
    from elasticctr.cube.transfer_server import parse_listen

    if local == (platform is not None):
        raise EctlError("name one platform: --local, or --platform RELEASE (with -n NAMESPACE)")
    if local:
        from elasticctr.cli.local import _running_workdir

        where = _running_workdir(workdir)
        backend = LocalBackend(where)
        audit_path = audit or Path(where) / "console-audit.jsonl"
        if mlflow_ui is None:
            try:
                mlflow_ui = backend.endpoints.get("mlflow")
            except EctlError:
                mlflow_ui = None  # the platform is starting: no state written yet
    else:
        from elasticctr.cli._cluster import ClusterBackend

        backend = ClusterBackend(Target(platform, namespace, kubeconfig, context), chart)
        audit_path = audit or Path("console-audit.jsonl")
        if mlflow_ui is None:
            from elasticctr.values import dig

            uri = dig(backend.platform_values(), "global.mlflow.trackingUri") or ""
            mlflow_ui = uri if uri.startswith(("http://", "https://")) else None
    token = os.environ.get(C.ENV_CONSOLE_TOKEN)
    made = token is None and users is None
    if made:
        token = secrets.token_urlsafe(24)
    server = ConsoleServer(
        parse_listen(listen),
        backend,
        Users.from_file(token, users),
        Audit(audit_path),
        mlflow_ui=mlflow_ui,
    )
    link = f"{server.url}/#token={token}" if made else server.url
    typer.echo(f"console of platform {backend.platform} on {link} (audit log {audit_path})")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    try:
        stop.wait()
    finally:
        server.stop()


def register(app: typer.Typer) -> None:
    app.command("console")(console)
