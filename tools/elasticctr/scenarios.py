"""Scenarios on one platform: the name rules, the registration record and where a
scenario lives in each shared part (docs/platform.md).

A platform (model store, MLflow, one cube cluster, one cube-transfer, one serving
deployment) holds many scenarios. A scenario is its data, slot config, model and
training job; on the platform it owns:

- a prefix of the model store: ``{store}/scenarios/{name}`` (same layout as a store root:
  ``versions/YYYYMMDD/HH/...``);
- a cube table named after it (its versions loaded, committed and dropped on their own);
- serving routes ``/v1/scenarios/{name}/predict`` and ``.../version``;
- an MLflow experiment and registered model named after it.

The scenario named ``default`` is the single release of earlier versions: the store root,
cube's default table, ``/v1/predict``; so one values file keeps working unchanged.

Scenarios are registered in a `Registry`: on Kubernetes each is a ConfigMap labelled
``elasticctr.io/platform=<platform release>`` and ``elasticctr.io/scenario=<name>``
holding ``scenario.json`` (the scenario's Helm release creates it and deletes it on
uninstall); locally a folder of ``<name>.json`` files. cube-transfer lists the registry
every poll: a new entry gets a table, a removed one has its tables dropped.

Nothing here imports cube, serving or training: they all import this.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from elasticctr.errors import EctlError

DEFAULT = "default"
"""The scenario of a single release: store root, cube default table, /v1/predict."""

SCENARIOS_DIR = "scenarios"
"""Folder of the model store (and of cube's roots) that holds one folder per scenario."""

NAME_MAX = 40
"""Longest scenario name: Kubernetes names derived from it (`<name>-trainer-<hash>`,
Volcano's `<job>-<task>-<i>` host names) must stay within 63 characters."""
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

LABEL_PLATFORM = "elasticctr.io/platform"
"""Label of a scenario's registration ConfigMap: the platform release it belongs to."""
LABEL_SCENARIO = "elasticctr.io/scenario"
"""Label of a scenario's registration ConfigMap (and its pods): the scenario's name."""
SPEC_KEY = "scenario.json"
"""Key of the registration ConfigMap's data (and the file name suffix locally)."""

DEFAULT_CUBE_MEMORY_MIB = 512
"""Memory a scenario's cube table may use on each shard when it names no budget
(every version held: the committed one, the kept previous one and one being loaded)."""


def check_name(name: object, *, field_name: str = "scenario name") -> str:
    """A scenario name: a DNS-1123 label of at most NAME_MAX characters."""
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > NAME_MAX:
        raise EctlError(
            f"{field_name} {name!r} is not a valid scenario name",
            hint=(
                f"use lower-case letters, digits and '-', starting with a letter, at most "
                f"{NAME_MAX} characters (e.g. coupon-feed)"
            ),
        )
    return name


def store_url(platform_store: str, name: str) -> str:
    """The model store of scenario `name` on a platform whose store is `platform_store`."""
    base = platform_store.rstrip("/")
    if name == DEFAULT:
        return base
    return f"{base}/{SCENARIOS_DIR}/{check_name(name)}"


def subdir(root: str | Path, name: str) -> Path:
    """A shared part's own folder for scenario `name` under `root` (cube root, state dir)."""
    if name == DEFAULT:
        return Path(root)
    return Path(root) / SCENARIOS_DIR / check_name(name)


def experiment_name(name: str, base: str = "elasticctr") -> str:
    """MLflow experiment of a scenario's training runs."""
    return base if name == DEFAULT else f"{base}-{name}"


def registered_model_name(name: str, base: str = "elasticctr") -> str:
    """MLflow registered model of a scenario's versions (serving moves its alias)."""
    return base if name == DEFAULT else f"{base}-{name}"


@dataclass(frozen=True)
class Scenario:
    """A scenario's registration: what the platform needs to know to serve it."""

    name: str
    team: str = ""
    model: str = ""
    slots: tuple[int, ...] = ()
    sparse_dim: int = 0
    cube_memory_mib: int = DEFAULT_CUBE_MEMORY_MIB
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        check_name(self.name)
        if not isinstance(self.cube_memory_mib, int) or self.cube_memory_mib < 1:
            raise EctlError(
                f"scenario {self.name}: cube_memory_mib must be a positive integer, "
                f"got {self.cube_memory_mib!r}"
            )

    @property
    def cube_memory_bytes(self) -> int:
        return self.cube_memory_mib << 20

    def to_json(self) -> str:
        doc = asdict(self)
        doc["slots"] = list(self.slots)
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes, where: str) -> Scenario:
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise EctlError(f"{where}: not valid JSON ({exc})") from exc
        if not isinstance(doc, dict):
            raise EctlError(f"{where}: expected a JSON object")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(doc) - known)
        if unknown:
            raise EctlError(f"{where}: unknown keys {unknown}")
        try:
            doc["slots"] = tuple(int(s) for s in doc.get("slots", ()))
            return cls(**doc)
        except (TypeError, ValueError) as exc:
            raise EctlError(f"{where}: {exc}") from exc


class Registry:
    """Where the platform learns which scenarios exist."""

    def list(self) -> dict[str, Scenario]:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError


class DirRegistry(Registry):
    """Local mode: one `<name>.json` file per scenario in a folder."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def describe(self) -> str:
        return f"folder {self.root}"

    def path(self, name: str) -> Path:
        return self.root / f"{check_name(name)}.json"

    def add(self, scenario: Scenario) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.path(scenario.name)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(scenario.to_json() + "\n")
        os.replace(tmp, path)
        return path

    def remove(self, name: str) -> bool:
        try:
            self.path(name).unlink()
        except FileNotFoundError:
            return False
        return True

    def list(self) -> dict[str, Scenario]:
        found: dict[str, Scenario] = {}
        if not self.root.is_dir():
            return found
        for path in sorted(self.root.glob("*.json")):
            sc = Scenario.from_json(path.read_bytes(), str(path))
            if f"{sc.name}.json" != path.name:
                raise EctlError(f"{path}: holds scenario {sc.name!r}; name the file {sc.name}.json")
            found[sc.name] = sc
        return found


class KubeRegistry(Registry):
    """On Kubernetes: the ConfigMaps of the platform's namespace labelled with the platform.

    Read with the pod's service-account token through the API server's REST API (a GET
    with a label selector; the platform's Role allows get/list of configmaps: kube_api),
    so the image needs no Kubernetes client library.
    """

    def __init__(self, platform: str, kube: Any = None):
        """`kube`: an `elasticctr.kube_api.InCluster` (default: the pod's own API server,
        namespace and service account)."""
        from elasticctr.kube_api import InCluster

        self.platform = platform
        self.kube = kube or InCluster(purpose="the Kubernetes scenario registry")
        self.namespace = self.kube.namespace
        self.kube.purpose = f"scenario registry ({self.describe()})"

    def describe(self) -> str:
        return f"ConfigMaps {LABEL_PLATFORM}={self.platform} in namespace {self.namespace}"

    def list(self) -> dict[str, Scenario]:
        answer = self.kube.get(
            f"/api/v1/namespaces/{self.namespace}/configmaps",
            {"labelSelector": registry_selector(self.platform)},
            hint="the platform's Role must allow list on configmaps",
        )
        return from_configmaps(answer.get("items", []))


def registry_selector(platform: str) -> str:
    """The label selector of a platform's registration ConfigMaps."""
    return f"{LABEL_PLATFORM}={platform},{LABEL_SCENARIO}"


def from_configmaps(items: list[dict[str, Any]]) -> dict[str, Scenario]:
    """The scenarios of registration ConfigMaps (the API's JSON `items`), checked."""
    found: dict[str, Scenario] = {}
    for item in items:
        meta = item.get("metadata", {})
        where = f"ConfigMap {meta.get('name')}"
        text = (item.get("data") or {}).get(SPEC_KEY)
        if text is None:
            raise EctlError(f"{where}: no {SPEC_KEY} key")
        sc = Scenario.from_json(text, where)
        label = (meta.get("labels") or {}).get(LABEL_SCENARIO)
        if label != sc.name:
            raise EctlError(f"{where}: label {LABEL_SCENARIO}={label} but holds {sc.name!r}")
        found[sc.name] = sc
    return found


def open_registry(spec: str) -> Registry:
    """`kube:PLATFORM` (ConfigMaps in the pod's namespace) or `dir:PATH` / a bare path."""
    if spec.startswith("kube:"):
        platform = spec[len("kube:") :]
        if not platform:
            raise EctlError("--scenarios kube: needs the platform release, e.g. kube:elasticctr")
        return KubeRegistry(platform)
    path = spec[len("dir:") :] if spec.startswith("dir:") else spec
    if not path:
        raise EctlError("--scenarios needs kube:PLATFORM or a folder path")
    return DirRegistry(path)


# --- a scenario's status row (`ectl scenario list|status`, the console) ------------------


def freshness_seconds(version: str | None, now: dt.datetime | None = None) -> int | None:
    """How old the served model's data is: seconds from the end of its hour (version ids
    are data hours, read as UTC) to `now`; None without a version."""
    from elasticctr.versions import is_version_id, parse_date_hour

    if not version or not is_version_id(version):
        return None
    end = parse_date_hour(version).replace(tzinfo=dt.UTC) + dt.timedelta(hours=1)
    now = now or dt.datetime.now(dt.UTC)
    return int((now - end).total_seconds())


PAUSED_PHASES = ("Aborting", "Aborted")
"""A paused scenario's Volcano Job (`ectl scenario pause`: an `AbortJob` command)."""


def status_row(
    name: str, sc: Scenario, served: dict[str, Any], stored: dict[str, Any], job: dict[str, Any]
) -> dict[str, Any]:
    """One scenario's status from what the platform's parts say of it: its registration,
    serving's `/v1/scenarios` entry, cube-transfer's per-scenario status (the store's
    newest version) and its Volcano Job (empty without one, as on the local platform)."""
    spec, st = job.get("spec", {}), job.get("status", {})
    trainer = next((t for t in spec.get("tasks", []) if t.get("name") == "trainer"), {})
    running = (
        (st.get("taskStatusCount") or {}).get("trainer", {}).get("phase", {}).get("Running", 0)
    )
    return {
        "name": name,
        "team": sc.team,
        "model": sc.model,
        "trained": stored.get("newestVersion"),
        "served": served.get("version"),
        "freshness_seconds": freshness_seconds(served.get("version")),
        "heldout_auc": served.get("heldout_auc"),
        "job": st.get("state", {}).get("phase", "-") if job else "-",
        # `ectl scenario pause`: Volcano's AbortJob (elasticctr.cli.scenario.set_training)
        "paused": st.get("state", {}).get("phase") in PAUSED_PHASES,
        "trainers": f"{running}/{trainer.get('minAvailable', '-')}/{trainer.get('replicas', '-')}",
        "trainers_running": running,
        "trainers_min": trainer.get("minAvailable"),
        "trainers_max": trainer.get("replicas"),
        "queue": spec.get("queue", "-"),
        "error": served.get("error"),
        "store_error": stored.get("error"),
        "cube_memory_mib": sc.cube_memory_mib,
    }
