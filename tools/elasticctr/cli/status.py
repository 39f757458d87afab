"""`ectl status` and `ectl logs`: where a release stands, read through the Kubernetes API.

Release facts come from helm (pyhelm3); everything else from the kubernetes client:
Volcano Job phase, task pods, and the release's own services reached through the API
server's service and pod proxies (coordinator progress, cube-transfer's view of the
model store — readable or not, newest version — or else the fileserver's listing,
committed cube version, serving readiness). Read-only: nothing here changes the cluster.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from elasticctr import constants as C
from elasticctr.cli import _common as common
from elasticctr.cli._common import (
    CONTEXT_OPTION,
    HELM_OPTION,
    KUBECONFIG_OPTION,
    NAMESPACE_OPTION,
    RELEASE_OPTION,
    REQUEST_TIMEOUT,
    OutputFormat,
    Target,
    console,
)
from elasticctr.constants import DONEFILE, MLFLOW_PORT
from elasticctr.errors import EctlError
from elasticctr.versions import VERSIONS_DIR, is_version_id

INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
VOLCANO_TASK_LABEL = C.VOLCANO_TASK_LABEL
VOLCANO = ("batch.volcano.sh", "v1alpha1", "jobs")

COMPONENTS = ("trainer", "pserver", "coordinator", "fileserver", "cube-transfer", "serving")
"""What `ectl logs` accepts (ElasticCTR's -l); `cube`, `mlflow` and `console` work too."""
EXTRA_COMPONENTS = ("cube", "mlflow", "console")

# HTTP paths of the release's own services, read through the API server's service proxy.
COORDINATOR_PROGRESS_PATH = "v1/progress"
FILESERVER_VERSIONS_PATH = f"models/{VERSIONS_DIR}/"
"""Where the default model store (global.modelStore empty) keeps versions on the fileserver."""
CUBE_STATUS_PATH = "v1/status"
TRANSFER_STATUS_PATH = "v1/status"
"""cube-transfer's status (elasticctr.cube.transfer_server): the model store as it reads it."""
TRANSFER_PROGRESS_PATH = "v1/progress"
"""cube-transfer's read of the coordinator's stored progress (any store it reads)."""
SERVING_READY_PATH = "readyz"


LABEL_OF = {"mlflow": "tracking"}
"""Verb-facing component name -> the chart's `app.kubernetes.io/component` value."""


def component_name(labels: dict[str, str] | None) -> str:
    """The component a pod or Service belongs to, in the names `ectl` verbs use."""
    labels = labels or {}
    value = labels.get(COMPONENT_LABEL) or labels.get(VOLCANO_TASK_LABEL) or "?"
    return next((verb for verb, label in LABEL_OF.items() if label == value), value)


def _pod_component(pod) -> str:
    return component_name(pod.metadata.labels)


def _pod_row(pod) -> dict[str, Any]:
    statuses = pod.status.container_statuses or []
    return {
        "name": pod.metadata.name,
        "component": _pod_component(pod),
        "phase": pod.status.phase,
        "ready": f"{sum(1 for s in statuses if s.ready)}/{len(pod.spec.containers)}",
        "restarts": sum(s.restart_count for s in statuses),
        "node": pod.spec.node_name or "",
    }


def waiting_reason(pod) -> str | None:
    """Why a pod of the release is not ready yet, in a few words (None when it is ready or
    finished): the scheduler's message, a container's waiting reason, a failing init
    container, or "not ready" with its restarts."""
    st = pod.status
    if st.phase in ("Succeeded", "Failed"):
        return None
    for cond in st.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False":
            return f"not scheduled: {cond.message or cond.reason or 'pending'}"
    for cs in st.init_container_statuses or []:
        if cs.state and cs.state.waiting:
            return f"init container {cs.name}: {cs.state.waiting.reason}"
        if cs.state and cs.state.terminated and cs.state.terminated.exit_code:
            return f"init container {cs.name} exited {cs.state.terminated.exit_code}"
    statuses = st.container_statuses or []
    if not statuses:
        return st.phase or "Pending"
    for cs in statuses:
        if cs.state and cs.state.waiting:
            return f"{cs.name}: {cs.state.waiting.reason}"
    if all(cs.ready for cs in statuses):
        return None
    restarts = sum(cs.restart_count for cs in statuses)
    return "running, not ready" + (f" ({restarts} restarts)" if restarts else "")


def waiting_pods(core, namespace: str, release: str) -> list[str]:
    """'pod (why)' for each pod of the release that is not ready yet."""
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"{INSTANCE_LABEL}={release}", _request_timeout=REQUEST_TIMEOUT
    ).items
    out = []
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        why = waiting_reason(pod)
        if why:
            out.append(f"{pod.metadata.name} ({why})")
    return out


def _proxy_get(core, namespace: str, service, path: str) -> Any:
    """GET a path of a release Service through the API server; JSON if it parses."""
    port = service.spec.ports[0].port
    name = f"{service.metadata.name}:{port}"
    raw = core.connect_get_namespaced_service_proxy_with_path(
        name,
        namespace,
        path,
        _request_timeout=REQUEST_TIMEOUT,
        _preload_content=False,
        _headers={"Accept": "application/json"},  # the fileserver lists as JSON then
    )
    return _decode(raw.data)


def _pod_proxy_get(core, namespace: str, pod, path: str) -> Any:
    """GET a path of a pod's first container port through the API server (no Service)."""
    ports = [p.container_port for c in pod.spec.containers for p in (c.ports or [])]
    if not ports:
        raise EctlError(f"pod {pod.metadata.name} declares no port")
    raw = core.connect_get_namespaced_pod_proxy_with_path(
        f"{pod.metadata.name}:{ports[0]}",
        namespace,
        path,
        _request_timeout=REQUEST_TIMEOUT,
        _preload_content=False,
    )
    return _decode(raw.data)


def _decode(data: bytes) -> Any:
    text = data.decode(errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def newest_version(get: Callable[[str], Any]) -> str | None:
    """Newest `YYYYMMDD/HH` under the store's versions/ that has its donefile (the contract:
    a version without it does not exist). `get(path)` returns a fileserver JSON listing:
    the cluster is reached through the API server's service proxy, so this reads the
    fileserver's listing format rather than opening the store with elasticctr.modelstore."""
    days = get(FILESERVER_VERSIONS_PATH)
    if not isinstance(days, dict):
        return None
    for day in sorted((e["name"].strip("/") for e in days.get("entries", [])), reverse=True):
        hours = get(f"{FILESERVER_VERSIONS_PATH}{day}/")
        if not isinstance(hours, dict):
            continue
        for hour in sorted((e["name"].strip("/") for e in hours.get("entries", [])), reverse=True):
            if not is_version_id(f"{day}/{hour}"):
                continue  # not a version (the contract: elasticctr.versions)
            files = get(f"{FILESERVER_VERSIONS_PATH}{day}/{hour}/")
            if isinstance(files, dict) and any(
                e["name"] == DONEFILE for e in files.get("entries", [])
            ):
                return f"{day}/{hour}"
    return None


def _newest_version(core, namespace: str, service) -> str | None:
    from kubernetes.client.exceptions import ApiException

    def get(path: str) -> Any:
        try:
            return _proxy_get(core, namespace, service, path)
        except ApiException as exc:
            if exc.status == 404:  # no versions/ yet (fresh install): no model, not an error
                return None
            raise

    return newest_version(get)


def _stored_progress(core, namespace: str, pods, fileserver, values: Any) -> dict:
    """No running coordinator (the job completed, or is restarting): its durable record in
    the model store says what was trained and exported. Read by the release's
    cube-transfer (GET /v1/progress: any store it reads, HDFS and S3 included), else
    through the release's fileserver (the embedded store), else (a training-only release)
    from this machine, as the other verbs reach a store (`_progress_from_store`)."""
    from kubernetes.client.exceptions import ApiException

    from elasticctr.coordinator.core import progress_from_state
    from elasticctr.coordinator.runtime import STATE_FILE

    transfers = [
        p for p in pods if _pod_component(p) == "cube-transfer" and p.status.phase == "Running"
    ]
    if transfers:
        try:
            doc = _pod_proxy_get(core, namespace, transfers[0], TRANSFER_PROGRESS_PATH)
        except ApiException as exc:
            if exc.status == 404:
                return {"unavailable": "no running coordinator pod, and no stored progress"}
            from elasticctr.httpd import error_message  # the HTTP servers' module: lazily

            body = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else exc.body
            detail = error_message(body) if body else exc.reason
            return {"unavailable": f"stored coordinator progress: {detail}"}
        except Exception as exc:
            return {"unavailable": common.kube_error(exc, "cube-transfer").message}
        if not isinstance(doc, dict) or "partitions" not in doc:
            return {"unavailable": f"cube-transfer: unexpected progress {str(doc)[:200]!r}"}
        return doc
    if fileserver is None:
        return _progress_from_store(values)
    state = _try("fileserver", _proxy_get, core, namespace, fileserver, f"models/{STATE_FILE}")
    if not isinstance(state, dict) or "unavailable" in state:
        return {"unavailable": "no running coordinator pod, and no stored progress"}
    try:
        return progress_from_state(json.dumps(state))
    except EctlError as exc:
        return {"unavailable": f"stored coordinator progress: {exc.message}"}


def _progress_from_store(values: Any) -> dict:
    """The stored progress read from this machine: the release's global.modelStore (its
    global.s3 endpoint and global.data.hdfsAddress; credentials from this shell, as for
    `ectl data` and `ectl scenario`)."""
    from elasticctr import modelstore
    from elasticctr.coordinator.runtime import read_stored_progress
    from elasticctr.data import storage

    if not isinstance(values, dict) or "unavailable" in values:
        why = values.get("unavailable") if isinstance(values, dict) else values
        return {"unavailable": f"no running coordinator pod; release values: {why}"}
    g = values.get("global") or {}
    if not g.get("modelStore"):
        return {"unavailable": "no running coordinator pod"}
    try:
        storage.apply_s3_values(values)
        store = modelstore.open_store(
            g["modelStore"], hdfs_address=(g.get("data") or {}).get("hdfsAddress") or None
        )
        progress = read_stored_progress(store.url, store.hdfs_ugi)
    except EctlError as exc:
        return {"unavailable": f"stored coordinator progress: {exc.message}"}
    if progress is None:
        return {"unavailable": "no running coordinator pod, and no stored progress"}
    return progress


def store_from_transfer(doc: Any) -> dict[str, Any]:
    """The "model store" of `ectl status` from cube-transfer's GET /v1/status: the store
    it watches, whether its latest read succeeded (else the error), the newest complete
    version it saw, and the scenarios whose last poll failed (their own errors)."""
    if not isinstance(doc, dict) or "modelStore" not in doc:
        return {"unavailable": f"cube-transfer: unexpected /v1/status answer {str(doc)[:200]!r}"}
    scenarios = {
        name: {"newestVersion": sc.get("newestVersion"), "error": sc.get("error")}
        for name, sc in sorted((doc.get("scenarios") or {}).items())
        if isinstance(sc, dict) and name != "default"
    }
    readable = bool(doc.get("ready"))
    return {
        "source": "cube-transfer",
        "url": doc.get("modelStore"),
        "readable": readable,
        "newestVersion": doc.get("newestVersion"),
        "error": None if readable else (doc.get("detail") or doc.get("lastError")),
        "lastOkAt": doc.get("lastOkAt"),
        "lastPollAt": doc.get("lastPollAt"),
        "scenarios": scenarios,
    }


def store_from_fileserver(newest: Any, url: str) -> dict[str, Any]:
    """The "model store" from the fallback, the release fileserver's listing (no running
    cube-transfer, e.g. a training-only release): `newest` is what `_newest_version`
    gave, or `_try`'s {"unavailable"} when the listing failed."""
    failed = isinstance(newest, dict)
    return {
        "source": "fileserver",
        "url": url,
        "readable": not failed,
        "newestVersion": None if failed else newest,
        "error": newest.get("unavailable") if failed else None,
        "lastOkAt": None,
        "lastPollAt": None,
        "scenarios": {},
    }


def _model(core, namespace: str, pods, by_component: dict) -> dict[str, Any]:
    """`status["model"]`: the store (cube-transfer's view, else the fileserver listing),
    its newest version, and the committed cube version."""
    transfers = [
        p for p in pods if _pod_component(p) == "cube-transfer" and p.status.phase == "Running"
    ]
    fileserver = by_component.get("fileserver")
    if transfers:
        doc = _try(
            "cube-transfer", _pod_proxy_get, core, namespace, transfers[0], TRANSFER_STATUS_PATH
        )
        store = doc if isinstance(doc, dict) and "unavailable" in doc else store_from_transfer(doc)
        newest = store if "unavailable" in store else store["newestVersion"]
    elif fileserver is not None:
        newest = _try("fileserver", _newest_version, core, namespace, fileserver)
        port = fileserver.spec.ports[0].port
        url = f"http://{fileserver.metadata.name}.{namespace}.svc:{port}/models"
        store = store_from_fileserver(newest, url)
    else:
        newest = {"unavailable": "no fileserver service (model store elsewhere)"}
        store = {"unavailable": "no running cube-transfer pod and no fileserver service"}
    return {
        "newestVersion": newest,
        "store": store,
        "cube": _cube_committed(core, namespace, by_component["cube"])
        if "cube" in by_component
        else {"unavailable": "no cube service"},
    }


def coordinator_progress(live: Callable[[], dict] | None, stored: Callable[[], dict]) -> dict:
    """The coordinator row of `ectl status`: the running coordinator's answer (`live`, None
    when no coordinator pod runs); else, and also when the running pod does not answer (it
    is exiting as a bounded job ends, or restarting), its durable record (`stored`), which
    then names the live error under "live". Both are {"unavailable": why} when unreachable;
    when neither answers, the live error is shown."""
    answer = live() if live is not None else None
    if answer is not None and "unavailable" not in answer:
        return answer
    record = stored()
    if answer is None:
        return record
    if "unavailable" in record:
        return answer
    return {**record, "live": answer["unavailable"]}


def _cube_committed(core, namespace: str, service) -> Any:
    """The committed version of the cube shard the Service routes to (all shards agree
    after cube-transfer's phase 2; a straggler is reconciled on its next poll)."""
    shard = _try("cube", _proxy_get, core, namespace, service, CUBE_STATUS_PATH)
    if isinstance(shard, dict) and "committed" in shard:
        return {"committed": shard["committed"]}
    return shard


def _try(what: str, fn, *args) -> Any:
    """A service that is not up yet is a state to show, not an error to stop at."""
    try:
        return fn(*args)
    except EctlError as exc:
        return {"unavailable": f"{what}: {exc.message}"}
    except Exception as exc:
        return {"unavailable": common.kube_error(exc, what).message}


def _release_values(revision) -> dict:
    try:
        return common.run(revision.values(computed=True))
    except Exception as exc:
        raise common.helm_error(exc, "cannot read the release's values") from exc


def collect_status(target: Target) -> dict[str, Any]:
    """Everything `ectl status` shows, as one JSON-able dict."""
    common.require_kube_extra("pyhelm3")
    common.require_kube_extra("kubernetes")
    from kubernetes import client
    from pyhelm3 import errors as helm_errors

    namespace = target.resolved_namespace()
    helm = common.helm_client(target)
    try:
        revision = common.run(helm.get_current_revision(target.release, namespace=namespace))
    except helm_errors.ReleaseNotFoundError as exc:
        raise EctlError(
            f"release {target.release} not found in namespace {namespace}",
            hint="`ectl install -f values.yaml` creates it; `helm list -A` lists releases",
        ) from exc
    except Exception as exc:
        raise common.helm_error(exc, "cannot read the release") from exc
    try:
        # pyhelm3 fills chart metadata lazily (`helm get metadata`), not from get_current_revision.
        chart = common.run(revision.chart_metadata())
    except Exception as exc:
        raise common.helm_error(exc, "cannot read the release's chart") from exc
    status: dict[str, Any] = {
        "release": {
            "name": target.release,
            "namespace": namespace,
            "revision": revision.revision,
            "status": revision.status.value,
            "updated": revision.updated.isoformat(),
            "chart": f"{chart.name}-{chart.version}" if chart else "",
        }
    }
    api = common.kube_api_client(target)
    try:
        core = client.CoreV1Api(api)
        selector = f"{INSTANCE_LABEL}={target.release}"
        try:
            pods = core.list_namespaced_pod(
                namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
            ).items
            services = core.list_namespaced_service(
                namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
            ).items
        except Exception as exc:
            raise common.kube_error(exc, "cannot list pods") from exc
        status["pods"] = sorted((_pod_row(p) for p in pods), key=lambda r: r["name"])
        status["jobs"] = _volcano_jobs(api, namespace, selector)
        by_component = {component_name(s.metadata.labels): s for s in services if s.spec.ports}
        # The coordinator is a task of the Volcano Job: reached through its pod, not a Service.
        coordinators = [
            p for p in pods if _pod_component(p) == "coordinator" and p.status.phase == "Running"
        ]
        status["coordinator"] = coordinator_progress(
            (lambda: _try("coordinator", _pod_proxy_get, core, namespace, coordinators[0],
                          COORDINATOR_PROGRESS_PATH))
            if coordinators
            else None,
            lambda: _stored_progress(core, namespace, pods, by_component.get("fileserver"),
                                     _try("helm", _release_values, revision)),
        )  # fmt: skip
        status["model"] = _model(core, namespace, pods, by_component)
        status["serving"] = _serving(api, namespace, selector)
        if "serving" in by_component and "unavailable" not in status["serving"]:
            ready = _try(
                "serving", _proxy_get, core, namespace, by_component["serving"], SERVING_READY_PATH
            )
            status["serving"]["modelVersion"] = (
                ready.get("version") if isinstance(ready, dict) and "version" in ready else None
            )
            if isinstance(ready, dict) and ready.get("version") is None and ready.get("detail"):
                # Ready with nothing to serve: no model version exists yet.
                status["serving"]["detail"] = ready["detail"]
        mlflow = by_component.get("mlflow")
        status["mlflow"] = (
            {
                "url": f"http://{mlflow.metadata.name}.{namespace}.svc:{mlflow.spec.ports[0].port}",
                "portForward": f"ectl port-forward mlflow -R {target.release} -n {namespace} "
                f"-p {MLFLOW_PORT}",
            }
            if mlflow
            else {"unavailable": "mlflow disabled (or external: see global.mlflow.trackingUri)"}
        )
    finally:
        api.close()
    return status


def _volcano_jobs(api, namespace: str, selector: str) -> list[dict[str, Any]]:
    from kubernetes import client

    try:
        jobs = client.CustomObjectsApi(api).list_namespaced_custom_object(
            *VOLCANO[:2],
            namespace,
            VOLCANO[2],
            label_selector=selector,
            _request_timeout=REQUEST_TIMEOUT,
        )
    except Exception as exc:
        return [{"unavailable": common.kube_error(exc, "Volcano jobs").message}]
    from elasticctr.coordinator.upkeep import ANNOTATION_RECOVERED

    rows = []
    for job in jobs.get("items", []):
        st = job.get("status", {})
        annotations = job["metadata"].get("annotations") or {}
        try:  # restarts the coordinator gave back after healthy periods (docs/coordinator.md)
            recovered = int(annotations.get(ANNOTATION_RECOVERED) or 0)
        except ValueError:
            recovered = 0
        rows.append(
            {
                "name": job["metadata"]["name"],
                "phase": st.get("state", {}).get("phase", "Unknown"),
                "running": st.get("running", 0),
                "pending": st.get("pending", 0),
                "succeeded": st.get("succeeded", 0),
                "failed": st.get("failed", 0),
                "retryCount": st.get("retryCount", 0),
                "maxRetry": (job.get("spec") or {}).get("maxRetry"),
                "retriesRecovered": recovered,
                "tasks": {
                    task: sum(counts.get("phase", {}).values())
                    for task, counts in (st.get("taskStatusCount") or {}).items()
                },
            }
        )
    return rows


def _retries(job: dict[str, Any]) -> str:
    """ "1 of 5, 3 given back": the Volcano Job's spent retries, its maximum and what the
    coordinator gave back after healthy periods (older rows may lack the last two)."""
    text = str(job["retryCount"])
    if job.get("maxRetry") is not None:
        text += f" of {job['maxRetry']}"
    if job.get("retriesRecovered"):
        text += f", {job['retriesRecovered']} given back"
    return text


def _serving(api, namespace: str, selector: str) -> dict[str, Any]:
    from kubernetes import client

    try:
        deps = (
            client.AppsV1Api(api)
            .list_namespaced_deployment(
                namespace,
                label_selector=f"{selector},{COMPONENT_LABEL}=serving",
                _request_timeout=REQUEST_TIMEOUT,
            )
            .items
        )
    except Exception as exc:
        return {"unavailable": common.kube_error(exc, "serving").message}
    if not deps:
        return {"unavailable": "no serving Deployment"}
    dep = deps[0]
    ready = dep.status.ready_replicas or 0
    return {
        "deployment": dep.metadata.name,
        "ready": ready,
        "replicas": dep.spec.replicas or 0,
        "serving": ready > 0,
    }


def _fmt(value: Any) -> str:
    if isinstance(value, dict) and "unavailable" in value:
        return f"[dim]{value['unavailable']}[/dim]"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return "" if value is None else str(value)


def store_row(store: dict[str, Any]) -> str:
    """The "model store" row: readable with the newest version, or the error in red."""
    if "unavailable" in store:
        return _fmt(store)
    via = " (the fileserver's listing)" if store.get("source") == "fileserver" else ""
    url = escape(str(store.get("url") or "?"))
    if store.get("readable"):
        newest = store.get("newestVersion") or "none yet"
        when = f" at {store['lastOkAt']}" if store.get("lastOkAt") else ""
        return f"{url}: readable{when}{via}, newest version {escape(newest)}"
    last = store.get("lastOkAt")
    if via:
        seen = ""  # a listing done just now: no history
    elif last:
        seen = (
            f"; last good read {last}, newest version then {store.get('newestVersion') or 'none'}"
        )
    else:
        seen = "; never read"
    return f"[red]not readable[/red]{via}: {escape(str(store.get('error') or url))}{seen}"


def _print_status(s: dict[str, Any]) -> None:
    rel = s["release"]
    summary = Table(title=f"release {rel['name']} ({rel['namespace']})", show_header=False)
    summary.add_column("what")
    summary.add_column("value", overflow="fold")
    summary.add_row("helm", f"revision {rel['revision']}, {rel['status']}, {rel['chart']}")
    for job in s["jobs"]:
        if "unavailable" in job:
            summary.add_row("training job", _fmt(job))
        else:
            summary.add_row(
                f"job {job['name']}",
                f"{job['phase']} (running {job['running']}, pending {job['pending']}, "
                f"failed {job['failed']}, retries {_retries(job)})",
            )
    coord = s["coordinator"]
    if isinstance(coord, dict) and "tasks_done" in coord:
        parts = coord.get("partitions", [])
        exported = sum(1 for p in parts if p.get("exported"))
        label = "coordinator"
        if coord.get("stored"):  # its durable record: the pod is gone, or did not answer
            label += " (stored; not answering)" if coord.get("live") else " (stored; not running)"
        summary.add_row(
            label,
            f"{exported}/{len(parts)} partitions exported, tasks done {coord['tasks_done']}, "
            f"leased {coord['tasks_leased']}, pending {coord['tasks_pending']}, "
            f"retried {coord['tasks_retried']}, samples {coord['samples']}",
        )
        if coord.get("tasks_failed"):  # tasks given back with a reason (e.g. a read failed)
            summary.add_row(
                "coordinator task failures",
                f"{coord['tasks_failed']}, last: {coord['last_failure']}",
            )
    else:
        summary.add_row("coordinator", _fmt(coord))
    store = s["model"].get("store")
    if store is not None:
        summary.add_row("model store", store_row(store))
        for name, sc in (store.get("scenarios") or {}).items():
            if sc.get("error"):
                summary.add_row(f"model store ({name})", f"[yellow]{escape(sc['error'])}[/yellow]")
    summary.add_row("newest model version", _fmt(s["model"]["newestVersion"]) or "none yet")
    cube = s["model"]["cube"]
    summary.add_row(
        "cube committed version",
        str(cube["committed"] or "none yet") if "committed" in cube else _fmt(cube),
    )
    serving = s["serving"]
    summary.add_row(
        "serving",
        _fmt(serving)
        if "unavailable" in serving
        else f"{serving['ready']}/{serving['replicas']} ready, model version "
        f"{serving.get('modelVersion') or serving.get('detail') or 'none loaded'}",
    )
    summary.add_row(
        "mlflow",
        _fmt(s["mlflow"])
        if "url" not in s["mlflow"]
        else f"{s['mlflow']['url']}  (local: {s['mlflow']['portForward']})",
    )
    console.print(summary)
    pods = Table(title="pods")
    for column in ("name", "component", "phase", "ready", "restarts", "node"):
        pods.add_column(column)
    for p in s["pods"]:
        pods.add_row(
            *(str(p[c]) for c in ("name", "component", "phase", "ready", "restarts", "node"))
        )
    console.print(pods)


def _interval(value: str) -> int:
    seconds = common.whole_seconds(value)
    if seconds < 1:
        raise typer.BadParameter(f"{value!r} is under 1s; {common.DURATION_FIX}")
    return seconds


def status(
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    watch: bool = typer.Option(
        False,
        "--watch",
        "-w",
        help="Show it again every --interval until Ctrl-C (as kubectl get -w); with "
        "-o json one document per line, with -o yaml documents separated by ---.",
    ),
    interval: int = typer.Option(
        "5s",
        "--interval",
        parser=_interval,
        metavar="DURATION",
        help="Time between two looks with --watch: 5s, 1m (a bare number is seconds).",
    ),
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Show where a release stands: helm, Volcano Job, pods, training, models, serving.

    Also the coordinator's progress, the model store (readable or not, as cube-transfer
    reads it), the newest model version, the committed cube version and the MLflow URL.

    Examples:

      ectl status

      ectl status -w --interval 10s

      ectl status -R ctr-demo -n ctr -o json | jq .coordinator
    """
    import time

    target = Target(release, namespace, kubeconfig, context, helm)
    rounds = 0
    if watch:
        _exit_on_interrupt()
    try:
        while True:
            data = collect_status(target)
            if watch and output is OutputFormat.json:
                common.print_json_line(data)
            elif watch and output is OutputFormat.yaml:
                if rounds:
                    print("---", flush=True)
                common.print_yaml(data)
            elif not common.print_data(output, data):
                if watch and console.is_terminal:
                    console.clear()
                _print_status(data)
            rounds += 1
            if not watch:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        if not watch:
            raise


def _exit_on_interrupt() -> None:
    """-w: Ctrl-C (SIGINT) ends the watch at once with exit 0, as kubectl's -w. Not by
    KeyboardInterrupt: raised inside a helm or API call it waits for that call's cleanup
    (seen in CI: still running 60 s after SIGINT on a loaded machine). Every document is
    written and flushed whole before the next read, so nothing is cut."""
    import os
    import signal
    import sys

    def stop(_signum, _frame) -> None:
        try:
            sys.stdout.flush()
        finally:
            os._exit(0)

    signal.signal(signal.SIGINT, stop)


def split_lines(chunks) -> Iterator[str]:
    """Whole lines from a byte stream whose chunks end anywhere (a followed log)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.decode(errors="replace").rstrip("\r")
    if pending:
        yield pending.decode(errors="replace").rstrip("\r")


def _component(value: str) -> str:
    if value not in COMPONENTS + EXTRA_COMPONENTS:
        raise typer.BadParameter(f"choose one of {', '.join(COMPONENTS + EXTRA_COMPONENTS)}")
    return value


def logs(
    component: str = typer.Argument(
        ...,
        callback=_component,
        autocompletion=lambda: list(COMPONENTS + EXTRA_COMPONENTS),
        help=f"One of {', '.join(COMPONENTS)} (also {', '.join(EXTRA_COMPONENTS)}).",
    ),
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    follow: bool = typer.Option(
        False, "--follow", "-f", "-F", help="Keep streaming new lines (as kubectl logs -f)."
    ),
    tail: int = typer.Option(200, "--tail", help="Lines per pod to start from (-1 = all)."),
    since: int | None = typer.Option(
        None,
        "--since",
        parser=common.whole_seconds,
        metavar="DURATION",
        help="Only lines newer than this, as kubectl logs --since: 45s, 10m, 1h30m (a bare "
        "number is seconds).",
    ),
    previous: bool = typer.Option(
        False, "--previous", help="The previous (crashed) container's logs."
    ),
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    """Print the logs of a component's pods, each line prefixed with its pod (ElasticCTR's -l).

    Examples:

      ectl logs trainer

      ectl logs pserver --tail 50 -f

      ectl logs cube-transfer --since 10m
    """
    common.require_kube_extra("kubernetes")
    from kubernetes import client

    target = Target(release, namespace, kubeconfig, context)
    ns = target.resolved_namespace()
    api = common.kube_api_client(target)
    core = client.CoreV1Api(api)
    selector = f"{INSTANCE_LABEL}={release}"
    try:
        pods = core.list_namespaced_pod(
            ns, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
        ).items
    except Exception as exc:
        api.close()
        raise common.kube_error(exc, "cannot list pods") from exc
    pods = sorted(
        (p for p in pods if _pod_component(p) == component), key=lambda p: p.metadata.name
    )
    if not pods:
        api.close()
        raise EctlError(
            f"no {component} pods for release {release} in {ns}",
            hint="`ectl status` lists the release's pods",
        )
    kwargs: dict[str, Any] = {"previous": previous}
    if tail >= 0:
        kwargs["tail_lines"] = tail
    if since:
        kwargs["since_seconds"] = since
    lock = threading.Lock()

    def stream(pod) -> None:
        name = pod.metadata.name
        try:
            resp = core.read_namespaced_pod_log(
                name,
                ns,
                follow=follow,
                _preload_content=False,
                _request_timeout=None if follow else REQUEST_TIMEOUT,
                **kwargs,
            )
            for line in split_lines(resp.stream() if follow else [resp.data]):
                with lock:
                    typer.echo(f"{name} | {line}" if len(pods) > 1 else line)
        except Exception as exc:
            with lock:
                common.err_console.print(
                    f"{name}: {common.kube_error(exc, 'logs')}", markup=False, style="yellow"
                )

    try:
        if follow and len(pods) > 1:
            threads = [threading.Thread(target=stream, args=(p,), daemon=True) for p in pods]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            for p in pods:
                stream(p)
    finally:
        api.close()


def register(app: typer.Typer) -> None:
    app.command("status")(status)
    app.command("logs")(logs)
