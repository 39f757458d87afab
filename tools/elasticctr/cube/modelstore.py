"""Cube's view of a model version: its verified sparse part files (and a test writer).

Fetching and listing go through `elasticctr.modelstore` (token, HDFS user, verification),
what a version is through `elasticctr.versions`; this module adds what cube needs on top:
the (keys, values) pairs of the sparse parts and the embedding dim.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from elasticctr import versions
from elasticctr.errors import EctlError, ValidationError
from elasticctr.modelstore import open_store
from elasticctr.versions import VERSIONS_DIR, check_version_id

__all__ = [
    "VERSIONS_DIR",
    "ModelVersion",
    "check_version_id",
    "fetch_version",
    "list_versions",
    "verify_version",
    "write_version",
]


@dataclass(frozen=True)
class ModelVersion:
    """A verified version on the local disk: its manifest and sparse part files."""

    version: str
    path: Path
    manifest: dict[str, Any]
    dim: int
    parts: list[tuple[Path, Path]]  # (keys.npy, values.npy) in part order


def verify_version(
    path: Path, version: str | None = None, *, only: str | None = versions.SPARSE_DIR
) -> ModelVersion:
    """Check a local version's sparse files (every file with `only=None`) against its
    manifest; raise EctlError on a fault.

    The checks are `elasticctr.versions.verify_version` (donefile, every listed file's
    size and sha256 under `only`, no unlisted files, no escaping paths); this adds the
    keys/values pairs and the dim.
    """
    path = Path(path)
    where = f"model version {version or path}"
    manifest = versions.verify_version(path, only=only, where=where)
    parts = [(path / k, path / v) for k, v in versions.sparse_parts(manifest, where)]
    dim = manifest.get("embedding_dim")
    if not isinstance(dim, int) or dim < 1:
        raise EctlError(f"{where}: manifest embedding_dim must be a positive integer, got {dim!r}")
    return ModelVersion(version or manifest.get("version", ""), path, manifest, dim, parts)


def list_versions(store: str) -> list[str]:
    """Complete versions in the store, oldest first (see ModelStore.list_versions)."""
    return open_store(store).list_versions()


def fetch_version(store: str, version: str, cache: Path) -> ModelVersion:
    """Verified local copy of `version`'s sparse files: the store itself when local."""
    vdir = open_store(store).fetch(version, cache, only=versions.SPARSE_DIR)
    return verify_version(vdir, version)


def write_version(
    store: Path,
    version: str,
    parts: list[tuple[np.ndarray, np.ndarray]],
    *,
    model: str = "dnn",
    slots: list[int] | None = None,
    metrics: dict[str, float] | None = None,
    donefile: bool = True,
) -> Path:
    """Write a model version in the contract layout from numpy arrays (tests, demos, bench).

    The training export is the producer in production; this writes the same layout (the
    manifest through `elasticctr.versions.write_manifest`) so cube can be exercised
    without a training run.
    """
    check_version_id(version)
    vdir = Path(store) / VERSIONS_DIR / version
    (vdir / versions.SPARSE_DIR).mkdir(parents=True, exist_ok=True)
    dim = None
    rows = 0
    for i, (keys, values) in enumerate(parts):
        keys = np.asarray(keys, dtype=np.uint64)
        values = np.asarray(values, dtype=np.float32)
        if values.ndim != 2 or values.shape[0] != keys.shape[0]:
            raise ValidationError(f"part {i}: values {values.shape} vs keys {keys.shape}")
        dim = values.shape[1] if dim is None else dim
        if values.shape[1] != dim:
            raise ValidationError(f"part {i}: dim {values.shape[1]} != {dim}")
        keys_rel, values_rel = versions.sparse_part_files(i)
        np.save(vdir / keys_rel, keys)
        np.save(vdir / values_rel, values)
        rows += int(keys.shape[0])
    meta = {
        "model": model,
        "slots": list(slots or []),
        "metrics": dict(metrics or {}),
        "embedding_dim": int(dim or 0),
        "sparse": {"rows": rows, "parts": len(parts)},
    }
    versions.write_manifest(vdir, version, meta, donefile=donefile)
    return vdir
