"""Cube shard vs Redis MGET: 1000-key batch lookups at concurrency 1, 8, 32, driven by one
compiled load generator (bench/cube/loadgen.c) for both peers.

Both servers hold the same keys (default 1M random uint64 feasigns) and rows (float32
[dim], 32 bytes at dim 8) and run pinned to the same core(s) (`--server-cpus`, taskset);
the load generator runs on the others (`--client-cpus`):

  cube        `ectl cube server` (1 shard, the native lookup path, cubefast.c) holding the
              version built by `ectl cube build`; HTTP/1.1 POST /v1/lookup, binary body
  cube-numpy  the same server with ELASTICCTR_CUBE_NATIVE=0 (the numpy path): what the
              native path buys
  redis       Debian's `redis-server` configured as its docs recommend for a cache: no
              persistence (`save ""`, `appendonly no`), `io-threads 1` (the docs: I/O threads
              only help with spare cores, and the server gets the same cores as cube);
              key = the feasign's 8 little-endian bytes, value = the row; RESP MGET

The load generator (gcc -O2, built here) runs C threads, each with its own keep-alive
connection, sending the same pre-drawn batches (`--missing` of the keys absent) one at a
time; both replies are parsed in place and copied into a rows array (no allocation per
key). Each round runs every peer at every concurrency for `--seconds` after a warm-up;
rounds are repeated (`--rounds`, the peer order rotating), and the tables give medians
with min-max. Server CPU is the server process's utime + stime from /proc over the whole
run (warm-up included, divided by every key it answered). The machine's load average is
printed before, between and after rounds. Final lines: `ratio: <what> = N.NNx`.

Memory-bound estimate: the native lookup alone (no HTTP, no syscalls) on the same mapping
and batches, in this process on a server core; and `loadgen mem`: random 64-byte reads
over a buffer of the shard file's size, times the 3 lines a key needs at least (hash
slot, row number, row).

    .venv/bin/python bench/cube/bench_lookup.py            # 1M keys, 3 rounds, ~4 minutes
    .venv/bin/python bench/cube/bench_lookup.py --keys 100000 --seconds 1 --rounds 1  # quick
    .venv/bin/python bench/cube/bench_lookup.py --rt-priority 10 --concurrency 1 \
        --peers cube,redis --seconds 3       # latency without the machine's other jobs
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from elasticctr.cube.modelstore import write_version
from elasticctr.cube.protocol import decode_response
from elasticctr.net import free_port, wait_for_port

VERSION = "20200401/00"
HERE = Path(__file__).resolve().parent
BATCH = 1000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def build_loadgen(work: Path) -> Path:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        sys.exit("no C compiler (gcc) to build bench/cube/loadgen.c")
    out = work / "loadgen"
    subprocess.run([cc, "-O2", "-pthread", "-o", str(out), str(HERE / "loadgen.c")], check=True)
    return out


def pinned(cpus: str) -> list[str]:
    return ["taskset", "-c", cpus] if cpus and shutil.which("taskset") else []


def start_cube(work: Path, port: int, cpus: str, native: bool) -> subprocess.Popen:
    env = {**os.environ, "ELASTICCTR_CUBE_NATIVE": "1" if native else "0"}
    state = work / f"state-{port}"
    proc = subprocess.Popen(
        [*pinned(cpus), sys.executable, "-m", "elasticctr.cli.main", "cube", "server",
         "--cube-root", str(work / "cube"), "--state-dir", str(state), "--shard", "0",
         "--num-shards", "1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=open(work / f"cube-{port}.log", "wb"),  # noqa: SIM115
        start_new_session=True, env=env,
    )  # fmt: skip
    wait_for_port("127.0.0.1", port, timeout=60, what="cube server")
    import httpx

    for step in ("load", "commit"):
        httpx.post(
            f"http://127.0.0.1:{port}/admin/{step}", json={"version": VERSION}, timeout=120
        ).raise_for_status()
    return proc


def load_redis(port: int, keys: np.ndarray, rows: np.ndarray) -> None:
    """MSET in 1000-key commands over one socket (RESP written here, replies counted)."""
    kb, rb, width = keys.astype("<u8").tobytes(), rows.astype("<f4").tobytes(), rows.shape[1] * 4
    with socket.create_connection(("127.0.0.1", port)) as sock:
        commands = 0
        for start in range(0, keys.size, BATCH):
            end = min(start + BATCH, keys.size)
            parts = [b"*%d\r\n$4\r\nMSET\r\n" % (1 + 2 * (end - start))]
            for i in range(start, end):
                parts.append(b"$8\r\n" + kb[8 * i : 8 * i + 8] + b"\r\n")
                parts.append(b"$%d\r\n" % width + rb[width * i : width * (i + 1)] + b"\r\n")
            sock.sendall(b"".join(parts))
            commands += 1
        got = b""
        while got.count(b"+OK\r\n") < commands:
            chunk = sock.recv(1 << 16)
            if not chunk or b"-" in chunk[:1]:
                raise RuntimeError(f"redis refused the load: {chunk[:200]!r}")
            got += chunk


def check_same_answers(cube_port: int, redis_port: int, batch: np.ndarray, dim: int) -> None:
    import httpx
    import redis as redis_lib

    r = httpx.post(f"http://127.0.0.1:{cube_port}/v1/lookup", content=batch.tobytes())
    r.raise_for_status()
    a = decode_response(r.content).rows
    client = redis_lib.Redis(host="127.0.0.1", port=redis_port)
    values = client.mget([batch[i : i + 1].tobytes() for i in range(batch.size)])
    client.close()
    zero = b"\0" * (4 * dim)
    b = np.frombuffer(b"".join(v or zero for v in values), dtype="<f4").reshape(batch.size, dim)
    assert np.array_equal(a, b), "cube and redis disagree"


def realtime(pid: int, priority: int) -> None:
    """SCHED_FIFO for every thread of a server (--rt-priority)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        subprocess.run(["chrt", "-f", "-p", str(priority), tid], check=True)


def run_load(loadgen, kind, port, c, args, proc) -> dict:
    cpu0 = cpu_seconds(proc.pid)
    rt = ["chrt", "-f", str(args.rt_priority)] if args.rt_priority else []
    out = subprocess.run(
        [*rt, *pinned(args.client_cpus), str(loadgen), kind, "127.0.0.1", str(port), str(c),
         str(args.seconds), str(args.warmup), str(args.batches_file), str(args.dim)],
        check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    cpu = cpu_seconds(proc.pid) - cpu0
    keys, _, seconds, p50, p99, _, total, errors = out
    if int(errors):
        raise RuntimeError(f"{kind}: {errors} failed requests")
    return {
        "kps": int(keys) / float(seconds),
        "p50": float(p50),
        "p99": float(p99),
        "cpu": cpu,
        "kpcs": int(total) / max(cpu, 1e-9),  # keys per server CPU-second
    }


def lookup_only(work: Path, batches: np.ndarray, cpus: str) -> float:
    """Keys per CPU-second of the native lookup alone (in a pinned child process)."""
    code = f"""
import glob, time, numpy as np
from elasticctr.cube import native
from elasticctr.cube.format import ShardFile
mod = native.module()
sf = ShardFile(glob.glob({str(work / "cube")!r} + "/versions/*/*/*.cube")[0])
data = np.load({str(work / "batches.npy")!r}).tobytes()
nb = len(data) // {8 * BATCH}
for i in range(nb):
    mod.lookup(sf.native, data, i * {8 * BATCH}, {BATCH}, 0, b"v", True)
t0 = time.process_time(); n = 0
while time.process_time() - t0 < 3:
    for i in range(nb):
        mod.lookup(sf.native, data, i * {8 * BATCH}, {BATCH}, 0, b"v", True)
    n += nb * {BATCH}
print(n / (time.process_time() - t0))
"""
    np.save(work / "batches.npy", batches)
    out = subprocess.run(
        [*pinned(cpus), sys.executable, "-c", code], check=True, capture_output=True, text=True
    )
    return float(out.stdout.split()[-1])


def med(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def fmt_spread(values: list[float], scale: float = 1.0, digits: int = 2, unit: str = "") -> str:
    m, lo, hi = med([v * scale for v in values])
    return f"{m:,.{digits}f}{unit} ({lo:,.{digits}f}–{hi:,.{digits}f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5.0, help="measured time per run")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--missing", type=float, default=0.05, help="share of absent keys")
    ap.add_argument("--peers", default="cube,redis,cube-numpy")
    ap.add_argument("--server-cpus", default="0", help="taskset list for both servers")
    ap.add_argument("--client-cpus", default="1", help="taskset list for the load generator")
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    ap.add_argument(
        "--rt-priority", type=int, default=0,
        help="run both servers and the load generator SCHED_FIFO at this priority (root): "
        "the machine's other jobs cannot preempt them (dedicated cores, as on a node with "
        "pinned CPUs); short runs only, a saturated server starves its core",
    )  # fmt: skip
    args = ap.parse_args()
    if not shutil.which(args.redis_server):
        sys.exit("redis-server not found: apt-get install -y redis-server (Debian)")
    levels = [int(c) for c in args.concurrency.split(",")]
    peers = args.peers.split(",")
    rng = np.random.default_rng(42)
    keys = np.unique(rng.integers(1, 2**64 - 1, args.keys + args.keys // 50 + 10, dtype=np.uint64))
    keys = keys[: args.keys]
    rng.shuffle(keys)
    rows = rng.standard_normal((keys.size, args.dim), dtype=np.float32)
    absent = rng.integers(1, 2**64 - 1, 20_000, dtype=np.uint64)
    absent = absent[~np.isin(absent, keys)]
    batches = []
    for _ in range(512):
        b = keys[rng.integers(0, keys.size, BATCH)]
        m = rng.random(BATCH) < args.missing
        b[m] = absent[rng.integers(0, absent.size, int(m.sum()))]
        batches.append(b.astype("<u8"))
    batches_np = np.stack(batches)

    work = Path(tempfile.mkdtemp(prefix="bench-cube-"))
    args.batches_file = work / "batches.bin"
    batches_np.tofile(args.batches_file)
    procs: dict[str, subprocess.Popen] = {}
    try:
        print(f"keys {keys.size:,}  dim {args.dim}  batch {BATCH}  missing {args.missing:.0%}  "
              f"servers on cpu {args.server_cpus}, load generator on cpu {args.client_cpus}  "
              f"({os.cpu_count()} cpus)")  # fmt: skip
        print(f"load average at start: {loadavg()}", flush=True)
        if args.rt_priority:
            print(f"servers and load generator SCHED_FIFO, priority {args.rt_priority}")
        loadgen = build_loadgen(work)
        write_version(work / "store", VERSION, [(keys, rows)])
        subprocess.run(
            [sys.executable, "-m", "elasticctr.cli.main", "cube", "build", "--model-store",
             str(work / "store"), "--version", VERSION, "--cube-root", str(work / "cube"),
             "--shards", "1"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        ports = {}
        for peer in peers:
            ports[peer] = free_port()
            if peer.startswith("cube"):
                procs[peer] = start_cube(work, ports[peer], args.server_cpus, peer == "cube")
            elif peer == "redis":
                procs[peer] = subprocess.Popen(
                    [*pinned(args.server_cpus), args.redis_server, "--port", str(ports[peer]),
                     "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                     "--io-threads", "1", "--protected-mode", "no", "--dir", str(work)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
                wait_for_port("127.0.0.1", ports[peer], timeout=30, what="redis-server")
                t0 = time.perf_counter()
                load_redis(ports[peer], keys, rows)
                print(f"redis MSET load: {time.perf_counter() - t0:.1f}s")
            else:
                sys.exit(f"unknown peer {peer!r}")
        if args.rt_priority:
            for proc in procs.values():
                realtime(proc.pid, args.rt_priority)
        if "cube" in peers and "redis" in peers:
            check_same_answers(ports["cube"], ports["redis"], batches[0], args.dim)
        if "cube-numpy" in peers and "cube" in peers:
            import httpx

            a, b = (
                httpx.post(f"http://127.0.0.1:{ports[p]}/v1/lookup", content=batches[1].tobytes())
                for p in ("cube", "cube-numpy")
            )
            assert a.content == b.content, "native and numpy cube answers differ"

        results: dict[tuple[str, int], list[dict]] = {}
        for rnd in range(args.rounds):
            order = peers[rnd % len(peers) :] + peers[: rnd % len(peers)]
            for c in levels:
                for peer in order:
                    kind = "redis" if peer == "redis" else "cube"
                    r = run_load(loadgen, kind, ports[peer], c, args, procs[peer])
                    results.setdefault((peer, c), []).append(r)
                    print(
                        f"round {rnd + 1} c={c:<3} {peer:<10} {r['kps'] / 1e6:6.2f}M keys/s  "
                        f"p50 {r['p50']:7.3f} ms  p99 {r['p99']:7.3f} ms  "
                        f"server CPU {r['cpu']:5.2f}s  "
                        f"{r['kpcs'] / 1e6:6.2f}M keys per server CPU-s",
                        flush=True,
                    )
            print(f"load average after round {rnd + 1}: {loadavg()}", flush=True)

        for proc in procs.values():  # the servers' cores are free for the estimate
            proc.send_signal(signal.SIGSTOP)
        try:
            alone = [lookup_only(work, batches_np, args.server_cpus) for _ in range(3)]
            shard_mib = max(1, sum(f.stat().st_size for f in (work / "cube").rglob("*.cube")) >> 20)
            ns_line = []
            for _ in range(3):
                out = subprocess.run(
                    [*pinned(args.server_cpus), str(loadgen), "mem", str(shard_mib), "20000000"],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                ns_line.append(float(out.stdout.split()[0]))
        finally:
            for proc in procs.values():
                proc.send_signal(signal.SIGCONT)
        print(f"load average at the end: {loadavg()}")

        print()
        print(f"Medians of {args.rounds} rounds (min–max); keys/s over {args.seconds:g} s per run")
        print()
        print("| concurrency | peer | keys/s (M) | p50 ms | p99 ms | keys per server CPU-s (M) |")
        print("|---|---|---|---|---|---|")
        for c in levels:
            for peer in peers:
                rs = results[(peer, c)]
                print(
                    f"| {c} | {peer} | {fmt_spread([r['kps'] for r in rs], 1e-6)} | "
                    f"{fmt_spread([r['p50'] for r in rs], digits=3)} | "
                    f"{fmt_spread([r['p99'] for r in rs], digits=3)} | "
                    f"{fmt_spread([r['kpcs'] for r in rs], 1e-6)} |"
                )
        m_alone = med(alone)
        m_line = med(ns_line)
        print()
        print(
            f"memory-bound estimate: the native lookup alone {m_alone[0] / 1e6:.1f}M keys per "
            f"core-second ({m_alone[1] / 1e6:.1f}–{m_alone[2] / 1e6:.1f}); random 64-byte reads "
            f"over {shard_mib} MiB: {m_line[0]:.1f} ns per line ({m_line[1]:.1f}–{m_line[2]:.1f}), "
            f"at 3 lines per key {1e3 / (3 * m_line[0]):.1f}M keys per core-second"
        )
        if "cube" in peers:
            all_kpcs = statistics.median(r["kpcs"] for c in levels for r in results[("cube", c)])
            print(
                f"cube server keys per core-second, all runs: median {all_kpcs / 1e6:.1f}M "
                f"= {all_kpcs / m_alone[0]:.0%} of the lookup alone"
            )
        print()

        def ratio(what: str, num: str, den: str, key: str, cs: list[int], invert=False) -> None:
            per_round = []
            for c in cs:
                for a, b in zip(results[(num, c)], results[(den, c)], strict=True):
                    per_round.append(b[key] / a[key] if invert else a[key] / b[key])
            m, lo, hi = med(per_round)
            print(
                f"ratio: {what} (median of {len(per_round)}, min-max {lo:.2f}-{hi:.2f}x) = {m:.2f}x"
            )

        if "cube" in peers and "redis" in peers:
            for c in levels:
                ratio(f"cube/redis keys/s at concurrency {c}", "cube", "redis", "kps", [c])
            ratio("redis/cube p99 at concurrency 1", "cube", "redis", "p99", [1], invert=True)
            ratio(
                "cube/redis keys per server CPU-second, all levels", "cube", "redis", "kpcs", levels
            )
        if "cube" in peers and "cube-numpy" in peers:
            ratio("cube native/numpy keys per server CPU-second, all levels", "cube",
                  "cube-numpy", "kpcs", levels)  # fmt: skip
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
