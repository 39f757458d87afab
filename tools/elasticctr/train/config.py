"""What a training role needs from the values file (docs/contracts.md), validated once.

Keys read: `trainer.trainer.threads` (the trainer subchart's `trainer.threads`; env
`ELASTICCTR_TRAIN_THREADS` overrides it), `trainer.model` (name + hyperparameters, see
`elasticctr.train.models`), `global.data` (path, hdfsAddress, slots, sparseDim,
startDateHour, endDateHour, maxErrorRate, hdfsUgi), `global.modelStore`,
`global.mlflow.trackingUri`. Everything else in the values file belongs to other parts
and is ignored here. `hdfsAddress` completes an `hdfs:///path` (or bare path) data URL;
HDFS_UGI comes from the values, else from the `HDFS_UGI` environment variable (the chart
sets it from `global.data.hdfsUgiSecret` or the release's store Secret).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticctr.constants import (
    DEFAULT_MAX_ERROR_RATE,
    DEFAULT_TRAIN_THREADS,
    ENV_HDFS_UGI,
    ENV_TRAIN_THREADS,
    MAX_TRAIN_THREADS,
)
from elasticctr.data import storage
from elasticctr.data.config import dataset_url
from elasticctr.errors import ValidationError
from elasticctr.modelstore import with_hdfs_address
from elasticctr.train.models import ModelSpec, resolve_spec
from elasticctr.values import read_yaml_mapping
from elasticctr.versions import parse_date_hour


@dataclass(frozen=True)
class TrainConfig:
    model: ModelSpec
    slots: tuple[int, ...]
    data_path: str = ""
    sparse_dim: int | None = None
    start_date_hour: str = ""
    end_date_hour: str = ""
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    hdfs_ugi: str | None = None
    model_store: str = ""
    mlflow_uri: str = ""
    threads: int = DEFAULT_TRAIN_THREADS  # 0: Python reader; >= 1: native pipeline threads
    extra: dict[str, Any] = field(default_factory=dict)


def _get(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping


def from_values(values: Mapping[str, Any]) -> TrainConfig:
    """Build a TrainConfig; every problem is reported at once with its key path."""
    problems: list[str] = []
    try:
        spec = resolve_spec(_get(values, "trainer", "model"))
    except ValidationError as exc:
        problems.extend(exc.problems or [str(exc)])
        spec = None
    data = _get(values, "global", "data") or {}
    if not isinstance(data, Mapping):
        problems.append("global.data: expected a mapping")
        data = {}
    slots = data.get("slots")
    if (
        not isinstance(slots, list)
        or not slots
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in slots)
    ):
        problems.append("global.data.slots: expected a non-empty list of slot ids (integers >= 0)")
        slots = []
    elif len(set(slots)) != len(slots):
        problems.append("global.data.slots: slot ids must be unique")
    sparse_dim = data.get("sparseDim")
    if sparse_dim in ("", 0):
        sparse_dim = None
    if sparse_dim is not None and (
        not isinstance(sparse_dim, int) or isinstance(sparse_dim, bool) or sparse_dim < 1
    ):
        problems.append(f"global.data.sparseDim: expected a positive integer, got {sparse_dim!r}")
    for key in ("startDateHour", "endDateHour"):
        value = data.get(key) or ""
        if value:
            try:
                parse_date_hour(str(value))
            except ValueError as exc:
                problems.append(f"global.data.{key}: {exc}")
    rate = data.get("maxErrorRate", DEFAULT_MAX_ERROR_RATE)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        problems.append(f"global.data.maxErrorRate: expected a number in [0, 1], got {rate!r}")
    data_path = str(data.get("path") or "")
    if data_path and data.get("hdfsAddress"):
        try:
            data_path = dataset_url(data_path, str(data["hdfsAddress"]))
        except ValueError as exc:
            problems.append(f"global.data.hdfsAddress: {exc}")
    model_store = str(_get(values, "global", "modelStore") or "")
    if model_store.startswith("hdfs:///") and data.get("hdfsAddress") and not problems:
        # the same namenode completes an hdfs:/// model store (elasticctr.modelstore)
        model_store = with_hdfs_address(model_store, str(data["hdfsAddress"]))
    # The chart sets MLFLOW_TRACKING_URI when trackingUri is empty (its own mlflow subchart).
    mlflow_uri = _get(values, "global", "mlflow", "trackingUri") or os.environ.get(
        "MLFLOW_TRACKING_URI", ""
    )
    threads = _get(values, "trainer", "trainer", "threads")
    where = "trainer.trainer.threads"
    if os.environ.get(ENV_TRAIN_THREADS, "") != "":
        where, threads = ENV_TRAIN_THREADS, os.environ[ENV_TRAIN_THREADS]
        threads = int(threads) if threads.strip().isdigit() else threads
    if threads is None:
        threads = DEFAULT_TRAIN_THREADS
    if (
        isinstance(threads, bool)
        or not isinstance(threads, int)
        or not 0 <= threads <= MAX_TRAIN_THREADS
    ):
        problems.append(
            f"{where}: expected an integer in [0, {MAX_TRAIN_THREADS}], got {threads!r}"
        )
    if problems:
        raise ValidationError("values are not usable for training", problems)
    return TrainConfig(
        model=spec,
        slots=tuple(slots),
        data_path=data_path,
        sparse_dim=sparse_dim,
        start_date_hour=str(data.get("startDateHour") or ""),
        end_date_hour=str(data.get("endDateHour") or ""),
        max_error_rate=float(rate),
        hdfs_ugi=data.get("hdfsUgi") or os.environ.get(ENV_HDFS_UGI) or None,
        model_store=str(model_store),
        mlflow_uri=str(mlflow_uri),
        threads=int(threads),
    )


def load_values(path: str | Path) -> dict[str, Any]:
    """The values file a role reads (same reader and errors as `ectl validate`); its
    `global.s3` becomes the S3 environment where that is unset (`storage.apply_s3_values`)."""
    values = read_yaml_mapping(Path(path), "values file")
    storage.apply_s3_values(values)
    return values


def load(path: str | Path) -> TrainConfig:
    return from_values(load_values(path))
