"""`ectl doctor`: can this machine deploy ElasticCTR? Each failing check comes with a fix.

Checks run in order and later ones are skipped (not failed) when what they need is
missing, so the first red line is the one to fix. Read-only: it never changes the cluster.
"""

from __future__ import annotations

import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from elasticctr.cli import _common as common
from elasticctr.cli._common import (
    CONTEXT_OPTION,
    HELM_OPTION,
    KUBECONFIG_OPTION,
    NAMESPACE_OPTION,
    REQUEST_TIMEOUT,
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
    Overrides,
    load_user_values,
)
from elasticctr.constants import DEFAULT_RELEASE, ENV_HELM
from elasticctr.errors import EctlError

MIN_HELM = (3, 8)
VOLCANO_CRDS = (
    "jobs.batch.volcano.sh",
    "podgroups.scheduling.volcano.sh",
    "queues.scheduling.volcano.sh",
)
# Volcano's scheduler's leader-election Lease is named after its scheduler name.
VOLCANO_SCHEDULER_LEASE = "volcano"
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
# Elastic training on a shared cluster (docs/chart.md "Scheduling on a shared cluster"):
# what the Volcano scheduler must run so that trainers are preempted (preempt: for pods of
# higher priority in the queue; reclaim: for other queues) and never below the gang.
SCHEDULER_CONFIGMAP = "volcano-scheduler-configmap"
SCHEDULER_CONF_KEY = "volcano-scheduler.conf"
PREEMPTION_ACTIONS = ("allocate", "preempt", "reclaim")
PREEMPTION_PLUGINS = ("priority", "gang", "conformance", "proportion")
# What a StorageClass makes, told from its provisioner (or the CSI driver a shared
# provisioner such as Huawei's everest names in its parameters): file storage (NFS-like:
# ReadWriteMany, root-owned volumes that fsGroup does not change) or block storage
# (ReadWriteOnce only). Substrings of the driver names; anything else is "unknown".
CSI_DRIVER_PARAMETER = "csi.storage.k8s.io/csi-driver-name"
FILE_STORAGE_MARKERS = (
    "nfs", "efs.", "cephfs", "azure-file", "file.csi", "filestore", "nas.", "sfs", "cfs",
    "glusterfs", "juicefs",
)  # fmt: skip
BLOCK_STORAGE_MARKERS = (
    "ebs", "gce-pd", "pd.csi", "azure-disk", "disk.", "cds", "evs", "rbd", "local-path",
    "no-provisioner", "host-path", "hostpath",
)  # fmt: skip
DEFAULT_INGRESS_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
# The resource metrics API the serving HPA reads CPU from (metrics-server serves it).
METRICS_API_SERVICE = "v1beta1.metrics.k8s.io"
# Group versions of the Volcano objects: the training Job (and the PodGroup Volcano makes for
# it), the Queues the chart may create.
VOLCANO_JOB_API = ("batch.volcano.sh", "v1alpha1")
VOLCANO_SCHEDULING_API = ("scheduling.volcano.sh", "v1beta1")
# (group, resource, verb) the chart's objects need in the release namespace.
NEEDED_PERMISSIONS = (
    ("apps", "deployments", "create"),
    ("apps", "statefulsets", "create"),
    ("", "services", "create"),
    ("", "configmaps", "create"),
    ("", "secrets", "create"),
    ("", "persistentvolumeclaims", "create"),
    ("batch.volcano.sh", "jobs", "create"),
    ("", "pods", "list"),
    ("", "pods/log", "get"),
    ("", "pods/portforward", "create"),
    ("", "services/proxy", "get"),
)


@dataclass
class Check:
    name: str
    status: str  # ok | fail | skip | warn
    detail: str
    fix: str = ""


def _helm_check(helm: str | None) -> Check:
    try:
        binary = common.find_helm(helm)
    except EctlError as exc:
        return Check(
            "helm",
            "fail",
            exc.message,
            f"run `make tools` then `source scripts/tools-env.sh`, or set ${ENV_HELM}",
        )
    try:
        out = subprocess.run(
            [binary, "version", "--template", "{{ .Version }}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("helm", "fail", f"{binary} does not run: {exc}", "reinstall: `make tools`")
    version = out.stdout.strip()
    try:
        major, minor = (int(p) for p in version.lstrip("v").split(".")[:2])
    except ValueError:
        return Check("helm", "fail", f"{binary}: unreadable version {version!r}", "`make tools`")
    if (major, minor) < MIN_HELM:
        return Check(
            "helm",
            "fail",
            f"{binary} is {version}; need >= v{MIN_HELM[0]}.{MIN_HELM[1]}",
            "run `make tools` (builds the pinned helm into .tools/bin)",
        )
    return Check("helm", "ok", f"{version} ({binary})")


def run_checks(target: Target, release: str, values: dict | None = None) -> list[Check]:
    """Every check, in order; needs-the-cluster checks are skipped when it is unreachable.
    With `values` (effective values of `-f` files), also the Volcano queue and the
    PriorityClasses the training job names."""
    checks = [_helm_check(target.helm)]
    try:
        common.require_kube_extra("kubernetes")
    except EctlError as exc:
        return (
            checks
            + [Check("kubeconfig", "fail", exc.message, exc.hint or "")]
            + _skipped("no kubernetes client")
        )
    from kubernetes import client

    try:
        api = common.kube_api_client(target)
    except EctlError as exc:
        checks.append(
            Check(
                "kubeconfig",
                "fail",
                exc.message,
                "point --kubeconfig / $KUBECONFIG at your cluster's kubeconfig "
                "(e.g. the file your cluster admin gave you), or pick one with --context",
            )
        )
        return checks + _skipped("no kubeconfig")
    host = api.configuration.host
    checks.append(Check("kubeconfig", "ok", f"API server {host}"))
    try:
        info = client.VersionApi(api).get_code(_request_timeout=REQUEST_TIMEOUT)
        checks.append(Check("cluster reachable", "ok", f"Kubernetes {info.git_version} at {host}"))
    except Exception as exc:
        err = common.kube_error(exc, "cannot reach the API server")
        checks.append(
            Check(
                "cluster reachable",
                "fail",
                f"{host}: {err.message}",
                "start the cluster or VPN, check the server address and context "
                "(`kubectl cluster-info`), then rerun `ectl doctor`",
            )
        )
        api.close()
        return checks + _skipped("cluster unreachable")
    namespace = target.resolved_namespace()
    try:
        checks += [
            _volcano_crds(api),
            _volcano_scheduler(api),
            _volcano_preemption(api),
            _storage_class(api),
            _permissions(api, namespace),
        ]
        if values is not None:
            checks += _values_checks(api, values)
    finally:
        api.close()
    return checks


def _values_checks(api, values: dict) -> list[Check]:
    """What the effective values need from the cluster: the Volcano queue, PriorityClasses
    and API versions of the job, every StorageClass a claim names, every IngressClass an
    enabled Ingress names, the metrics API when serving autoscales."""
    checks = []
    if (values.get("trainer") or {}).get("enabled"):
        volcano = values["trainer"]["volcano"]
        checks += [_volcano_queue(api, volcano), _priority_classes(api, volcano)]
    if needed := volcano_apis_needed(values):
        checks.append(_volcano_apis(api, needed))
    if claims := claims_needed(values):
        checks += _storage_classes(api, claims, volume_permissions(values))
    if ingresses := ingresses_needed(values):
        checks += _ingress_classes(api, ingresses)
    serving = values.get("serving") or {}
    if serving.get("enabled") and (serving.get("autoscaling") or {}).get("enabled"):
        checks.append(_metrics_api(api))
    return checks


def _skipped(reason: str) -> list[Check]:
    names = (
        "Volcano CRDs",
        "Volcano scheduler",
        "Volcano preemption",
        "default StorageClass",
        "permissions",
    )
    return [Check(name, "skip", f"skipped: {reason}") for name in names]


def _volcano_crds(api) -> Check:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(api)
    missing = []
    for name in VOLCANO_CRDS:
        try:
            ext.read_custom_resource_definition(name, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                missing.append(name)
                continue
            return Check("Volcano CRDs", "fail", common.kube_error(exc, name).message, _RBAC_FIX)
    if missing:
        return Check(
            "Volcano CRDs",
            "fail",
            "missing: " + ", ".join(missing),
            "install Volcano into the cluster (its Helm chart volcano-sh/volcano, namespace "
            "volcano-system); the trainer runs as a Volcano Job",
        )
    return Check("Volcano CRDs", "ok", ", ".join(VOLCANO_CRDS))


def _volcano_scheduler(api) -> Check:
    from kubernetes import client

    try:
        deployments = client.AppsV1Api(api).list_deployment_for_all_namespaces(
            field_selector="metadata.name=volcano-scheduler", _request_timeout=REQUEST_TIMEOUT
        )
    except Exception as exc:
        return Check(
            "Volcano scheduler",
            "fail",
            common.kube_error(exc, "list deployments").message,
            _RBAC_FIX,
        )
    if not deployments.items:
        # A scheduler run another way (outside the cluster, or with leader election in any
        # Deployment) holds the leader-election Lease named after its scheduler name.
        lease = _volcano_scheduler_lease(api)
        if lease:
            return Check("Volcano scheduler", "ok", lease)
        return Check(
            "Volcano scheduler",
            "fail",
            "no volcano-scheduler Deployment in any namespace and no Volcano scheduler "
            f"holding a '{VOLCANO_SCHEDULER_LEASE}' Lease",
            "install Volcano (chart volcano-sh/volcano); without its scheduler Volcano Jobs "
            "stay Pending",
        )
    dep = deployments.items[0]
    ready = dep.status.ready_replicas or 0
    if ready < 1:
        return Check(
            "Volcano scheduler",
            "fail",
            f"{dep.metadata.namespace}/volcano-scheduler has no ready replica",
            f"kubectl -n {dep.metadata.namespace} describe deploy volcano-scheduler",
        )
    return Check("Volcano scheduler", "ok", f"{dep.metadata.namespace}/volcano-scheduler ready")


def scheduler_conf_gaps(text: str) -> list[str]:
    """What a Volcano scheduler configuration lacks for elastic trainers: missing actions
    and plugins, e.g. ["action preempt", "plugin proportion"]; [] when complete."""
    import yaml

    try:
        conf = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        return [f"readable configuration ({exc})"]
    if not isinstance(conf, dict):
        return ["readable configuration (not a mapping)"]
    actions = {a.strip() for a in str(conf.get("actions") or "").split(",")}
    plugins = {
        p.get("name"): p
        for tier in conf.get("tiers") or []
        if isinstance(tier, dict)
        for p in tier.get("plugins") or []
        if isinstance(p, dict)
    }
    gaps = [f"action {a}" for a in PREEMPTION_ACTIONS if a not in actions]
    gaps += [f"plugin {p}" for p in PREEMPTION_PLUGINS if p not in plugins]
    # The gang plugin keeps preempt and reclaim from taking a job below its minAvailable;
    # Volcano's own chart turns that off (enablePreemptable: false).
    for flag in ("enablePreemptable", "enableReclaimable"):
        if plugins.get("gang", {}).get(flag) is False:
            gaps.append(f"gang {flag} (it is false)")
    # With priority's preemptable on, preemption between two jobs of a queue needs a
    # higher job priority: a scenario whose trainers fell below its minimum waits while a
    # sibling scenario (same class) keeps borrowed trainers in the room it needs.
    if "priority" in plugins and plugins["priority"].get("enablePreemptable") is not False:
        gaps.append("priority enablePreemptable: false (a scenario below its minimum waits)")
    return gaps


def _volcano_preemption(api) -> Check:
    """Warn (training still runs) when trainers cannot be preempted and reclaimed."""
    from kubernetes import client

    name = "Volcano preemption"
    try:
        found = client.CoreV1Api(api).list_config_map_for_all_namespaces(
            field_selector=f"metadata.name={SCHEDULER_CONFIGMAP}", _request_timeout=REQUEST_TIMEOUT
        )
    except Exception as exc:
        return Check(name, "warn", common.kube_error(exc, "list configmaps").message, _RBAC_FIX)
    enable = (
        f'set `actions: "enqueue, allocate, preempt, reclaim, backfill"`, the plugins '
        f"{', '.join(PREEMPTION_PLUGINS)}, `enablePreemptable: false` on priority and not on gang "
        "in the "
        "scheduler configuration (docs/chart.md, Scheduling on a shared cluster), then "
        "restart volcano-scheduler"
    )
    if not found.items:
        return Check(
            name,
            "warn",
            f"no {SCHEDULER_CONFIGMAP} ConfigMap: cannot tell whether the scheduler preempts "
            "and reclaims trainers",
            "if Volcano runs with a configuration file of its own: " + enable,
        )
    cm = found.items[0]
    where = f"{cm.metadata.namespace}/{SCHEDULER_CONFIGMAP}"
    text = (cm.data or {}).get(SCHEDULER_CONF_KEY)
    if text is None:
        return Check(name, "warn", f"{where} has no {SCHEDULER_CONF_KEY}", enable)
    gaps = scheduler_conf_gaps(text)
    if gaps:
        return Check(
            name,
            "warn",
            f"{where} lacks {', '.join(gaps)}: trainers are not preempted for other work "
            "(the job still runs)",
            enable,
        )
    return Check(name, "ok", f"{where}: {', '.join(PREEMPTION_ACTIONS)} with the gang plugins")


def _volcano_queue(api, volcano: dict) -> Check:
    """The job's queue exists and is Open (the webhook admits Jobs only then), or, when the
    chart is to create it, no queue of that name exists yet."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    name, create = volcano["queue"], volcano["createQueue"]["enabled"]
    check = f"Volcano queue {name}"
    try:
        queue = client.CustomObjectsApi(api).get_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues", name, _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as exc:
        if exc.status != 404:
            return Check(check, "fail", common.kube_error(exc, "read queue").message, _RBAC_FIX)
        if create:
            return Check(check, "ok", "absent; the chart creates it (trainer.volcano.createQueue)")
        return Check(
            check,
            "fail",
            f"no Volcano queue {name}: the job would be rejected",
            "create it (a scheduling.volcano.sh/v1beta1 Queue), set "
            "trainer.volcano.createQueue.enabled, or name an existing trainer.volcano.queue",
        )
    if create:
        return Check(
            check,
            "fail",
            f"queue {name} exists: the chart's createQueue hook would fail",
            "set trainer.volcano.createQueue.enabled: false to use it, or name another queue",
        )
    state = (queue.get("status") or {}).get("state") or "unknown"
    if state != "Open":
        return Check(
            check,
            "fail",
            f"queue {name} is {state}: Volcano admits jobs only into Open queues",
            f"open it (vcctl queue operate -n {name} -a open) or name another queue",
        )
    return Check(check, "ok", "exists and is Open")


def _priority_classes(api, volcano: dict) -> Check:
    """The per-role PriorityClasses exist, or, when the chart is to create them, are free."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    classes = volcano["priorityClasses"]
    names = [
        n for n in (volcano["priorityClassName"], classes["guaranteed"], classes["trainer"]) if n
    ]
    created = {classes["guaranteed"], classes["trainer"]} if classes["create"] else set()
    if not names:
        return Check("PriorityClasses", "ok", "none named (the job's pods have no priority)")
    scheduling = client.SchedulingV1Api(api)
    problems, fixes = [], []
    for name in dict.fromkeys(names):
        try:
            pc = scheduling.read_priority_class(name, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                return Check(
                    "PriorityClasses", "fail", common.kube_error(exc, "read").message, _RBAC_FIX
                )
            if name not in created:
                problems.append(f"{name} does not exist")
                fixes.append(f"create PriorityClass {name} or set priorityClasses.create")
            continue
        owner = (pc.metadata.annotations or {}).get("meta.helm.sh/release-name")
        if name in created and not owner:
            problems.append(f"{name} exists outside Helm")
            fixes.append(f"set priorityClasses.create: false to use {name}, or rename")
    if problems:
        return Check("PriorityClasses", "fail", "; ".join(problems), "; ".join(fixes))
    return Check("PriorityClasses", "ok", ", ".join(dict.fromkeys(names)))


def _volcano_scheduler_lease(api) -> str | None:
    """'<ns>/<name> held by X, renewed N s ago' when a Volcano scheduler renews its Lease."""
    import datetime as dt

    from kubernetes import client

    try:
        leases = client.CoordinationV1Api(api).list_lease_for_all_namespaces(
            field_selector=f"metadata.name={VOLCANO_SCHEDULER_LEASE}",
            _request_timeout=REQUEST_TIMEOUT,
        )
    except Exception:
        return None  # no permission to read leases: the Deployment check above decides
    now = dt.datetime.now(dt.UTC)
    for lease in leases.items:
        spec = lease.spec
        if not (spec and spec.holder_identity and spec.renew_time):
            continue
        age = (now - spec.renew_time).total_seconds()
        if age <= 2 * (spec.lease_duration_seconds or 15):
            return (
                f"{lease.metadata.namespace}/{lease.metadata.name} Lease held by "
                f"{spec.holder_identity}, renewed {age:.0f} s ago"
            )
    return None


def _storage_class(api) -> Check:
    from kubernetes import client

    try:
        classes = client.StorageV1Api(api).list_storage_class(_request_timeout=REQUEST_TIMEOUT)
    except Exception as exc:
        return Check(
            "default StorageClass", "fail", common.kube_error(exc, "list").message, _RBAC_FIX
        )
    default = [
        sc.metadata.name
        for sc in classes.items
        if any((sc.metadata.annotations or {}).get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS)
    ]
    if not default:
        names = ", ".join(sc.metadata.name for sc in classes.items) or "none"
        return Check(
            "default StorageClass",
            "fail",
            f"no default StorageClass (classes: {names})",
            "mark one default: kubectl patch storageclass NAME -p "
            '\'{"metadata":{"annotations":{"storageclass.kubernetes.io/is-default-class":'
            '"true"}}}\', or set the storageClass of fileserver/mlflow persistence in values',
        )
    return Check("default StorageClass", "ok", ", ".join(default))


@dataclass(frozen=True)
class Claim:
    """A PersistentVolumeClaim the chart creates: values key, class ("" = default), mode."""

    key: str
    storage_class: str
    access_mode: str


def claims_needed(values: dict) -> list[Claim]:
    """The claims the chart creates for these effective values (an existingClaim is the
    user's own and is not checked)."""
    claims = []

    def part(name: str) -> dict:
        section = values.get(name) or {}
        return section if section.get("enabled") else {}

    def add(key: str, spec: dict, mode: str | None = None) -> None:
        if spec and not spec.get("existingClaim") and spec.get("enabled", True):
            access_mode = mode or spec.get("accessMode") or "ReadWriteOnce"
            claims.append(Claim(key, spec.get("storageClass") or "", access_mode))

    add("trainer.staging", part("trainer").get("staging"))
    cube = part("cube")
    add("cube.sharedStorage", cube.get("sharedStorage"))
    add("cube.persistence", cube.get("persistence"), "ReadWriteOnce")  # volumeClaimTemplates
    add("fileserver.persistence", part("fileserver").get("persistence"))
    add("mlflow.persistence", part("mlflow").get("persistence"), "ReadWriteOnce")
    return claims


def volume_permissions(values: dict) -> bool:
    return bool(((values.get("global") or {}).get("volumePermissions") or {}).get("enabled"))


def storage_kind(provisioner: str, parameters: dict | None = None) -> str:
    """What the class makes: file (NFS-like, ReadWriteMany), block (ReadWriteOnce only)
    or unknown."""
    names = [(parameters or {}).get(CSI_DRIVER_PARAMETER) or "", provisioner or ""]
    for name in (n.lower() for n in names if n):
        if any(m in name for m in FILE_STORAGE_MARKERS):
            return "file"
        if any(m in name for m in BLOCK_STORAGE_MARKERS):
            return "block"
    return "unknown"


def judge_storage_class(
    label: str, found: tuple[str, dict] | None, claims: list[Claim], permissions: bool
) -> Check:
    """One StorageClass against the claims that use it. `found` = (provisioner, parameters)
    of the class, None when it does not exist."""
    name = f"StorageClass {label}"
    keys = ", ".join(c.key for c in claims)
    uses = ", ".join(f"{c.key} ({c.access_mode})" for c in claims)
    if found is None:
        return Check(
            name,
            "fail",
            f"no StorageClass {label}: the claims of {keys} would stay Pending",
            f"create it, or set {' / '.join(f'{c.key}.storageClass' for c in claims)} to a "
            "class that exists (kubectl get storageclass)",
        )
    provisioner, parameters = found
    kind = storage_kind(provisioner, parameters)
    driver = (parameters or {}).get(CSI_DRIVER_PARAMETER)
    made_by = f"provisioner {provisioner}" + (f" (driver {driver})" if driver else "")
    shared = [c.key for c in claims if c.access_mode == "ReadWriteMany"]
    if shared and kind == "block":
        return Check(
            name,
            "fail",
            f"{made_by} makes block volumes, which are ReadWriteOnce only: "
            f"{', '.join(shared)} ask for ReadWriteMany and would stay Pending",
            "use a file-storage class for them (EFS, CFS, SFS csi-nas, NFS, CephFS), or "
            "accessMode: ReadWriteOnce with every pod that mounts them on one node "
            "(docs/chart.md, Shared volumes)",
        )
    if shared and kind == "unknown":
        return Check(
            name,
            "warn",
            f"{made_by}: cannot tell whether it serves ReadWriteMany, which "
            f"{', '.join(shared)} ask for",
            "check the driver's access modes; NFS-like classes (EFS, CFS, SFS csi-nas, NFS, "
            "CephFS) serve it",
        )
    if kind == "file" and not permissions:
        return Check(
            name,
            "warn",
            f"{made_by} makes file-storage volumes, usually with a root-owned root directory "
            f"that fsGroup does not change: the pods (uid 10001) may not write {keys}",
            "set global.volumePermissions.enabled: true (docs/chart.md, Shared volumes), or "
            "make the class hand out volumes owned by uid 10001",
        )
    what = {"file": "file storage", "block": "ReadWriteOnce only"}.get(kind, "kind unknown")
    return Check(name, "ok", f"{made_by} ({what}); used by {uses}")


def _storage_classes(api, claims: list[Claim], permissions: bool) -> list[Check]:
    from kubernetes import client

    try:
        classes = client.StorageV1Api(api).list_storage_class(_request_timeout=REQUEST_TIMEOUT)
    except Exception as exc:
        return [Check("StorageClasses", "fail", common.kube_error(exc, "list").message, _RBAC_FIX)]
    found = {sc.metadata.name: (sc.provisioner, sc.parameters or {}) for sc in classes.items}
    defaults = [
        sc.metadata.name
        for sc in classes.items
        if any((sc.metadata.annotations or {}).get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS)
    ]
    checks = []
    for class_name in dict.fromkeys(c.storage_class for c in claims):
        users = [c for c in claims if c.storage_class == class_name]
        if class_name:
            checks.append(
                judge_storage_class(class_name, found.get(class_name), users, permissions)
            )
        elif defaults:
            label = f"(default: {defaults[0]})"
            checks.append(judge_storage_class(label, found[defaults[0]], users, permissions))
        else:
            checks.append(
                Check("StorageClass (default)", "skip", "no default StorageClass (see above)")
            )
    return checks


def ingresses_needed(values: dict) -> list[tuple[str, str]]:
    """(values key, ingressClassName) of every Ingress the chart creates; "" = the default."""
    found = []
    for part in ("serving", "mlflow"):
        section = values.get(part) or {}
        ingress = section.get("ingress") or {}
        if section.get("enabled") and ingress.get("enabled"):
            found.append((f"{part}.ingress", ingress.get("className") or ""))
    return found


def judge_ingress_class(
    class_name: str, keys: list[str], classes: dict[str, str], defaults: list[str]
) -> Check:
    """One ingressClassName ("" = the cluster default) against the IngressClasses that exist
    (name -> controller)."""
    users = ", ".join(keys)
    if not class_name:
        if not defaults:
            return Check(
                "IngressClass (default)",
                "fail",
                f"{users}: no className and no IngressClass is marked default, so no "
                "controller serves the Ingress",
                f"set {' / '.join(f'{k}.className' for k in keys)} to one of: "
                f"{', '.join(classes) or 'none (install an ingress controller)'}, or mark one "
                f'default (annotation {DEFAULT_INGRESS_CLASS_ANNOTATION}: "true")',
            )
        class_name = defaults[0]
        label = f"IngressClass (default: {class_name})"
    else:
        label = f"IngressClass {class_name}"
    if class_name not in classes:
        return Check(
            label,
            "fail",
            f"no IngressClass {class_name}: no controller would serve {users}",
            "install the ingress controller that provides it, or set className to one of: "
            f"{', '.join(classes) or 'none (no IngressClass exists)'}",
        )
    return Check(label, "ok", f"controller {classes[class_name]}; used by {users}")


def _ingress_classes(api, ingresses: list[tuple[str, str]]) -> list[Check]:
    from kubernetes import client

    try:
        listed = client.NetworkingV1Api(api).list_ingress_class(_request_timeout=REQUEST_TIMEOUT)
    except Exception as exc:
        return [Check("IngressClasses", "fail", common.kube_error(exc, "list").message, _RBAC_FIX)]
    classes = {ic.metadata.name: ic.spec.controller for ic in listed.items}
    defaults = [
        ic.metadata.name
        for ic in listed.items
        if (ic.metadata.annotations or {}).get(DEFAULT_INGRESS_CLASS_ANNOTATION) == "true"
    ]
    by_class: dict[str, list[str]] = {}
    for key, class_name in ingresses:
        by_class.setdefault(class_name, []).append(key)
    return [judge_ingress_class(n, keys, classes, defaults) for n, keys in by_class.items()]


def _metrics_api(api) -> Check:
    """The serving HPA scales on CPU from metrics.k8s.io (metrics-server)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    name = "metrics API"
    fix = (
        "install metrics-server (it serves metrics.k8s.io), or set "
        "serving.autoscaling.enabled: false and a fixed serving.replicas"
    )
    try:
        service = client.ApiregistrationV1Api(api).read_api_service(
            METRICS_API_SERVICE, _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as exc:
        if exc.status != 404:
            return Check(name, "fail", common.kube_error(exc, "read apiservice").message, _RBAC_FIX)
        return Check(
            name,
            "fail",
            "metrics.k8s.io is not served: the serving HPA (serving.autoscaling) cannot read "
            "CPU use and never scales",
            fix,
        )
    conditions = {c.type: c for c in (service.status.conditions or [])} if service.status else {}
    available = conditions.get("Available")
    if available is None or available.status != "True":
        why = f"{available.reason}: {available.message}" if available else "no Available condition"
        return Check(
            name,
            "fail",
            f"{METRICS_API_SERVICE} is registered but not available ({why}): the serving HPA "
            "cannot read CPU use",
            f"kubectl describe apiservice {METRICS_API_SERVICE}; " + fix,
        )
    backend = service.spec.service
    where = f"service {backend.namespace}/{backend.name}" if backend else "served locally"
    return Check(name, "ok", f"{METRICS_API_SERVICE} available ({where})")


def volcano_apis_needed(values: dict) -> list[tuple[str, str]]:
    """Volcano (group, version) pairs the chart's objects need for these values."""
    trainer = values.get("trainer") or {}
    needed = []
    if trainer.get("enabled"):
        needed.append(VOLCANO_JOB_API)
    creates_queue = trainer.get("enabled") and trainer["volcano"]["createQueue"]["enabled"]
    if trainer.get("enabled") or creates_queue or values.get("teams"):
        needed.append(VOLCANO_SCHEDULING_API)  # the job's PodGroup, the chart's Queues
    return needed


def _volcano_apis(api, needed: list[tuple[str, str]]) -> Check:
    from kubernetes import client

    name = "Volcano APIs"
    try:
        groups = client.ApisApi(api).get_api_versions(_request_timeout=REQUEST_TIMEOUT).groups
    except Exception as exc:
        return Check(name, "fail", common.kube_error(exc, "discovery").message, _RBAC_FIX)
    served = {g.name: {v.version for v in g.versions} for g in groups}
    missing = [f"{g}/{v}" for g, v in needed if v not in served.get(g, set())]
    wanted = ", ".join(f"{g}/{v}" for g, v in needed)
    if missing:
        have = {g: sorted(served[g]) for g, _ in needed if g in served}
        return Check(
            name,
            "fail",
            f"not served: {', '.join(missing)}" + (f" (served: {have})" if have else ""),
            f"install Volcano >= 1.9 (the chart's objects use {wanted})",
        )
    return Check(name, "ok", wanted)


def _permissions(api, namespace: str) -> Check:
    from kubernetes import client

    auth = client.AuthorizationV1Api(api)
    denied = []
    for group, resource, verb in NEEDED_PERMISSIONS:
        sub = None
        if "/" in resource:
            resource, sub = resource.split("/", 1)
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace,
                    group=group,
                    resource=resource,
                    subresource=sub,
                    verb=verb,
                )
            )
        )
        try:
            result = auth.create_self_subject_access_review(
                review, _request_timeout=REQUEST_TIMEOUT
            )
        except Exception as exc:
            return Check(
                "permissions", "fail", common.kube_error(exc, "access review").message, _RBAC_FIX
            )
        if not result.status.allowed:
            full = f"{resource}/{sub}" if sub else resource
            denied.append(f"{verb} {full}" + (f".{group}" if group else ""))
    if denied:
        return Check(
            "permissions",
            "fail",
            f"in namespace {namespace} you may not: " + ", ".join(denied),
            f"ask a cluster admin for a Role/RoleBinding in {namespace} granting these verbs, "
            "or use a namespace where you have them (--namespace)",
        )
    return Check("permissions", "ok", f"all {len(NEEDED_PERMISSIONS)} needed in {namespace}")


_RBAC_FIX = "your user may lack read access to cluster-scoped objects; ask a cluster admin"


def doctor(
    values_files: list[Path] | None = typer.Option(
        None,
        "--values",
        "-f",
        help="Values file(s) to deploy: also check what they need from the cluster: the "
        "Volcano queue, PriorityClasses and APIs, every StorageClass (and ReadWriteMany) and "
        "IngressClass they name, the metrics API for serving autoscaling (repeatable, like "
        "helm -f).",
    ),
    sets: list[str] | None = SET_OPTION,
    set_strings: list[str] | None = SET_STRING_OPTION,
    set_files: list[str] | None = SET_FILE_OPTION,
    set_json: list[str] | None = SET_JSON_OPTION,
    set_literals: list[str] | None = SET_LITERAL_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    output: OutputFormat = common.OUTPUT_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
    helm: str | None = HELM_OPTION,
) -> None:
    """Check helm, cluster access, Volcano, storage and permissions; print a fix per failure.

    Exits 0 when every check passes, 4 when one fails (details in the table).

    Examples:

      ectl doctor

      ectl doctor --context staging -n ctr -o json

      ectl doctor -f values/production.yaml
    """
    values = None
    overrides = Overrides.of(sets, set_strings, set_files, set_json, set_literals)
    if values_files or overrides:
        from elasticctr import values as chart_values
        from elasticctr.constants import chart_dir

        user = load_user_values(values_files or [], chart_dir(), overrides)
        values = chart_values.effective_values(user, chart_dir())
    target = Target(DEFAULT_RELEASE, namespace, kubeconfig, context, helm)
    checks = run_checks(target, DEFAULT_RELEASE, values)
    ok = all(c.status in ("ok", "warn") for c in checks)
    if not common.print_data(output, {"ok": ok, "checks": [asdict(c) for c in checks]}):
        table = Table(title="ectl doctor")
        for column in ("check", "result", "detail", "fix"):
            table.add_column(column, overflow="fold")
        style = {"ok": "green", "fail": "red", "skip": "dim", "warn": "yellow"}
        for c in checks:
            table.add_row(c.name, Text(c.status, style=style[c.status]), c.detail, c.fix)
        console.print(table)
        console.print(
            "[green]ready to deploy[/green]"
            if ok
            else "[red]not ready[/red]: fix the first failing check and rerun `ectl doctor`"
        )
    if not ok:
        raise typer.Exit(common.EXIT_CHECKS_FAILED)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
