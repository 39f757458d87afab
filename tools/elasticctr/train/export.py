"""Exported model versions: the model store layout of docs/contracts.md, written and checked.

```
{modelStore}/versions/{YYYYMMDD}/{HH}/
  manifest.json                      files: {relpath: {"sha256", "bytes"}} + model facts
  dense/                             Paddle inference model (input: pooled embeddings)
  sparse/part-NNNNN.keys.npy         uint64 [n]
  sparse/part-NNNNN.values.npy       float32 [n, dim]
  donefile                           written last
```

`build_version` lays the version out in a local folder (the manifest and donefile through
`elasticctr.versions`, the one home of the version contract); the trainer then publishes
it with `elasticctr.modelstore` (donefile last). This module is the training side only:
reading Paddle's PS dumps, the dense inference model from a dump (`save_dense`), the
held-out evaluation of a built version (`evaluate_version`) and a trained hour's whole
export (`export_partition`).
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from elasticctr import modelstore, versions
from elasticctr.errors import EctlError
from elasticctr.train import metrics, program, shape
from elasticctr.train.config import TrainConfig

DEFAULT_ROWS_PER_PART = 1 << 20


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


def _first_line(path: Path) -> bytes:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        return fh.readline()


def _load_columns(path: Path, table: str, **columns) -> np.ndarray:
    """Some columns of a dump part (numpy's C text reader; plain or gzip'd), or a clear
    error naming the part."""
    try:
        return np.loadtxt(path, ndmin=1, delimiter=" ", **columns)
    except ValueError as exc:
        raise EctlError(f"{path}: unreadable {table} table dump ({exc})") from None


def read_sparse_dump(table_dir: Path, table_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """All rows of a dumped sparse table: keys uint64 [n] (sorted), values float32 [n, dim].

    Only the key and the weight columns are parsed (numpy's C text reader with those
    columns); plain and gzip'd parts (older checkpoints) both read."""
    files = sorted(Path(table_dir).glob("part-*"))
    if not files:
        raise EctlError(f"no sparse table dump under {table_dir}")
    keys_parts, value_parts = [], []
    row = None
    for path in files:
        head = _first_line(path).split()
        if not head:
            continue
        if row is None:
            embed_col, embedx_col = row_layout(len(head) - 1, table_dim)
            # columns counted from the key's (0): embed w, then the embedx weights
            cols = [0, 1 + embed_col, *range(1 + embedx_col, embedx_col + table_dim)]
            row = np.dtype([("key", np.uint64), ("w", np.float32, (table_dim,))])
            fields = len(head)
        elif len(head) != fields:
            raise EctlError(f"{path}: {len(head)} values per line, other parts have {fields}")
        rows = _load_columns(path, "sparse", dtype=row, usecols=cols)
        keys_parts.append(rows["key"])
        value_parts.append(rows["w"].reshape(len(rows), table_dim))
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
        columns.append(_load_columns(path, "dense", dtype=np.float32, usecols=0))
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


def _write_sparse(vdir: Path, keys: np.ndarray, values: np.ndarray, rows_per_part: int) -> int:
    """The sparse parts of version folder `vdir` (names of versions.sparse_part_files)."""
    (vdir / versions.SPARSE_DIR).mkdir(parents=True, exist_ok=True)
    parts = max(1, -(-keys.size // rows_per_part))
    for p in range(parts):
        sl = slice(p * rows_per_part, (p + 1) * rows_per_part)
        keys_rel, values_rel = versions.sparse_part_files(p)
        np.save(vdir / keys_rel, np.ascontiguousarray(keys[sl], np.uint64))
        np.save(vdir / values_rel, np.ascontiguousarray(values[sl], np.float32))
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
    versions.check_version_id(version_id)
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    shutil.copytree(dense_dir, out_dir / versions.DENSE_DIR)
    parts = _write_sparse(out_dir, keys, values, rows_per_part)
    facts = {
        **meta,
        "embedding_dim": int(values.shape[1]),
        "sparse": {"rows": int(keys.size), "parts": parts},
    }
    return versions.write_manifest(out_dir, version_id, facts)


def local_tempdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


# --- one trained hour's version: dense model, evaluation, publication -----------------


def save_dense(exe, net: program.Net, dump_dir: Path, names: list[str], out_dir: Path) -> dict:
    """Dense inference model from the pservers' dump (the same snapshot as the sparse dump).

    Reading the dump rather than pulling into this trainer's scope keeps sparse and dense
    of one version consistent and never touches the parameters the trainer is using.
    """
    paddle = program.import_paddle()
    block = net.infer_program.global_block()
    shapes = {n: tuple(block.var(n).shape) for n in names}
    params = read_dense_dump(dump_dir / "ps", names, shapes)
    scope = paddle.static.Scope()
    place = paddle.CPUPlace()
    with paddle.static.scope_guard(scope):
        for name, value in params.items():
            scope.var(name).get_tensor().set(value, place)
        out_dir.mkdir(parents=True, exist_ok=True)
        paddle.static.save_inference_model(
            str(out_dir / "model"), [net.pooled], [net.prob], exe, program=net.infer_program
        )
    return {
        "path": "dense",
        "prefix": "dense/model",
        "input": net.pooled.name,
        "input_shape": [-1, *list(net.pooled.shape[1:])],
        "output": net.prob.name,
    }


def evaluate_version(version_dir: Path, batches: list) -> dict:
    """AUC/logloss of an exported version on batches: numpy lookup + the saved dense model."""
    paddle = program.import_paddle()
    manifest = versions.verify_version(version_dir)
    parts = versions.sparse_parts(manifest, str(version_dir))
    keys = np.concatenate([np.load(version_dir / k) for k, _ in parts])
    values = np.concatenate([np.load(version_dir / v) for _, v in parts])
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    labels, probs = [], []
    with paddle.static.scope_guard(scope):
        inference, feeds, fetches = paddle.static.load_inference_model(
            str(version_dir / manifest["dense"]["prefix"]), exe
        )
        for batch in batches:
            pooled = pool(keys, values, batch)
            (prob,) = exe.run(inference, feed={feeds[0]: pooled}, fetch_list=fetches)
            labels.append(batch.click)
            probs.append(np.asarray(prob).reshape(-1))
    label = np.concatenate(labels) if labels else np.zeros(0)
    prob = np.concatenate(probs) if probs else np.zeros(0)
    return {
        "auc": metrics.auc(label, prob),
        "logloss": metrics.logloss(label, prob),
        "eval_samples": int(label.size),
    }


def model_store(cfg: TrainConfig) -> modelstore.ModelStore:
    """The job's model store, opened with the fileserver token and HDFS user."""
    return modelstore.open_store(cfg.model_store, hdfs_ugi=cfg.hdfs_ugi)


def export_partition(
    cfg: TrainConfig,
    version_id: str,
    dump_dir: Path,
    dense_meta: dict,
    heldout: list,
    train: dict,
    timeline: Mapping[str, float] | None = None,
) -> dict:
    """Version `version_id` from the pservers' dump in `dump_dir` (`ps/`, and the dense
    model `save_dense` wrote to `dense/`): built in `dump_dir/version`, evaluated on the
    `heldout` batches (its metrics, with `train`'s, go into the manifest), published to
    the model store. Returns the metrics and where the version went (`exported_to`).

    `timeline`: when the coordinator found the hour's data and when its last task was
    done (Unix times); the manifest's `timeline` adds `exported_at`, and serving measures
    the hand-off from each to the moment it serves the version (docs/operations.md)."""
    t0 = time.monotonic()
    keys, values = read_sparse_dump(dump_dir / "ps" / "000", cfg.model.table_dim)
    # Keys are the feasigns as trained: already reduced modulo SPARSE_DIM by the parser.
    local = dump_dir / "version"
    meta = {
        **shape.version_facts(cfg),
        "dense": dense_meta,
        "metrics": {k: v for k, v in train.items()},
    }

    def build() -> dict:
        return build_version(
            local,
            version_id=version_id,
            dense_dir=dump_dir / "dense",
            keys=keys,
            values=values,
            meta=meta,
        )

    build()
    # Metrics of the exported version itself go into the manifest (rebuild: sha changes).
    evaluated = evaluate_version(local, heldout)
    meta["metrics"].update(evaluated)
    meta["timeline"] = {**(timeline or {}), "exported_at": time.time()}
    manifest = build()
    target = ""
    if cfg.model_store:
        target = model_store(cfg).publish(local, version_id)
    result = {
        **meta["metrics"],
        "sparse_rows": manifest["sparse"]["rows"],
        "manifest_sha256": versions.sha256_file(local / versions.MANIFEST),
        "export_seconds": time.monotonic() - t0,
        "exported_to": target,
    }
    program.log(
        f"{version_id}: held-out auc {evaluated['auc']:.4f} logloss "
        f"{evaluated['logloss']:.4f} on {evaluated['eval_samples']} samples; "
        f"{keys.size} sparse rows -> {target or '(no model store)'}"
    )
    return result
