"""Cube shard vs Redis MGET: 1000-key batch lookups at concurrency 1, 8, 32.

Both servers run on loopback as one process each, with the same keys (default 1M
random uint64 feasigns) and the same rows (float32 [dim], 32 bytes at dim 8):

  cube   `ectl cube server` (1 shard) holding the version built by `ectl cube build`;
         client: asyncio, one keep-alive HTTP/1.1 connection per task, binary protocol
  redis  `redis-server` from Debian (no persistence); key = the 8 little-endian bytes
         of the feasign, value = the row bytes; client: redis-py asyncio + hiredis, MGET

Each round: the same pre-drawn batches (some keys absent, `--missing`), C concurrent
tasks, `--seconds` per round after a warm-up. Prints keys/s, p50/p99 per request and
the ratio cube/redis (throughput: higher is better; latency: lower is better), plus
server CPU seconds per million keys (from /proc) which leaves the client out.

    .venv/bin/python bench/cube/bench_lookup.py            # 1M keys, ~2 minutes
    .venv/bin/python bench/cube/bench_lookup.py --keys 100000 --seconds 2   # quick
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
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


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) if values else float("nan")


# --- cube client: raw asyncio HTTP/1.1 keep-alive --------------------------------------
class CubeConn:
    def __init__(self, port: int):
        self.port = port

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def lookup(self, body: bytes) -> np.ndarray:
        self.writer.write(
            b"POST /v1/lookup HTTP/1.1\r\nHost: b\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = head[9:12]
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        payload = await self.reader.readexactly(length)
        if status != b"200":
            raise RuntimeError(f"cube answered {status!r}: {payload[:200]!r}")
        return decode_response(payload).rows

    async def close(self):
        self.writer.close()


async def run_round(make_conn, batches, concurrency: int, seconds: float, warmup: float):
    conns = [make_conn() for _ in range(concurrency)]
    for c in conns:
        await c.open()
    latencies: list[float] = []
    keys_done = 0
    t_measure = time.perf_counter() + warmup
    t_end = t_measure + seconds

    async def worker(i: int, conn):
        nonlocal keys_done
        j = i
        while True:
            now = time.perf_counter()
            if now >= t_end:
                return
            batch = batches[j % len(batches)]
            j += concurrency
            t0 = time.perf_counter()
            rows = await conn.lookup(batch)
            t1 = time.perf_counter()
            assert rows.shape[0] == 1000
            if t0 >= t_measure:
                latencies.append(t1 - t0)
                keys_done += 1000

    await asyncio.gather(*(worker(i, c) for i, c in enumerate(conns)))
    for c in conns:
        await c.close()
    return keys_done / seconds, latencies


# --- redis clients ---------------------------------------------------------------------
def resp_mget(keys: list[bytes]) -> bytes:
    """The MGET command in RESP, encoded once per batch (as a C client would send it)."""
    parts = [b"*%d\r\n$4\r\nMGET\r\n" % (len(keys) + 1)]
    parts += [b"$%d\r\n%s\r\n" % (len(k), k) for k in keys]
    return b"".join(parts)


class RedisRawConn:
    """Pre-encoded MGET over a raw socket, reply parsed by hiredis (C): the fastest Python
    client for Redis, so the comparison measures the server, not redis-py overhead."""

    def __init__(self, port: int, dim: int):
        self.port = port
        self.zero = b"\0" * (4 * dim)
        self.dim = dim

    async def open(self):
        import hiredis

        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.parser = hiredis.Reader()

    async def lookup(self, command: bytes) -> np.ndarray:
        self.writer.write(command)
        while True:
            reply = self.parser.gets()
            if reply is not False:
                break
            self.parser.feed(await self.reader.read(1 << 20))
        if None in reply:
            reply = [v if v is not None else self.zero for v in reply]
        return np.frombuffer(b"".join(reply), dtype="<f4").reshape(len(reply), self.dim)

    async def close(self):
        self.writer.close()


class RedisConn:
    def __init__(self, port: int, dim: int):
        import redis.asyncio as aioredis

        self.client = aioredis.Redis(host="127.0.0.1", port=port, single_connection_client=True)
        self.zero = b"\0" * (4 * dim)
        self.dim = dim

    async def open(self):
        await self.client.ping()

    async def lookup(self, keys: list[bytes]) -> np.ndarray:
        values = await self.client.mget(keys)
        if None in values:
            values = [v if v is not None else self.zero for v in values]
        return np.frombuffer(b"".join(values), dtype="<f4").reshape(len(keys), self.dim)

    async def close(self):
        await self.client.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=8.0, help="measured time per round")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--missing", type=float, default=0.05, help="share of absent keys")
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    args = ap.parse_args()
    if not shutil.which(args.redis_server):
        sys.exit("redis-server not found: apt-get install -y redis-server (Debian)")
    levels = [int(c) for c in args.concurrency.split(",")]
    rng = np.random.default_rng(42)
    keys = np.unique(rng.integers(1, 2**64 - 1, args.keys + args.keys // 50 + 10, dtype=np.uint64))
    keys = keys[: args.keys]
    rng.shuffle(keys)
    rows = rng.standard_normal((keys.size, args.dim), dtype=np.float32)
    absent = rng.integers(1, 2**64 - 1, 20_000, dtype=np.uint64)
    absent = absent[~np.isin(absent, keys)]
    batches_np = []
    for _ in range(512):
        b = keys[rng.integers(0, keys.size, 1000)]
        m = rng.random(1000) < args.missing
        b[m] = absent[rng.integers(0, absent.size, int(m.sum()))]
        batches_np.append(b.astype("<u8"))

    work = Path(tempfile.mkdtemp(prefix="bench-cube-"))
    procs: list[subprocess.Popen] = []
    try:
        print(f"keys {keys.size:,}  dim {args.dim}  batch 1000  missing {args.missing:.0%}")
        write_version(work / "store", VERSION, [(keys, rows)])
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "elasticctr.cli.main", "cube", "build", "--model-store",
             str(work / "store"), "--version", VERSION, "--cube-root", str(work / "cube"),
             "--shards", "1"],
            check=True, stdout=subprocess.PIPE,
        )  # fmt: skip
        print(f"ectl cube build (incl. sha256 verify + interpreter start): "
              f"{time.perf_counter() - t0:.2f}s")  # fmt: skip

        cube_port = free_port()
        cube = subprocess.Popen(
            [sys.executable, "-m", "elasticctr.cli.main", "cube", "server", "--cube-root",
             str(work / "cube"), "--state-dir", str(work / "state"), "--shard", "0",
             "--num-shards", "1", "--port", str(cube_port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        procs.append(cube)
        wait_for_port("127.0.0.1", cube_port, timeout=60, what="cube server")
        import httpx

        for step in ("load", "commit"):
            httpx.post(
                f"http://127.0.0.1:{cube_port}/admin/{step}", json={"version": VERSION}, timeout=120
            ).raise_for_status()

        redis_port = free_port()
        redis = subprocess.Popen(
            [args.redis_server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--protected-mode", "no", "--dir", str(work)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        procs.append(redis)
        wait_for_port("127.0.0.1", redis_port, timeout=30, what="redis-server")
        import redis as redis_lib

        r = redis_lib.Redis(host="127.0.0.1", port=redis_port)
        kb = keys.astype("<u8").tobytes()
        rb = rows.astype("<f4").tobytes()
        step = 4 * args.dim
        t0 = time.perf_counter()
        for start in range(0, keys.size, 10_000):
            pipe = r.pipeline(transaction=False)
            end = min(start + 10_000, keys.size)
            pipe.mset(
                {kb[8 * i : 8 * i + 8]: rb[step * i : step * (i + 1)] for i in range(start, end)}
            )
            pipe.execute()
        assert r.dbsize() == keys.size
        print(f"redis MSET load: {time.perf_counter() - t0:.1f}s, "
              f"used_memory {r.info('memory')['used_memory_human']}")  # fmt: skip
        r.close()

        # Same answers from both before timing anything.
        probe = batches_np[0]

        async def check():
            c, rc = CubeConn(cube_port), RedisConn(redis_port, args.dim)
            await c.open()
            await rc.open()
            a = await c.lookup(probe.tobytes())
            b = await rc.lookup([probe[i : i + 1].tobytes() for i in range(probe.size)])
            raw = RedisRawConn(redis_port, args.dim)
            await raw.open()
            d = await raw.lookup(resp_mget([probe[i : i + 1].tobytes() for i in range(probe.size)]))
            await c.close()
            await rc.close()
            await raw.close()
            assert np.array_equal(a, b) and np.array_equal(a, d), "cube and redis disagree"

        asyncio.run(check())
        cube_batches = [b.tobytes() for b in batches_np]
        redis_batches = [[b[i : i + 1].tobytes() for i in range(b.size)] for b in batches_np]
        raw_batches = [resp_mget(keys) for keys in redis_batches]

        results = []
        for c in levels:
            row = {"c": c}
            for name, proc, make, batches in (
                ("cube", cube, lambda: CubeConn(cube_port), cube_batches),
                ("redis", redis, lambda: RedisRawConn(redis_port, args.dim), raw_batches),
                ("redis-py", redis, lambda: RedisConn(redis_port, args.dim), redis_batches),
            ):
                cpu0 = cpu_seconds(proc.pid)
                kps, lat = asyncio.run(run_round(make, batches, c, args.seconds, args.warmup))
                cpu = cpu_seconds(proc.pid) - cpu0
                row[name] = {
                    "kps": kps,
                    "p50": percentile(lat, 50) * 1e3,
                    "p99": percentile(lat, 99) * 1e3,
                    "cpu_per_mkeys": cpu / max(kps * (args.seconds + args.warmup) / 1e6, 1e-9),
                }
            results.append(row)
            print(
                f"c={c:<3} "
                + " | ".join(
                    f"{n} {row[n]['kps'] / 1e6:5.2f}M keys/s p50 {row[n]['p50']:6.2f}ms "
                    f"p99 {row[n]['p99']:6.2f}ms"
                    for n in ("cube", "redis", "redis-py")
                ),
                flush=True,
            )

        print()
        print("| concurrency | cube keys/s | redis keys/s | cube/redis keys/s "
              "| cube p50 / p99 ms | redis p50 / p99 ms | redis/cube p99 "
              "| server CPU s per 1M keys, cube / redis | redis-py client keys/s |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|")
        for row in results:
            cu, rd, py = row["cube"], row["redis"], row["redis-py"]
            print(
                f"| {row['c']} | {cu['kps']:,.0f} | {rd['kps']:,.0f} | "
                f"**{cu['kps'] / rd['kps']:.2f}x** | {cu['p50']:.2f} / {cu['p99']:.2f} | "
                f"{rd['p50']:.2f} / {rd['p99']:.2f} | {rd['p99'] / cu['p99']:.2f}x | "
                f"{cu['cpu_per_mkeys']:.3f} / {rd['cpu_per_mkeys']:.3f} | {py['kps']:,.0f} |"
            )
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
