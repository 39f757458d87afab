"""Exported model versions: the model store layout of docs/contracts.md, written and checked.

```
{modelStore}/versions/{YYYYMMDD}/{HH}/
  manifest.json                      files: {relpath: {"sha256", "bytes"}} + model facts
  dense/                             Paddle inference model (input: pooled embeddings)
  sparse/part-NNNNN.keys.npy         uint64 [n]
  sparse/part-NNNNN.values.npy       float32 [n, dim]
  donefile                           written last
```

`write_version` builds the version in a local folder and then copies it to the store
(file path, file://, or any fsspec URL) with the donefile last, so a reader never sees a
version whose donefile exists while files are missing. `verify_version` is what every
consumer (cube-transfer, serving) runs before using a version.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from elasticctr.constants import DONEFILE
from elasticctr.errors import EctlError

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
DEFAULT_ROWS_PER_PART = 1 << 20
VERSION_ID = re.compile(r"^(\d{8})/(\d{2})$")
_HASH_CHUNK = 1 << 20


def version_path(version_id: str) -> str:
    """'20200401/07' -> 'versions/20200401/07' (relative to the model store root)."""
    if not VERSION_ID.match(version_id):
        raise EctlError(f"bad version id {version_id!r}: expected YYYYMMDD/HH")
    return f"versions/{version_id}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# --- sparse table dump (Paddle PS, SparseAccessor text) ----------------------------------


def _rule_width(n: int, rule: str) -> int:
    return {"adam": 3 * n + 2, "naive": n, "adagrad": n + 1}[rule]


def row_layout(fields_after_key: int, table_dim: int) -> tuple[int, int]:
    """(embed_w column, first embedx_w column) of a SparseAccessor dump line.

    A line is `key` + 5 bookkeeping fields (slot, unseen days, delta score, show, click)
    + the embed block (w + optimizer state) + the embedx block (table_dim - 1 weights +
    state). The state width depends on the sparse SGD rule, so the rule is recognised
    from the field count rather than assumed.
    """
    for rule in ("adam", "naive", "adagrad"):
        embed = _rule_width(1, rule)
        embedx = _rule_width(table_dim - 1, rule)  # a 1-wide table still has embedx state
        if 5 + embed + embedx == fields_after_key:
            return 5, 5 + embed
    raise EctlError(
        f"unrecognised sparse table dump: {fields_after_key} values per key for a "
        f"{table_dim}-wide table (expected a SparseAccessor with adam/naive/adagrad rules)"
    )


def read_sparse_dump(table_dir: Path, table_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """All rows of a dumped sparse table: keys uint64 [n] (sorted), values float32 [n, dim]."""
    files = sorted(Path(table_dir).glob("part-*"))
    if not files:
        raise EctlError(f"no sparse table dump under {table_dir}")
    keys_parts, value_parts = [], []
    layout = None
    for path in files:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            data = fh.read()
        lines = data.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        if not lines:
            continue
        heads, tails = zip(*(line.split(b" ", 1) for line in lines), strict=True)
        keys = np.array(heads).astype(np.uint64)
        flat = np.array(b" ".join(tails).split(), dtype=np.float32)
        width = flat.size // len(lines)
        if width * len(lines) != flat.size:
            raise EctlError(f"{path}: lines have different numbers of values")
        if layout is None:
            layout = row_layout(width, table_dim)
        rows = flat.reshape(len(lines), width)
        embed_col, embedx_col = layout
        values = np.empty((len(lines), table_dim), dtype=np.float32)
        values[:, 0] = rows[:, embed_col]
        if table_dim > 1:
            values[:, 1:] = rows[:, embedx_col : embedx_col + table_dim - 1]
        keys_parts.append(keys)
        value_parts.append(values)
    if not keys_parts:
        return np.zeros(0, np.uint64), np.zeros((0, table_dim), np.float32)
    keys = np.concatenate(keys_parts)
    values = np.concatenate(value_parts)
    real = keys != 0  # feasign 0 is the trainer's padding id (always a zero row)
    keys, values = keys[real], values[real]
    order = np.argsort(keys, kind="stable")
    return keys[order], values[order]


def read_dense_dump(
    ps_dir: Path, names: list[str], shapes: dict[str, tuple[int, ...]]
) -> dict[str, np.ndarray]:
    """Dense parameters from a PS dump: the dense table (the folder after the sparse one,
    `001`) holds one row per scalar, parameters concatenated in table order; column 0 is
    the value, the rest optimizer state."""
    tables = sorted(p for p in Path(ps_dir).iterdir() if p.is_dir() and p.name != "000")
    if not tables:
        raise EctlError(f"no dense table dump under {ps_dir}")
    files = sorted(tables[0].glob("part-*"))
    columns = []
    for path in files:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            lines = fh.read().split(b"\n")
        rows = [line.split(b" ", 1)[0] for line in lines if line.strip()]
        columns.append(np.array(rows).astype(np.float32))
    flat = np.concatenate(columns) if columns else np.zeros(0, np.float32)
    sizes = [int(np.prod([d for d in shapes[n]])) for n in names]
    if sum(sizes) != flat.size:
        raise EctlError(
            f"dense dump under {tables[0]} has {flat.size} values, the model needs {sum(sizes)}"
        )
    out, off = {}, 0
    for name, size in zip(names, sizes, strict=True):
        out[name] = flat[off : off + size].reshape(shapes[name])
        off += size
    return out


# --- lookup (what serving does with a version) ----------------------------------------


def pool(keys: np.ndarray, values: np.ndarray, batch) -> np.ndarray:
    """Pooled embeddings [n, num_slots, dim] of a slot-major batch; unknown keys count as 0."""
    n = len(batch)
    dim = values.shape[1]
    out = np.zeros((n, len(batch.ids), dim), dtype=np.float32)
    for j, ids in enumerate(batch.ids):
        if ids.size == 0 or keys.size == 0:
            continue
        idx = np.searchsorted(keys, ids)
        idx[idx >= keys.size] = 0
        rows = values[idx] * (keys[idx] == ids)[:, None]
        csum = np.zeros((ids.size + 1, dim), dtype=np.float64)
        np.cumsum(rows, axis=0, out=csum[1:])
        off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(batch.lengths[j], out=off[1:])
        out[:, j, :] = csum[off[1:]] - csum[off[:-1]]
    return out


# --- writing and verifying versions ---------------------------------------------------


def _write_sparse(folder: Path, keys: np.ndarray, values: np.ndarray, rows_per_part: int) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    parts = max(1, -(-keys.size // rows_per_part))
    for p in range(parts):
        sl = slice(p * rows_per_part, (p + 1) * rows_per_part)
        np.save(folder / f"part-{p:05d}.keys.npy", np.ascontiguousarray(keys[sl], np.uint64))
        np.save(folder / f"part-{p:05d}.values.npy", np.ascontiguousarray(values[sl], np.float32))
    return parts


def build_version(
    out_dir: Path,
    *,
    version_id: str,
    dense_dir: Path,
    keys: np.ndarray,
    values: np.ndarray,
    meta: Mapping[str, Any],
    rows_per_part: int = DEFAULT_ROWS_PER_PART,
) -> dict[str, Any]:
    """Lay out one complete version (with donefile) in a local folder; return the manifest."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    shutil.copytree(dense_dir, out_dir / "dense")
    parts = _write_sparse(out_dir / "sparse", keys, values, rows_per_part)
    files = {}
    for path in sorted(out_dir.rglob("*")):
        if path.is_file():
            rel = path.relative_to(out_dir).as_posix()
            files[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    manifest = {
        "format_version": FORMAT_VERSION,
        "version": version_id,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **meta,
        "embedding_dim": int(values.shape[1]),
        "sparse": {"rows": int(keys.size), "parts": parts},
        "files": files,
    }
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (out_dir / DONEFILE).write_text(version_id + "\n")
    return manifest


def published(store: str, version_id: str) -> bool:
    """Whether the model store already holds this version (its donefile exists)."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(f"{store.rstrip('/')}/{version_path(version_id)}")
    return bool(fs.exists(f"{root}/{DONEFILE}"))


def publish(local_dir: Path, store: str, version_id: str) -> str:
    """Copy a built version into the model store, donefile last; return its URL/path."""
    import fsspec

    target = f"{store.rstrip('/')}/{version_path(version_id)}"
    fs, root = fsspec.core.url_to_fs(target)
    if fs.exists(f"{root}/{DONEFILE}"):
        raise EctlError(f"model version {version_id} already exists at {target}")
    local_dir = Path(local_dir)
    files = [p for p in sorted(local_dir.rglob("*")) if p.is_file() and p.name != DONEFILE]
    for path in [*files, local_dir / DONEFILE]:  # the donefile makes the version exist
        rel = path.relative_to(local_dir).as_posix()
        fs.makedirs(f"{root}/{rel}".rsplit("/", 1)[0], exist_ok=True)
        fs.put_file(str(path), f"{root}/{rel}")
    return target


def verify_version(path: str | Path) -> dict[str, Any]:
    """Check a version folder against its manifest; return the manifest or raise EctlError.

    Fails when the donefile or manifest is missing, a listed file is missing, has another
    size or another sha256, or an unlisted file sits in dense/ or sparse/.
    """
    root = Path(path)
    if not (root / DONEFILE).is_file():
        raise EctlError(f"{root}: no {DONEFILE}: the version is incomplete")
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except FileNotFoundError:
        raise EctlError(f"{root}: {MANIFEST} is missing") from None
    except (OSError, ValueError) as exc:
        raise EctlError(f"{root}: {MANIFEST} is unreadable: {exc}") from None
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise EctlError(f"{root}: {MANIFEST} lists no files")
    problems = []
    for rel, info in sorted(files.items()):
        file = root / rel
        if not file.is_file():
            problems.append(f"{rel}: missing")
            continue
        size = file.stat().st_size
        if size != info.get("bytes"):
            problems.append(f"{rel}: {size} bytes, manifest says {info.get('bytes')}")
            continue
        if sha256_file(file) != info.get("sha256"):
            problems.append(f"{rel}: sha256 differs from the manifest")
    for sub in ("dense", "sparse"):
        for file in sorted((root / sub).rglob("*")) if (root / sub).is_dir() else []:
            rel = file.relative_to(root).as_posix()
            if file.is_file() and rel not in files:
                problems.append(f"{rel}: not in the manifest")
    if problems:
        raise EctlError(f"model version {root} failed verification: " + "; ".join(problems))
    return manifest


def local_tempdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
