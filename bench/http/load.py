"""Before/after figures of the HTTP layer, per service, against the real processes:

  slow      connections still open `--slow-wait` s after `--slow` clients sent a partial
            request head and kept dripping header lines (the layer closes them after the
            header timeout, set here to `--header-timeout` s; the default is 30 s)
  idle      of `--idle` idle connections opened at once, how many the server kept
            (the layer's cap is set to `--cap`)
  smuggle   request-smuggling cases (tests/integration/http_load.py SMUGGLE) refused
            with a single 400/501 answer
  load      bounded load (`--threads` x `--requests`), every answer checked: requests/s,
            p50/p99 ms, errors (lost or corrupted answers count as errors)

Run with `--before SRC` (a checkout's tools/ folder, e.g. from `git archive`) to run the
server processes from that source instead (the client side always runs this checkout):

    .venv/bin/python bench/http/load.py
    mkdir -p /tmp/before && git archive e8fb5c1 tools | tar -x -C /tmp/before
    .venv/bin/python bench/http/load.py --before /tmp/before/tools
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2] / "tests" / "integration"))
sys.path.insert(0, str(HERE.parents[2]))

from http_load import (  # noqa: E402
    SMUGGLE,
    layer_env,
    run_load,
    smuggle_refused,
    start_coordinator,
    start_cube,
    start_fileserver,
    start_serving,
)


def still_open(socks: list[socket.socket]) -> int:
    """How many of the connections the server has not closed (an answer such as 408 or
    503 followed by a close counts as closed)."""
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            while s.recv(65536):
                pass  # an answer: read on to see whether the close follows
        except BlockingIOError:
            n += 1  # nothing more to read and no close: held
        except OSError:
            pass  # reset: closed
    return n


def slow_clients(port: int, n: int, wait: float) -> int:
    socks = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        except OSError:
            break
    t_end = time.monotonic() + wait
    while time.monotonic() < t_end:
        for s in socks:
            try:
                s.sendall(b"X-Drip: 1\r\n")
            except OSError:
                pass
        time.sleep(0.5)
    held = still_open(socks)
    for s in socks:
        s.close()
    return held


def idle_clients(port: int, n: int) -> int:
    socks = []
    for _ in range(n):
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    time.sleep(1.0)
    held = still_open(socks)
    for s in socks:
        s.close()
    return held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="run the servers from this tools/ folder")
    ap.add_argument("--services", default="cube,serving,fileserver,coordinator")
    ap.add_argument("--slow", type=int, default=200)
    ap.add_argument("--slow-wait", type=float, default=5.0)
    ap.add_argument("--header-timeout", type=float, default=2.0)
    ap.add_argument("--idle", type=int, default=300)
    ap.add_argument("--cap", type=int, default=100)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--requests", type=int, default=500, help="per thread")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the servers on exit

    env = layer_env(args.header_timeout, 60, args.cap)
    if args.before:
        env["PYTHONPATH"] = str(args.before.resolve())
    demo = HERE.parents[2] / ".." / "shared" / "data" / "elasticctr" / "serving_demo_data.txt"
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-http-load-") as d:
        for name in args.services.split(","):
            tmp = Path(d) / name
            tmp.mkdir()
            if name == "cube":
                svc = start_cube(tmp, env)
            elif name == "serving":
                svc = start_serving(tmp, env, demo)
            elif name == "fileserver":
                svc = start_fileserver(tmp, env)
            else:
                svc = start_coordinator(tmp, env, files=400)
            try:
                slow = slow_clients(svc.port, args.slow, args.slow_wait)
                time.sleep(1)
                idle = idle_clients(svc.port, args.idle)
                time.sleep(1)
                refused = sum(
                    smuggle_refused(svc.port, svc.post_path, svc.auth, c, limit=2) for c in SMUGGLE
                )
                res = run_load(
                    name,
                    svc.worker_factory,
                    threads=args.threads,
                    requests_per_thread=args.requests,
                )
                if svc.check:
                    try:
                        svc.check()
                    except AssertionError as exc:
                        res.errors += 1
                        res.first_error = res.first_error or str(exc)
                rows.append((name, slow, idle, refused, res))
            finally:
                svc.proc.stop()

    label = f"before ({args.before})" if args.before else "this checkout"
    print(f"\nservers from {label}; header timeout {args.header_timeout:g} s, cap {args.cap}")
    print(
        f"{'service':12s} {'slow held':>9s} {'idle held':>9s} {'smuggle refused':>15s} "
        f"{'req/s':>7s} {'p50 ms':>7s} {'p99 ms':>7s} {'errors':>6s}"
    )
    for name, slow, idle, refused, res in rows:
        print(
            f"{name:12s} {slow:4d}/{args.slow:<4d} {idle:4d}/{args.idle:<4d} "
            f"{refused:11d}/{len(SMUGGLE):<3d} {res.throughput:7.0f} {res.p(50):7.2f} "
            f"{res.p(99):7.2f} {res.errors:6d}"
        )
        if res.first_error:
            print(f"  first error: {res.first_error}")


if __name__ == "__main__":
    main()
