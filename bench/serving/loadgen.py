"""Closed-loop HTTP/1.1 load: N keep-alive connections, each sends its next request as soon
as the previous answer arrived. Requests are pre-encoded bytes, so the generator costs
little CPU; the same generator drives every service being compared.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np


async def _one(host, port, requests, stop_at, warm_until, lat, errors, idx):
    reader, writer = await asyncio.open_connection(host, port)
    i = idx
    try:
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                return
            writer.write(requests[i % len(requests)])
            i += 1
            status = int((await reader.readline()).split(b" ", 2)[1])
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            t1 = time.perf_counter()
            if t0 >= warm_until:
                if status == 200:
                    lat.append(t1 - t0)
                else:
                    errors.append(status)
    finally:
        writer.close()


async def run(host, port, requests, concurrency, duration, warmup=1.0, mark=None) -> dict:
    """`mark("start")` is called when the warm-up ends (the requests counted start from
    then on), `mark("stop")` once every connection is done: the window a caller measures
    other processes' CPU over (bench/serving/scenarios.py)."""
    lat: list[float] = []
    errors: list[int] = []
    start = time.perf_counter()
    warm_until = start + warmup
    stop_at = warm_until + duration

    async def window_start():
        await asyncio.sleep(max(0.0, warm_until - time.perf_counter()))
        mark("start")

    marker = asyncio.get_running_loop().create_task(window_start()) if mark else None
    await asyncio.gather(
        *(_one(host, port, requests, stop_at, warm_until, lat, errors, k * 7)
          for k in range(concurrency))
    )  # fmt: skip
    if marker is not None:
        await marker
        mark("stop")
    arr = np.asarray(lat) * 1000
    return {
        "concurrency": concurrency,
        "requests": len(lat),
        "errors": len(errors),
        "error_statuses": sorted(set(errors)),
        "qps": len(lat) / duration,
        "p50_ms": float(np.percentile(arr, 50)) if arr.size else float("nan"),
        "p99_ms": float(np.percentile(arr, 99)) if arr.size else float("nan"),
    }


def http_post(path: str, host: str, body: bytes, ctype: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
