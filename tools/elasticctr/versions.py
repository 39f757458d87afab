"""The model version contract: ids, layout, manifest, sha256, verify, write.

One home for what a "model version" is (docs/contracts.md, "Model store layout"); the
training export writes versions with it, cube and serving verify them with it, and the
test/demo writers use it too, so producer and consumers cannot drift apart:

```
{modelStore}/versions/{YYYYMMDD}/{HH}/
  manifest.json      {"format_version", "version", "created_at", ..., "files": {relpath:
                      {"sha256", "bytes"}}}: every file of the version except itself and
                      the donefile
  dense/...          Paddle inference model
  sparse/part-NNNNN.{keys,values}.npy   (`sparse_part_files`)
  donefile           written last: a version without it does not exist
```

Ids and partition hours share one format, ``YYYYMMDD/HH``: a real calendar date and an
hour 00..23 (`parse_date_hour`, `check_version_id`). Manifest paths must stay inside the
version folder (no ``..``, not absolute). Reading and writing the store itself (URLs,
tokens, HDFS user, atomic publish) is `elasticctr.modelstore`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import operator
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from elasticctr.constants import DONEFILE
from elasticctr.errors import EctlError, ValidationError

VERSIONS_DIR = "versions"
"""Folder of the model store that holds the versions."""
MANIFEST = "manifest.json"
FORMAT_VERSION = 1
DENSE_DIR = "dense"
SPARSE_DIR = "sparse"
DATE_HOUR_FORMAT = "YYYYMMDD/HH"
_DATE_HOUR = re.compile(r"^(\d{8})/(\d{2})$")
_PART_PREFIX = f"{SPARSE_DIR}/part-"
_PART_DIGITS = 5
_KEYS_SUFFIX = ".keys.npy"
_VALUES_SUFFIX = ".values.npy"
MAX_SPARSE_PARTS = 10**_PART_DIGITS
"""Part numbers have exactly five digits: 0..99999."""
_HASH_CHUNK = 4 << 20


# --- ids ------------------------------------------------------------------------------


def parse_date_hour(text: str) -> dt.datetime:
    """``20200401/00`` -> datetime(2020, 4, 1, 0); ValueError with the reason otherwise.

    Used for model version ids and for data partition hours (START_DATE_HR,
    global.data.startDateHour): a real calendar date and an hour in 00..23.
    """
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not {DATE_HOUR_FORMAT} (e.g. 20200401/00)")
    match = _DATE_HOUR.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not {DATE_HOUR_FORMAT} (e.g. 20200401/00)")
    day, hour = match.groups()
    try:
        date = dt.datetime.strptime(day, "%Y%m%d")
    except ValueError:
        raise ValueError(f"{text!r}: {day} is not a calendar date") from None
    if int(hour) > 23:
        raise ValueError(f"{text!r}: hour {hour} is not in 00..23")
    return date.replace(hour=int(hour))


def format_date_hour(when: dt.datetime) -> str:
    return when.strftime("%Y%m%d/%H")


def has_date_hour_shape(text: object) -> bool:
    """Whether `text` has the shape ``NNNNNNNN/NN`` (a real hour or not: parse_date_hour)."""
    return isinstance(text, str) and _DATE_HOUR.match(text) is not None


def is_version_id(text: object) -> bool:
    """Whether `text` is exactly a valid ``YYYYMMDD/HH`` (no surrounding blanks)."""
    if not isinstance(text, str) or text != text.strip():
        return False
    try:
        parse_date_hour(text)
    except ValueError:
        return False
    return True


def check_version_id(version: object) -> str:
    """The version id itself, or a ValidationError (exit 2) saying what is wrong."""
    if not isinstance(version, str) or version != version.strip():
        raise ValidationError(f"bad version id {version!r}: expected {DATE_HOUR_FORMAT}")
    try:
        parse_date_hour(version)
    except ValueError as exc:
        reason = str(exc).removeprefix(f"{version!r}: ")
        if reason.startswith(repr(version)):
            reason = ""
        raise ValidationError(
            f"bad version id {version!r}: expected {DATE_HOUR_FORMAT}"
            + (f" ({reason})" if reason else ""),
            hint="a real date and an hour 00..23, e.g. 20200401/00",
        ) from None
    return version


def version_path(version_id: str) -> str:
    """'20200401/07' -> 'versions/20200401/07' (relative to the model store root)."""
    return f"{VERSIONS_DIR}/{check_version_id(version_id)}"


def sparse_part_files(i: int) -> tuple[str, str]:
    """(keys, values) paths of sparse part `i`, relative to the version folder:
    ``sparse/part-00007.keys.npy`` and ``sparse/part-00007.values.npy``.

    The one place these names are typed: the training export, the test/demo writers and
    every reader (`sparse_parts`, `SPARSE_PART`) go through it. ValueError for a part
    number outside 0..MAX_SPARSE_PARTS-1 (its name would not have five digits, and no
    reader would find it).
    """
    try:
        n = -1 if isinstance(i, bool) else operator.index(i)  # int or numpy integer
    except TypeError:
        n = -1
    if not 0 <= n < MAX_SPARSE_PARTS:
        raise ValueError(f"sparse part number {i!r} is not in 0..{MAX_SPARSE_PARTS - 1}")
    stem = f"{_PART_PREFIX}{n:0{_PART_DIGITS}d}"
    return stem + _KEYS_SUFFIX, stem + _VALUES_SUFFIX


SPARSE_PART = re.compile(
    "^" + re.escape(_PART_PREFIX) + rf"(\d{{{_PART_DIGITS}}})" + re.escape(_KEYS_SUFFIX) + "$"
)
"""A sparse part's keys file (a name `sparse_part_files` gives; group 1: the part number);
its values file is ``sparse_part_files(int(group 1))[1]``."""


# --- files ----------------------------------------------------------------------------


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_entry(path: str | Path) -> dict[str, Any]:
    """The manifest entry of one file: {"sha256", "bytes"}."""
    return {"sha256": sha256_file(path), "bytes": Path(path).stat().st_size}


def relpath_problem(rel: object) -> str | None:
    """Why a manifest path is unsafe (escapes the version folder), or None if it is fine."""
    if not isinstance(rel, str) or not rel:
        return f"{rel!r}: not a relative file path"
    pure = PurePosixPath(rel)
    if pure.is_absolute() or rel.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", rel):
        return f"{rel}: absolute path (escapes the version directory)"
    if ".." in pure.parts or "\\" in rel:
        return f"{rel}: path escapes the version directory"
    return None


def write_manifest(
    vdir: str | Path,
    version_id: str,
    meta: Mapping[str, Any],
    *,
    donefile: bool = True,
) -> dict[str, Any]:
    """Hash every file under `vdir`, write manifest.json, then the donefile (last).

    `meta` adds the model facts (model, slots, embedding_dim, metrics, ...). The manifest
    is replaced atomically; returns it.
    """
    check_version_id(version_id)
    vdir = Path(vdir)
    files = {}
    for path in sorted(vdir.rglob("*")):
        rel = path.relative_to(vdir).as_posix()
        if path.is_file() and rel not in (MANIFEST, DONEFILE):
            files[rel] = file_entry(path)
    manifest = {
        "format_version": FORMAT_VERSION,
        "version": version_id,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **meta,
        "files": files,
    }
    tmp = vdir / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, vdir / MANIFEST)
    if donefile:
        (vdir / DONEFILE).write_text(version_id + "\n")
    return manifest


def read_manifest(vdir: str | Path, where: str | None = None) -> dict[str, Any]:
    """The parsed manifest.json of a local version folder, or an EctlError."""
    path = Path(vdir) / MANIFEST
    where = where or str(vdir)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise EctlError(f"{where}: {MANIFEST} is missing") from None
    except (OSError, ValueError) as exc:
        raise EctlError(f"{where}: {MANIFEST} is unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise EctlError(f"{where}: {MANIFEST} is not a JSON object")
    return data


def verify_version(
    vdir: str | Path, *, only: str | None = None, where: str | None = None
) -> dict[str, Any]:
    """Check a local version folder against its manifest; return the manifest.

    Fails (an EctlError naming every problem) when the donefile or manifest is
    missing, a listed path escapes the folder, a listed file is missing, has another
    size or sha256, or an unlisted file sits in dense/ or sparse/. With `only`
    ("dense"/"sparse") just the files under that folder are checked, and it must list
    at least one (serving with cube needs dense/ alone; hashing gigabytes of sparse
    files it never reads would only slow a replica down).
    """
    root = Path(vdir)
    where = where or f"model version {root}"
    if not (root / DONEFILE).is_file():
        raise EctlError(f"{where}: no {DONEFILE}: the version is incomplete")
    manifest = read_manifest(root, where)
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise EctlError(f"{where}: {MANIFEST} lists no files")
    problems = []
    listed = False
    for rel, info in sorted(files.items()):
        bad = relpath_problem(rel)
        if bad:
            problems.append(bad)
            continue
        if only and not rel.startswith(only + "/"):
            continue
        listed = True
        file = root / rel
        if not isinstance(info, dict):
            problems.append(f"{rel}: manifest entry is not an object")
        elif not file.is_file():
            problems.append(f"{rel}: missing")
        elif file.stat().st_size != info.get("bytes"):
            problems.append(
                f"{rel}: {file.stat().st_size} bytes, manifest says {info.get('bytes')}"
            )
        elif sha256_file(file) != info.get("sha256"):
            problems.append(f"{rel}: sha256 differs from the manifest")
    if only and not listed:
        problems.append(f"{only}/: the manifest lists no files there")
    for sub in (only,) if only else (DENSE_DIR, SPARSE_DIR):
        for file in sorted((root / sub).rglob("*")) if (root / sub).is_dir() else []:
            rel = file.relative_to(root).as_posix()
            if file.is_file() and rel not in files:
                problems.append(f"{rel}: not in the manifest")
    if problems:
        error = EctlError(f"{where} failed verification: " + "; ".join(problems))
        error.problems = problems  # type: ignore[attr-defined]
        raise error
    return manifest


def sparse_parts(
    manifest: Mapping[str, Any], where: str = "model version"
) -> list[tuple[str, str]]:
    """(keys, values) relative paths of the sparse parts the manifest lists, in part
    order (names of `sparse_part_files`; other files under sparse/ are not parts)."""
    files = manifest.get("files") or {}
    parts = []
    for rel in sorted(files):
        m = SPARSE_PART.match(rel)
        if m:
            values_rel = sparse_part_files(int(m.group(1)))[1]
            if values_rel not in files:
                raise EctlError(f"{where}: {rel} has no {values_rel} in the manifest")
            parts.append((rel, values_rel))
    return parts
