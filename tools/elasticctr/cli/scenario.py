"""`ectl scenario add | list | status | pause | resume | remove`: scenarios on a shared platform
(docs/platform.md).

A scenario is a Helm release of the same chart holding only its training job (the
platform release serves it); `add` writes the keys that make it one (global.scenario, the
platform parts disabled, the platform's image, store and MLflow), checks what helm cannot
(the name is free, the platform exists and serves scenarios, the Volcano queue exists, the
platform's cube has room for the scenario's table, the versions already in the scenario's
store prefix have the same shape) and installs it. `list` and `status` show every
scenario of a platform in one table; `remove` uninstalls one (its ConfigMap goes with it,
so the platform's cube-transfer drops its tables and serving forgets it), refusing while
MLflow pins one of its versions, and `--purge` also deletes its store prefix and MLflow
entries.

The platform's model store and MLflow are reached from this machine as the CLI's other
verbs reach a release's services: the platform's own URL when it names one
(global.modelStore, global.mlflow.trackingUri), else its fileserver or MLflow Service
through a port-forward (elasticctr.cli.forward); `--store` / `--mlflow` override.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from elasticctr import constants as C
from elasticctr import scenarios
from elasticctr.cli import _common as common
from elasticctr.cli._common import (
    CONTEXT_OPTION,
    HELM_OPTION,
    KUBECONFIG_OPTION,
    NAMESPACE_OPTION,
    OutputFormat,
    Target,
    console,
)
from elasticctr.cli._values import (
    SET_FILE_OPTION,
    SET_JSON_OPTION,
    SET_LITERAL_OPTION,
    SET_OPTION,
    SET_STRING_OPTION,
    VALUES_OPTION,
    Overrides,
)
from elasticctr.cli.release import CHART_OPTION, TIMEOUT_OPTION, WAIT_OPTION
from elasticctr.errors import EctlError
from elasticctr.values import PLATFORM_PARTS

scenario_app = typer.Typer(
    help=(
        "Scenarios on a shared platform: each its own training job, all served by one "
        "platform (docs/platform.md).\n\n"
        "  ectl scenario add coupon -f coupon.yaml --platform elasticctr --team growth\n\n"
        "  ectl scenario list --platform elasticctr\n\n"
        "  ectl scenario remove coupon --yes"
    ),
    no_args_is_help=True,
)

PLATFORM_OPTION = typer.Option(
    "elasticctr", "--platform", "-P", help="The platform release (same namespace)."
)
QUEUES = ("scheduling.volcano.sh", "v1beta1", "queues")
STORE_OPTION = typer.Option(
    None,
    "--store",
    help="The platform's model store as this machine reaches it (default: the platform's "
    "global.modelStore, else its fileserver through a port-forward).",
)
MLFLOW_OPTION = typer.Option(
    None,
    "--mlflow",
    help="The platform's MLflow tracking server as this machine reaches it (default: the "
    "platform's global.mlflow.trackingUri, else its MLflow through a port-forward).",
)


def _platform_values(target: Target, platform: str, namespace: str) -> dict[str, Any]:
    """The platform release's computed values; a clear error when it is not one."""
    from pyhelm3 import errors as helm_errors

    client = common.helm_client(target)

    async def get() -> dict[str, Any]:
        rev = await client.get_current_revision(platform, namespace=namespace)
        return await rev.values(computed=True)

    try:
        values = common.run(get())
    except helm_errors.ReleaseNotFoundError as exc:
        raise EctlError(
            f"--platform {platform}: no release {platform} in namespace {namespace}",
            hint="install the platform first (ectl install -f platform.yaml -R NAME)",
        ) from exc
    except Exception as exc:
        raise common.helm_error(exc, f"cannot read platform {platform}") from exc
    sc = (values.get("global") or {}).get("scenario") or {}
    if sc.get("name") or not all((values.get(p) or {}).get("enabled") for p in ("cube", "serving")):
        raise EctlError(
            f"--platform {platform}: release {platform} is not a platform (it must run cube and "
            f"serving, and not be a scenario itself)",
            hint="name the release that runs the shared parts",
        )
    return values


def _registered(target: Target, platform: str, namespace: str) -> dict[str, scenarios.Scenario]:
    from kubernetes import client

    api = common.kube_api_client(target)
    try:
        raw = client.CoreV1Api(api).list_namespaced_config_map(
            namespace,
            label_selector=scenarios.registry_selector(platform),
            _request_timeout=30,
            _preload_content=False,  # the API's JSON, what scenarios.from_configmaps reads
        )
        items = json.loads(raw.data).get("items", [])
    except Exception as exc:
        raise common.kube_error(exc, "cannot list scenario registrations") from exc
    finally:
        api.close()
    return scenarios.from_configmaps(items)


def _queue_exists(target: Target, queue: str) -> bool:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = common.kube_api_client(target)
    try:
        client.CustomObjectsApi(api).get_cluster_custom_object(*QUEUES, queue)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise common.kube_error(exc, f"cannot read Volcano queue {queue}") from exc
    finally:
        api.close()


def room_problem(
    capacity_mib: int, registered: dict[str, scenarios.Scenario], name: str, budget_mib: int
) -> str | None:
    """Why the platform's cube cannot take a table of `budget_mib` for `name` (or None)."""
    if not capacity_mib:
        return None
    used = sum(sc.cube_memory_mib for n, sc in registered.items() if n != name)
    if used + budget_mib > capacity_mib:
        return (
            f"global.scenario.cubeMemoryMiB: {budget_mib} MiB does not fit the platform's cube "
            f"(cube.capacityMiB {capacity_mib} MiB, {used} MiB promised to "
            f"{len(registered)} scenario(s)); lower the budget, raise the platform's "
            f"cube.capacityMiB, or remove a scenario"
        )
    return None


def _fileserver_token(target: Target, platform: str, pv: dict[str, Any], namespace: str):
    """The platform fileserver's token: $ELASTICCTR_FILESERVER_TOKEN, else its Secret (the
    chart's `fileserver.secretName`); None when neither can be read (reads may still work)."""
    from kubernetes import client

    from elasticctr.constants import ENV_FILESERVER_TOKEN

    if os.environ.get(ENV_FILESERVER_TOKEN):
        return os.environ[ENV_FILESERVER_TOKEN]
    auth = (pv.get("fileserver") or {}).get("auth") or {}
    name = auth.get("existingSecret") or f"{platform}-fileserver"[:63].rstrip("-")
    key = (auth.get("existingSecretKey") or "token") if auth.get("existingSecret") else "token"
    api = common.kube_api_client(target)
    try:
        secret = client.CoreV1Api(api).read_namespaced_secret(name, namespace, _request_timeout=30)
        raw = (secret.data or {}).get(key)
        return base64.b64decode(raw).decode() if raw else None
    except Exception:  # noqa: BLE001 - no right to read it: a protected store says so itself
        return None
    finally:
        api.close()


@contextlib.contextmanager
def platform_store(
    target: Target, platform: str, pv: dict[str, Any], namespace: str, store: str | None
) -> Iterator[Any]:
    """The platform's model store (its root) opened from this machine."""
    from elasticctr import modelstore

    g = pv.get("global") or {}
    hdfs = (g.get("data") or {}).get("hdfsAddress") or None
    if store or g.get("modelStore"):
        yield modelstore.open_store(store or g["modelStore"], hdfs_address=hdfs)
        return
    if not (pv.get("fileserver") or {}).get("enabled"):
        raise EctlError(
            f"platform {platform} names no model store and runs no fileserver",
            hint="pass --store URL",
        )
    from elasticctr.cli.forward import forward_service

    token = _fileserver_token(target, platform, pv, namespace)
    where = Target(platform, namespace, target.kubeconfig, target.context, target.helm)
    with forward_service(where, "fileserver") as url:
        yield modelstore.open_store(f"{url}/models", token=token or "")


@contextlib.contextmanager
def platform_mlflow(
    target: Target, platform: str, pv: dict[str, Any], namespace: str, uri: str | None
) -> Iterator[str | None]:
    """The platform's MLflow tracking URI from this machine; None when it has none."""
    g = pv.get("global") or {}
    uri = uri or (g.get("mlflow") or {}).get("trackingUri")
    if uri:
        yield uri
        return
    if not (pv.get("mlflow") or {}).get("enabled"):
        yield None
        return
    from elasticctr.cli.forward import forward_service

    where = Target(platform, namespace, target.kubeconfig, target.context, target.helm)
    with forward_service(where, "mlflow") as url:
        yield url


def scenario_store(root: Any, name: str) -> Any:
    """Scenario `name`'s own prefix of an opened platform store (same token and user)."""
    from elasticctr import modelstore

    if name == scenarios.DEFAULT:
        raise EctlError("the default scenario is the platform's store root, not a prefix")
    return modelstore.ModelStore(
        scenarios.store_url(root.url, name), token=root.token, hdfs_ugi=root.hdfs_ugi
    )


def shape_problems(store: Any, name: str, values: dict[str, Any]) -> list[str]:
    """Why `values` cannot train into scenario `name`'s store prefix: one line per
    setting that differs from the newest version already there ([] when none is)."""
    from elasticctr import modelstore
    from elasticctr.train import config as train_config
    from elasticctr.train import shape

    newest = store.latest_version()
    if newest is None:
        return []
    differs = shape.shape_problems(store.read_manifest(newest), train_config.from_values(values))
    where = modelstore.redact_url(store.url)
    return [
        f"{key}: {wanted!r} differs from {stored!r} of the versions scenario {name} already "
        f"has (newest {newest} in {where}); keep {stored!r}, pick a new scenario name, or "
        f"delete those versions first with `ectl scenario remove {name} --purge`"
        for key, stored, wanted in differs
    ]


def check_versions(
    target: Target, platform: str, name: str, values: dict[str, Any], namespace: str,
    pv: dict[str, Any] | None = None, store: str | None = None,
) -> list[str]:  # fmt: skip
    """`shape_problems` against the platform's store as this machine reaches it; a store
    that cannot be read is a problem too (it is never taken for an empty one)."""
    pv = pv if pv is not None else _platform_values(target, platform, namespace)
    try:
        with platform_store(target, platform, pv, namespace, store) as root:
            return shape_problems(scenario_store(root, name), name, values)
    except EctlError as exc:
        if getattr(exc, "problems", None):
            raise
        return [
            f"model store: cannot read scenario {name}'s versions ({exc}); pass --store URL "
            f"that reaches the platform's store from here"
        ]


def check_upgrade(target: Target, values: dict[str, Any], namespace: str) -> None:
    """`ectl upgrade` of a scenario release: the version-shape rule of `scenario add`."""
    from elasticctr import values as chart_values
    from elasticctr.errors import ValidationError

    sc = (values.get("global") or {}).get("scenario") or {}
    if not sc.get("name") or not sc.get("platform"):
        return
    effective = chart_values.effective_values(values)
    problems = check_versions(target, sc["platform"], sc["name"], effective, namespace)
    if problems:
        raise ValidationError(f"scenario {sc['name']} cannot be upgraded", problems=problems)


@scenario_app.command("add")
def add(
    name: str = typer.Argument(..., help="Scenario name (DNS-1123 label, at most 40 characters)."),
    files: list[Path] | None = VALUES_OPTION,
    sets: list[str] | None = SET_OPTION,
    set_strings: list[str] | None = SET_STRING_OPTION,
    set_files: list[str] | None = SET_FILE_OPTION,
    set_json: list[str] | None = SET_JSON_OPTION,
    set_literals: list[str] | None = SET_LITERAL_OPTION,
    platform: str = PLATFORM_OPTION,
    team: str | None = typer.Option(None, help="Team that owns it (default: from the values)."),
    namespace: str | None = NAMESPACE_OPTION,
    chart: str | None = CHART_OPTION,
    dry_run: bool = typer.Option(False, "--dry-run", help="Check and show; install nothing."),
    store: str | None = STORE_OPTION,
    wait: bool = WAIT_OPTION,
    timeout: str = TIMEOUT_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Install a scenario release of PLATFORM: its data, slots, model and resources from -f.

    The release is named after the scenario; its training job trains into
    scenarios/NAME of the platform's model store and is served at
    /v1/scenarios/NAME/predict once its first hour is exported.
    """
    add_scenario(
        Target(name, namespace, kubeconfig, context, helm),
        platform,
        name,
        files,
        team=team,
        chart=chart,
        sets=Overrides.of(sets, set_strings, set_files, set_json, set_literals),
        dry_run=dry_run,
        store=store,
        wait=wait,
        timeout=timeout,
        output=output,
    )


def scenario_layers(
    pv: dict[str, Any], name: str, platform: str, team: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(base, own): the values under a scenario's files (the platform's image, store, MLflow
    and PriorityClasses, the platform parts off) and over them (its name and platform, and
    `team` when given), from the platform release's values `pv`."""
    g = pv.get("global") or {}
    # What makes the release this platform's scenario NAME: not overridable by the files.
    own: dict[str, Any] = {"global": {"scenario": {"name": name, "platform": platform}}}
    if team is not None:
        own["global"]["scenario"]["team"] = team
    # Defaults the files may override: the platform's images, store and MLflow (empty ones
    # resolve to the platform's fileserver and MLflow), and no platform parts, so a file that
    # enables one is refused by the chart's own rule rather than silently changed.
    base: dict[str, Any] = {"global": {"image": g.get("image") or {}}}
    if g.get("modelStore"):
        base["global"]["modelStore"] = g["modelStore"]
    if (g.get("mlflow") or {}).get("trackingUri"):
        base["global"]["mlflow"] = {"trackingUri": g["mlflow"]["trackingUri"]}
    for part in PLATFORM_PARTS:
        base[part] = {"enabled": False}
    base["tests"] = {"enabled": False}
    # The platform's per-role PriorityClasses (it creates them): the scenario's coordinator
    # and pservers high, its trainers low and preemptible, unless its files say otherwise.
    pcs = ((pv.get("trainer") or {}).get("volcano") or {}).get("priorityClasses") or {}
    if pcs.get("guaranteed") and pcs.get("trainer"):
        base["trainer"] = {
            "volcano": {
                "priorityClasses": {
                    "guaranteed": pcs["guaranteed"],
                    "trainer": pcs["trainer"],
                    "create": False,
                }
            }
        }
    return base, own


def add_scenario(
    target: Target,
    platform: str,
    name: str,
    files: list[Path] | None,
    *,
    team: str | None = None,
    chart: str | None = None,
    sets: Overrides | None = None,
    dry_run: bool = False,
    store: str | None = None,
    wait: bool = False,
    timeout: str = "10m",
    output: OutputFormat = OutputFormat.table,
) -> None:
    """`ectl scenario add NAME -f FILES --platform PLATFORM` (the console installs a form's
    YAML through this too, so both give the same release)."""
    # Imported here: the images' entry points reach every verb module, and the install
    # path pulls in pyhelm3, which only the CLI's `kube` extra has.
    from elasticctr.cli.release import _deploy

    scenarios.check_name(name, field_name="scenario")
    ns = target.resolved_namespace()
    if name == platform:
        raise EctlError(f"scenario {name}: the platform release has that name; pick another")
    pv = _platform_values(target, platform, ns)
    base, own = scenario_layers(pv, name, platform, team)

    def check(values: dict[str, Any], namespace: str) -> None:
        from elasticctr import values as chart_values

        problems = []
        effective = chart_values.effective_values(values)
        queue = effective["trainer"]["volcano"]["queue"]
        if not _queue_exists(target, queue):
            problems.append(
                f"trainer.volcano.queue: Volcano queue {queue!r} does not exist; create it, "
                f"or pick an existing one (kubectl get queues)"
            )
        registered = _registered(target, platform, namespace)
        capacity = int((pv.get("cube") or {}).get("capacityMiB") or 0)
        budget = int(effective["global"]["scenario"]["cubeMemoryMiB"])
        room = room_problem(capacity, registered, name, budget)
        if room:
            problems.append(room)
        # A name used before keeps its versions (remove without --purge): same shape only.
        problems.extend(check_versions(target, platform, name, effective, namespace, pv, store))
        if problems:
            from elasticctr.errors import ValidationError

            raise ValidationError(f"scenario {name} cannot be added", problems=problems)

    _deploy(
        "install",
        target,
        files,
        chart,
        sets=sets or Overrides(),
        dry_run=dry_run,
        wait=wait,
        timeout=timeout,
        atomic=False,
        create_namespace=False,
        output=output,
        show_diff=False,
        extra=own,
        base=base,
        check=check,
    )


@scenario_app.command("list")
def list_(
    platform: str = PLATFORM_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Every scenario of PLATFORM: team, model, version served, training job and queue."""
    target = Target(platform, namespace, kubeconfig, context, helm)
    ns = target.resolved_namespace()
    rows = collect(target, platform, ns)
    if common.print_data(output, rows):
        return
    table = Table(title=f"scenarios of platform {platform} ({ns})")
    for col in ("scenario", "team", "model", "served", "job", "trainers", "queue", "error"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["name"], r["team"], r["model"], r["served"] or "-", r["job"], r["trainers"],
            r["queue"], r["error"] or "",
        )  # fmt: skip
    console.print(table)


@scenario_app.command("status")
def status(
    name: str | None = typer.Argument(None, help="One scenario (default: every one)."),
    platform: str = PLATFORM_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Where each scenario of PLATFORM stands, one row each: the newest hour trained (in
    the store), the version served, its freshness and held-out AUC, trainers running /
    min / max, and the queue."""
    target = Target(platform, namespace, kubeconfig, context, helm)
    ns = target.resolved_namespace()
    rows = collect(target, platform, ns)
    if name is not None:
        rows = [r for r in rows if r["name"] == scenarios.check_name(name, field_name="scenario")]
        if not rows:
            raise EctlError(
                f"no scenario {name} on platform {platform} in namespace {ns}",
                hint=f"ectl scenario list --platform {platform}",
            )
    if common.print_data(output, rows):
        return
    console.print(status_table(rows, f"scenarios of platform {platform} ({ns})"))


STATUS_COLUMNS = (
    "scenario", "hour trained", "served", "freshness", "held-out AUC", "trainers r/min/max",
    "queue", "job", "error",
)  # fmt: skip


def status_table(rows: list[dict[str, Any]], title: str) -> Table:
    """`scenario status`'s table of `collect`'s rows."""
    from rich.markup import escape

    table = Table(title=title)
    for col in STATUS_COLUMNS:
        table.add_column(col, overflow="fold")
    for r in rows:
        auc = r.get("heldout_auc")
        error = r.get("error") or r.get("store_error") or ""
        error = f"[yellow]{escape(error)}[/yellow]" if error else ""
        table.add_row(
            r["name"], r.get("trained") or "-", r["served"] or "-",
            format_age(r.get("freshness_seconds")), "-" if auc is None else f"{auc:.4f}",
            r["trainers"], r["queue"], r["job"], error,
        )  # fmt: skip
    return table


def format_age(seconds: int | None) -> str:
    """3m, 5h 10m, 12d 3h; '-' for None; a version of a later hour than now is 'ahead'."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return "ahead"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if days:
        return f"{days}d {hours % 24}h"
    if hours:
        return f"{hours}h {minutes % 60}m"
    return f"{minutes}m"


def collect(target: Target, platform: str, namespace: str) -> list[dict[str, Any]]:
    """One row per registered scenario: registration, serving's version and its held-out
    AUC, the newest version in its store (cube-transfer's view), the Volcano job."""
    from kubernetes import client

    from elasticctr.cli.status import (
        COMPONENT_LABEL,
        INSTANCE_LABEL,
        TRANSFER_STATUS_PATH,
        VOLCANO,
        _pod_proxy_get,
        _proxy_get,
        _try,
        store_from_transfer,
    )

    registered = _registered(target, platform, namespace)
    api = common.kube_api_client(target)
    try:
        core = client.CoreV1Api(api)
        served: dict[str, Any] = {}
        svcs = core.list_namespaced_service(
            namespace,
            label_selector=f"{INSTANCE_LABEL}={platform},{COMPONENT_LABEL}=serving",
        ).items
        if svcs:
            doc = _try("serving", _proxy_get, core, namespace, svcs[0], "v1/scenarios")
            served = doc.get("scenarios", {}) if isinstance(doc, dict) else {}
        stored: dict[str, Any] = {}
        transfers = [
            p for p in core.list_namespaced_pod(
                namespace,
                label_selector=f"{INSTANCE_LABEL}={platform},{COMPONENT_LABEL}=cube-transfer",
            ).items
            if p.status.phase == "Running"
        ]  # fmt: skip
        if transfers:
            doc = _try(
                "cube-transfer", _pod_proxy_get, core, namespace, transfers[0],
                TRANSFER_STATUS_PATH,
            )  # fmt: skip
            if isinstance(doc, dict) and "unavailable" not in doc:
                stored = store_from_transfer(doc).get("scenarios") or {}
        jobs = client.CustomObjectsApi(api).list_namespaced_custom_object(
            *VOLCANO[:2], namespace, VOLCANO[2],
            label_selector=scenarios.registry_selector(platform),
        )  # fmt: skip
    except Exception as exc:
        raise common.kube_error(exc, "cannot read the platform") from exc
    finally:
        api.close()
    by_scenario = {
        job["metadata"]["labels"][scenarios.LABEL_SCENARIO]: job for job in jobs.get("items", [])
    }
    return [
        scenarios.status_row(
            name, sc, served.get(name) or {}, stored.get(name) or {}, by_scenario.get(name, {})
        )
        for name, sc in sorted(registered.items())
    ]


def _mlflow_call(what: str, fn, *args):
    """An MLflow REST call; an unreachable server is one clear error."""
    import httpx

    try:
        return fn(*args)
    except httpx.HTTPError as exc:
        raise EctlError(f"MLflow: {what}: {type(exc).__name__}: {exc}") from exc


def pin_problem(name: str, model: str, aliases: dict[str, str] | None) -> str | None:
    """Why scenario `name` may not be removed: MLflow aliases other than `serving` on its
    registered model `model` pin versions someone relies on (or None)."""
    from elasticctr import mlflowreg

    pinned = mlflowreg.pins(aliases)
    if not pinned:
        return None
    which = ", ".join(f"{a!r} -> version {v}" for a, v in sorted(pinned.items()))
    return (
        f"scenario {name}: MLflow registered model {model} has pinned versions ({which}); "
        f"delete the alias(es) in MLflow first, or pass --force"
    )


def remove_scenario(
    target: Target, platform: str, name: str, *, purge: bool = False, force: bool = False,
    store: str | None = None, mlflow: str | None = None, confirm=None,
) -> dict[str, Any]:  # fmt: skip
    """`ectl scenario remove` (and the console's Remove): every check and read first, then
    the deletions, the release first. `target` names the scenario's release; `confirm`,
    when given, is asked with the plan and may refuse (typer.Abort)."""
    from elasticctr import mlflowreg, modelstore

    scenarios.check_name(name, field_name="scenario")
    if name in (scenarios.DEFAULT, platform):
        raise EctlError(
            f"scenario {name}: that is the platform's own (default) scenario, not one to remove",
            hint=f"`ectl uninstall -R {platform}` removes the platform",
        )
    ns = target.resolved_namespace()
    registered = name in _registered(target, platform, ns)
    if not registered and not purge:
        raise EctlError(
            f"no scenario {name} on platform {platform} in namespace {ns}",
            hint=f"ectl scenario list --platform {platform}; `--purge` deletes what a removed "
            f"scenario left in the store and MLflow",
        )
    pv = _platform_values(target, platform, ns)
    model = scenarios.registered_model_name(name)
    experiment = scenarios.experiment_name(name)
    result: dict[str, Any] = {"scenario": name, "removed": False, "pinned": {}}
    with contextlib.ExitStack() as stack:
        # Reads first: what is pinned, what a purge would delete.
        uri = None
        if purge or not force:
            uri = stack.enter_context(platform_mlflow(target, platform, pv, ns, mlflow))
        aliases = (
            _mlflow_call("read the registered model", mlflowreg.registered_aliases, uri, model)
            if uri
            else None
        )
        result["pinned"] = mlflowreg.pins(aliases)
        problem = pin_problem(name, model, aliases)
        if problem and not force:
            raise EctlError(problem)
        plan = [f"uninstall release {name}"] if registered else []
        sc_store = versions_found = None
        if purge:
            root = stack.enter_context(platform_store(target, platform, pv, ns, store))
            sc_store = scenario_store(root, name)
            versions_found = sc_store.list_versions()  # proves the prefix is readable
            where = modelstore.redact_url(sc_store.url)
            plan.append(f"delete {where} ({len(versions_found)} version(s))")
            if uri:
                plan.append(f"delete MLflow registered model {model} and experiment {experiment}")
        if confirm is not None and not confirm(
            f"Remove scenario {name} from platform {platform}: " + "; ".join(plan) + "?"
        ):
            raise typer.Abort()
        # Then deletions, the release first: a failure stops before anything later.
        if registered:
            client = common.helm_client(target)
            try:
                common.run(client.uninstall_release(name, namespace=ns, wait=False))
            except Exception as exc:
                raise common.helm_error(exc, f"remove {name} failed") from exc
            result["removed"] = True
        if purge:
            done = "uninstalled; " if registered else ""
            again = f"run `ectl scenario remove {name} --purge` again to finish"
            try:
                deleted = sc_store.delete_all()
            except EctlError as exc:
                raise EctlError(f"scenario {name}: {done}deleting its store failed: {exc}",
                                hint=again) from exc  # fmt: skip
            result["store"] = {
                "url": modelstore.redact_url(sc_store.url),
                "deleted": deleted,
                "versions": len(versions_found),
            }
            if uri:
                try:
                    result["registered_model"] = (
                        model
                        if _mlflow_call("delete", mlflowreg.delete_registered_model, uri, model)
                        else None
                    )
                    result["experiment"] = _mlflow_call(
                        "delete", mlflowreg.delete_experiment, uri, experiment
                    )
                except EctlError as exc:
                    raise EctlError(
                        f"scenario {name}: {done}store deleted; MLflow failed: {exc}", hint=again
                    ) from exc
    return result


@scenario_app.command("remove")
def remove(
    name: str = typer.Argument(..., help="Scenario to remove."),
    purge: bool = typer.Option(
        False,
        "--purge",
        help="Also delete its store prefix (every version) and its MLflow registered model "
        "and experiment; works on a scenario already removed, for what it left behind.",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Remove even when an MLflow alias other than `serving` pins one of its versions.",
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    namespace: str | None = NAMESPACE_OPTION,
    platform: str = PLATFORM_OPTION,
    store: str | None = STORE_OPTION,
    mlflow: str | None = MLFLOW_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Uninstall a scenario: its job stops, its registration goes, the platform drops its
    cube tables and serving forgets it. Its model versions stay in the store and MLflow
    unless --purge.

    Every check and read happens before anything is deleted: a pinned version, an
    unreadable store or MLflow refuses the whole command.
    """
    target = Target(name, namespace, kubeconfig, context, helm)
    if not (yes or sys.stdin.isatty()):
        raise EctlError(f"not removing scenario {name} without confirmation", hint="pass --yes")
    result = remove_scenario(
        target, platform, name, purge=purge, force=force, store=store, mlflow=mlflow,
        confirm=None if yes else typer.confirm,
    )  # fmt: skip
    registered = result["removed"]
    experiment = scenarios.experiment_name(name)
    if common.print_data(output, result):
        return
    if registered:
        console.print(f"[green]removed[/green] scenario {name} from platform {platform}")
    if result["pinned"]:
        console.print(f"[yellow]it had pinned versions[/yellow] {result['pinned']} (--force)")
    if purge:
        st = result["store"]
        console.print(
            f"[green]purged[/green] {st['url']} ({st['versions']} version(s))"
            + (f", MLflow registered model {result['registered_model']}"
               if result.get("registered_model") else "")
            + (f", experiment {experiment} (renamed {result['experiment']}, deleted)"
               if result.get("experiment") else "")
        )  # fmt: skip


COMMANDS = ("bus.volcano.sh", "v1alpha1", "commands")
FINAL_PHASES = ("Completing", "Completed", "Failed", "Terminating", "Terminated")
WAIT_SECONDS_OPTION = typer.Option(
    300.0, "--wait-seconds", help="How long to wait for the job to stop or run again."
)


def set_training(
    target: Target, platform: str, namespace: str, name: str, *, paused: bool,
    wait_seconds: float = 300.0,
) -> dict[str, Any]:  # fmt: skip
    """Pause or resume scenario `name`'s training job with Volcano's own job commands
    (`AbortJob`, `ResumeJob`: what `vcctl job suspend/resume` sends): a paused job keeps
    its spec and its store, its pods go; a resumed one restarts from the checkpoint of
    its last exported hour, as after a pserver restart (docs/coordinator.md). Serving is
    untouched either way. Waits until the pods are gone (pause) or the job runs again
    (resume), at most `wait_seconds` (0: do not wait). Returns {scenario, job, phase,
    changed}."""
    import time

    from kubernetes import client

    from elasticctr.cli.status import VOLCANO

    verb = "pause" if paused else "resume"
    scenarios.check_name(name, field_name="scenario")
    if name not in _registered(target, platform, namespace):
        raise EctlError(
            f"no scenario {name} on platform {platform} in namespace {namespace}",
            hint=f"ectl scenario list --platform {platform}",
        )
    api = common.kube_api_client(target)
    try:
        custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)
        selector = f"{scenarios.registry_selector(platform)},{scenarios.LABEL_SCENARIO}={name}"

        def job() -> dict[str, Any]:
            items = custom.list_namespaced_custom_object(
                *VOLCANO[:2], namespace, VOLCANO[2], label_selector=selector, _request_timeout=30
            ).get("items", [])
            if not items:
                raise EctlError(f"scenario {name} has no training job in namespace {namespace}")
            return items[0]

        def phase(j: dict[str, Any]) -> str:
            return ((j.get("status") or {}).get("state") or {}).get("phase") or "Pending"

        try:
            current = job()
            meta = current["metadata"]
            now = phase(current)
            result = {"scenario": name, "job": meta["name"], "phase": now, "changed": False}
            if (now in scenarios.PAUSED_PHASES) == paused:
                return result  # already so: nothing to send
            if now in FINAL_PHASES:
                raise EctlError(
                    f"scenario {name}: its training job is {now}; there is nothing to {verb}",
                    hint="`ectl scenario status` shows why; `ectl upgrade` starts a new job",
                )
            action = "AbortJob" if paused else "ResumeJob"
            owner = {
                "apiVersion": "/".join(VOLCANO[:2]), "kind": "Job", "name": meta["name"],
                "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True,
            }  # fmt: skip
            command = {
                "apiVersion": "/".join(COMMANDS[:2]),
                "kind": "Command",
                "metadata": {
                    "generateName": f"{meta['name']}-{action.lower()}-",
                    "ownerReferences": [owner],
                },
                "target": owner,  # Go's TargetObject (json "target", the CRD's schema)
                "action": action,
                "message": f"ectl scenario {verb}",
            }
            custom.create_namespaced_custom_object(
                *COMMANDS[:2], namespace, COMMANDS[2], command, _request_timeout=30
            )
            result["changed"] = True
            deadline = time.monotonic() + wait_seconds
            while wait_seconds > 0:
                j = job()
                result["phase"] = phase(j)
                if paused:
                    pods = core.list_namespaced_pod(
                        namespace, label_selector=f"{C.VOLCANO_JOB_LABEL}={meta['name']}",
                        _request_timeout=30,
                    ).items  # fmt: skip
                    if result["phase"] == "Aborted" and not pods:
                        break
                elif result["phase"] == "Running":
                    break
                if time.monotonic() > deadline:
                    raise EctlError(
                        f"scenario {name}: {action} sent, but its job is {result['phase']} "
                        f"after {wait_seconds:.0f} s",
                        hint=f"ectl scenario status {name} --platform {platform}",
                    )
                time.sleep(1.0)
            return result
        except EctlError:
            raise
        except Exception as exc:
            raise common.kube_error(exc, f"cannot {verb} scenario {name}") from exc
    finally:
        api.close()


def _pause_or_resume(paused: bool, name: str, platform: str, target: Target,
                     wait_seconds: float, output: OutputFormat) -> None:  # fmt: skip
    done = set_training(
        target, platform, target.resolved_namespace(), name, paused=paused,
        wait_seconds=wait_seconds,
    )  # fmt: skip
    if common.print_data(output, done):
        return
    state = f"job {done['job']} {done['phase']}"
    if done["changed"]:
        console.print(
            f"[green]{'paused' if paused else 'resumed'}[/green] scenario {name}: {state}"
        )
    else:
        console.print(f"scenario {name} is already {'paused' if paused else 'training'}: {state}")


# Two decorated verbs rather than one made by a factory: what module-level code calls is
# followed by tests/images/reach.py, and set_training imports kubernetes (not in images).
@scenario_app.command("pause")
def pause(
    name: str = typer.Argument(..., help="Scenario to pause."),
    platform: str = PLATFORM_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    wait_seconds: float = WAIT_SECONDS_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Stop a scenario's training (Volcano's AbortJob): its pods go, its spec, store and
    served model stay; `ectl scenario resume` trains on from the last exported hour."""
    target = Target(platform, namespace, kubeconfig, context, helm)
    _pause_or_resume(True, name, platform, target, wait_seconds, output)


@scenario_app.command("resume")
def resume(
    name: str = typer.Argument(..., help="Scenario to resume."),
    platform: str = PLATFORM_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    wait_seconds: float = WAIT_SECONDS_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Train a paused scenario again (Volcano's ResumeJob): the job restarts from the
    checkpoint of its last exported hour and picks up the hours that landed meanwhile."""
    target = Target(platform, namespace, kubeconfig, context, helm)
    _pause_or_resume(False, name, platform, target, wait_seconds, output)


def register(app: typer.Typer) -> None:
    app.add_typer(scenario_app, name="scenario")
