"""cube-builder speed: verify an exported version (sha256) and build N shard files.

    .venv/bin/python bench/cube/bench_build.py --keys 5000000 --shards 1,4 --dim 8

Prints seconds and keys/s for the export verification and for the build itself, and the
build speed relative to a plain copy of the same bytes (`cp`-like read+write+fsync), the
floor for any builder that writes its output once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from elasticctr.cube.builder import build_version
from elasticctr.cube.modelstore import verify_version, write_version

VERSION = "20200401/00"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=5_000_000)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--shards", default="1,4")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(1, 2**64 - 1, args.keys + args.keys // 50 + 10, dtype=np.uint64))
    keys = keys[: args.keys]
    rng.shuffle(keys)
    rows = rng.standard_normal((keys.size, args.dim), dtype=np.float32)
    work = Path(tempfile.mkdtemp(prefix="bench-cube-build-"))
    try:
        cuts = np.array_split(np.arange(keys.size), args.parts)
        vdir = write_version(work / "store", VERSION, [(keys[c], rows[c]) for c in cuts])
        size = sum(f.stat().st_size for f in (vdir / "sparse").iterdir())
        t0 = time.perf_counter()
        mv = verify_version(vdir, VERSION)
        t_verify = time.perf_counter() - t0
        t0 = time.perf_counter()
        (work / "copy").mkdir()
        for f in (vdir / "sparse").iterdir():
            with open(f, "rb") as src, open(work / "copy" / f.name, "wb") as dst:
                shutil.copyfileobj(src, dst, 8 << 20)
                dst.flush()
                os.fsync(dst.fileno())
        t_copy = time.perf_counter() - t0
        print(
            f"keys {keys.size:,}  dim {args.dim}  export {size / 1e6:.0f} MB in {args.parts} parts"
        )
        print(f"verify sha256: {t_verify:.2f}s ({size / t_verify / 1e6:.0f} MB/s)")
        print(f"plain copy of the export (floor): {t_copy:.2f}s")
        print()
        print("| shards | build s | keys/s | output MB | build / plain copy |")
        print("|---|---|---|---|---|")
        for n in [int(s) for s in args.shards.split(",")]:
            t0 = time.perf_counter()
            manifest = build_version(mv, work / f"cube{n}", n, force=True)
            dt = time.perf_counter() - t0
            out = sum(e["bytes"] for e in manifest["shards"])
            print(
                f"| {n} | {dt:.2f} | {keys.size / dt:,.0f} | {out / 1e6:.0f} | {dt / t_copy:.1f}x |"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
