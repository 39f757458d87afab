"""The values files a user passes to install/upgrade/template, validated before helm sees them.

Reading, merging and validation belong to `elasticctr.values` (the chart's schemas and
cross-field rules, one source of truth with helm); this module only asks it, and hands
helm ONE merged dict (pyhelm3 would concatenate lists if given several) holding only what
the user set, so changed chart defaults still apply on upgrade.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from elasticctr.errors import ValidationError


def parse_sets(sets: list[str]) -> dict[str, Any]:
    """`--set a.b=v` pairs as one values dict; `v` is read as YAML (3, true, [1, 2], text)."""
    from elasticctr import values as chart_values

    result: dict[str, Any] = {}
    problems = []
    for item in sets:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(p and p.replace("_", "").replace("-", "").isalnum() for p in parts):
            problems.append(f"--set {item}: expected dotted.key=value (e.g. cube.shards=4)")
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        for part in reversed(parts):
            value = {part: value}
        result = chart_values.merge(result, value, drop_nulls=False)
    if problems:
        raise ValidationError(f"{len(problems)} bad --set value(s)", problems=problems)
    return result


def load_user_values(
    files: list[Path],
    chart: Path | None = None,
    sets: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Merge `base`, the files like `helm -f a -f b`, --set, then `extra`; validate against
    the chart (so a file can override `base` but never `extra`)."""
    from elasticctr import values as chart_values

    merged = chart_values.merge(
        base or {}, chart_values.load_files([Path(f) for f in files]), drop_nulls=False
    )
    if sets:
        merged = chart_values.merge(merged, parse_sets(sets), drop_nulls=False)
    if extra:
        merged = chart_values.merge(merged, extra, drop_nulls=False)
    names = [*map(str, files), *(f"--set {s}" for s in sets or [])]
    raise_problems(chart_values.validate(merged, chart), names)
    return merged


def raise_problems(problems: list[str], files: list) -> None:
    if problems:
        names = ", ".join(str(f) for f in files) or "chart defaults"
        raise ValidationError(f"{names}: {len(problems)} problem(s)", problems=list(problems))
