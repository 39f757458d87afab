"""Serving benchmark: `ectl serve` (+ its cube shards) vs `mlflow models serve`, one run.

Both serve the same model version (built from the ElasticCTR demo data's feasigns plus
random extra keys); the same closed-loop load (one sample per request, the demo lines in
turn, keep-alive connections) is applied at each concurrency level, first to ectl serve,
then to mlflow. Predictions of the two are compared first (they must agree to 1e-5).

    .venv/bin/python bench/serving/run.py [--duration 10] [--levels 1,8,32,64]
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from loadgen import http_post, run  # noqa: E402

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
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
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
                        "--port", str(port)])  # fmt: skip
            wait_for_port("127.0.0.1", port, timeout=60, what=f"cube shard {shard}")
            urls.append(f"http://127.0.0.1:{port}")
        subprocess.run([*ECTL, "cube", "transfer", "--model-store", str(store), "--cube-root",
                        str(tmp / "cube"), "--version", VERSION,
                        *sum((["--shard-url", u] for u in urls), [])],
                       check=True, capture_output=True)  # fmt: skip

        ectl_port = free_port()
        p = procs.start("serve", [*ECTL, "serve", "--store", str(store), "--cube",
                        ",".join(urls), "--port", str(ectl_port), "--poll-interval", "0",
                        "--cache", str(tmp / "cache"), *args.serve_arg])  # fmt: skip
        wait_http(f"http://127.0.0.1:{ectl_port}/readyz", 120, "ectl serve", p)

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
                            "-p", str(mlflow_port)], env)  # fmt: skip
            wait_http(f"http://127.0.0.1:{mlflow_port}/ping", 300, "mlflow models serve", p)

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
        rows = []
        for c in levels:
            a = asyncio.run(run("127.0.0.1", ectl_port, ectl_reqs, c, args.duration))
            rows.append({"concurrency": c, "ectl": a})
            if mlflow_port is None:
                print(f"c={c:3d}  ectl serve {a['qps']:8.0f} qps p50 {a['p50_ms']:7.2f} ms "
                      f"p99 {a['p99_ms']:7.2f} ms err {a['errors']}", flush=True)  # fmt: skip
                continue
            b = asyncio.run(run("127.0.0.1", mlflow_port, mlflow_reqs, c, args.duration))
            rows[-1]["mlflow"] = b
            print(f"c={c:3d}  ectl serve {a['qps']:8.0f} qps p50 {a['p50_ms']:7.2f} ms "
                  f"p99 {a['p99_ms']:7.2f} ms err {a['errors']} | mlflow {b['qps']:7.0f} qps "
                  f"p50 {b['p50_ms']:7.2f} ms p99 {b['p99_ms']:7.2f} ms err {b['errors']} | "
                  f"QPS x{a['qps'] / max(b['qps'], 1e-9):.1f}, "
                  f"p99 x{b['p99_ms'] / a['p99_ms']:.1f} lower", flush=True)  # fmt: skip
        stats = httpx.get(f"http://127.0.0.1:{ectl_port}/metrics").text
        sums = {ln.split()[0]: float(ln.split()[1]) for ln in stats.splitlines()
                if ln.startswith(("elasticctr_serving_batch_samples_sum",
                                  "elasticctr_serving_batch_samples_count"))}  # fmt: skip
        mean = sums["elasticctr_serving_batch_samples_sum"] / max(
            sums["elasticctr_serving_batch_samples_count"], 1
        )
        print(f"ectl mean dynamic batch: {mean:.1f} samples")
        print(f"load average now: {os.getloadavg()}")
        if args.json:
            args.json.write_text(json.dumps({"rows": rows, "max_diff": diff}, indent=1))
    finally:
        procs.stop()


if __name__ == "__main__":
    main()
