"""`ectl install | upgrade | uninstall | rollback | history | template`: Helm releases.

Everything goes through pyhelm3 (which shells out to the real helm). Values are validated
by `elasticctr.values` before anything reaches the cluster, and `--dry-run` shows what would
change as a per-resource diff of rendered manifests against the release's current ones.
This module owns release lifecycle only; reading cluster state is `status.py`'s job.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.table import Table
from rich.text import Text

from elasticctr.cli import _common as common
from elasticctr.cli._common import (
    CONTEXT_OPTION,
    HELM_OPTION,
    KUBECONFIG_OPTION,
    NAMESPACE_OPTION,
    RELEASE_OPTION,
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
    load_user_values,
)
from elasticctr.constants import ENV_CHART_DIR, chart_dir
from elasticctr.errors import EctlError

CHART_OPTION = typer.Option(
    None,
    "--chart",
    help=f"Chart directory, or a published chart oci://HOST[:PORT]/PATH/elasticctr[:VERSION] "
    f"(pulled with helm; plain HTTP for a loopback registry) "
    f"(default: ${ENV_CHART_DIR}, else the chart packaged with this ectl).",
)
TIMEOUT_OPTION = typer.Option(
    "10m",
    "--timeout",
    callback=common.go_duration,
    help="How long helm waits: 45s, 10m, 1h30m (Go duration; a bare number is seconds).",
)
WAIT_OPTION = typer.Option(
    False, "--wait/--no-wait", help="Wait until pods are ready and hook Jobs finished."
)


# --- manifest diff ----------------------------------------------------------------------


@dataclass
class Change:
    """One resource that a release operation would create, delete or modify."""

    action: str  # create | delete | change
    kind: str
    name: str
    namespace: str
    diff: str

    @property
    def added(self) -> int:
        return sum(
            1 for ln in self.diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")
        )

    @property
    def removed(self) -> int:
        return sum(
            1 for ln in self.diff.splitlines() if ln.startswith("-") and not ln.startswith("---")
        )


def _key(doc: dict[str, Any], default_namespace: str) -> tuple[str, str, str]:
    meta = doc.get("metadata") or {}
    return (
        str(doc.get("kind", "?")),
        str(meta.get("namespace") or default_namespace),
        str(meta.get("name", "?")),
    )


def _masked(doc: dict[str, Any]) -> dict[str, Any]:
    """Secrets show a digest of each value, never the value: a change stays visible."""
    if doc.get("kind") != "Secret":
        return doc
    masked = dict(doc)
    for field in ("data", "stringData"):
        if isinstance(doc.get(field), dict):
            masked[field] = {
                key: f"(sha256 {hashlib.sha256(str(value).encode()).hexdigest()[:12]})"
                for key, value in doc[field].items()
            }
    return masked


def _dump(doc: dict[str, Any] | None) -> list[str]:
    if doc is None:
        return []
    text = yaml.safe_dump(_masked(doc), sort_keys=True, default_flow_style=False)
    return text.splitlines(True)


def diff_manifests(
    current: list[dict[str, Any]], proposed: list[dict[str, Any]], namespace: str
) -> list[Change]:
    """Per-resource unified diffs between two sets of manifests (order-insensitive)."""
    old = {_key(d, namespace): d for d in current if isinstance(d, dict)}
    new = {_key(d, namespace): d for d in proposed if isinstance(d, dict)}
    changes: list[Change] = []
    for key in sorted(old.keys() | new.keys()):
        kind, ns, name = key
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        label = f"{kind}/{name}"
        text = "".join(
            difflib.unified_diff(
                _dump(before),
                _dump(after),
                fromfile=f"current {label}" if before is not None else "/dev/null",
                tofile=f"proposed {label}" if after is not None else "/dev/null",
            )
        )
        action = "create" if before is None else "delete" if after is None else "change"
        changes.append(Change(action, kind, name, ns, text))
    return changes


def _print_changes(
    changes: list[Change], *, release: str, output: OutputFormat, verb: str, show_diff: bool
) -> None:
    data = {
        "release": release,
        "operation": verb,
        "dryRun": True,
        "changes": [asdict(c) | {"added": c.added, "removed": c.removed} for c in changes],
    }
    if common.print_data(output, data):
        return
    if not changes:
        console.print(f"[green]{verb} {release}: no changes[/green]")
        return
    table = Table(title=f"{verb} {release} (dry run): {len(changes)} resource(s) would change")
    for column in ("action", "kind", "name", "namespace", "+lines", "-lines"):
        table.add_column(column)
    colour = {"create": "green", "delete": "red", "change": "yellow"}
    for c in changes:
        table.add_row(
            Text(c.action, style=colour[c.action]),
            c.kind,
            c.name,
            c.namespace,
            str(c.added),
            str(c.removed),
        )
    console.print(table)
    if show_diff:
        for c in changes:
            for line in c.diff.splitlines():
                style = (
                    "bold"
                    if line.startswith(("---", "+++"))
                    else "green"
                    if line.startswith("+")
                    else "red"
                    if line.startswith("-")
                    else "cyan"
                    if line.startswith("@@")
                    else None
                )
                console.print(Text(line, style=style or ""))


# --- helm operations ---------------------------------------------------------------------


def _pull_oci_chart(ref: str, helm: str | None) -> Path:
    """`helm pull` of an oci:// chart into a temporary directory removed at exit.

    `oci://host/path/name:1.2.3` pulls version 1.2.3 (helm's --version); without a tag helm
    takes the newest. A registry on a loopback address is spoken to over plain HTTP (what a
    local registry serves); any other host over TLS.
    """
    import atexit
    import ipaddress
    import shutil
    import subprocess
    import tempfile
    from urllib.parse import urlsplit

    parts = urlsplit(ref)
    name = parts.path.rsplit("/", 1)[-1]
    if not parts.hostname or not name:
        raise EctlError(
            f"bad chart reference {ref!r}", hint="oci://HOST[:PORT]/PATH/NAME[:VERSION]"
        )
    url, version = ref, None
    if ":" in name:
        name, version = name.split(":", 1)
        url = ref[: -len(version) - 1]
    command = [common.find_helm(helm), "pull", url, "--untar"]
    if version:
        command += ["--version", version]
    try:
        loopback = parts.hostname == "localhost" or ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        command.append("--plain-http")
    where = Path(tempfile.mkdtemp(prefix="ectl-chart-"))
    atexit.register(shutil.rmtree, where, True)
    done = subprocess.run(
        [*command, "--untardir", str(where)], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise EctlError(f"cannot pull chart {ref}: {done.stderr.strip() or done.stdout.strip()}")
    return where / name


def _chart_path(chart: str | Path | None, helm: str | None = None) -> Path:
    if chart is not None and str(chart).startswith("oci://"):
        chart = _pull_oci_chart(str(chart), helm)
    path = Path(chart) if chart is not None else chart_dir()
    if not (path / "Chart.yaml").is_file():
        raise EctlError(
            f"no chart at {path} (Chart.yaml missing)",
            hint=f"pass --chart DIR or set ${ENV_CHART_DIR}",
        )
    return path


async def _get_chart(client, path: Path):
    try:
        return await client.get_chart(path)
    except Exception as exc:
        raise common.helm_error(exc, f"cannot read chart {path}") from exc


async def render(
    client, chart_path: Path, release: str, values: dict[str, Any], namespace: str, upgrade: bool
) -> list[dict[str, Any]]:
    """`helm template` of the chart with one merged values dict (offline, no cluster)."""
    chart = await _get_chart(client, chart_path)
    try:
        docs = await client.template_resources(
            chart, release, values, namespace=namespace, is_upgrade=upgrade
        )
        return [d for d in docs if isinstance(d, dict)]
    except Exception as exc:
        raise common.helm_error(exc, "helm template failed") from exc


async def server_render(
    client, chart_path: Path, release: str, values: dict[str, Any], namespace: str
) -> list[dict[str, Any]]:
    """What `helm upgrade --install` would apply, rendered by helm against the cluster.

    `--dry-run=server` lets the chart's `lookup` see existing objects (kept Secrets), so
    the diff against `helm get manifest` shows only real changes.
    """
    command = [
        "upgrade", release, str(chart_path), "--install", "--dry-run=server",
        "--namespace", namespace, "--output", "json", "--values", "-",
    ]  # fmt: skip
    try:
        out = await client._command.run(command, json.dumps(values).encode())
    except Exception as exc:
        raise common.helm_error(exc, "helm upgrade --dry-run failed") from exc
    try:
        manifest = json.loads(out[out.index(b"{") :]).get("manifest", "")
    except ValueError as exc:
        raise EctlError(f"helm upgrade --dry-run printed no release: {out[:200]!r}") from exc
    return [d for d in yaml.safe_load_all(manifest) if isinstance(d, dict)]


async def current_manifests(
    client, release: str, namespace: str, revision: int | None = None
) -> list[dict[str, Any]] | None:
    """The release's deployed manifests (`helm get manifest`), or None if no such release."""
    from pyhelm3 import errors as helm_errors

    try:
        docs = await client._command.get_resources(release, namespace=namespace, revision=revision)
        return [d for d in docs if isinstance(d, dict)]
    except helm_errors.ReleaseNotFoundError:
        return None
    except Exception as exc:
        raise common.helm_error(exc, f"cannot read release {release}") from exc


async def release_exists(client, release: str, namespace: str) -> bool:
    from pyhelm3 import errors as helm_errors

    try:
        await client.get_current_revision(release, namespace=namespace)
        return True
    except helm_errors.ReleaseNotFoundError:
        return False
    except Exception as exc:
        raise common.helm_error(exc, f"cannot read release {release}") from exc


def _target(release, namespace, kubeconfig, context, helm) -> Target:
    return Target(release, namespace, kubeconfig, context, helm)


def _deploy(
    verb: str,
    target: Target,
    files: list[Path] | None,
    chart: str | None,
    *,
    sets: Overrides,
    dry_run: bool,
    wait: bool,
    timeout: str,
    atomic: bool,
    create_namespace: bool,
    output: OutputFormat,
    show_diff: bool,
    extra: dict[str, Any] | None = None,
    base: dict[str, Any] | None = None,
    check: Any = None,
) -> None:
    """`base` / `extra`: values under / over the files and the --set family (ectl
    scenario's keys);
    `check(values, namespace)`: refuses what helm would accept but the cluster cannot run."""
    chart_path = _chart_path(chart, target.helm)
    values = load_user_values(files or [], chart_path, sets, extra, base)
    if check is not None:
        check(values, target.resolved_namespace())
    namespace = target.resolved_namespace()
    client = common.helm_client(target)

    async def go() -> None:
        if dry_run:
            current = await current_manifests(client, target.release, namespace)
            if verb == "upgrade" and current is None:
                raise EctlError(
                    f"release {target.release} not found in namespace {namespace}",
                    hint="use `ectl install` for a new release",
                )
            if verb == "install" and current is not None:
                raise EctlError(
                    f"release {target.release} already exists in namespace {namespace}",
                    hint="`ectl upgrade --dry-run` shows what an upgrade would change",
                )
            if current is None:  # a new release: nothing for `lookup` to find, render offline
                proposed = await render(
                    client, chart_path, target.release, values, namespace, upgrade=False
                )
            else:
                proposed = await server_render(
                    client, chart_path, target.release, values, namespace
                )
            changes = diff_manifests(current or [], proposed, namespace)
            _print_changes(
                changes,
                release=target.release,
                output=output,
                verb=verb,
                show_diff=show_diff,
            )
            return
        exists = await release_exists(client, target.release, namespace)
        if verb == "install" and exists:
            raise EctlError(
                f"release {target.release} already exists in namespace {namespace}",
                hint="use `ectl upgrade` to change it, or --release for a second one",
            )
        if verb == "upgrade" and not exists:
            raise EctlError(
                f"release {target.release} not found in namespace {namespace}",
                hint="use `ectl install` for a new release",
            )
        helm_chart = await _get_chart(client, chart_path)
        progress = (
            asyncio.get_running_loop().create_task(_report_waiting(target, namespace))
            if wait or atomic
            else None
        )
        try:
            revision = await client.install_or_upgrade_release(
                target.release,
                helm_chart,
                values,
                atomic=atomic,
                create_namespace=create_namespace,
                namespace=namespace,
                timeout=timeout,
                wait=wait,
            )
        except Exception as exc:
            raise common.helm_error(exc, f"{verb} {target.release} failed") from exc
        finally:
            if progress is not None:
                progress.cancel()
        result = {
            "release": target.release,
            "namespace": namespace,
            "revision": revision.revision,
            "status": revision.status.value,
            "notes": revision.notes or "",
        }
        if common.print_data(output, result):
            return
        console.print(
            f"[green]{verb}ed[/green] {target.release} in {namespace}: revision "
            f"{revision.revision}, {revision.status.value}"
        )
        if revision.notes:
            console.print(revision.notes, markup=False, highlight=False)
        console.print("Next: `ectl status` shows training and serving progress.")

    common.run(go())


WAIT_REPORT_SECONDS = 10.0


async def _report_waiting(target: Target, namespace: str) -> None:
    """While helm waits: every WAIT_REPORT_SECONDS, which pods are not ready yet and why,
    on stderr, when that changed (a failing read is skipped: helm's wait decides)."""
    loop = asyncio.get_running_loop()
    started, last = loop.time(), None
    while True:
        await asyncio.sleep(WAIT_REPORT_SECONDS)
        try:
            waiting = await loop.run_in_executor(None, _waiting, target, namespace)
        except Exception:  # noqa: BLE001 - progress is a courtesy; the wait goes on
            continue
        if waiting != last:
            last = waiting
            took = f"{loop.time() - started:.0f} s"
            if waiting:
                common.err_console.print(
                    f"waiting ({took}) for: " + ", ".join(waiting), markup=False, highlight=False
                )
            else:
                common.err_console.print(
                    f"every pod ready ({took}); helm still waits (hook Jobs, PVCs)",
                    markup=False, highlight=False,
                )  # fmt: skip


def _waiting(target: Target, namespace: str) -> list[str]:
    from kubernetes import client

    from elasticctr.cli.status import waiting_pods

    api = common.kube_api_client(target)
    try:
        return waiting_pods(client.CoreV1Api(api), namespace, target.release)
    finally:
        api.close()


def install(
    files: list[Path] | None = VALUES_OPTION,
    sets: list[str] | None = SET_OPTION,
    set_strings: list[str] | None = SET_STRING_OPTION,
    set_files: list[str] | None = SET_FILE_OPTION,
    set_json: list[str] | None = SET_JSON_OPTION,
    set_literals: list[str] | None = SET_LITERAL_OPTION,
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    chart: str | None = CHART_OPTION,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Validate, render and show what would be created; change nothing."
    ),
    show_diff: bool = typer.Option(True, "--diff/--no-diff", help="With --dry-run: full diffs."),
    wait: bool = WAIT_OPTION,
    timeout: str = TIMEOUT_OPTION,
    atomic: bool = typer.Option(
        False, "--atomic/--no-atomic", help="Uninstall again if the install fails (implies wait)."
    ),
    create_namespace: bool = typer.Option(
        True, "--create-namespace/--no-create-namespace", help="Create the namespace if missing."
    ),
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Validate the values, then install a new release of the chart (ElasticCTR's -a).

    Examples:

      ectl install -f values.yaml

      ectl install -f values.yaml --dry-run          # what would be created

      ectl install -f base.yaml -f prod.yaml -n ctr --wait --timeout 15m

      ectl install -f values.yaml --set cube.shards=4,serving.replicas=3
    """
    _deploy(
        "install",
        _target(release, namespace, kubeconfig, context, helm),
        files,
        chart,
        sets=Overrides.of(sets, set_strings, set_files, set_json, set_literals),
        dry_run=dry_run,
        wait=wait,
        timeout=timeout,
        atomic=atomic,
        create_namespace=create_namespace,
        output=output,
        show_diff=show_diff,
    )


def upgrade(
    files: list[Path] | None = VALUES_OPTION,
    sets: list[str] | None = SET_OPTION,
    set_strings: list[str] | None = SET_STRING_OPTION,
    set_files: list[str] | None = SET_FILE_OPTION,
    set_json: list[str] | None = SET_JSON_OPTION,
    set_literals: list[str] | None = SET_LITERAL_OPTION,
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    chart: str | None = CHART_OPTION,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Show a per-resource diff against the running release."
    ),
    show_diff: bool = typer.Option(True, "--diff/--no-diff", help="With --dry-run: full diffs."),
    wait: bool = WAIT_OPTION,
    timeout: str = TIMEOUT_OPTION,
    atomic: bool = typer.Option(
        True,
        "--atomic/--no-atomic",
        help="Roll back automatically when the upgrade fails (default on; implies wait).",
    ),
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Validate the values, then upgrade the running release (rolls back if it fails).

    The values files replace the release's previous values (nothing is reused silently),
    so pass the same files you installed with, changed.

    Examples:

      ectl upgrade -f values.yaml --dry-run          # diff against the running release

      ectl upgrade -f values.yaml --timeout 20m
    """
    target = _target(release, namespace, kubeconfig, context, helm)

    def check(values: dict[str, Any], namespace: str) -> None:
        # A scenario release keeps the shape of the versions in its store prefix.
        from elasticctr.cli.scenario import check_upgrade

        check_upgrade(target, values, namespace)

    _deploy(
        "upgrade",
        target,
        files,
        chart,
        sets=Overrides.of(sets, set_strings, set_files, set_json, set_literals),
        dry_run=dry_run,
        wait=wait,
        timeout=timeout,
        atomic=atomic,
        create_namespace=False,
        output=output,
        show_diff=show_diff,
        check=check,
    )


def uninstall(
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be deleted."),
    keep_history: bool = typer.Option(
        False, "--keep-history", help="Keep the release record so `ectl rollback` can restore it."
    ),
    wait: bool = WAIT_OPTION,
    timeout: str = TIMEOUT_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Delete a release and its resources (PersistentVolumeClaims of StatefulSets stay).

    Examples:

      ectl uninstall --dry-run

      ectl uninstall -R ctr-demo -n ctr --yes
    """
    if not (yes or dry_run or sys.stdin.isatty()):
        raise EctlError(
            f"not deleting release {release} without confirmation",
            hint="pass --yes (there is no terminal to ask on)",
        )
    target = _target(release, namespace, kubeconfig, context, helm)
    ns = target.resolved_namespace()
    client = common.helm_client(target)

    async def go() -> None:
        current = await current_manifests(client, release, ns)
        if current is None:
            raise EctlError(
                f"release {release} not found in namespace {ns}",
                hint="`helm list -A` shows existing releases",
            )
        if dry_run:
            changes = diff_manifests(current, [], ns)
            _print_changes(
                changes, release=release, output=output, verb="uninstall", show_diff=False
            )
            return
        if not yes and not typer.confirm(
            f"Delete release {release} in {ns} ({len(current)} resources)?"
        ):
            raise typer.Abort()
        try:
            await client.uninstall_release(
                release, namespace=ns, keep_history=keep_history, wait=wait, timeout=timeout
            )
        except Exception as exc:
            raise common.helm_error(exc, f"uninstall {release} failed") from exc
        _delete_test_hooks(target, release, ns)
        if not common.print_data(
            output, {"release": release, "namespace": ns, "uninstalled": True}
        ):
            console.print(f"[green]uninstalled[/green] {release} from {ns}")

    common.run(go())


def _delete_test_hooks(target, release: str, namespace: str) -> None:
    """`helm uninstall` keeps hook resources: the `helm test` pod (kept after it succeeds so
    `helm test --logs` can read it) and its ConfigMap would outlive the release."""
    from kubernetes import client

    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=test"
    api = common.kube_api_client(target)
    try:
        core = client.CoreV1Api(api)
        core.delete_collection_namespaced_pod(namespace, label_selector=selector)
        core.delete_collection_namespaced_config_map(namespace, label_selector=selector)
    except Exception as exc:  # noqa: BLE001 - the release is gone; say what is left
        common.err_console.print(
            f"[yellow]warning:[/yellow] the release's test pod may remain ({exc}); "
            f"kubectl -n {namespace} delete pod,configmap -l {selector}"
        )
    finally:
        api.close()


def rollback(
    revision: int | None = typer.Argument(
        None, help="Revision to return to (default: the previous one; see `ectl history`)."
    ),
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Show the per-resource diff the rollback would apply."
    ),
    show_diff: bool = typer.Option(True, "--diff/--no-diff", help="With --dry-run: full diffs."),
    wait: bool = WAIT_OPTION,
    timeout: str = TIMEOUT_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Return the release to an earlier revision (helm rollback).

    Model versions are rolled back separately (cube/serving keep earlier versions);
    this restores the Kubernetes objects and values of a revision.

    Examples:

      ectl history

      ectl rollback --dry-run

      ectl rollback 3 --wait
    """
    common.require_kube_extra("pyhelm3")
    from pyhelm3.models import Release

    target = _target(release, namespace, kubeconfig, context, helm)
    ns = target.resolved_namespace()
    client = common.helm_client(target)

    async def go() -> None:
        current = await current_manifests(client, release, ns)
        if current is None:
            raise EctlError(
                f"release {release} not found in namespace {ns}",
                hint="`helm list -A` shows existing releases",
            )
        handle = Release(client._command, name=release, namespace=ns)
        goal = revision
        if goal is None:
            try:
                revisions = sorted(r.revision for r in await handle.history())
                now = (await handle.current_revision()).revision
            except Exception as exc:
                raise common.helm_error(exc, f"cannot read history of {release}") from exc
            earlier = [r for r in revisions if r < now]
            if not earlier:
                raise EctlError(f"release {release} has no revision before {now} to roll back to")
            goal = earlier[-1]
        if dry_run:
            target_docs = await current_manifests(client, release, ns, revision=goal)
            if target_docs is None:
                raise EctlError(
                    f"release {release} has no revision {goal}", hint="see `ectl history`"
                )
            _print_changes(
                diff_manifests(current, target_docs, ns),
                release=release,
                output=output,
                verb=f"rollback to {goal}",
                show_diff=show_diff,
            )
            return
        try:
            result = await handle.rollback(goal, wait=wait, timeout=timeout, cleanup_on_fail=True)
        except Exception as exc:
            raise common.helm_error(exc, f"rollback of {release} failed") from exc
        data = {
            "release": release,
            "namespace": ns,
            "revision": result.revision,
            "rolledBackTo": goal,
            "status": result.status.value,
        }
        if not common.print_data(output, data):
            console.print(
                f"[green]rolled back[/green] {release} to revision {goal} "
                f"(new revision {result.revision}, {result.status.value})"
            )

    common.run(go())


def history(
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """List a release's revisions (what `ectl rollback REVISION` can return to).

    Examples:

      ectl history

      ectl history -R ctr-demo -o json
    """
    common.require_kube_extra("pyhelm3")
    from pyhelm3.models import Release

    target = _target(release, namespace, kubeconfig, context, helm)
    ns = target.resolved_namespace()
    client = common.helm_client(target)

    async def go() -> list[dict[str, Any]]:
        handle = Release(client._command, name=release, namespace=ns)
        try:
            return [
                {
                    "revision": r.revision,
                    "updated": r.updated.isoformat(),
                    "status": r.status.value,
                    "description": r.description or "",
                }
                for r in await handle.history()
            ]
        except Exception as exc:
            raise common.helm_error(exc, f"cannot read history of {release}") from exc

    rows = common.run(go())
    if common.print_data(output, {"release": release, "namespace": ns, "revisions": rows}):
        return
    table = Table(title=f"{release} in {ns}")
    for column in ("revision", "updated", "status", "description"):
        table.add_column(column)
    for r in rows:
        table.add_row(str(r["revision"]), r["updated"], r["status"], r["description"])
    console.print(table)


def _template_output(value: str) -> str:
    if value not in ("yaml", "json"):
        raise typer.BadParameter("choose yaml or json")
    return value


def template(
    files: list[Path] | None = VALUES_OPTION,
    sets: list[str] | None = SET_OPTION,
    set_strings: list[str] | None = SET_STRING_OPTION,
    set_files: list[str] | None = SET_FILE_OPTION,
    set_json: list[str] | None = SET_JSON_OPTION,
    set_literals: list[str] | None = SET_LITERAL_OPTION,
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    chart: str | None = CHART_OPTION,
    output: str = typer.Option(
        "yaml",
        "--output",
        "-o",
        callback=_template_output,
        help="yaml (manifests) or json (a list of resources).",
    ),
    helm: str | None = HELM_OPTION,
) -> None:
    """Validate the values and print the rendered manifests (offline, no cluster needed).

    Examples:

      ectl template -f values.yaml > manifests.yaml

      ectl template -f values.yaml -o json | jq '.[].kind'
    """
    chart_path = _chart_path(chart, helm)
    values = load_user_values(
        files or [], chart_path, Overrides.of(sets, set_strings, set_files, set_json, set_literals)
    )
    ns = namespace or "default"
    client = common.helm_client(Target(release, ns, None, None, helm))
    docs = common.run(render(client, chart_path, release, values, ns, upgrade=False))
    if output == "json":
        common.print_json(docs)
    else:
        typer.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)


def register(app: typer.Typer) -> None:
    app.command("install")(install)
    app.command("upgrade")(upgrade)
    app.command("uninstall")(uninstall)
    app.command("rollback")(rollback)
    app.command("history")(history)
    app.command("template")(template)
