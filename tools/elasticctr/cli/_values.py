"""The values files a user passes to install/upgrade/template, validated before helm sees them.

Reading, merging and validation belong to `elasticctr.values` (the chart's schemas and
cross-field rules, one source of truth with helm); this module only asks it, and hands
helm ONE merged dict (pyhelm3 would concatenate lists if given several) holding only what
the user set, so changed chart defaults still apply on upgrade.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from elasticctr.errors import ValidationError


def load_user_values(files: list[Path], chart: Path | None = None) -> dict[str, Any]:
    """Merge the files like `helm -f a -f b`, validate against the chart, return the merge."""
    from elasticctr import values as chart_values

    merged = chart_values.load_files([Path(f) for f in files])
    raise_problems(chart_values.validate(merged, chart), files)
    return merged


def check_values(files: list[Path], chart: Path | None = None) -> None:
    """Raise ValidationError listing every `path: message` problem the chart reports."""
    from elasticctr import values as chart_values

    raise_problems(chart_values.validate_files([Path(f) for f in files], chart), files)


def raise_problems(problems: list[str], files: list[Path]) -> None:
    if problems:
        names = ", ".join(str(f) for f in files) or "chart defaults"
        raise ValidationError(f"{names}: {len(problems)} problem(s)", problems=list(problems))
