"""Data path rates: the trainers' readers vs. a plain-Python parser, generate, profile.

Readers, side by side on the same bytes, figures per CPU-second of exactly the process
that parses (this process's `process_time()` for the in-process readers; the child's
user+system time from wait4 for the native reader), wall-clock rates printed too:

  slotfeed  ectl-slotfeed, the compiled reader the trainers' native pipeline runs
            (elasticctr.train.native; output to /dev/null), one process
  parser    elasticctr.data.parser.LineParser on 1 MiB chunks (the Python path's reader)
  python    the obvious per-line parser: split(), split(':'), int() (a plain-Python reader)

Every reader runs `--rounds` times (default 5), interleaved (the order rotates each
round) with the same data; the table gives medians with min-max, and the headline ratios
are ratios of medians, printed as `ratio: ... = N.NNx` with the load average during the
run. The goal line (25,000 lines/s per core: the data path must never bound training) is
a requirement, not a peer.

Data: synthetic ElasticCTR lines from `ectl data generate`'s model (27 slots, ~10%
slots missing, 19-20 digit feasigns, ~560 bytes/line), plus the real PaddlePaddle/Serving
demo file repeated (27 slots, ~600 bytes/line) when ../shared is present.

    .venv/bin/python bench/data/bench_parse.py                 # 200k lines, ~2 minutes
    .venv/bin/python bench/data/bench_parse.py --lines 50000 --rounds 3   # quick
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from elasticctr.data.generate import GeneratorSpec, SyntheticModel, generate
from elasticctr.data.parser import DEFAULT_BLOCK_BYTES, FileStats, LineParser
from elasticctr.data.profile import profile

TARGET = 25_000
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


def in_process(fn):
    """(wall seconds, cpu seconds of this process, result) of one run."""
    w, c = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - w, time.process_time() - c, result


def native_run(binary: Path, path: Path, slots: list[int], tmp: Path):
    """(wall, cpu of the reader process, samples) of ectl-slotfeed over the whole file."""
    stats = tmp / "stats"
    spec = f"{path}\t0\t-1\t{stats}\t/dev/null\n".encode()
    w = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        proc = subprocess.Popen(
            [str(binary), "--slots", ",".join(map(str, slots)), "--heldout", "all"],
            stdin=subprocess.PIPE,
            stdout=sink,
        )
        proc.stdin.write(spec)
        proc.stdin.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - w
    if proc.returncode != 0:
        raise RuntimeError(f"ectl-slotfeed exited {proc.returncode}")
    samples = int(stats.read_text().split()[1])
    return wall, usage.ru_utime + usage.ru_stime, samples


def spread(values: list[float]) -> str:
    return f"{np.median(values):>12,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def bench_parser(name: str, data: bytes, slots: list[int], rounds: int) -> dict[str, float]:
    """Median lines per CPU-second of each reader over interleaved rounds."""
    from elasticctr.train import native

    lines = data.count(b"\n")
    parser = LineParser(slots)

    def vector():
        stats = FileStats()
        for chunk in chunks(data, DEFAULT_BLOCK_BYTES):
            parser.parse(chunk, stats)
        return stats.samples

    binary = native.binary()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "part-00000"
        path.write_bytes(data)
        readers = {
            "parser": lambda: in_process(vector),
            "python": lambda: in_process(lambda: python_parse(data, slots)),
        }
        if binary is not None:
            readers["slotfeed"] = lambda: native_run(binary, path, slots, Path(tmp))
        order = list(readers)
        runs: dict[str, list[tuple[float, float]]] = {r: [] for r in readers}
        for i in range(rounds):
            for r in order[i % len(order) :] + order[: i % len(order)]:
                wall, cpu, n = readers[r]()
                assert n == lines, (r, n, lines)
                runs[r].append((wall, cpu))
    print(f"\n{name}: {lines:,} lines, {len(data) / lines:.0f} bytes/line, {rounds} rounds")
    print(f"  {'reader':<10}{'lines/s/core, median (min-max)':>34}{'lines/s wall':>14}")
    medians = {}
    for r, rs in runs.items():
        per_core = [lines / c for _, c in rs]
        medians[r] = float(np.median(per_core))
        wall = float(np.median([lines / w for w, _ in rs]))
        print(f"  {r:<10}{spread(per_core):>34}{wall:>14,.0f}")
    if binary is None:
        print(f"  slotfeed: not measured ({native.unavailable()})")
    best = max(medians.values())
    print(f"  goal {TARGET:,} lines/s/core: {'met' if best >= TARGET else 'NOT met'}")
    return medians


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per reader")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cores, load average {load0:.2f}")

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
    medians = {
        "synthetic": bench_parser(
            "synthetic (generate)", b"".join(parts), list(range(27)), args.rounds
        )
    }
    if DEMO.exists():
        demo = DEMO.read_bytes()
        reps = max(1, args.lines // demo.count(b"\n"))
        medians["demo"] = bench_parser(
            "PaddlePaddle/Serving demo data, repeated", demo * reps, list(range(27)), args.rounds
        )

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
    print(f"\nload average: {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    for data, m in medians.items():
        for ours in ("slotfeed", "parser"):
            if ours in m:
                print(
                    f"ratio: {ours}/python lines per CPU-second, {data} = "
                    f"{m[ours] / m['python']:.2f}x"
                )


if __name__ == "__main__":
    main()
