"""The values files a user passes to install/upgrade/template, validated before helm sees them.

Validation itself (chart schemas + cross-field rules) belongs to `elasticctr.values`; this
module only merges the user's files the way `helm -f a -f b` does, so helm receives ONE
dict (pyhelm3 would concatenate lists if given several) holding only what the user set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from elasticctr.errors import EctlError, ValidationError


def read_values_file(path: Path) -> dict[str, Any]:
    """One YAML values file as a dict; unreadable or non-mapping files are user errors."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise EctlError(f"cannot read values file {path}: {exc.strerror or exc}") from exc
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
        raise ValidationError(f"{path}: a values file must be a mapping, got {type(data).__name__}")
    return data


def merge_values(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """helm's -f semantics: maps merge key by key, anything else (lists too) is replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_user_values(files: list[Path], chart: Path | None = None) -> dict[str, Any]:
    """Merge the files (later wins) and validate them against the chart; return the merge."""
    merged: dict[str, Any] = {}
    for path in files:
        merged = merge_values(merged, read_values_file(path))
    check_values(files, chart)
    return merged


def check_values(files: list[Path], chart: Path | None = None) -> None:
    """Raise ValidationError listing every `path: message` problem the chart reports."""
    from elasticctr import values as chart_values

    problems = chart_values.validate_files([Path(f) for f in files], chart)
    if problems:
        names = ", ".join(str(f) for f in files) or "chart defaults"
        raise ValidationError(f"{names}: {len(problems)} problem(s)", problems=list(problems))
