"""`ectl scenario add | list | remove`: scenarios on a shared platform (docs/platform.md).

A scenario is a Helm release of the same chart holding only its training job (the
platform release serves it); `add` writes the keys that make it one (global.scenario, the
platform parts disabled, the platform's image, store and MLflow), checks what helm cannot
(the name is free, the platform exists and serves scenarios, the Volcano queue exists, the
platform's cube has room for the scenario's table) and installs it. `list` shows every
scenario of a platform in one table; `remove` uninstalls one (its ConfigMap goes with it,
so the platform's cube-transfer drops its tables and serving forgets it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

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
from elasticctr.cli.release import (
    CHART_OPTION,
    SET_OPTION,
    TIMEOUT_OPTION,
    VALUES_OPTION,
    WAIT_OPTION,
)
from elasticctr.errors import EctlError

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
PLATFORM_PARTS = ("fileserver", "mlflow", "cube", "serving")
QUEUES = ("scheduling.volcano.sh", "v1beta1", "queues")


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


@scenario_app.command("add")
def add(
    name: str = typer.Argument(..., help="Scenario name (DNS-1123 label, at most 40 characters)."),
    files: list[Path] | None = VALUES_OPTION,
    sets: list[str] | None = SET_OPTION,
    platform: str = PLATFORM_OPTION,
    team: str | None = typer.Option(None, help="Team that owns it (default: from the values)."),
    namespace: str | None = NAMESPACE_OPTION,
    chart: str | None = CHART_OPTION,
    dry_run: bool = typer.Option(False, "--dry-run", help="Check and show; install nothing."),
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
    # Imported here: the images' entry points reach every verb module, and the install
    # path pulls in pyhelm3, which only the CLI's `kube` extra has.
    from elasticctr.cli.release import _deploy

    scenarios.check_name(name, field_name="scenario")
    target = Target(name, namespace, kubeconfig, context, helm)
    ns = target.resolved_namespace()
    if name == platform:
        raise EctlError(f"scenario {name}: the platform release has that name; pick another")
    pv = _platform_values(target, platform, ns)
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
        if problems:
            from elasticctr.errors import ValidationError

            raise ValidationError(f"scenario {name} cannot be added", problems=problems)

    _deploy(
        "install",
        target,
        files,
        chart,
        sets=sets,
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
    if output is OutputFormat.json:
        common.print_json(rows)
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


def collect(target: Target, platform: str, namespace: str) -> list[dict[str, Any]]:
    """One row per registered scenario: registration, serving's version, the Volcano job."""
    from kubernetes import client

    from elasticctr.cli.status import VOLCANO, _proxy_get, _try

    registered = _registered(target, platform, namespace)
    api = common.kube_api_client(target)
    try:
        core = client.CoreV1Api(api)
        served: dict[str, Any] = {}
        svcs = core.list_namespaced_service(
            namespace,
            label_selector=f"app.kubernetes.io/instance={platform},"
            "app.kubernetes.io/component=serving",
        ).items
        if svcs:
            doc = _try("serving", _proxy_get, core, namespace, svcs[0], "v1/scenarios")
            served = doc.get("scenarios", {}) if isinstance(doc, dict) else {}
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
    rows = []
    for name, sc in sorted(registered.items()):
        job = by_scenario.get(name, {})
        spec, st = job.get("spec", {}), job.get("status", {})
        trainer = next((t for t in spec.get("tasks", []) if t.get("name") == "trainer"), {})
        running = (
            (st.get("taskStatusCount") or {}).get("trainer", {}).get("phase", {}).get("Running", 0)
        )
        srv = served.get(name) or {}
        rows.append(
            {
                "name": name,
                "team": sc.team,
                "model": sc.model,
                "served": srv.get("version"),
                "job": st.get("state", {}).get("phase", "-") if job else "-",
                "trainers": f"{running}/{trainer.get('minAvailable', '-')}/"
                f"{trainer.get('replicas', '-')}",
                "queue": spec.get("queue", "-"),
                "error": srv.get("error"),
                "cube_memory_mib": sc.cube_memory_mib,
            }
        )
    return rows


@scenario_app.command("remove")
def remove(
    name: str = typer.Argument(..., help="Scenario to remove."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    namespace: str | None = NAMESPACE_OPTION,
    platform: str = PLATFORM_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Uninstall a scenario: its job stops, its registration goes, the platform drops its
    cube tables and serving forgets it (its model versions stay in the store)."""
    scenarios.check_name(name, field_name="scenario")
    target = Target(name, namespace, kubeconfig, context, helm)
    ns = target.resolved_namespace()
    if name not in _registered(target, platform, ns):
        raise EctlError(
            f"no scenario {name} on platform {platform} in namespace {ns}",
            hint=f"ectl scenario list --platform {platform}",
        )
    if not (yes or sys.stdin.isatty()):
        raise EctlError(f"not removing scenario {name} without confirmation", hint="pass --yes")
    if not yes and not typer.confirm(f"Remove scenario {name} from platform {platform}?"):
        raise typer.Abort()
    client = common.helm_client(target)
    try:
        common.run(client.uninstall_release(name, namespace=ns, wait=False))
    except Exception as exc:
        raise common.helm_error(exc, f"remove {name} failed") from exc
    if output is OutputFormat.json:
        print(json.dumps({"scenario": name, "removed": True}))
    else:
        console.print(f"[green]removed[/green] scenario {name} from platform {platform}")


def register(app: typer.Typer) -> None:
    app.add_typer(scenario_app, name="scenario")
