"""`ectl model list | pin | rollback | unpin`: which model version a scenario serves, and
holding it on an earlier one (docs/operations.md "Rollbacks").

Every verb talks to the release's cube-transfer (the version watcher: its status server,
elasticctr.cube.transfer_server) through the Kubernetes API server's pod proxy, so it needs
only the kubeconfig that `ectl status` needs: no exec, no port-forward, no cube volume. A
pin verifies the version against its manifest, switches every cube shard to it in two
phases and stops the watcher from publishing anything newer; serving follows cube's
committed version and moves the MLflow alias `serving` itself, and the verb waits until
every ready serving replica answers with the version. `unpin` follows the newest again.
`--local` talks to the local platform's (`ectl quickstart`, `ectl local up`) and `--url`
to a status server this machine reaches directly (a port-forward) instead.

The admin token (pin, rollback, unpin) is read from the Secret the cube-transfer pod takes
it from; `--admin-token` / $ELASTICCTR_CUBE_ADMIN_TOKEN give it instead.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from elasticctr import constants as C
from elasticctr.cli import _common as common
from elasticctr.cli._common import (
    CONTEXT_OPTION,
    KUBECONFIG_OPTION,
    NAMESPACE_OPTION,
    RELEASE_OPTION,
    OutputFormat,
    Target,
    console,
)
from elasticctr.errors import EctlError

model_app = typer.Typer(
    help=(
        "Model versions of a scenario on a cluster: list them, pin or roll back to one, "
        'follow the newest again (docs/operations.md "Rollbacks").\n\n'
        "  ectl model list -R platform -s coupon\n\n"
        "  ectl model rollback -R platform -s coupon\n\n"
        "  ectl model pin 20260401/07 -R platform -s coupon\n\n"
        "  ectl model unpin -R platform -s coupon"
    ),
    no_args_is_help=True,
)

SCENARIO_OPTION = typer.Option(
    None,
    "--scenario",
    "-s",
    help="The scenario, on a platform release (-R names the platform); omit it for a "
    "standalone release.",
)
URL_OPTION = typer.Option(
    None,
    "--url",
    help="cube-transfer's status server as this machine reaches it (a local platform, a "
    "port-forward); default: the release's cube-transfer through the Kubernetes API server.",
)
LOCAL_OPTION = typer.Option(
    False,
    "--local",
    help="The local platform running on this machine (`ectl quickstart`, `ectl local up`).",
)
TOKEN_OPTION = typer.Option(
    None,
    "--admin-token",
    envvar=C.ENV_CUBE_ADMIN_TOKEN,
    help="The cube admin token (default: read from the Secret cube-transfer takes it from).",
    show_envvar=True,
)
WAIT_OPTION = typer.Option(
    300.0,
    "--wait",
    help="Seconds to wait for every ready serving replica to answer with the version "
    "(0: do not wait).",
)
ADMIN_TOKEN_HEADER = C.CUBE_ADMIN_TOKEN_HEADER
PIN_TIMEOUT = 600  # a pin fetches, verifies and may build a whole version
SERVING_VERSION_METRIC = "elasticctr_serving_version_info"


class TransferCallError(EctlError):
    """cube-transfer answered with an error status."""

    def __init__(self, status: int, message: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.status = status


def _error_text(raw: bytes | str | None) -> str:
    from elasticctr.httpd import error_message

    if isinstance(raw, bytes):
        raw = raw.decode(errors="replace")
    return error_message(raw or "")


class DirectTransfer:
    """cube-transfer's status server at a URL this machine reaches."""

    def __init__(self, url: str, token: str | None, serving_url: str | None = None):
        self.url = url.rstrip("/")
        self.token = token
        self.where = self.url
        self.serving_url = serving_url

    def call(self, method: str, path: str, *, query=None, body=None, timeout=30.0) -> Any:
        import httpx

        headers = {ADMIN_TOKEN_HEADER: self.token} if self.token else {}
        try:
            r = httpx.request(
                method, self.url + path, params=query, json=body, headers=headers, timeout=timeout
            )
        except httpx.HTTPError as exc:
            raise EctlError(
                f"cube-transfer at {self.url} unreachable: {type(exc).__name__}: {exc}",
                hint="is the platform running? (`ectl local status`)",
            ) from exc
        if r.status_code >= 400:
            raise TransferCallError(r.status_code, _error_text(r.content))
        return r.json()

    def serving_versions(self, scenario: str | None) -> dict[str, str | None] | None:
        """{serving URL: the version it answers `scenario` with}; None without a serving
        URL (--url: the pin's answer is all there is)."""
        if not self.serving_url:
            return None
        import httpx

        try:
            text = httpx.get(f"{self.serving_url}/metrics", timeout=10).text
        except httpx.HTTPError as exc:
            raise EctlError(f"serving at {self.serving_url} unreachable: {exc}") from exc
        return {self.serving_url: served_version(text, scenario)}


def served_version(metrics_text: str, scenario: str | None) -> str | None:
    """The version a serving process answers `scenario` with, from its /metrics text."""
    from prometheus_client.parser import text_string_to_metric_families

    from elasticctr import scenarios

    want = scenario or scenarios.DEFAULT
    for family in text_string_to_metric_families(metrics_text):
        if family.name in (SERVING_VERSION_METRIC, SERVING_VERSION_METRIC.removesuffix("_info")):
            for sample in family.samples:
                if sample.labels.get("scenario") == want and sample.value == 1:
                    return sample.labels.get("version")
    return None


def _is_ours(body: Any) -> bool:
    """Whether an error body is cube-transfer's (not the API server's own)."""
    try:
        return "error" in json.loads(body)
    except (TypeError, ValueError):
        return False


def _connect(
    release: str,
    namespace: str | None,
    kubeconfig: Path | None,
    context: str | None,
    url: str | None,
    token: str | None,
    local: bool = False,
) -> Any:
    if local and not url:
        from elasticctr.cli.local import _running_workdir
        from elasticctr.local.stack import read_state, read_tokens

        workdir = _running_workdir(None)
        endpoints = read_state(workdir)["endpoints"]
        token = token or read_tokens(workdir).get("cube")
        return DirectTransfer(endpoints["transfer"], token, endpoints.get("serving"))
    if url:
        return DirectTransfer(url, token)
    common.require_kube_extra("kubernetes")
    from elasticctr.cli._cluster import ProxiedTransfer

    return ProxiedTransfer(Target(release, namespace, kubeconfig, context), token)


def _versions(t, scenario: str | None) -> dict[str, Any]:
    try:
        return t.call("GET", "/v1/versions", query={"scenario": scenario} if scenario else None)
    except TransferCallError as exc:
        if exc.status == 404:
            raise EctlError(
                f"{t.where}: {exc.message}",
                hint="`ectl scenario list` shows the platform's scenarios",
            ) from exc
        raise EctlError(f"{t.where}: {exc.message}") from exc


def _scenario(name: str | None) -> str | None:
    if name is None:
        return None
    from elasticctr.scenarios import check_name

    return check_name(name, field_name="scenario")


@model_app.command("list")
def list_(
    scenario: str | None = SCENARIO_OPTION,
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    url: str | None = URL_OPTION,
    local: bool = LOCAL_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    """The versions of a scenario and which one is served.

    Complete versions in the model store (what can be pinned), builds retained on the cube
    volume, the committed and the pinned one, rejected ones with their reasons, and the
    version each serving replica answers with."""
    scenario = _scenario(scenario)
    t = _connect(release, namespace, kubeconfig, context, url, None, local)
    doc = _versions(t, scenario)
    doc["serving"] = t.serving_versions(scenario)
    if common.print_data(output, doc):
        return
    table = Table(title=f"model versions of {doc.get('scenario') or scenario or 'default'}")
    for col in ("version", "held-out AUC", "in store", "built", "state"):
        table.add_column(col)
    served = set((doc["serving"] or {}).values())
    for v in sorted(set(doc["store"]) | set(doc["retained"]) | set(doc["failed"]), reverse=True):
        state = []
        if v == doc.get("committed"):
            state.append("committed")
        if v == doc.get("pinned"):
            state.append("pinned")
        if v in served:
            state.append("served")
        if v in doc["failed"]:
            state.append(f"rejected: {doc['failed'][v]}")
        auc = (doc.get("metrics") or {}).get(v, {}).get("auc")
        table.add_row(
            v, "-" if auc is None else f"{auc:.4f}", "yes" if v in doc["store"] else "-",
            "yes" if v in doc["retained"] else "-", ", ".join(state),
        )  # fmt: skip
    console.print(table)
    if doc.get("pinned"):
        console.print(f"pinned on {doc['pinned']}: `ectl model unpin` follows the newest again")


def previous_version(versions: dict[str, Any]) -> str:
    """What a rollback pins: the newest complete version of the store older than the
    committed one (not a rejected one), from cube-transfer's /v1/versions answer."""
    committed = versions.get("committed")
    if not committed:
        raise EctlError("nothing is committed yet: no version to roll back from")
    failed = versions.get("failed") or {}
    older = [v for v in versions.get("store", []) if v < committed and v not in failed]
    if not older:
        raise EctlError(
            f"no complete version older than {committed} in the model store",
            hint="`ectl model list` shows what is there",
        )
    return older[-1]


def _pin(t, scenario: str | None, version: str, wait: float, verb: str) -> dict[str, Any]:
    from elasticctr.versions import check_version_id

    check_version_id(version)  # a ValidationError (exit 2) saying what is wrong
    body: dict[str, Any] = {"version": version}
    if scenario:
        body["scenario"] = scenario
    try:
        done = t.call("POST", "/v1/pin", body=body, timeout=PIN_TIMEOUT)
    except TransferCallError as exc:
        raise EctlError(
            f"{verb} to {version} refused by {t.where}: {exc.message}",
            hint="nothing was switched; `ectl model list` shows the versions that can be pinned",
        ) from exc
    done["serving"] = _wait_served(t, scenario, version, wait)
    return done


def _wait_served(t, scenario: str | None, version: str, wait: float) -> dict[str, Any] | None:
    """Wait until every ready serving replica answers with `version`."""
    if wait <= 0:
        return None
    deadline = time.monotonic() + wait
    seen = t.serving_versions(scenario)
    while seen is not None and (not seen or any(v != version for v in seen.values())):
        if time.monotonic() > deadline:
            raise EctlError(
                f"cube serves {version}, but after {wait:.0f}s serving answers with {seen}",
                hint="`ectl status` and `ectl logs serving` show why",
            )
        time.sleep(1.0)
        seen = t.serving_versions(scenario)
    return seen


def _print_switch(output: OutputFormat, done: dict[str, Any], what: str) -> None:
    if common.print_data(output, done):
        return
    served = done.get("serving")
    tail = f"; {len(served)} serving replica(s) answer with it" if served else ""
    console.print(f"{what} (was {done.get('previous') or 'none'}){tail}", highlight=False)
    console.print("`ectl model unpin` follows the newest version again", highlight=False)


@model_app.command("pin")
def pin(
    version: str = typer.Argument(..., help="The version, YYYYMMDD/HH (`ectl model list`)."),
    scenario: str | None = SCENARIO_OPTION,
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    url: str | None = URL_OPTION,
    local: bool = LOCAL_OPTION,
    admin_token: str | None = TOKEN_OPTION,
    wait: float = WAIT_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    """Serve VERSION, and nothing newer until `ectl model unpin`.

    VERSION may be older or newer than the current one. Refused, with the current version
    serving on, when VERSION is not complete in the store, a file differs from its manifest
    or its slots differ from the served version's."""
    scenario = _scenario(scenario)
    t = _connect(release, namespace, kubeconfig, context, url, admin_token, local)
    done = _pin(t, scenario, version, wait, "pin")
    _print_switch(output, done, f"pinned {version}")


@model_app.command("rollback")
def rollback(
    scenario: str | None = SCENARIO_OPTION,
    to: str | None = typer.Option(
        None, "--to", help="The version (default: the newest one older than the committed)."
    ),
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    url: str | None = URL_OPTION,
    local: bool = LOCAL_OPTION,
    admin_token: str | None = TOKEN_OPTION,
    wait: float = WAIT_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    """Pin the version before the one served (or --to VERSION).

    A model rollback on the cluster, cube and serving together (`ectl rollback` rolls back
    a Helm revision instead)."""
    scenario = _scenario(scenario)
    t = _connect(release, namespace, kubeconfig, context, url, admin_token, local)
    if to is None:
        to = previous_version(_versions(t, scenario))
    done = _pin(t, scenario, to, wait, "rollback")
    _print_switch(output, done, f"rolled back to {to}")


@model_app.command("unpin")
def unpin(
    scenario: str | None = SCENARIO_OPTION,
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    url: str | None = URL_OPTION,
    local: bool = LOCAL_OPTION,
    admin_token: str | None = TOKEN_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    """Follow the store's newest version again (published at once)."""
    scenario = _scenario(scenario)
    t = _connect(release, namespace, kubeconfig, context, url, admin_token, local)
    try:
        done = t.call("POST", "/v1/unpin", body={"scenario": scenario} if scenario else {})
    except TransferCallError as exc:
        raise EctlError(f"unpin refused by {t.where}: {exc.message}") from exc
    if common.print_data(output, done):
        return
    was = done.get("was")
    console.print(
        f"unpinned {was}: following the newest version again" if was else "was not pinned",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
