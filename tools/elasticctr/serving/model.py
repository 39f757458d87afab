"""One exported version as a scorer: embeddings pooled per slot, then the dense model.

This is the single implementation of the prediction computation. The server
(`elasticctr.serving.app`) and the MLflow pyfunc (`elasticctr.serving.pyfunc`) both call
`Scorer.keys_of` → (fetch rows for those keys: cube shards or a local table) →
`Scorer.score` (or `Scorer.predict` with a synchronous lookup), so they cannot drift apart.

Pooling is a sum over the feasigns of a slot (ElasticCTR's multi-valued slots);
a slot with no feasign pools to zeros, a feasign the table does not know looks up zeros.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from elasticctr import versions
from elasticctr.data.parser import SlotBatch
from elasticctr.errors import EctlError
from elasticctr.versions import DENSE_DIR, MANIFEST  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class VersionInfo:
    """What serving needs from a version's manifest."""

    version: str
    slots: tuple[int, ...]
    dim: int
    sparse_dim: int | None
    model: str
    heldout_auc: float | None = None
    """The version's AUC on the held-out samples of its hour (manifest metrics.auc)."""
    timeline: dict[str, float] = field(default_factory=dict, compare=False)
    """Manifest `timeline` (Unix times): data_found_at, trained_at, exported_at -- each
    when the training job knew it; entries that are not numbers are left out."""

    @staticmethod
    def from_manifest(manifest: dict[str, Any], version: str | None = None) -> VersionInfo:
        where = f"model version {version or manifest.get('version', '?')}"
        slots = manifest.get("slots")
        if not isinstance(slots, list) or not slots or not all(isinstance(s, int) for s in slots):
            raise EctlError(f"{where}: manifest 'slots' must be a non-empty list of slot ids")
        dim = manifest.get("embedding_dim")
        if not isinstance(dim, int) or dim < 1:
            raise EctlError(f"{where}: manifest embedding_dim must be a positive integer")
        sparse_dim = manifest.get("sparse_dim")
        if sparse_dim is not None and (not isinstance(sparse_dim, int) or sparse_dim < 1):
            raise EctlError(f"{where}: manifest sparse_dim must be a positive integer or null")
        model = manifest.get("model")
        auc = (manifest.get("metrics") or {}).get("auc")
        raw = manifest.get("timeline")
        timeline = {
            str(k): float(v)
            for k, v in (raw.items() if isinstance(raw, dict) else ())
            if isinstance(v, int | float) and not isinstance(v, bool) and v == v
        }
        return VersionInfo(
            version=str(version or manifest.get("version", "")),
            slots=tuple(slots),
            dim=dim,
            sparse_dim=sparse_dim,
            model=str(model.get("name", "")) if isinstance(model, dict) else str(model or ""),
            heldout_auc=float(auc) if isinstance(auc, int | float) and auc == auc else None,
            timeline=timeline,
        )


def dense_model_files(dense_dir: Path) -> tuple[Path, Path]:
    """(program file, params file) of a Paddle Inference model saved in `dense_dir`.

    `save_inference_model(prefix)` writes `prefix.json` (PIR) or `prefix.pdmodel` (legacy)
    plus `prefix.pdiparams`; the prefix is whatever the exporter chose.
    """
    params = sorted(dense_dir.glob("*.pdiparams"))
    for p in params:
        stem = p.name[: -len(".pdiparams")]
        for ext in (".json", ".pdmodel"):
            prog = dense_dir / (stem + ext)
            if prog.is_file():
                return prog, p
    raise EctlError(
        f"{dense_dir}: no Paddle Inference model (<prefix>.json|.pdmodel + <prefix>.pdiparams)"
    )


def keep_python_signal_handlers() -> None:
    """Stop Paddle from taking SIGTERM over. Importing paddle installs glog's failure
    handler for SIGTERM, which aborts the process at once ("Termination signal is
    detected"): serving then never drained. Called once before serving installs its
    handlers; a later `import paddle.inference` (the first version load) keeps them."""
    try:
        import paddle
    except ImportError:  # no Paddle: no dense model to load, nothing takes SIGTERM over
        return
    paddle.disable_signal_handler()


SMALL_BATCH = 128
"""Batches up to this many samples run on a predictor without oneDNN (MKLDNN), larger ones
on one with it. Paddle enables oneDNN by default on CPU; for a few samples its primitive
setup and reorders cost more than the math (bench model, one thread: 1 sample 36 µs without,
81 µs with; 1024 samples 551 µs without, 284 µs with; they cross between 128 and 256)."""


class DenseModel:
    """A Paddle Inference predictor of the dense part (CPU, one math thread).

    The input is the pooled embeddings, float32 [batch, num_slots, dim] (docs/training.md:
    the training export's `pooled` input); a model declaring the flattened
    [batch, num_slots * dim] instead is accepted too. Which one is found by a probe run at
    load time. The first output is the click probability, one per sample.

    Two predictors of the same files: one without oneDNN for batches of up to
    `SMALL_BATCH` samples (a lone request), one with it for larger batches.
    """

    def __init__(self, dense_dir: Path, nslots: int, dim: int, threads: int = 1):
        prog, params = dense_model_files(Path(dense_dir))
        self.nslots, self.dim = nslots, dim
        self._lock = threading.Lock()  # a predictor is not re-entrant
        self._small = self._create(dense_dir, prog, params, threads, onednn=False)
        self._large = self._create(dense_dir, prog, params, threads, onednn=True)
        self.flat = False
        probe = np.zeros((2, nslots, dim), np.float32)
        errors = []
        for flat in (False, True):
            self.flat = flat
            try:
                if all(self._run(p, probe).shape == (2,) for p in (self._small, self._large)):
                    return
                errors.append(f"flat={flat}: output is not one value per sample")
            except Exception as exc:  # the other layout fails inside paddle
                errors.append(f"{'flat' if flat else '3-D'} input: {str(exc).strip()[:200]}")
        raise EctlError(f"{dense_dir}: the dense model does not take pooled embeddings: {errors}")

    def _create(self, dense_dir, prog: Path, params: Path, threads: int, onednn: bool):
        """(predictor, input handle, output handle)."""
        import paddle.inference as pi

        config = pi.Config(str(prog), str(params))
        config.disable_gpu()
        config.set_cpu_math_library_num_threads(threads)
        config.disable_glog_info()
        config.switch_ir_optim(True)
        if onednn:
            config.enable_mkldnn()
        elif hasattr(config, "disable_mkldnn"):
            config.disable_mkldnn()
        try:
            predictor = pi.create_predictor(config)
        except Exception as exc:  # paddle raises its own types for corrupt programs
            raise EctlError(f"{dense_dir}: Paddle Inference cannot load the model: {exc}") from exc
        names = predictor.get_input_names()
        if len(names) != 1:
            raise EctlError(
                f"{dense_dir}: the dense model has inputs {names}; expected one (pooled "
                f"embeddings [batch, {self.nslots}, {self.dim}])"
            )
        out = predictor.get_output_handle(predictor.get_output_names()[0])
        return predictor, predictor.get_input_handle(names[0]), out

    def run(self, pooled: np.ndarray) -> np.ndarray:
        """pooled float32 [B, nslots, dim] -> probabilities float32 [B]."""
        small = pooled.shape[0] <= SMALL_BATCH
        return self._run(self._small if small else self._large, pooled)

    def _run(self, handles, pooled: np.ndarray) -> np.ndarray:
        predictor, inp, outp = handles
        b = pooled.shape[0]
        x = np.ascontiguousarray(pooled, dtype=np.float32)
        if self.flat:
            x = x.reshape(b, self.nslots * self.dim)
        with self._lock:
            inp.reshape(list(x.shape))
            inp.copy_from_cpu(x)
            predictor.run()
            out = outp.copy_to_cpu()
        out = np.asarray(out, dtype=np.float32)
        if out.size != b:
            raise EctlError(f"dense model output has shape {out.shape} for {b} samples")
        return out.reshape(b).copy()


class Scorer:
    """The shared computation: which keys a batch needs, and its probabilities from rows."""

    def __init__(self, info: VersionInfo, dense: DenseModel):
        self.info = info
        self.dense = dense

    @staticmethod
    def keys_of(batch: SlotBatch) -> tuple[np.ndarray, np.ndarray]:
        """(sorted unique feasigns, index of each id in them): what to fetch, and where.

        Ids are taken slot-major (slot 0's ids sample after sample, then slot 1's, ...),
        the order `pool` relies on.
        """
        if not batch.ids:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        return np.unique(np.concatenate(batch.ids), return_inverse=True)

    def pool(self, batch: SlotBatch, inverse: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Sum-pool per (sample, slot): float32 [B, nslots, dim].

        `rows[k]` is the embedding of the k-th unique key and `inverse` maps every id
        (slot-major) to its row, as returned by `keys_of`. Ids of one (slot, sample) are
        contiguous in slot-major order, so one `reduceat` sums every segment.
        """
        n, nslots, dim = len(batch), len(self.info.slots), self.info.dim
        out = np.zeros((nslots * n, dim), dtype=np.float32)
        if inverse.size:
            lengths = np.concatenate(batch.lengths)  # [nslots * n], slot-major
            nonempty = np.flatnonzero(lengths)
            starts = np.zeros(lengths.size, dtype=np.int64)
            np.cumsum(lengths[:-1], out=starts[1:])
            out[nonempty] = np.add.reduceat(rows[inverse], starts[nonempty], axis=0)
        return out.reshape(nslots, n, dim).transpose(1, 0, 2)

    def predict(self, batch: SlotBatch, lookup) -> np.ndarray:
        """Probabilities for `batch` with a synchronous `lookup(keys) -> rows`."""
        keys, inverse = self.keys_of(batch)
        return self.score(batch, inverse, lookup(keys))

    def score(self, batch: SlotBatch, inverse: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Probabilities float32 [B] for `batch`, given the rows of its unique keys."""
        if len(batch) == 0:
            return np.zeros(0, np.float32)
        return self.dense.run(self.pool(batch, inverse, rows))


class LocalTable:
    """Embeddings of a version held in memory (sorted keys + rows); zeros for unknown keys.

    Serves the MLflow pyfunc and `ectl serve` without `--cube`.
    """

    def __init__(self, keys: np.ndarray, values: np.ndarray):
        keys = np.asarray(keys, dtype=np.uint64)
        values = np.asarray(values, dtype=np.float32)
        order = np.argsort(keys, kind="stable")
        self.keys = np.ascontiguousarray(keys[order])
        # one zero row at the end answers every unknown key
        self.values = np.concatenate([values[order], np.zeros((1, values.shape[1]), np.float32)])
        self.dim = int(values.shape[1])

    @staticmethod
    def from_parts(parts: list[tuple[Path, Path]], dim: int) -> LocalTable:
        keys = [np.load(k, allow_pickle=False) for k, _ in parts]
        values = [np.load(v, allow_pickle=False) for _, v in parts]
        if not keys:
            return LocalTable(np.zeros(0, np.uint64), np.zeros((0, dim), np.float32))
        return LocalTable(np.concatenate(keys), np.concatenate(values))

    def lookup(self, query: np.ndarray) -> np.ndarray:
        n = self.keys.shape[0]
        if n == 0:
            return np.zeros((query.shape[0], self.dim), np.float32)
        pos = np.minimum(np.searchsorted(self.keys, query), n - 1)
        pos[self.keys[pos] != query] = n  # the zero row
        return self.values[pos]


def read_manifest(version_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((Path(version_dir) / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise EctlError(f"{version_dir}: cannot read {MANIFEST}: {exc}") from exc


def sparse_parts(version_dir: Path, manifest: dict[str, Any]) -> list[tuple[Path, Path]]:
    """(keys.npy, values.npy) pairs of a version, in part order, as the manifest lists them
    (`elasticctr.versions.sparse_parts`)."""
    root = Path(version_dir)
    return [(root / k, root / v) for k, v in versions.sparse_parts(manifest, str(version_dir))]
