"""Values of the umbrella chart, checked the way Helm checks them, for `ectl validate`.

One source of truth: the chart's own files. This module reads the umbrella's and every
subchart's `values.yaml` (defaults) and `values.schema.json`, merges user values files
over them with Helm's rules, validates each chart's schema against the part of the values
Helm gives that chart, and applies the same cross-field rules as the chart's
`elasticctr.validateValues` helper (charts/elasticctr/templates/_helpers.tpl), with the
same messages. Cross-field rules a schema states (`if`/`then`, `allOf`) come with the
schemas; their `errorMessage` (which Helm ignores) is what `ectl validate` prints. Every
problem comes back as one `path: message` string. Library charts (Chart.yaml `type:
library`, the umbrella's `common`) hold named templates only: they take no values, so
they are neither loaded as a part nor offered as a values key.

It owns no chart content and never shells out to helm (so `ectl validate` works without
helm installed); tests/chart compares its answers with helm's.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator
from jsonschema.exceptions import ValidationError as SchemaError

from elasticctr.constants import ENV_CHART_DIR, chart_dir
from elasticctr.errors import EctlError, ValidationError
from elasticctr.versions import has_date_hour_shape, parse_date_hour
from elasticctr.zoo import COMMON_DEFAULTS, DEFAULTS

Values = dict[str, Any]

MOVED = {
    "trainer.hdfs": "global.data.hdfsUgiSecret (name, key): every role that opens the store "
    "reads HDFS_UGI from it",
}
"""Keys earlier chart revisions accepted, and where their setting lives now (docs/chart.md,
"Values changes between revisions"): the schema refuses them, this says what to write."""

REMOVED = {
    "trainer.rbac": "delete the key; the one Role the job needs (its coordinator yields "
    "trainers to kube-scheduler) comes with trainer.coordinator.yieldToKubeScheduler",
}
"""Keys earlier chart revisions accepted that no longer do anything (docs/chart.md, "Values
changes between revisions"), and why."""

RESHAPED = {
    "trainer.extraEnv": "a list of Kubernetes EnvVar objects now, e.g. [{name: GLOG_v, "
    'value: "1"}] (valueFrom works too); the map NAME: value of earlier revisions is gone',
}
"""Keys whose shape changed between chart revisions (docs/chart.md, "Values changes between
revisions"): a value of the old shape is a type error, this says what to write."""


@dataclass(frozen=True)
class Chart:
    """One chart directory: its default values and its values schema."""

    name: str
    path: Path
    defaults: Values
    schema: dict[str, Any] | None
    condition: str | None = None  # e.g. "trainer.enabled" (subcharts only)
    library: bool = False  # Chart.yaml `type: library`: named templates, no values


@dataclass(frozen=True)
class Umbrella:
    chart: Chart
    subcharts: list[Chart] = field(default_factory=list)
    libraries: tuple[str, ...] = ()  # dependencies that are library charts (`common`)


# The parts only a platform release runs; a scenario release turns them off (the chart's
# elasticctr.validateValues lists the same).
PLATFORM_PARTS = ("fileserver", "mlflow", "cube", "serving", "console")


def read_yaml_mapping(path: Path, what: str = "values file") -> Values:
    """A YAML file whose top level is a mapping (empty file = {}).

    Unreadable: EctlError (exit 1). Not UTF-8, not YAML or not a mapping:
    ValidationError (exit 2) naming the file, line and column where known.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise EctlError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValidationError(
            f"{path}:{line}:{column}: not valid YAML (byte 0x{raw[exc.start]:02x} is not "
            "UTF-8 text; save the file as UTF-8)"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValidationError(f"{where}: not valid YAML ({problem})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValidationError(f"{path}: {what} must be a mapping, got {type(data).__name__}")
    return data


def _load_chart(path: Path, condition: str | None = None) -> Chart:
    meta = read_yaml_mapping(path / "Chart.yaml", "Chart.yaml")
    values_file = path / "values.yaml"
    defaults = read_yaml_mapping(values_file, "values file") if values_file.exists() else {}
    schema_file = path / "values.schema.json"
    schema = None
    if schema_file.exists():
        try:
            schema = json.loads(schema_file.read_text())
        except json.JSONDecodeError as exc:
            raise EctlError(f"{schema_file}: not valid JSON ({exc})") from exc
    library = meta.get("type") == "library"
    return Chart(meta.get("name", path.name), path, defaults, schema, condition, library)


def load_chart(chart: Path | None = None) -> Umbrella:
    """The umbrella chart at `chart` (default: constants.chart_dir()), its local subcharts,
    and the names of its library dependencies (skipped: they have no values)."""
    root = Path(chart) if chart is not None else chart_dir()
    if not (root / "Chart.yaml").is_file():
        raise EctlError(f"no chart at {root}", hint=f"pass --chart DIR or set {ENV_CHART_DIR}")
    umbrella = _load_chart(root)
    meta = read_yaml_mapping(root / "Chart.yaml", "Chart.yaml")
    subcharts, libraries = [], []
    for dep in meta.get("dependencies") or []:
        sub_path = root / "charts" / dep["name"]
        if not (sub_path / "Chart.yaml").is_file():
            raise EctlError(f"{root}: dependency {dep['name']} is not unpacked in charts/")
        sub = _load_chart(sub_path, dep.get("condition"))
        if sub.library:
            libraries.append(sub.name)
        else:
            subcharts.append(sub)
    return Umbrella(umbrella, subcharts, tuple(libraries))


def merge(base: Values, override: Values, *, drop_nulls: bool = True) -> Values:
    """Helm's values merge: maps merge key by key, other values (lists too) are replaced,
    and an explicit null removes the key (how users unset a default). Between user files
    (`drop_nulls=False`) a null is kept, so it still removes the chart's default later."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if value is None and drop_nulls:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value, drop_nulls=drop_nulls)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def dig(values: Any, dotted: str, default: Any = None) -> Any:
    """The value at `dotted` (e.g. "global.data.path") of nested mappings, else `default`."""
    node = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _enabled(values: Values, condition: str | None) -> bool:
    """Helm's `condition`: comma-separated paths, the first one set to a bool decides; none
    set (missing, or not a bool) means enabled."""
    for path in (condition or "").split(","):
        value = dig(values, path.strip()) if path.strip() else None
        if isinstance(value, bool):
            return value
    return True


def effective_values(user: Values, chart: Path | Umbrella | None = None) -> Values:
    """What the umbrella's templates see: subchart defaults < umbrella defaults < user."""
    umbrella = chart if isinstance(chart, Umbrella) else load_chart(chart)
    values = copy.deepcopy(umbrella.chart.defaults)
    for sub in umbrella.subcharts:
        section = values.get(sub.name)
        values[sub.name] = merge(
            {k: v for k, v in sub.defaults.items() if k != "global"},
            section if isinstance(section, dict) else {},
        )
    return merge(values, user)


def _subchart_values(values: Values, sub: Chart) -> Values:
    """What Helm hands a subchart: its section plus the parent's globals over its own."""
    section = copy.deepcopy(values.get(sub.name) or {})
    own_global = sub.defaults.get("global") if isinstance(sub.defaults.get("global"), dict) else {}
    parent_global = values.get("global") if isinstance(values.get("global"), dict) else {}
    section["global"] = merge(own_global, parent_global)
    return section


def _path(prefix: str, parts: Any) -> str:
    out = prefix
    for part in parts:
        out = f"{out}[{part}]" if isinstance(part, int) else (f"{out}.{part}" if out else part)
    return out or "(root)"


def _describe(error: SchemaError, prefix: str, hidden: tuple[str, ...] = ()) -> list[str]:
    """One jsonschema error as `path: message` lines a person can act on. `hidden`: keys
    of the schema at the values' root never offered as allowed (the library charts')."""
    where = _path(prefix, error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    if isinstance(schema.get("errorMessage"), str):
        # A cross-field rule of a schema (`if`/`then`, an `allOf` item): the subschema that
        # failed says what is wrong. Helm's validator ignores the keyword and prints its own.
        return [f"{where}: {schema['errorMessage']}"]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        offered = set(schema.get("properties", {})) - set(hidden if where == "(root)" else ())
        allowed = sorted(offered)
        extra = sorted(k for k in error.instance if k not in schema.get("properties", {}))
        hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
        lines = []
        for k in extra:
            key = _path(where if where != "(root)" else "", [k])
            if key in MOVED:
                lines.append(f"{key}: moved to {MOVED[key]}")
            elif key in REMOVED:
                lines.append(f"{key}: removed ({REMOVED[key]})")
            else:
                lines.append(f"{key}: unknown key{hint}")
        return lines
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [f"{_path(where if where != '(root)' else '', [missing])}: required"]
    if error.validator == "type" and where in RESHAPED:
        return [f"{where}: {RESHAPED[where]}"]
    if error.validator == "not" and isinstance(error.validator_value, dict):
        banned = error.validator_value.get("const")
        if banned is not None:
            return [f"{where}: must not be {banned!r}"]
        if error.validator_value == {}:  # a key the schema reserves (patternProperties)
            return [f"{where}: not allowed ({schema.get('description', 'reserved')})"]
        both = error.validator_value.get("required")
        if both:
            return [f"{where}: set one of {' or '.join(both)}, not both"]
    message = error.message
    if error.validator in ("pattern", "anyOf") and schema.get("description"):
        message = f"{message} (expected: {schema['description']})"
    return [f"{where}: {message}"]


def _schema_problems(
    schema: dict[str, Any] | None, instance: Values, prefix: str, hidden: tuple[str, ...] = ()
) -> list[str]:
    if not schema:
        return []
    validator = Draft7Validator(schema)
    problems: list[str] = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path)):
        for line in _describe(error, prefix, hidden):
            if line not in problems:
                problems.append(line)
    return problems


def _closed_global(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The umbrella schema with `global` closed at its top level too.

    The chart's schema leaves `global` open there, because when the chart is a subchart of
    someone's umbrella Helm hands it the parent's globals as well. `ectl` installs this
    chart as the top chart, where nobody else reads `global`: a key we do not know there
    is a typo (`global.modelstore`), reported like one anywhere else."""
    g = (schema or {}).get("properties", {}).get("global")
    if not isinstance(g, dict) or "properties" not in g or "additionalProperties" in g:
        return schema
    closed = copy.deepcopy(schema)
    closed["properties"]["global"]["additionalProperties"] = False
    return closed


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(value)
    return int(value)


def model_hyperparameters() -> dict[str, set[str]]:
    """Hyperparameter names of each zoo model, from the zoo itself (no Paddle import)."""
    return {name: set(COMMON_DEFAULTS) | set(own) for name, own in DEFAULTS.items()}


def cross_field_problems(values: Values, chart: Path | Umbrella | None = None) -> list[str]:
    """The chart's `elasticctr.validateValues` rules, same order and messages: the rules no
    schema can state. The others are in the schemas (`if`/`then`, `allOf`), each with the
    `errorMessage` `_describe` prints. A part is on as Helm decides it: by its dependency's
    `condition` in the umbrella's Chart.yaml.

    A rule whose inputs have the wrong type is skipped: the schema already reports them.
    """
    umbrella = chart if isinstance(chart, Umbrella) else load_chart(chart)
    conditions = {sub.name: sub.condition for sub in umbrella.subcharts}
    problems: list[str] = []
    g = values.get("global") or {}
    data = g.get("data") or {}

    def on(name: str) -> bool:
        return _enabled(values, conditions.get(name, f"{name}.enabled"))

    def rule(check) -> None:
        try:
            message = check()
        except (TypeError, AttributeError, KeyError):
            return
        if message:
            problems.append(message)

    fileserver = on("fileserver")
    sc = g.get("scenario") or {}
    # A scenario of a platform release uses the platform's fileserver and MLflow.
    on_platform = bool(sc.get("name") and sc.get("platform"))
    if sc.get("name"):
        parts = [p for p in PLATFORM_PARTS if on(p)]
        if parts:
            problems.append(
                "global.scenario.name: a scenario release runs only its training job (its "
                f"platform serves it); set {', '.join(parts)} enabled: false "
                "(ectl scenario add does)"
            )
        if not on("trainer"):
            problems.append(
                "trainer.enabled: a scenario release is its training job; it must be true"
            )
    elif on("console") and not (on("cube") and on("serving")):
        problems.append(
            "console.enabled: the console serves a platform, which runs cube and serving; set "
            "console.enabled: false in a release without them"
        )
    if on("trainer"):
        t = dig(values, "trainer.trainer", {})

        def min_trainers():
            lo, hi = _int(t["minReplicas"]), _int(t["replicas"])
            if lo > hi:
                return (
                    f"trainer.trainer.minReplicas: {lo} is more than "
                    f"trainer.trainer.replicas ({hi})"
                )

        rule(min_trainers)

        def hyperparameters():
            model = dig(values, "trainer.model", {})
            known = model_hyperparameters().get(model.get("name"))
            if known is None:
                return None  # unknown name: the schema's enum reports it
            for key in sorted(model):
                if key != "name" and key not in known:
                    problems.append(
                        f"trainer.model.{key}: not a hyperparameter of {model['name']} "
                        f"(known: {', '.join(sorted(known))})"
                    )

        rule(hyperparameters)
        rule(
            lambda: (
                (not data.get("path") and not fileserver and not on_platform)
                and "global.data.path: required when fileserver.enabled is false "
                "(empty means the release's fileserver)"
            )
        )
        rule(
            lambda: (
                (str(data.get("path") or "").startswith("hdfs:///") and not data.get("hdfsAddress"))
                and "global.data.hdfsAddress: required when global.data.path is an hdfs:/// URL "
                "without a namenode"
            )
        )
    # Also a platform without a training job creates the classes for its scenarios.
    pc = dig(values, "trainer.volcano.priorityClasses", {}) or {}
    rule(
        lambda: (
            (pc["create"] and _int(pc["trainerValue"]) >= _int(pc["guaranteedValue"]))
            and f"trainer.volcano.priorityClasses.trainerValue: {_int(pc['trainerValue'])} "
            f"must be lower than guaranteedValue ({_int(pc['guaranteedValue'])})"
        )
    )
    rule(
        lambda: (
            (pc["guaranteed"] and pc["guaranteed"] == pc["trainer"])
            and "trainer.volcano.priorityClasses.trainer: must differ from guaranteed "
            "(trainers are the preemptible part)"
        )
    )

    def s3_keys():
        s3 = g.get("s3") or {}
        if s3.get("existingSecret") and s3["accessKeyIdKey"] == s3["secretAccessKeyKey"]:
            return (
                f"global.s3.secretAccessKeyKey: must differ from global.s3.accessKeyIdKey "
                f"({s3['accessKeyIdKey']}): they name the two keys of {s3['existingSecret']}"
            )

    rule(s3_keys)

    def date_order():
        start, end = str(data["startDateHour"]), data.get("endDateHour")
        if end and str(end) < start:
            return f"global.data.endDateHour: {end} is before global.data.startDateHour {start}"

    rule(date_order)
    rule(
        lambda: (
            (
                not g.get("modelStore")
                and not fileserver
                and not on_platform
                and (on("trainer") or on("cube") or on("serving"))
            )
            and "global.modelStore: required when fileserver.enabled is false "
            "(empty means the release's fileserver)"
        )
    )

    def fileserver_tokens():
        # Parts that send the fileserver token read the fileserver's Secret and key
        # (trainer: uploads; cube-transfer and serving: reads, with protectReads).
        if not fileserver or g.get("modelStore"):
            return
        secret = dig(values, "fileserver.auth.existingSecret")
        key = dig(values, "fileserver.auth.existingSecretKey") if secret else "token"
        why = {
            "trainer": "training uploads model versions to the fileserver with that token",
            "cube": "cube-transfer reads model versions from the fileserver with that token",
            "serving": "serving reads model versions from the fileserver with that token",
        }
        for part in ("trainer", "cube", "serving"):
            if not on(part) or (
                part != "trainer" and not dig(values, "fileserver.auth.protectReads")
            ):
                continue
            mine = dig(values, f"{part}.fileserverToken", {})
            if secret and mine.get("existingSecret") != secret:
                problems.append(
                    f"{part}.fileserverToken.existingSecret: must be {secret} like "
                    f"fileserver.auth.existingSecret ({why[part]})"
                )
            if mine.get("existingSecretKey") != key:
                problems.append(
                    f"{part}.fileserverToken.existingSecretKey: must be {key} like the "
                    f"fileserver's token key ({why[part]})"
                )

    rule(fileserver_tokens)
    if on("serving"):
        s = values.get("serving") or {}
        rule(
            lambda: (
                (not on("cube"))
                and "serving.enabled: serving needs cube.enabled "
                "(it looks embeddings up in the cube shards)"
            )
        )
        floor = {"n": None}

        def replicas():
            floor["n"] = _int(s["replicas"])
            a = s["autoscaling"]
            if a["enabled"]:
                lo, hi = _int(a["minReplicas"]), _int(a["maxReplicas"])
                floor["n"] = lo
                if lo > hi:
                    return (
                        f"serving.autoscaling.minReplicas: {lo} is more than "
                        f"serving.autoscaling.maxReplicas ({hi})"
                    )

        rule(replicas)

        def pdb():
            budget = s["podDisruptionBudget"]
            if floor["n"] is not None and budget["enabled"]:
                keep = _int(budget["minAvailable"])
                if keep >= floor["n"]:
                    return (
                        f"serving.podDisruptionBudget.minAvailable: {keep} must be lower than "
                        f"the minimum replica count ({floor['n']}), or no node could ever be "
                        "drained"
                    )

        rule(pdb)
    rule(
        lambda: (
            not on("mlflow")
            and (on("trainer") or on("serving"))
            and not (g.get("mlflow") or {}).get("trackingUri")
            and not on_platform
            and MLFLOW_NOT_DEPLOYED
        )
    )
    if on("cube"):

        def cube_pdb():
            c = values["cube"]
            shards = _int(c["shards"])
            replicas = _int(c.get("replicas", 1))
            budget = c["podDisruptionBudget"]
            down = _int(budget["maxUnavailable"])
            if budget["enabled"] and replicas > 1 and down >= replicas:
                return (
                    f"cube.podDisruptionBudget.maxUnavailable: {down} would let every replica "
                    f"({replicas}) of a shard go down at once"
                )
            if budget["enabled"] and replicas == 1 and down >= shards and shards > 1:
                return (
                    f"cube.podDisruptionBudget.maxUnavailable: {down} would let every shard "
                    f"({shards}) go down at once"
                )

        rule(cube_pdb)
    return problems


MLFLOW_NOT_DEPLOYED = (
    "global.mlflow.trackingUri: required when mlflow.enabled is false (training and serving "
    "report to MLflow; with no URI they would report to this release's MLflow, which is not "
    "deployed, and each trainer would wait minutes for it)"
)


def validate(user: Values, chart: Path | Umbrella | None = None) -> list[str]:
    """Every problem of `user` values (merged over the chart's defaults) as `path: message`.

    Like Helm: the umbrella schema sees all values, each enabled subchart's schema sees its
    own section plus `global`; then the cross-field rules. Empty list = valid.
    """
    if not isinstance(user, dict):
        return [f"(root): values must be a mapping, got {type(user).__name__}"]
    umbrella = chart if isinstance(chart, Umbrella) else load_chart(chart)
    values = effective_values(user, umbrella)
    problems = _schema_problems(
        _closed_global(umbrella.chart.schema), values, "", umbrella.libraries
    )
    for sub in umbrella.subcharts:
        if _enabled(values, sub.condition):
            section = _subchart_values(values, sub)
            for line in _schema_problems(sub.schema, section, sub.name):
                if line not in problems:
                    problems.append(line)
    problems += [p for p in cross_field_problems(values, umbrella) if p not in problems]
    problems += [p for p in semantic_problems(values) if p not in problems]
    return problems


def semantic_problems(values: Values) -> list[str]:
    """Rules a schema pattern cannot state: the hours in global.data must be real
    (`20200231/25` matches `^[0-9]{8}/[0-9]{2}$` but is no date). Values whose format is
    already wrong are left to the schema's message."""
    problems = []
    data = dig(values, "global.data", {})
    for key in ("startDateHour", "endDateHour"):
        value = data.get(key) if isinstance(data, dict) else None
        if not has_date_hour_shape(value):
            continue
        try:
            parse_date_hour(value)
        except ValueError as exc:
            reason = str(exc).removeprefix(f"{value!r}: ")
            problems.append(f"global.data.{key}: {value} is not a real hour ({reason})")
    return problems


def split_problem(problem: str) -> dict[str, str]:
    """`path: message` -> {"path", "message"} (what `ectl validate -o json` prints and the
    console shows beside the field); a message that names no values path keeps path ""."""
    path, sep, message = problem.partition(": ")
    if not sep or " " in path:
        return {"path": "", "message": problem}
    return {"path": path, "message": message}


class _Dumper(yaml.SafeDumper):
    """Block style, except lists of plain values (slots, hidden units) stay on one line."""


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = all(not isinstance(item, dict | list) for item in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def dump_values(values: Values) -> str:
    """A values file's text as `ectl init` and the console write it (keys in order)."""
    return yaml.dump(values, Dumper=_Dumper, sort_keys=False)


def load_files(files: list[Path]) -> Values:
    """Merge user values files like `helm -f a -f b` (later files win)."""
    merged: Values = {}
    for path in files:
        merged = merge(merged, read_yaml_mapping(Path(path), "values file"), drop_nulls=False)
    return merged


def validate_files(files: list[Path], chart: Path | Umbrella | None = None) -> list[str]:
    """`validate()` of the files merged in order; unreadable or non-YAML files raise."""
    return validate(load_files(files), chart)
