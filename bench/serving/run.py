"""Serving benchmark: `ectl serve` (+ its cube shards) vs `mlflow models serve`.

Both serve the same model version (built from the ElasticCTR demo data's feasigns plus
random extra keys); predictions of the two are compared first (they must agree to 1e-5).
The same closed-loop load (one sample per request, the demo lines in turn, keep-alive
connections) is applied at each concurrency level by bench/serving/loadgen.py (asyncio,
pre-encoded requests); `--loadgen c` uses the compiled generator of the cube bench
instead (bench/cube/loadgen.c, `http` mode: a C thread per connection, replies read and
dropped), a cross-check that the client is not what limits either side.

Fair by construction:
- MLflow as its docs recommend for throughput: `--workers` = the cores the servers get
  (uvicorn workers); ectl serve is one process with its two cube shards.
- Both sides' server processes run on the same cores (`--server-cpus`, taskset; default
  every core), and the CPU seconds of every process of each side (the whole process tree:
  mlflow's uvicorn workers; ectl serve and its shards) are read from /proc at the start
  and the end of each measured window, so each side has CPU milliseconds per request.
- `--rounds` rounds (default 3); in each, every level runs both sides, the order of the
  two alternating round by round; the table gives medians with min-max.
The headline ratios are printed last as `ratio: <what> = N.NNx`, with the load average.

    .venv/bin/python bench/serving/run.py [--duration 10] [--levels 1,8,32,64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from loadgen import http_post, run  # noqa: E402

sys.path.insert(0, str(HERE.parent / "cube"))
from bench_lookup import build_loadgen  # noqa: E402

from elasticctr.net import free_port, wait_for_port  # noqa: E402

ECTL = [sys.executable, "-m", "elasticctr.cli.main"]
VERSION = "20261201/00"
SLOTS = list(range(27))
DEMO = Path(os.environ.get("ELASTICCTR_SHARED", REPO.parent / "shared")) / (
    "data/elasticctr/serving_demo_data.txt"
)


class Procs:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []

    def start(
        self, name: str, args: list[str], env: dict | None = None, cpus: str | None = None
    ) -> subprocess.Popen:
        """`cpus` (taskset's list, e.g. "1" or "0,1"): the process runs only there."""
        log = open(self.tmp / f"{name}.log", "wb")
        if cpus is not None:
            args = ["taskset", "-c", cpus, *args]
        env = {**os.environ, "GLOG_minloglevel": "2", **(env or {})}
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)  # fmt: skip
        self.procs.append(p)
        return p

    def stop_one(self, p: subprocess.Popen, timeout: float = 30) -> int:
        """SIGTERM one process group started here, SIGKILL after `timeout`; its exit code."""
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            return p.wait(5)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def wait_http(url: str, timeout: float, what: str, proc: subprocess.Popen):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{what} not ready after {timeout}s")


def tree_cpu(procs: list[subprocess.Popen]) -> float:
    """CPU seconds of these processes and every descendant (living, or waited for)."""
    total = 0.0
    for p in procs:
        try:
            root = psutil.Process(p.pid)
            for q in [root, *root.children(recursive=True)]:
                t = q.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            continue
    return total


def measure(procs, port: int, requests: list[bytes], concurrency: int, duration: float) -> dict:
    """One closed-loop window; adds the side's CPU ms per request over exactly it."""
    snaps: dict[str, float] = {}

    def mark(what: str) -> None:
        snaps[what] = tree_cpu(procs)

    r = asyncio.run(run("127.0.0.1", port, requests, concurrency, duration, mark=mark))
    return with_cpu(r, snaps["stop"] - snaps["start"])


def with_cpu(r: dict, cpu_s: float) -> dict:
    """A window's result with the side's CPU seconds over it and per request."""
    return {**r, "cpu_s": cpu_s, "cpu_ms_per_req": cpu_s / max(r["requests"], 1) * 1000}


def write_requests(path: Path, requests: list[bytes]) -> Path:
    """The compiled generator's REQFILE: each request after its uint32 LE length."""
    path.write_bytes(b"".join(len(r).to_bytes(4, "little") + r for r in requests))
    return path


def measure_c(
    procs, loadgen: Path, port: int, reqfile: Path, concurrency: int, duration: float
) -> dict:
    """measure() with bench/cube/loadgen.c: it prints "start" when its warm-up ends, its
    result line once every connection is done; the side's CPU is read at each."""
    warmup = 1.0
    cmd = [str(loadgen), "http", "127.0.0.1", str(port), str(concurrency), str(duration),
           str(warmup), str(reqfile)]  # fmt: skip
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as gen:
        first = gen.stdout.readline().strip()
        start = tree_cpu(procs)
        line = gen.stdout.readline().split()
        stop = tree_cpu(procs)
        rc = gen.wait()
    if first != "start" or rc != 0 or len(line) != 7:
        raise SystemExit(f"loadgen failed (exit {rc}): {first!r} {line!r}")
    n, non_200, errors = int(line[0]), int(line[5]), int(line[6])
    r = {"concurrency": concurrency, "requests": n, "errors": non_200 + errors,
         "qps": n / duration, "p50_ms": float(line[2]), "p99_ms": float(line[3])}  # fmt: skip
    return with_cpu(r, stop - start)


def report(runs: dict, levels: list[int], names: list[str]) -> list[dict]:
    """Medians (min-max) per level and side; returns the median rows."""
    print(f"\n{'c':>4} {'side':<7}{'qps, median (min-max)':>28}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'CPU ms/req':>12}{'errors':>8}")  # fmt: skip
    rows = []
    for c in levels:
        row: dict = {"concurrency": c}
        for name in names:
            rs = runs[(name, c)]
            qps = [r["qps"] for r in rs]
            med = {k: float(np.median([r[k] for r in rs]))
                   for k in ("qps", "p50_ms", "p99_ms", "cpu_ms_per_req")}  # fmt: skip
            med["errors"] = sum(r["errors"] for r in rs)
            med["rounds"] = rs
            row[name] = med
            span = f"{med['qps']:,.0f} ({min(qps):,.0f}-{max(qps):,.0f})"
            print(f"{c:>4} {name:<7}{span:>28}{med['p50_ms']:>9.2f}{med['p99_ms']:>9.2f}"
                  f"{med['cpu_ms_per_req']:>12.3f}{med['errors']:>8}")  # fmt: skip
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    ap.add_argument("--levels", default="1,8,32,64")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--extra-keys", type=int, default=200_000)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        help="extra `ectl serve` option, e.g. --serve-arg=--max-inflight-batches=1",
    )
    ap.add_argument("--no-mlflow", action="store_true", help="measure ectl serve only")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, sides alternating")
    ap.add_argument(
        "--server-cpus",
        default=",".join(str(c) for c in sorted(os.sched_getaffinity(0))),
        help="taskset list of both sides' server processes (default: every core)",
    )
    ap.add_argument(
        "--mlflow-workers", type=int, default=0, help="uvicorn workers (default: the server cores)"
    )
    ap.add_argument(
        "--loadgen",
        choices=("python", "c"),
        default="python",
        help="the asyncio load generator (default) or the compiled one (bench/cube/loadgen.c)",
    )
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    server_cores = len(args.server_cpus.split(","))
    workers = args.mlflow_workers or server_cores
    load0 = os.getloadavg()[0]
    if not DEMO.exists():
        raise SystemExit(f"{DEMO} missing (../shared/data beside the checkout)")

    from elasticctr.serving.pyfunc import log_version
    from elasticctr.serving.testing import keys_of_file, write_version

    tmp = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    os.chdir(tmp)  # MLflow's default artifact root ./mlruns lands in tmp, not the checkout
    procs = Procs(tmp)
    try:
        store = tmp / "store"
        rng = np.random.default_rng(7)
        extra = rng.integers(0, 2**63, args.extra_keys, dtype=np.uint64)
        keys = np.concatenate([keys_of_file(DEMO, SLOTS), extra])
        vdir = write_version(store, VERSION, slots=SLOTS, dim=8, keys=keys, seed=7)
        print(f"version {VERSION}: {keys.size} keys, dim 8, {len(SLOTS)} slots ({tmp})")

        urls = []
        for shard in range(args.shards):
            port = free_port()
            procs.start(f"cube-{shard}", [*ECTL, "cube", "server", "--cube-root",
                        str(tmp / "cube"), "--state-dir", str(tmp / f"state-{shard}"),
                        "--shard", str(shard), "--num-shards", str(args.shards),
                        "--port", str(port)], cpus=args.server_cpus)  # fmt: skip
            wait_for_port("127.0.0.1", port, timeout=60, what=f"cube shard {shard}")
            urls.append(f"http://127.0.0.1:{port}")
        subprocess.run([*ECTL, "cube", "transfer", "--model-store", str(store), "--cube-root",
                        str(tmp / "cube"), "--version", VERSION,
                        *sum((["--shard-url", u] for u in urls), [])],
                       check=True, capture_output=True)  # fmt: skip

        ectl_port = free_port()
        sides = {"ectl": list(procs.procs)}  # the shards; serve is added below
        p = procs.start("serve", [*ECTL, "serve", "--store", str(store), "--cube",
                        ",".join(urls), "--port", str(ectl_port), "--poll-interval", "0",
                        "--cache", str(tmp / "cache"), *args.serve_arg],
                        cpus=args.server_cpus)  # fmt: skip
        wait_http(f"http://127.0.0.1:{ectl_port}/readyz", 120, "ectl serve", p)
        sides["ectl"].append(p)

        mlflow_port, diff = None, None
        lines = DEMO.read_bytes().splitlines()
        if not args.no_mlflow:
            tracking = f"sqlite:///{tmp / 'mlflow.db'}"
            uri = log_version(vdir, VERSION, tracking_uri=tracking)
            mlflow_port = free_port()
            path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
            env = {"MLFLOW_TRACKING_URI": tracking, "PATH": path}
            p = procs.start("mlflow", [str(Path(sys.executable).parent / "mlflow"), "models",
                            "serve", "-m", uri, "--env-manager", "local", "-h", "127.0.0.1",
                            "-p", str(mlflow_port), "--workers", str(workers)], env,
                            cpus=args.server_cpus)  # fmt: skip
            wait_http(f"http://127.0.0.1:{mlflow_port}/ping", 300, "mlflow models serve", p)
            sides["mlflow"] = [p]

            ours = httpx.post(f"http://127.0.0.1:{ectl_port}/v1/predict",
                              content=b"\n".join(lines), headers={"Content-Type": "text/plain"},
                              ).json()["probabilities"]  # fmt: skip
            data = [[ln.decode()] for ln in lines]
            frame = {"dataframe_split": {"columns": ["line"], "data": data}}
            theirs = httpx.post(f"http://127.0.0.1:{mlflow_port}/invocations", json=frame,
                                timeout=60).json()["predictions"]  # fmt: skip
            diff = float(np.max(np.abs(np.asarray(ours) - np.asarray(theirs))))
            print(f"predictions of the 100 demo lines: max |ectl - mlflow| = {diff:.2e}")
            if diff > 1e-5:
                raise SystemExit("predictions differ by more than 1e-5")

        ectl_reqs = [http_post("/v1/predict", "127.0.0.1", ln + b"\n", "text/plain")
                     for ln in lines]  # fmt: skip
        mlflow_reqs = [
            http_post("/invocations", "127.0.0.1", json.dumps(
                {"dataframe_split": {"columns": ["line"], "data": [[ln.decode()]]}}).encode(),
                "application/json")
            for ln in lines
        ]  # fmt: skip
        ports = {"ectl": ectl_port, "mlflow": mlflow_port}
        reqs = {"ectl": ectl_reqs, "mlflow": mlflow_reqs}
        names = ["ectl"] if mlflow_port is None else ["ectl", "mlflow"]
        loadgen = build_loadgen(tmp) if args.loadgen == "c" else None
        reqfiles = {n: write_requests(tmp / f"{n}.requests", reqs[n]) for n in names if loadgen}

        def measure_side(name: str, c: int) -> dict:
            if loadgen is None:
                return measure(sides[name], ports[name], reqs[name], c, args.duration)
            return measure_c(sides[name], loadgen, ports[name], reqfiles[name], c, args.duration)

        print(
            f"server cores {args.server_cpus} for both sides; mlflow --workers {workers}; "
            f"{args.rounds} rounds of {args.duration:.0f} s per level and side; load generator "
            + ("bench/cube/loadgen.c (C threads)" if loadgen else "bench/serving/loadgen.py"),
            flush=True,
        )
        runs: dict[tuple[str, int], list[dict]] = {}
        for rnd in range(args.rounds):
            for c in levels:
                for name in names if rnd % 2 == 0 else names[::-1]:
                    r = measure_side(name, c)
                    runs.setdefault((name, c), []).append(r)
                    print(f"round {rnd + 1} c={c:3d} {name:<6} {r['qps']:8.0f} qps p50 "
                          f"{r['p50_ms']:7.2f} ms p99 {r['p99_ms']:7.2f} ms "
                          f"{r['cpu_ms_per_req']:6.3f} CPU ms/req err {r['errors']}",
                          flush=True)  # fmt: skip
        rows = report(runs, levels, names)
        stats = httpx.get(f"http://127.0.0.1:{ectl_port}/metrics").text
        sums = {ln.split()[0]: float(ln.split()[1]) for ln in stats.splitlines()
                if ln.startswith(("elasticctr_serving_batch_samples_sum",
                                  "elasticctr_serving_batch_samples_count"))}  # fmt: skip
        mean = sums["elasticctr_serving_batch_samples_sum"] / max(
            sums["elasticctr_serving_batch_samples_count"], 1
        )
        print(f"ectl mean dynamic batch: {mean:.1f} samples")
        print(f"load average: {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
        if args.json:
            args.json.write_text(json.dumps({"rows": rows, "max_diff": diff}, indent=1))
        single = rows[0]["ectl"]["p50_ms"] if levels[0] == 1 else None
        if single is not None:
            print(f"single-request p50 (c=1), ectl serve: {single:.3f} ms (median of rounds)")
        for row in rows if mlflow_port is not None else []:
            a, b = row["ectl"], row["mlflow"]
            c = row["concurrency"]
            print(f"ratio: ectl/mlflow QPS at c={c} = {a['qps'] / b['qps']:.2f}x")
            print(f"ratio: mlflow/ectl CPU per request at c={c} = "
                  f"{b['cpu_ms_per_req'] / a['cpu_ms_per_req']:.2f}x")  # fmt: skip
    finally:
        procs.stop()


if __name__ == "__main__":
    main()
