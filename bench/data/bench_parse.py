"""Data path rates: the vectorised line parser vs. a plain-Python parser, generate, profile.

Peers, side by side (per core = CPU seconds of this process, so a loaded machine does
not distort the ratios much; wall-clock rates are printed too):

  parser   elasticctr.data.parser.LineParser on 1 MiB chunks (what trainers use)
  python   the obvious per-line parser: split(), split(':'), int() (a plain-Python reader)
  target   25,000 lines/s per core (the data path must never bound training)
  paddle   ~7,500 samples/s per trainer: Fleet async PS with a Python feed loop on this
           2-core machine class (docs/design.md, "Facts found while planning")

Data: synthetic ElasticCTR lines from `ectl data generate`'s model (27 slots, ~10%
slots missing, 19-20 digit feasigns, ~560 bytes/line), plus the real PaddlePaddle/Serving
demo file repeated (27 slots, ~600 bytes/line) when ../shared is present.

    .venv/bin/python bench/data/bench_parse.py                 # 200k lines, ~1 minute
    .venv/bin/python bench/data/bench_parse.py --lines 50000   # quick
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from elasticctr.data.generate import GeneratorSpec, SyntheticModel, generate
from elasticctr.data.parser import DEFAULT_BLOCK_BYTES, FileStats, LineParser
from elasticctr.data.profile import profile

TARGET = 25_000
PADDLE_TRAINER = 7_500
DEMO = Path(__file__).resolve().parents[2].parent / "shared/data/elasticctr/serving_demo_data.txt"


def python_parse(data: bytes, slots: list[int]) -> int:
    """A straightforward reader producing the same per-slot lists (the peer)."""
    wanted = set(slots)
    n = 0
    out: dict[int, list[int]] = {s: [] for s in slots}
    for line in data.split(b"\n"):
        parts = line.split()
        if not parts:
            continue
        show, click = int(parts[0]), int(parts[1])
        if click > show:
            continue
        for tok in parts[2:]:
            f, s = tok.split(b":")
            slot = int(s)
            if slot in wanted:
                out[slot].append(int(f))
        n += 1
    return n


def chunks(data: bytes, size: int):
    start = 0
    while start < len(data):
        end = data.rfind(b"\n", start, start + size)
        end = len(data) if end < 0 or start + size >= len(data) else end + 1
        yield data[start:end]
        start = end


def timed(fn, repeat: int = 3):
    """Best of `repeat` runs: (wall seconds, cpu seconds, result)."""
    best = None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        run = (time.perf_counter() - w, time.process_time() - c, result)
        if best is None or run[1] < best[1]:
            best = run
    return best


def bench_parser(name: str, data: bytes, slots: list[int]) -> None:
    lines = data.count(b"\n")
    parser = LineParser(slots)

    def vector():
        stats = FileStats()
        for chunk in chunks(data, DEFAULT_BLOCK_BYTES):
            parser.parse(chunk, stats)
        return stats.samples

    vw, vc, vn = timed(vector)
    pw, pc, pn = timed(lambda: python_parse(data, slots), repeat=1)
    assert vn == pn == lines, (vn, pn, lines)
    v_rate, p_rate = lines / vc, lines / pc
    print(f"\n{name}: {lines:,} lines, {len(data) / lines:.0f} bytes/line")
    print(f"  {'reader':<10}{'lines/s/core':>14}{'lines/s wall':>14}{'MB/s/core':>11}")
    print(f"  {'parser':<10}{v_rate:>14,.0f}{lines / vw:>14,.0f}{len(data) / vc / 1e6:>11.1f}")
    print(f"  {'python':<10}{p_rate:>14,.0f}{lines / pw:>14,.0f}{len(data) / pc / 1e6:>11.1f}")
    print(
        f"  ratios: parser/python {v_rate / p_rate:.1f}x, parser/target {v_rate / TARGET:.1f}x, "
        f"parser/paddle-trainer {v_rate / PADDLE_TRAINER:.1f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")

    model = SyntheticModel(GeneratorSpec(slots=list(range(27)), vocab=100_000))
    rng = np.random.default_rng(0)
    parts = []
    left = args.lines
    while left:
        n = min(20_000, left)
        ranks, present = model.draw(rng, n)
        clicks = rng.random(n) < model.probability(ranks, present)
        parts.append(model.render(ranks, present, clicks))
        left -= n
    bench_parser("synthetic (generate)", b"".join(parts), list(range(27)))
    if DEMO.exists():
        demo = DEMO.read_bytes()
        reps = max(1, args.lines // demo.count(b"\n"))
        bench_parser("PaddlePaddle/Serving demo data, repeated", demo * reps, list(range(27)))

    with tempfile.TemporaryDirectory() as tmp:
        spec = GeneratorSpec(slots=list(range(27)), vocab=100_000)
        start = dt.datetime(2020, 4, 1)
        print(f"\ngenerate: {args.lines:,} lines, 27 slots, vocab 100k, 2 hours, 2 files/hour")
        for workers in sorted({1, args.workers}):
            out = os.path.join(tmp, f"w{workers}")
            w, c = time.perf_counter(), time.process_time()
            res = generate(
                out,
                spec,
                start=start,
                hours=2,
                lines_per_hour=args.lines // 2,
                files_per_partition=2,
                workers=workers,
            )
            wall, cpu = time.perf_counter() - w, time.process_time() - c
            size = sum(p.stat().st_size for p in Path(out).rglob("part-*"))
            line = (
                f"  workers={workers}: {res.lines / wall:,.0f} lines/s wall "
                f"({res.steady_lines_per_second:,.0f} after {res.setup_seconds:.1f}s model setup)"
            )
            if workers == 1:
                line += f", {res.lines / cpu:,.0f} lines/s/core"
            line += f", {size / wall / 1e6:.0f} MB/s written, oracle AUC {res.oracle_auc:.4f}"
            print(line)
        files = sorted(str(p) for p in Path(tmp, "w1").rglob("part-*"))
        w, c = time.perf_counter(), time.process_time()
        prof = profile(files)
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        print(
            f"\nprofile: {prof.stats.lines:,} lines: {prof.stats.lines / cpu:,.0f} lines/s/core, "
            f"{prof.stats.lines / wall:,.0f} lines/s wall"
        )


if __name__ == "__main__":
    main()
