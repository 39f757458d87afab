"""The HTTP layer decision: elasticctr.httpd vs maintained servers, on the cube lookup.

One run, side by side: each server process answers the same `POST /v1/lookup` of 1000
uint64 keys with the same handler (`CubeApp.lookup` over the same shard), on uvloop:

  httpd     elasticctr.httpd.serve_async (what `ectl cube server` runs)
  aiohttp   aiohttp.web (low-level Application, one route), the same handler
  uvicorn   uvicorn + httptools, a raw ASGI app (no framework on top), the same handler

Prints per server: requests/s and p50/p99 at each concurrency (keep-alive connections,
one asyncio client process), and server CPU µs per request (from /proc, leaves the client
out), with the ratio to httpd. A server whose package is missing is reported and skipped
(`uvicorn`/`httptools` are not project dependencies: `uv pip install uvicorn httptools`).

    .venv/bin/python bench/http/compare.py                 # ~1 minute
    .venv/bin/python bench/http/compare.py --seconds 2     # quick
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cube"))
from bench_lookup import CubeConn, cpu_seconds, percentile  # noqa: E402

from elasticctr.net import free_port, wait_for_port  # noqa: E402

VERSION = "20200401/00"
KINDS = ("httpd", "aiohttp", "uvicorn")


def build(tmp: Path, n: int) -> np.ndarray:
    from elasticctr.cube.builder import build_version
    from elasticctr.cube.modelstore import verify_version, write_version

    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(1, 2**63, n, dtype=np.uint64))
    rows = rng.random((keys.size, 8), dtype=np.float32)
    vdir = write_version(tmp / "store", VERSION, [(keys, rows)], slots=[0])
    build_version(verify_version(vdir, VERSION), tmp / "cube", 1)
    return keys


# --- the servers (run in a child process: `--serve KIND`) -------------------------------
def _app(cube_root: Path, state_dir: Path):
    from elasticctr.cube.server import CubeApp
    from elasticctr.cube.shard import Tables

    tables = Tables(cube_root, state_dir, 0, 1, 2)
    tables.default.load(VERSION)
    tables.default.commit(VERSION)
    return CubeApp(tables)


def _bytes(body: bytes | list[bytes]) -> bytes:
    return b"".join(body) if isinstance(body, list) else body


def serve(kind: str, port: int, cube_root: Path, state_dir: Path) -> None:
    import uvloop

    from elasticctr.httpd import Request

    app = _app(cube_root, state_dir)

    if kind == "httpd":
        from elasticctr.httpd import Limits, serve_async

        async def main():
            await serve_async(app.route, "127.0.0.1", port, Limits())
            await asyncio.Event().wait()

        uvloop.run(main())
    elif kind == "aiohttp":
        from aiohttp import web

        async def lookup(request: web.Request) -> web.Response:
            body = await request.read()
            resp = app.lookup(Request("POST", "/v1/lookup", "", {}, body))
            return web.Response(
                body=_bytes(resp.body), status=resp.status, headers=resp.headers,
                content_type=resp.content_type,
            )  # fmt: skip

        web_app = web.Application()
        web_app.router.add_post("/v1/lookup", lookup)
        web.run_app(web_app, host="127.0.0.1", port=port, print=None, loop=uvloop.new_event_loop())
    elif kind == "uvicorn":
        import uvicorn

        async def asgi(scope, receive, send):
            if scope["type"] != "http":
                return
            chunks = []
            while True:
                msg = await receive()
                chunks.append(msg.get("body", b""))
                if not msg.get("more_body"):
                    break
            resp = app.lookup(Request("POST", scope["path"], "", {}, b"".join(chunks)))
            headers = [(b"content-type", resp.content_type.encode())]
            headers += [(k.lower().encode(), v.encode()) for k, v in resp.headers.items()]
            body = _bytes(resp.body)
            headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": resp.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        uvicorn.run(
            asgi, host="127.0.0.1", port=port, loop="uvloop", http="httptools",
            log_level="warning", access_log=False,
        )  # fmt: skip


def available(kind: str) -> str | None:
    """None when the server can run here, else why not."""
    mods = {"httpd": [], "aiohttp": ["aiohttp"], "uvicorn": ["uvicorn", "httptools"]}[kind]
    for m in mods:
        try:
            __import__(m)
        except ImportError:
            return f"{m} is not installed"
    return None


async def measure(port: int, batches: list[bytes], concurrency: int, seconds: float):
    conns = [CubeConn(port) for _ in range(concurrency)]
    for c in conns:
        await c.open()
    lat: list[float] = []
    done = 0
    t_end = time.perf_counter() + seconds

    async def worker(i: int, conn):
        nonlocal done
        j = i
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            rows = await conn.lookup(batches[j % len(batches)])
            lat.append(time.perf_counter() - t0)
            assert rows.shape[0] == 1000
            done += 1
            j += concurrency

    await asyncio.gather(*(worker(i, c) for i, c in enumerate(conns)))
    for c in conns:
        await c.close()
    return done, lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.dir / "cube", args.dir / f"state-{args.serve}")
        return

    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-http-") as d:
        tmp = Path(d)
        keys = build(tmp, args.keys)
        rng = np.random.default_rng(1)
        batches = [
            keys[rng.integers(0, keys.size, 1000)].astype("<u8").tobytes() for _ in range(64)
        ]
        results: dict[str, dict] = {}
        for kind in KINDS:
            why = available(kind)
            if why:
                print(f"{kind:8s} skipped: {why}")
                continue
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, __file__, "--serve", kind, "--port", str(port), "--dir", str(tmp)],
                start_new_session=True,
            )
            try:
                wait_for_port(
                    "127.0.0.1", port, timeout=60, what=kind, alive=lambda p=proc: p.poll() is None
                )
                asyncio.run(measure(port, batches, 4, 1.0))  # warm-up
                row = {}
                for c in levels:
                    cpu0 = cpu_seconds(proc.pid)
                    n, lat = asyncio.run(measure(port, batches, c, args.seconds))
                    cpu = cpu_seconds(proc.pid) - cpu0
                    row[c] = {
                        "rps": n / args.seconds,
                        "p50": percentile(lat, 50) * 1e3,
                        "p99": percentile(lat, 99) * 1e3,
                        "cpu_us": cpu / n * 1e6,
                    }
                results[kind] = row
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(10)

    base = results.get("httpd")
    print(f"\n1000-key cube lookups, {args.seconds:g} s per level, server CPU from /proc")
    print(f"{'server':8s} {'conc':>4s} {'req/s':>8s} {'p50 ms':>7s} {'p99 ms':>7s} "
          f"{'CPU µs/req':>10s} {'req/s vs httpd':>14s} {'CPU vs httpd':>12s}")  # fmt: skip
    for kind, row in results.items():
        for c, r in row.items():
            ratio = r["rps"] / base[c]["rps"] if base else float("nan")
            cpu_ratio = r["cpu_us"] / base[c]["cpu_us"] if base else float("nan")
            print(
                f"{kind:8s} {c:4d} {r['rps']:8.0f} {r['p50']:7.3f} {r['p99']:7.3f} "
                f"{r['cpu_us']:10.1f} {ratio:14.2f} {cpu_ratio:12.2f}"
            )


if __name__ == "__main__":
    main()
