"""The console's new-scenario flow (docs/console.md, "New scenario"): the form, a data
sample's suggestions, and the checks of a scenario's values before it is installed.

One schema: the form is generated in the browser from the chart's own values.schema.json
sections listed in SECTIONS (no field is written by hand here), its defaults are the
chart's values.yaml, and its problems are `elasticctr.values.validate`'s, the messages of
`ectl validate`. The values the form edits are a scenario's values file, as
`ectl scenario add NAME -f FILE` takes it: the console installs the same YAML through the
same function (`elasticctr.cli.scenario.add_scenario`).

  form(chart)                  the sections' schemas and defaults, for the browser
  parse_yaml(text)             a values file's text -> values (a YAML error names its line)
  dump_yaml(values)            values -> the file's text (what the form shows and downloads)
  redacted(values)             the values without credentials (what the audit log keeps)
  check(values, base, own)     `path: message` problems of the values as they would install
  suggest(path)                profile a sample of the data -> suggested values + the profile
  data_problems(values, prof)  the data path and the slots against the sample's profile
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import yaml

from elasticctr.errors import EctlError
from elasticctr.values import dig

SECTIONS = (
    "global.scenario",
    "global.data",
    "global.s3",
    "trainer.model",
    "trainer.trainer",
    "trainer.pserver",
    "trainer.coordinator.resources",
    "trainer.volcano.queue",
)
"""What a scenario's owner sets, as paths of the chart's values: each is rendered from its
schema, every field it has (nested objects included)."""
SET_BY_PLATFORM = ("global.scenario.platform",)
"""Fields of SECTIONS the console fills in itself (not shown in the form)."""
SECRET_FIELDS = ("global.data.hdfsUgi",)
"""Values that hold a credential (the chart puts them into a Secret): never in the audit log."""
PROFILE_LINES = 20000
"""Lines of the data read to profile it (the newest partition's files first)."""
LINEAR_BELOW_SAMPLES = 100_000
"""Suggest the linear model below this many samples per hour (deep models need more data
to beat it; the preemption e2e test's stable-AUC model is the linear one)."""


def _schema_at(umbrella: Any, dotted: str) -> dict[str, Any]:
    """The schema of values path `dotted`: the umbrella's for `global.*`, the subchart's
    for its own section."""
    head, _, rest = dotted.partition(".")
    if head == "global":
        schema, parts = umbrella.chart.schema, dotted.split(".")
    else:
        (sub,) = [s for s in umbrella.subcharts if s.name == head]
        schema, parts = sub.schema, rest.split(".")
    for part in parts:
        schema = ((schema or {}).get("properties") or {}).get(part)
        if schema is None:
            raise EctlError(f"the chart's schema has no {dotted}")
    return schema


def _without(schema: dict[str, Any], section: str) -> dict[str, Any]:
    """`schema` of `section` without the fields the console sets itself."""
    out = copy.deepcopy(schema)
    for hidden in SET_BY_PLATFORM:
        if hidden.startswith(section + "."):
            (out.get("properties") or {}).pop(hidden[len(section) + 1 :], None)
            if isinstance(out.get("required"), list):
                out["required"] = [r for r in out["required"] if r != hidden.rsplit(".", 1)[1]]
    return out


def form(chart: Path | None = None) -> dict[str, Any]:
    """{"sections": [{"path", "schema", "default"}]}: what the browser renders the form from."""
    from elasticctr import values as chart_values

    umbrella = chart_values.load_chart(chart)
    defaults = chart_values.effective_values({}, umbrella)
    return {
        "sections": [
            {
                "path": path,
                "schema": _without(_schema_at(umbrella, path), path),
                "default": dig(defaults, path),
            }
            for path in SECTIONS
        ]
    }


def redacted(values: dict[str, Any]) -> dict[str, Any]:
    """`values` with every SECRET_FIELDS value replaced (for the audit log)."""
    out = copy.deepcopy(values)
    for dotted in SECRET_FIELDS:
        *parents, last = dotted.split(".")
        doc = dig(out, ".".join(parents)) if parents else out
        if isinstance(doc, dict) and doc.get(last):
            doc[last] = "(redacted)"
    return out


def parse_yaml(text: str) -> dict[str, Any]:
    """A scenario's values file -> values; bad YAML or a non-mapping is a problem at `(yaml)`."""
    from elasticctr.errors import ValidationError

    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "the text"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValidationError(
            "not valid YAML", problems=[f"(yaml): {where}: not valid YAML ({problem})"]
        ) from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValidationError(
            "not a values file",
            problems=[f"(yaml): a values file is a mapping, got {type(doc).__name__}"],
        )
    return doc


def dump_yaml(values: dict[str, Any]) -> str:
    from elasticctr.values import dump_values

    return dump_values(values) if values else ""


def merged(values: dict[str, Any], base: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """What `ectl scenario add` validates and installs: base, then the file, then own."""
    from elasticctr import values as chart_values

    return chart_values.merge(
        chart_values.merge(base, values, drop_nulls=False), own, drop_nulls=False
    )


def check(values: dict[str, Any], base: dict[str, Any], own: dict[str, Any]) -> list[str]:
    """The problems `ectl validate` (and so `ectl scenario add`) finds in the values as they
    would be installed, `path: message` each."""
    from elasticctr import values as chart_values

    return chart_values.validate(merged(values, base, own))


class Profiles:
    """Profiles of data paths, kept a while (a form checks the same path more than once),
    one per path and HDFS_UGI: with HDFS permissions on, what a path holds for one user is
    not what another may read."""

    def __init__(self, size: int = 16):
        self._cache: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.size = size

    def cached(self, path: str, hdfs_ugi: str | None = None) -> dict[str, Any] | None:
        """The profile of `path` if one was read (no I/O: what a form's every check uses)."""
        with self._lock:
            return self._cache.get((path, hdfs_ugi or ""))

    def get(self, path: str, hdfs_ugi: str | None = None) -> dict[str, Any]:
        key = (path, hdfs_ugi or "")
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        report = profile_path(path, hdfs_ugi)
        with self._lock:
            self._cache[key] = report
            while len(self._cache) > self.size:
                self._cache.popitem(last=False)
        return report


def profile_path(path: str, hdfs_ugi: str | None = None) -> dict[str, Any]:
    """`ectl data profile PATH --max-lines PROFILE_LINES` as JSON, plus the dataset's ready
    hours ("hours": [] for a single file or partition). Raises EctlError with the store's
    own reason when the path holds no data or cannot be read."""
    from elasticctr.data import partitions
    from elasticctr.data.profile import profile, resolve_files

    try:
        files = resolve_files(path, hdfs_ugi)
        try:
            hours = [p.id for p in partitions.list_partitions(path, hdfs_ugi=hdfs_ugi)]
        except (OSError, EctlError, ValueError):
            hours = []  # a single file or partition
        # the newest hours first: a sample of what the scenario trains on now
        report = profile(list(reversed(files)), max_lines=PROFILE_LINES, hdfs_ugi=hdfs_ugi)
    except EctlError:
        raise
    except Exception as exc:  # the store's client: unreachable, denied, not found
        from elasticctr.data import storage

        raise storage.wrap_error(path, exc) from exc
    doc = report.to_dict(top_k=3)
    if not doc["samples"]:
        raise EctlError(f"{path}: no samples in the first {PROFILE_LINES} lines")
    doc["hours"] = hours
    return doc


def suggest(path: str, prof: dict[str, Any]) -> dict[str, Any]:
    """Values inferred from the profile: the data path and its first hour, the
    recommended slots (`ectl data profile`'s slot.conf) and a model."""
    rec = prof["recommendation"]
    data: dict[str, Any] = {"path": path, "slots": rec["slots"]}
    if prof.get("hours"):
        data["startDateHour"] = prof["hours"][0]
    per_hour = prof["samples"] / max(1, len(prof.get("hours") or [None]))
    model = "lr" if per_hour < LINEAR_BELOW_SAMPLES and not prof["truncated"] else "deepfm"
    return {"global": {"data": data}, "trainer": {"model": {"name": model}}}


def data_problems(values: dict[str, Any], prof: dict[str, Any]) -> list[str]:
    """Slots the values name that the data's sample never shows (a typo, or another
    dataset's slot.conf)."""
    slots = dig(values, "global.data.slots")
    if not isinstance(slots, list):
        return []
    seen = {s["slot"] for s in prof["slots"]}
    unknown = [s for s in slots if isinstance(s, int) and s not in seen]
    if not unknown:
        return []
    shown = ", ".join(map(str, sorted(seen))) or "none"
    return [
        f"global.data.slots: slot(s) {', '.join(map(str, unknown))} never occur in the first "
        f"{prof['lines']} lines of {values['global']['data'].get('path')} (slots seen: {shown})"
    ]
