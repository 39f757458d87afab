"""Fetch one exported version (or just its dense part) from the model store, verified.

Layout and verification rule: docs/contracts.md ("Model store layout"). A version whose
files are missing, truncated or differ from the manifest's sha256 is rejected with an
EctlError; the caller keeps serving the version it has.

A whole version is checked by the training export's own `verify_version`. With cube,
serving needs only `dense/`: the sparse files are cube-transfer's (which verifies them),
and hashing gigabytes of embeddings on a serving replica would only slow it down, so
`verify_files(only="dense")` applies the same rules to that folder alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from elasticctr.constants import DONEFILE
from elasticctr.errors import EctlError, ValidationError
from elasticctr.serving.model import DENSE_DIR, MANIFEST

VERSIONS_DIR = "versions"
_VERSION_RE = re.compile(r"^\d{8}/([01]\d|2[0-3])$")


def check_version_id(version: str) -> str:
    if not isinstance(version, str) or not _VERSION_RE.match(version):
        raise ValidationError(f"bad version id {version!r}: expected YYYYMMDD/HH, e.g. 20200401/00")
    return version


def _local(store: str) -> Path | None:
    if store.startswith("file://"):
        return Path(store[len("file://") :])
    if "://" not in store:
        return Path(store)
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(4 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_files(vdir: Path, manifest: dict[str, Any], only: str | None, where: str) -> None:
    """Every manifest file (under `only`/ if given) exists with its size and sha256."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise EctlError(f"{where}: {MANIFEST} has no 'files' map")
    problems = []
    for rel, meta in sorted(files.items()):
        if only and not rel.startswith(only + "/"):
            continue
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            problems.append(f"{rel}: path escapes the version directory")
            continue
        f = vdir / rel
        if not f.is_file():
            problems.append(f"{rel}: missing")
        elif "bytes" in meta and f.stat().st_size != int(meta["bytes"]):
            problems.append(f"{rel}: {f.stat().st_size} bytes, manifest says {meta['bytes']}")
        elif _sha256(f) != meta.get("sha256"):
            problems.append(f"{rel}: sha256 differs from the manifest")
    if only and not any(rel.startswith(only + "/") for rel in files):
        problems.append(f"{only}/: the manifest lists no files there")
    if only and (vdir / only).is_dir():
        for f in sorted((vdir / only).rglob("*")):
            rel = f.relative_to(vdir).as_posix()
            if f.is_file() and rel not in files:
                problems.append(f"{rel}: not in the manifest")
    if problems:
        raise ValidationError(f"{where} failed verification", problems=problems)


def fetch(store: str, version: str, cache: Path, *, dense_only: bool) -> Path:
    """A verified local directory of `version`: dense/ (+ sparse/ unless dense_only).

    A local store is read in place; a remote one (http fileserver, hdfs://) is copied into
    `cache` first. Raises EctlError if the version is absent, unfinished or corrupt.
    """
    check_version_id(version)
    where = f"model version {version}"
    only = DENSE_DIR if dense_only else None
    local = _local(store)
    if local is not None:
        vdir = local / VERSIONS_DIR / version
        if not (vdir / DONEFILE).is_file():
            raise EctlError(f"{where}: not in {store} (no {vdir / DONEFILE})")
        _verify(vdir, only, where)
        return vdir
    import fsspec

    fs, root = fsspec.core.url_to_fs(store.rstrip("/") + f"/{VERSIONS_DIR}/{version}")
    dest = Path(cache) / version
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    try:
        if not fs.exists(f"{root}/{DONEFILE}"):
            raise EctlError(f"{where}: not in {store} (no {DONEFILE})")
        raw = fs.cat_file(f"{root}/{MANIFEST}")
        (tmp / MANIFEST).write_bytes(raw)
        manifest = _read_json(tmp / MANIFEST, where)
        for rel in manifest.get("files", {}):
            if only and not rel.startswith(only + "/"):
                continue
            if ".." in Path(rel).parts:
                continue  # verify_files reports it
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(f"{root}/{rel}", str(tmp / rel))
        (tmp / DONEFILE).write_bytes(b"")
        _verify(tmp, only, where)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except OSError as exc:
        raise EctlError(f"{where}: cannot fetch from {store}: {exc}") from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _verify(vdir: Path, only: str | None, where: str) -> None:
    if only is None:
        from elasticctr.train.export import verify_version

        verify_version(vdir)
    else:
        verify_files(vdir, _read_json(vdir / MANIFEST, where), only, where)


def _read_json(path: Path, where: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise EctlError(f"{where}: {MANIFEST} missing") from exc
    except (OSError, ValueError) as exc:
        raise EctlError(f"{where}: {MANIFEST} unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise EctlError(f"{where}: {MANIFEST} is not a JSON object")
    return data


def latest_version(store: str) -> str | None:
    """Newest complete version (donefile present) in the store, or None."""
    local = _local(store)
    found: list[str] = []
    if local is not None:
        base = local / VERSIONS_DIR
        if base.is_dir():
            for day in base.iterdir():
                for hour in day.iterdir() if day.is_dir() else ():
                    vid = f"{day.name}/{hour.name}"
                    if _VERSION_RE.match(vid) and (hour / DONEFILE).is_file():
                        found.append(vid)
        return max(found) if found else None
    import fsspec

    fs, root = fsspec.core.url_to_fs(store.rstrip("/") + "/" + VERSIONS_DIR)
    if not fs.exists(root):
        return None
    for day in fs.ls(root, detail=False):
        for hour in fs.ls(day, detail=False):
            parts = hour.rstrip("/").rsplit("/", 2)[-2:]
            vid = "/".join(parts)
            if _VERSION_RE.match(vid) and fs.exists(hour.rstrip("/") + "/" + DONEFILE):
                found.append(vid)
    return max(found) if found else None
