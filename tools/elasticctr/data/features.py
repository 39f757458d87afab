"""Feature spec: how raw table rows become ElasticCTR feasigns, for conversion and serving.

One spec file (``features.json``) written by ``ectl data convert`` holds, per input
column, its slot and kind and, for numeric columns, quantile bucket boundaries fitted on
the data, plus column statistics. `FeatureSpec.transform` turns one raw row into
``{slot: [feasign]}``; conversion and the prediction service both call it, so a value
gets the same feasign offline and online.

- categorical: ``feasign = blake2b-64("<slot>:<value>")`` (value stripped of spaces);
- numeric: ``bucket = number of boundaries <= x``,
  ``feasign = blake2b-64("<slot>:#<bucket>")``;
- missing (empty, ``None``, NaN): the slot is absent from the line (length 0).

blake2b from hashlib is stable across processes, machines and Python versions (unlike
``hash()``), needs no extra package, and 64 bits keep collisions negligible.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from elasticctr.errors import ValidationError

SPEC_FORMAT = "elasticctr-features/1"
HASH_NAME = "blake2b-64"
FEATURES_JSON = "features.json"

CRITEO_NUMERIC = [f"I{i}" for i in range(1, 14)]
CRITEO_CATEGORICAL = [f"C{i}" for i in range(1, 27)]
CRITEO_COLUMNS = ["label", *CRITEO_NUMERIC, *CRITEO_CATEGORICAL]


def hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def is_missing(raw: Any) -> bool:
    if raw is None:
        return True
    if isinstance(raw, float):
        return math.isnan(raw)
    if isinstance(raw, str):
        return not raw.strip()
    return False


@dataclass
class Feature:
    name: str
    slot: int
    kind: str  # "numeric" | "categorical"
    boundaries: list[float] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    def feasign(self, raw: Any) -> int | None:
        """The feasign of one raw value, or None when it is missing.

        Raises ValueError for a numeric column whose value is not a number.
        """
        if is_missing(raw):
            return None
        if self.kind == "numeric":
            x = float(raw)
            if math.isnan(x):
                return None
            return hash64(f"{self.slot}:#{bisect.bisect_right(self.boundaries, x)}")
        text = raw.strip() if isinstance(raw, str) else str(raw)
        return hash64(f"{self.slot}:{text}")


@dataclass
class FeatureSpec:
    """Columns of the raw input, the label column and one Feature per used column."""

    columns: list[str]
    label: str
    features: list[Feature]
    input: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def slots(self) -> list[int]:
        return [f.slot for f in self.features]

    def transform(self, row: Mapping[str, Any] | Sequence[Any]) -> dict[int, list[int]]:
        """One raw row (a {column: value} mapping, or values in `columns` order; a short
        sequence is padded with missing values) -> {slot: [feasign]} of present features.

        Raises ValidationError naming the column for an unusable value.
        """
        if not isinstance(row, Mapping):
            values = list(row)
            if len(values) > len(self.columns):
                raise ValidationError(
                    f"row has {len(values)} fields, the spec has {len(self.columns)} columns"
                )
            row = dict(
                zip(self.columns, values + [None] * (len(self.columns) - len(values)), strict=True)
            )
        out: dict[int, list[int]] = {}
        for feature in self.features:
            try:
                sign = feature.feasign(row.get(feature.name))
            except (TypeError, ValueError):
                raise ValidationError(
                    f"column {feature.name}: {row.get(feature.name)!r} is not a number"
                ) from None
            if sign is not None:
                out[feature.slot] = [sign]
        return out

    def to_json(self) -> str:
        data = {
            "format": SPEC_FORMAT,
            "hash": HASH_NAME,
            "columns": self.columns,
            "label": self.label,
            "input": self.input,
            "features": [asdict(f) for f in self.features],
            "summary": self.summary,
        }
        return json.dumps(data, indent=2) + "\n"

    @staticmethod
    def from_json(text: str, source: str = FEATURES_JSON) -> FeatureSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{source}: not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != SPEC_FORMAT:
            raise ValidationError(f"{source}: not a feature spec (format {SPEC_FORMAT!r})")
        if data.get("hash") != HASH_NAME:
            raise ValidationError(f"{source}: unknown hash {data.get('hash')!r}")
        try:
            features = [Feature(**f) for f in data["features"]]
            spec = FeatureSpec(
                columns=list(data["columns"]),
                label=data["label"],
                features=features,
                input=data.get("input", {}),
                summary=data.get("summary", {}),
            )
        except (KeyError, TypeError) as exc:
            raise ValidationError(f"{source}: incomplete feature spec ({exc})") from None
        for f in spec.features:
            if f.kind not in ("numeric", "categorical"):
                raise ValidationError(f"{source}: feature {f.name} has unknown kind {f.kind!r}")
            if f.boundaries != sorted(f.boundaries):
                raise ValidationError(f"{source}: feature {f.name} boundaries are not sorted")
        return spec


def format_line(click: int, feats: Mapping[int, Sequence[int]], show: int = 1) -> str:
    """An ElasticCTR line from transformed features (slots in ascending order)."""
    parts = [str(show), str(click)]
    for slot in sorted(feats):
        parts.extend(f"{sign}:{slot}" for sign in feats[slot])
    return " ".join(parts)


def read_spec(url: str, hdfs_ugi: str | None = None) -> FeatureSpec:
    from elasticctr.data.storage import read_text

    return FeatureSpec.from_json(read_text(url, hdfs_ugi), source=url)
