"""cube-builder: turn the sparse dump of one model version into N shard files.

Output (the cube root, local disk of the shards or a volume they share):

    {cube_root}/versions/{YYYYMMDD}/{HH}/
        shard-00000-of-0000N.cube ...   see format.py
        manifest.json                    written last: version, dim, counts, sha256 per shard

A version directory is built under a temp name and renamed into place, so a shard never
sees a half-built version.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from elasticctr.cube.format import shard_file_name, shard_of, write_shard
from elasticctr.cube.modelstore import ModelVersion
from elasticctr.errors import EctlError, ValidationError
from elasticctr.versions import VERSIONS_DIR, check_version_id

CUBE_MANIFEST = "manifest.json"
CUBE_FORMAT = "ectl-cube/1"


def version_dir(cube_root: Path, version: str) -> Path:
    return Path(cube_root) / VERSIONS_DIR / check_version_id(version)


def read_cube_manifest(cube_root: Path, version: str) -> dict[str, Any]:
    path = version_dir(cube_root, version) / CUBE_MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise EctlError(f"cube version {version} is not built ({path} missing)") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EctlError(f"{path} is not valid JSON: {exc}") from exc
    if manifest.get("format") != CUBE_FORMAT or manifest.get("version") != version:
        raise EctlError(f"{path}: not a {CUBE_FORMAT} manifest of version {version}")
    return manifest


def built_versions(cube_root: Path) -> list[str]:
    """Versions with a complete build (manifest present), oldest first."""
    base = Path(cube_root) / VERSIONS_DIR
    if not base.is_dir():
        return []
    out = []
    for day in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for hour in sorted(p for p in day.iterdir() if p.is_dir()):
            if (hour / CUBE_MANIFEST).is_file():
                out.append(f"{day.name}/{hour.name}")
    return out


def _load_parts(mv: ModelVersion) -> tuple[np.ndarray, np.ndarray]:
    keys_list, values_list = [], []
    for keys_path, values_path in mv.parts:
        try:
            keys = np.load(keys_path, mmap_mode="r", allow_pickle=False)
            values = np.load(values_path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise EctlError(f"{keys_path.parent}: cannot read a sparse part: {exc}") from exc
        if keys.dtype != np.uint64 or keys.ndim != 1:
            raise ValidationError(
                f"{keys_path}: expected uint64 [n], got {keys.dtype} {keys.shape}"
            )
        if values.dtype != np.float32 or values.shape != (keys.shape[0], mv.dim):
            raise ValidationError(
                f"{values_path}: expected float32 [{keys.shape[0]}, {mv.dim}], "
                f"got {values.dtype} {values.shape}"
            )
        keys_list.append(keys)
        values_list.append(values)
    if not keys_list:
        return np.zeros(0, np.uint64), np.zeros((0, mv.dim), np.float32)
    return np.concatenate(keys_list), np.concatenate(values_list)


def build_version(
    mv: ModelVersion,
    cube_root: Path,
    num_shards: int,
    *,
    force: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Build all shards of a verified model version; return the cube manifest.

    An existing complete build with the same shard count is reused unless `force`.
    """
    if num_shards < 1:
        raise ValidationError(f"--shards must be >= 1, got {num_shards}")
    version = check_version_id(mv.version)
    final = version_dir(cube_root, version)
    if (final / CUBE_MANIFEST).is_file() and not force:
        existing = read_cube_manifest(cube_root, version)
        if existing["num_shards"] == num_shards:
            return existing
    started = time.perf_counter()
    keys, values = _load_parts(mv)
    order = np.argsort(keys)  # equal keys are an error below, so stability is moot
    keys = keys[order]
    if keys.size > 1:
        dup = np.flatnonzero(keys[1:] == keys[:-1])
        if dup.size:
            sample = ", ".join(str(int(k)) for k in keys[dup[:5]])
            raise ValidationError(
                f"model version {version}: {dup.size} duplicate feasigns in the sparse dump "
                f"(e.g. {sample}); each key must appear in exactly one part once"
            )
    shard = shard_of(keys, num_shards) if num_shards > 1 else None
    tmp = final.parent / f".{final.name}.build-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    entries = []
    try:
        for i in range(num_shards):
            # flatnonzero keeps the keys of each shard in sorted order.
            sel = np.flatnonzero(shard == i) if shard is not None else slice(None)
            name = shard_file_name(i, num_shards)
            shard_keys = keys[sel]
            sha, size = write_shard(
                tmp / name, shard_keys, values[order[sel]], shard=i, num_shards=num_shards
            )
            entries.append(
                {"shard": i, "file": name, "keys": int(shard_keys.size), "bytes": size,
                 "sha256": sha}
            )  # fmt: skip
            if progress:
                progress(i + 1, num_shards)
        manifest = {
            "format": CUBE_FORMAT,
            "version": version,
            "model": mv.manifest.get("model"),
            "dim": mv.dim,
            "num_shards": num_shards,
            "total_keys": int(keys.size),
            "build_seconds": round(time.perf_counter() - started, 3),
            "shards": entries,
        }
        (tmp / CUBE_MANIFEST).write_text(json.dumps(manifest, indent=1))
        if final.exists():
            old = final.parent / f".{final.name}.old-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)  # mmapped inodes stay valid for readers
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def remove_version(cube_root: Path, version: str) -> None:
    shutil.rmtree(version_dir(cube_root, version), ignore_errors=True)
