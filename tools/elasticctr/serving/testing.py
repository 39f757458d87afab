"""Write a small but real model version in the contract layout (tests, bench, demos).

The training export is the producer in production. This writes the same layout —
manifest.json with sha256 per file, a Paddle Inference dense model saved with
`paddle.static.save_inference_model`, sparse/part-*.{keys,values}.npy, donefile last —
so serving can be exercised without a training run. The dense model is built in a child
process because `paddle.enable_static()` is process-global.

    python -m elasticctr.serving.testing STORE VERSION --slots 0-26 --dim 8 --keys-from FILE
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from elasticctr import versions

_BUILD_DENSE = r"""
import sys, numpy as np, paddle
out = sys.argv[1]
nslots, dim, seed = (int(a) for a in sys.argv[2:5])
paddle.enable_static()
paddle.seed(seed)
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    # the training export's input: pooled [batch, num_slots, dim] (docs/training.md)
    pooled = paddle.static.data("pooled", [-1, nslots, dim], "float32")
    x = paddle.reshape(pooled, [-1, nslots * dim])
    h = paddle.static.nn.fc(x, 16, activation="relu")
    prob = paddle.nn.functional.sigmoid(paddle.static.nn.fc(h, 1))
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
paddle.static.save_inference_model(out + "/model", [pooled], [prob], exe, program=main)
"""


def write_version(
    store: Path,
    version: str,
    *,
    slots: list[int],
    dim: int,
    keys: np.ndarray,
    seed: int = 0,
    parts: int = 2,
    sparse_dim: int | None = None,
    dense_from: Path | None = None,
    timeline: dict[str, float] | None = None,
) -> Path:
    """A complete version under {store}/versions/{version}; returns its directory.
    `timeline`: the manifest's (what a training job's export writes; none by default).

    `dense_from` copies the dense model files of another version (same slots/dim) instead
    of building one, so tests can make versions that differ only in their embeddings.
    """
    vdir = Path(store) / versions.version_path(version)
    (vdir / "sparse").mkdir(parents=True, exist_ok=True)
    (vdir / "dense").mkdir(parents=True, exist_ok=True)
    if dense_from is not None:
        for f in (Path(dense_from) / "dense").iterdir():
            (vdir / "dense" / f.name).write_bytes(f.read_bytes())
    else:
        subprocess.run(
            [sys.executable, "-c", _BUILD_DENSE, str(vdir / "dense"), str(len(slots)), str(dim),
             str(seed)],
            check=True, capture_output=True, env={**os.environ, "GLOG_minloglevel": "2"},
        )  # fmt: skip
    rng = np.random.default_rng(seed)
    keys = np.unique(np.asarray(keys, dtype=np.uint64))
    values = rng.normal(0, 0.5, size=(keys.size, dim)).astype(np.float32)
    for i, idx in enumerate(np.array_split(np.arange(keys.size), parts)):
        keys_rel, values_rel = versions.sparse_part_files(i)
        np.save(vdir / keys_rel, keys[idx])
        np.save(vdir / values_rel, values[idx])
    meta = {
        "model": {"name": "test-dnn", "params": {}},  # the shape training writes
        "slots": list(slots),
        "embedding_dim": dim,
        "sparse_dim": sparse_dim,
        "metrics": {},
        "sparse": {"rows": int(keys.size), "parts": parts},
    }
    if timeline is not None:
        meta["timeline"] = timeline
    versions.write_manifest(vdir, version, meta)
    return vdir


def keys_of_file(path: Path, slots: list[int]) -> np.ndarray:
    from elasticctr.data.parser import parse_bytes

    batch, _ = parse_bytes(Path(path).read_bytes(), slots)
    return np.unique(np.concatenate(batch.ids))


def _slot_range(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("version")
    ap.add_argument("--slots", default="0-26")
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--keys-from", type=Path, required=True, help="ElasticCTR lines")
    ap.add_argument("--extra-keys", type=int, default=0, help="random keys added to the table")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    slots = _slot_range(args.slots)
    keys = keys_of_file(args.keys_from, slots)
    if args.extra_keys:
        rng = np.random.default_rng(args.seed + 1)
        keys = np.concatenate([keys, rng.integers(0, 2**63, args.extra_keys, dtype=np.uint64)])
    print(write_version(args.store, args.version, slots=slots, dim=args.dim, keys=keys,
                        seed=args.seed))  # fmt: skip


if __name__ == "__main__":
    main()
