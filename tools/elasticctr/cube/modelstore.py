"""Read (and, for tests and demos, write) exported model versions in the model store.

The layout is the contract in docs/contracts.md ("Model store layout"):
`{store}/versions/{YYYYMMDD}/{HH}/` with manifest.json (sha256 of every file),
`sparse/part-NNNNN.{keys,values}.npy` and a donefile written last. This module only
reads what the training export writes; it never changes a version in the store.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from elasticctr.constants import DONEFILE, ENV_FILESERVER_TOKEN
from elasticctr.errors import EctlError, ValidationError

MANIFEST = "manifest.json"
VERSIONS_DIR = "versions"
_VERSION_RE = re.compile(r"^(\d{8})/(\d{2})$")
_PART_RE = re.compile(r"^sparse/part-(\d{5})\.keys\.npy$")


def check_version_id(version: str) -> str:
    """A version id is "YYYYMMDD/HH"; anything else is a user error."""
    m = _VERSION_RE.match(str(version))
    if not m or not (0 <= int(m.group(2)) <= 23):
        raise ValidationError(f"bad version id {version!r}: expected YYYYMMDD/HH, e.g. 20200401/00")
    return str(version)


def _local_path(url: str) -> Path | None:
    if url.startswith("file://"):
        return Path(url[len("file://") :])
    if "://" not in url:
        return Path(url)
    return None


def _fs(url: str):
    import fsspec

    token = os.environ.get(ENV_FILESERVER_TOKEN)
    if token and url.startswith(("http://", "https://")):
        # A fileserver with protected reads wants the same token as for writes.
        return fsspec.core.url_to_fs(url, headers={"Authorization": f"Bearer {token}"})
    return fsspec.core.url_to_fs(url)


def list_versions(store: str) -> list[str]:
    """Complete versions (donefile present) in the store, oldest first."""
    local = _local_path(store)
    found: list[str] = []
    if local is not None:
        base = local / VERSIONS_DIR
        if not base.is_dir():
            return []
        for day in sorted(p for p in base.iterdir() if p.is_dir()):
            for hour in sorted(p for p in day.iterdir() if p.is_dir()):
                vid = f"{day.name}/{hour.name}"
                if _VERSION_RE.match(vid) and (hour / DONEFILE).is_file():
                    found.append(vid)
        return found
    fs, root = _fs(store.rstrip("/") + "/" + VERSIONS_DIR)

    def ls(path: str) -> list[str]:
        try:
            return sorted(fs.ls(path, detail=False))
        except FileNotFoundError:
            return []
        except Exception as exc:  # auth, network: never mistake them for "no versions"
            raise EctlError(f"cannot list the model store {store}: {exc!r}") from exc

    for day in ls(root):
        day_name = day.rstrip("/").rsplit("/", 1)[-1]
        if not re.fullmatch(r"\d{8}", day_name):
            continue
        for hour in ls(day):
            hour_name = hour.rstrip("/").rsplit("/", 1)[-1]
            vid = f"{day_name}/{hour_name}"
            if _VERSION_RE.match(vid) and DONEFILE in {
                p.rstrip("/").rsplit("/", 1)[-1] for p in ls(hour)
            }:
                found.append(vid)
    return found


@dataclass(frozen=True)
class ModelVersion:
    """A verified version on the local disk: its manifest and sparse part files."""

    version: str
    path: Path
    manifest: dict[str, Any]
    dim: int
    parts: list[tuple[Path, Path]]  # (keys.npy, values.npy) in part order


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(4 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_version(path: Path, version: str | None = None) -> ModelVersion:
    """Check a local version directory against its manifest; raise EctlError on any fault.

    The file checks (donefile, every listed file's size and sha256, no unlisted files)
    are the training export's own `verify_version`, so producer and consumer agree on
    what a valid version is; this adds what cube needs: keys/values pairs and the dim.
    """
    from elasticctr.train.export import verify_version as verify_export

    path = Path(path)
    where = f"model version {version or path}"
    manifest = verify_export(path)
    files = manifest["files"]
    parts = []
    for rel in sorted(files):
        m = _PART_RE.match(rel)
        if m:
            values_rel = f"sparse/part-{m.group(1)}.values.npy"
            if values_rel not in files:
                raise EctlError(f"{where}: {rel} has no {values_rel}")
            parts.append((path / rel, path / values_rel))
    dim = manifest.get("embedding_dim")
    if not isinstance(dim, int) or dim < 1:
        raise EctlError(f"{where}: manifest embedding_dim must be a positive integer, got {dim!r}")
    return ModelVersion(version or manifest.get("version", ""), path, manifest, dim, parts)


def fetch_version(store: str, version: str, cache: Path) -> ModelVersion:
    """Verified local copy of `version`: the store itself when local, else a download."""
    check_version_id(version)
    local = _local_path(store)
    if local is not None:
        return verify_version(local / VERSIONS_DIR / version, version)
    fs, root = _fs(store.rstrip("/") + f"/{VERSIONS_DIR}/{version}")
    dest = Path(cache) / version
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        manifest_raw = fs.cat_file(f"{root}/{MANIFEST}")
        (dest / MANIFEST).write_bytes(manifest_raw)
        manifest = json.loads(manifest_raw)
        for rel in manifest.get("files", {}):
            if rel.startswith("sparse/") or rel == MANIFEST:
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                fs.get_file(f"{root}/{rel}", str(dest / rel))
        (dest / DONEFILE).write_bytes(fs.cat_file(f"{root}/{DONEFILE}"))
    except (OSError, json.JSONDecodeError) as exc:
        raise EctlError(f"cannot fetch model version {version} from {store}: {exc}") from exc
    # Only the sparse files were copied: check those (dense files stay in the store).
    # Rewriting the local copy's file list is safe: every listed file is still checked.
    manifest["files"] = {k: v for k, v in manifest["files"].items() if k.startswith("sparse/")}
    (dest / MANIFEST).write_text(json.dumps(manifest))
    return verify_version(dest, version)


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

    The training export is the producer in production; this writes the same layout so
    cube can be exercised without a training run.
    """
    check_version_id(version)
    vdir = Path(store) / VERSIONS_DIR / version
    (vdir / "sparse").mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}
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
        for suffix, arr in (("keys", keys), ("values", values)):
            rel = f"sparse/part-{i:05d}.{suffix}.npy"
            np.save(vdir / rel, arr)
            files[rel] = {"sha256": _sha256(vdir / rel), "bytes": (vdir / rel).stat().st_size}
        rows += int(keys.shape[0])
    # Same fields as elasticctr.train.export.build_version writes.
    manifest = {
        "format_version": 1,
        "version": version,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": model,
        "slots": list(slots or []),
        "metrics": dict(metrics or {}),
        "embedding_dim": int(dim or 0),
        "sparse": {"rows": rows, "parts": len(parts)},
        "files": files,
    }
    tmp = vdir / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(tmp, vdir / MANIFEST)
    if donefile:
        (vdir / DONEFILE).write_text(version + "\n")
    return vdir
