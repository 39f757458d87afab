"""Serving benchmark: one `ectl serve --scenarios` process with one scenario loaded vs four
(docs/platform.md "Measured" has a run).

Builds a platform with real processes: four scenarios, each with its own data
(`ectl data generate`), slot config and zoo model, trained with `ectl train --local` into
its prefix of the platform store (`{store}/scenarios/NAME`, the training export's own
path); two cube shards; `ectl cube transfer --scenarios` loading the registered
scenarios' tables; one `ectl serve --scenarios`. Then the same closed-loop load (the
target scenario's held-out lines, N per request, the same bodies, concurrency and
duration; bench/serving/loadgen.py) in rounds alternating a/b/a/b:

  (a) only the target scenario registered: cube holds its one table, serving one model;
  (b) all four registered and loaded, the load still on the target's route;
  (c) with --spread, after each (b): all four loaded, the load spread over the four.

Between rounds the registry changes and a cube-transfer runs until cube and serving
follow, then stops, so during a measured window only the serving process, the shards and
the load generator (this process) run. Each is pinned to fixed cores (`taskset -c` for the
children, sched_setaffinity for this process; the affinity of every process is printed)
the same way in every configuration, and the CPU time of each is read (psutil cpu_times)
at the window's start and end.

    .venv/bin/python bench/serving/scenarios.py [--rounds 5] [--duration 10]
        [--concurrency 16] [--lines-per-request 10] [--spread] [--workdir DIR]

Prints every round, per configuration the median and min-max, and the headline
`ratio: qps four/one scenarios = N.NNx` / `ratio: p99 four/one scenarios = N.NNx`
(medians of b over medians of a).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import psutil
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from loadgen import http_post, run  # noqa: E402
from run import ECTL, Procs, wait_http  # noqa: E402

from elasticctr.net import free_port, wait_for_port  # noqa: E402
from elasticctr.scenarios import DEFAULT, DirRegistry, Scenario  # noqa: E402

TRAIN_HOUR, HELDOUT_HOUR = "20200401/00", "20200401/01"
VERSION = TRAIN_HOUR  # training exports one version per hour, named after it


@dataclass(frozen=True)
class Spec:
    name: str
    model: str
    slots: tuple[int, ...]
    seed: int


SCENARIOS = (
    Spec("feed", "dnn", tuple(range(16)), 11),
    Spec("coupon", "wide_deep", tuple(range(100, 108)), 12),
    Spec("search", "lr", tuple(range(27)), 13),
    Spec("push", "deepfm", tuple(range(200, 212)), 14),
)
"""The platform's four scenarios: zoo models with their chart defaults, own slot ids."""


def sh(args: list[str], what: str, timeout: float) -> str:
    out = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "GLOG_minloglevel": "2"})  # fmt: skip
    if out.returncode != 0:
        tail = out.stdout[-3000:] + out.stderr[-3000:]
        raise SystemExit(f"{what} failed ({out.returncode}):\n{tail}")
    return out.stdout


def build_scenario(work: Path, sp: Spec, lines: int) -> dict:
    """Data (a training hour and a held-out hour) and one trained, exported version."""
    data = work / "data" / sp.name
    store = work / "store" / "scenarios" / sp.name
    vdir = store / "versions" / VERSION
    t0 = time.monotonic()
    if not (vdir / "donefile").exists():
        sh([*ECTL, "data", "generate", f"file://{data}", "--hours", "2", "--lines", str(lines),
            "--slots", ",".join(map(str, sp.slots)), "--seed", str(sp.seed)],
           f"data generate {sp.name}", 300)  # fmt: skip
        values = work / "values" / f"{sp.name}.yaml"
        values.parent.mkdir(parents=True, exist_ok=True)
        values.write_text(yaml.safe_dump({
            "global": {
                "data": {"path": f"file://{data}", "slots": list(sp.slots),
                         "startDateHour": TRAIN_HOUR, "endDateHour": TRAIN_HOUR},
                "modelStore": f"file://{store}",
            },
            "trainer": {"model": {"name": sp.model}},
        }))  # fmt: skip
        sh([*ECTL, "train", "--local", "-p", "1", "-t", "1", "-f", str(values), "-q",
            "--log-dir", str(work / "train" / sp.name / "logs"),
            "--checkpoint-dir", str(work / "train" / sp.name / "ckpt"), "--timeout", "900"],
           f"train {sp.name}", 960)  # fmt: skip
    manifest = json.loads((vdir / "manifest.json").read_text())
    assert manifest["model"]["name"] == sp.model and manifest["slots"] == list(sp.slots)
    return {
        "model": sp.model,
        "slots": len(sp.slots),
        "dim": manifest["embedding_dim"],
        "rows": manifest["sparse"]["rows"],
        "auc": manifest["metrics"].get("auc"),
        "seconds": time.monotonic() - t0,
    }


def heldout_lines(work: Path, sp: Spec) -> list[bytes]:
    part = work / "data" / sp.name / HELDOUT_HOUR
    data = b"".join(p.read_bytes() for p in sorted(part.glob("part-*")))
    return [ln for ln in data.splitlines() if ln.strip()]


def bodies(lines: list[bytes], n: int) -> list[bytes]:
    """Consecutive groups of n lines (the last partial group dropped), one per request."""
    return [b"\n".join(lines[i : i + n]) + b"\n" for i in range(0, len(lines) - n + 1, n)]


class Platform:
    """The running processes and how to move between configurations."""

    def __init__(self, work: Path, args, procs: Procs):
        self.work, self.args, self.procs = work, args, procs
        self.registry = DirRegistry(work / "registry")
        self.shard_urls: list[str] = []
        self.shards: list[subprocess.Popen] = []
        self.transfers = 0
        for f in self.registry.root.glob("*.json") if self.registry.root.is_dir() else []:
            f.unlink()
        for shard in range(args.shards):
            port = free_port()
            p = procs.start(f"cube-{shard}", [*ECTL, "cube", "server", "--cube-root",
                            str(work / "run" / "cube"), "--state-dir",
                            str(work / "run" / f"state-{shard}"), "--shard", str(shard),
                            "--num-shards", str(args.shards), "--port", str(port)],
                            cpus=args.cube_cpus)  # fmt: skip
            wait_for_port("127.0.0.1", port, timeout=60, what=f"cube shard {shard}")
            self.shard_urls.append(f"http://127.0.0.1:{port}")
            self.shards.append(p)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.serve = procs.start("serve", [*ECTL, "serve", "--store", str(work / "store"),
                                 "--cube", ",".join(self.shard_urls), "--scenarios",
                                 "--poll-interval", str(args.poll_interval), "--cache",
                                 str(work / "run" / "cache"), "--port", str(self.port),
                                 *args.serve_arg], cpus=args.serve_cpus)  # fmt: skip
        wait_http(f"{self.url}/readyz", 120, "ectl serve", self.serve)

    def served(self) -> dict:
        return httpx.get(f"{self.url}/v1/scenarios", timeout=10).json()["scenarios"]

    def tables(self) -> list[dict]:
        return [httpx.get(f"{u}/v1/status", timeout=10).json().get("tables", {})
                for u in self.shard_urls]  # fmt: skip

    def loaded(self, names: set[str]) -> bool:
        served = self.served()
        if set(served) != names | {DEFAULT}:
            return False
        if any(served[n]["version"] != VERSION for n in names):
            return False
        for held in self.tables():
            if set(held) - {DEFAULT} != names:
                return False
            if any(held[n].get("committed") != VERSION for n in names):
                return False
        return True

    def configure(self, specs: list[Spec]) -> float:
        """Register exactly `specs`, run a cube-transfer until cube and serving hold exactly
        their tables and models, stop it; the seconds it took."""
        names = {sp.name for sp in specs}
        if self.loaded(names):
            return 0.0
        t0 = time.monotonic()
        for name in set(self.registry.list()) - names:
            self.registry.remove(name)
        for sp in specs:
            self.registry.add(Scenario(sp.name, team="bench", model=sp.model, slots=sp.slots))
        self.transfers += 1
        p = self.procs.start(f"transfer-{self.transfers}", [*ECTL, "cube", "transfer",
                             "--model-store", str(self.work / "store"), "--cube-root",
                             str(self.work / "run" / "cube"), "--scenarios",
                             str(self.registry.root), "--interval", "0.5",
                             *sum((["--shard-url", u] for u in self.shard_urls), [])],
                             cpus=self.args.client_cpus)  # fmt: skip
        deadline = time.monotonic() + 300
        try:
            while not self.loaded(names):
                if p.poll() is not None:
                    raise SystemExit(f"cube transfer exited with {p.returncode}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"{sorted(names)} not loaded after 300 s: {self.served()}")
                time.sleep(0.3)
        finally:
            self.procs.stop_one(p)
        return time.monotonic() - t0


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def batch_sums(url: str) -> tuple[float, float]:
    """Serving's dynamic-batch histogram (elasticctr.metrics), summed over its labels."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    name = "elasticctr_serving_batch_samples"
    got = {"_sum": 0.0, "_count": 0.0}
    for ln in text.splitlines():
        metric = ln.split("{")[0].split()[0] if ln and not ln.startswith("#") else ""
        if metric in (name + "_sum", name + "_count"):
            got[metric[len(name) :]] += float(ln.rsplit(None, 1)[-1])
    return got["_sum"], got["_count"]


def answers(url: str, route: str, body: bytes) -> list[float]:
    r = httpx.post(url + route, content=body, headers={"Content-Type": "text/plain"}, timeout=30)
    r.raise_for_status()
    return r.json()["probabilities"]


def measure(plat: Platform, watched: dict[str, psutil.Process], requests: list[bytes],
            args) -> dict:  # fmt: skip
    """One window of closed-loop load; QPS, latency, CPU-seconds of every watched process."""
    load0 = os.getloadavg()
    b0 = batch_sums(plat.url)
    snaps: dict[str, tuple[float, dict[str, float]]] = {}

    def mark(what: str) -> None:
        snaps[what] = (time.perf_counter(), {k: cpu_seconds(p) for k, p in watched.items()})

    res = asyncio.run(run("127.0.0.1", plat.port, requests, args.concurrency, args.duration,
                          warmup=args.warmup, mark=mark))  # fmt: skip
    b1 = batch_sums(plat.url)
    (t0, c0), (t1, c1) = snaps["start"], snaps["stop"]
    cpu = {k: c1[k] - c0[k] for k in c0}
    per_k = {k: v / max(res["requests"], 1) * 1000 for k, v in cpu.items()}
    return {
        **res,
        "window_s": t1 - t0,
        "cpu_s": cpu,
        "cpu_s_per_1k": per_k,
        "serve_core_busy": cpu["serve"] / (t1 - t0),
        "mean_batch_samples": (b1[0] - b0[0]) / max(b1[1] - b0[1], 1),
        "serve_rss_mib": watched["serve"].memory_info().rss / 2**20,
        "load_before": load0[0],
        "load_after": os.getloadavg()[0],
    }


def fmt_round(i: int, cfg: str, r: dict) -> str:
    k = r["cpu_s_per_1k"]
    return (
        f"round {i:2d} {cfg}  {r['qps']:7.0f} qps  p50 {r['p50_ms']:6.2f} ms  "
        f"p99 {r['p99_ms']:6.2f} ms  err {r['errors']}  | CPU-s/1000 req: serve "
        f"{k['serve']:.3f} shards {k['shards']:.3f} client {k['client']:.3f}  | serve core "
        f"{r['serve_core_busy']:.0%}  batch {r['mean_batch_samples']:.1f}  rss "
        f"{r['serve_rss_mib']:.0f} MiB  | load {r['load_before']:.2f}->{r['load_after']:.2f}"
    )


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f} (min {min(values):.2f} - max {max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds per configuration")
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds per round")
    ap.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    ap.add_argument("--settle", type=float, default=1.0, help="idle seconds before each round")
    ap.add_argument("--concurrency", type=int, default=16, help="keep-alive connections")
    ap.add_argument("--lines-per-request", type=int, default=10)
    ap.add_argument("--lines", type=int, default=4000, help="generated lines per hour")
    ap.add_argument("--target", default=SCENARIOS[0].name, help="the scenario loaded")
    ap.add_argument("--spread", action="store_true", help="also (c): load over all four")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--serve-cpus", default="1", help="taskset list for ectl serve")
    ap.add_argument("--cube-cpus", default="0", help="taskset list for the cube shards")
    ap.add_argument("--client-cpus", default="0", help="this process (the load generator)")
    ap.add_argument("--poll-interval", type=float, default=2.0, help="ectl serve's")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `ectl serve` option")
    ap.add_argument(
        "--workdir", type=Path, help="keep data and trained versions here (reused when present)"
    )
    ap.add_argument("--json", type=Path, help="also write every round here")
    args = ap.parse_args()
    specs = {sp.name: sp for sp in SCENARIOS}
    if args.target not in specs:
        raise SystemExit(f"--target: one of {', '.join(specs)}")
    target = specs[args.target]
    cpus = os.sched_getaffinity(0)
    for opt in ("serve_cpus", "cube_cpus", "client_cpus"):
        wanted = {int(c) for c in getattr(args, opt).split(",")}
        if not wanted <= cpus:
            raise SystemExit(f"--{opt.replace('_', '-')}: cores {sorted(wanted - cpus)} absent")
    os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-scenarios-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "run").mkdir(exist_ok=True)
    print(f"machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.1f} GiB; "
          f"load average {os.getloadavg()}; work {work}", flush=True)  # fmt: skip
    for sp in SCENARIOS:
        b = build_scenario(work, sp, args.lines)
        print(f"scenario {sp.name}: {b['model']} on {b['slots']} slots, dim {b['dim']}, "
              f"{b['rows']} rows, trainer AUC {b['auc']:.3f} ({b['seconds']:.0f} s)",
              flush=True)  # fmt: skip

    route = f"/v1/scenarios/{target.name}/predict"
    one = bodies(heldout_lines(work, target), args.lines_per_request)
    reqs = {"a": [http_post(route, "127.0.0.1", b, "text/plain") for b in one]}
    reqs["b"] = reqs["a"]
    per = {sp.name: bodies(heldout_lines(work, sp), args.lines_per_request) for sp in SCENARIOS}
    reqs["c"] = [
        http_post(f"/v1/scenarios/{sp.name}/predict", "127.0.0.1", per[sp.name][i], "text/plain")
        for i in range(min(map(len, per.values())))
        for sp in SCENARIOS
    ]
    print(f"load: {args.concurrency} keep-alive connections, {args.lines_per_request} lines "
          f"per request ({len(one)} distinct bodies of {target.name}'s held-out hour), "
          f"{args.warmup:.0f} s warm-up + {args.duration:.0f} s per round", flush=True)  # fmt: skip

    procs = Procs(work / "run")
    try:
        plat = Platform(work, args, procs)
        watched = {"serve": psutil.Process(plat.serve.pid), "client": psutil.Process()}
        for i, p in enumerate(plat.shards):
            watched[f"cube-{i}"] = psutil.Process(p.pid)
        for name, p in watched.items():
            print(f"pinned: {name} pid {p.pid} cores {p.cpu_affinity()}", flush=True)
        configs = {"a": [target], "b": list(SCENARIOS), "c": list(SCENARIOS)}
        order = [c for _ in range(args.rounds) for c in ("a", "b")]
        if args.spread:
            order = [c for pair in zip(order[::2], order[1::2], strict=True)
                     for c in (*pair, "c")]  # fmt: skip
        results: dict[str, list[dict]] = {"a": [], "b": [], "c": []}
        reference = None
        check_body = one[0]
        for i, cfg in enumerate(order, 1):
            took = plat.configure(configs[cfg])
            got = answers(plat.url, route, check_body)
            if reference is None:
                reference = got
            elif float(np.max(np.abs(np.subtract(got, reference)))) > 1e-6:
                raise SystemExit(f"round {i}: {target.name}'s answers changed between rounds")
            loaded = sorted(n for n in plat.served() if n != DEFAULT)
            for k, p in watched.items():
                if k != "client" and p.children():
                    raise SystemExit(f"{k} has child processes: {p.children()}")
            time.sleep(args.settle)
            r = measure(plat, watched, reqs[cfg], args)
            r["cpu_s"]["shards"] = sum(v for k, v in r["cpu_s"].items() if k.startswith("cube"))
            r["cpu_s_per_1k"]["shards"] = r["cpu_s"]["shards"] / max(r["requests"], 1) * 1000
            r.update(config=cfg, round=i, loaded=loaded, configure_s=took)
            if sorted(n for n in plat.served() if n != DEFAULT) != loaded:
                raise SystemExit(f"round {i}: the loaded scenarios changed during the window")
            results[cfg].append(r)
            print(fmt_round(i, f"{cfg} [{','.join(loaded)}]", r), flush=True)

        names = {"a": f"one scenario loaded ({target.name}), load on it",
                 "b": f"four loaded, load on {target.name}",
                 "c": "four loaded, load spread over the four"}  # fmt: skip
        med = {}
        for cfg, rows in results.items():
            if not rows:
                continue
            print(f"\n({cfg}) {names[cfg]}: {len(rows)} rounds, median (min - max)")
            for key, label in (("qps", "QPS"), ("p50_ms", "p50 ms"), ("p99_ms", "p99 ms")):
                print(f"  {label:26s} {spread([r[key] for r in rows])}")
            for proc in ("serve", "shards", "client"):
                vals = [r["cpu_s_per_1k"][proc] for r in rows]
                print(f"  CPU-s/1000 req {proc:11s} {spread(vals)}")
            print(f"  serve core busy            {spread([r['serve_core_busy'] for r in rows])}")
            print(f"  errors                     {sum(r['errors'] for r in rows)}")
            med[cfg] = {k: statistics.median(r[k] for r in rows) for k in ("qps", "p99_ms")}
        pairs = list(zip(results["a"], results["b"], strict=True))
        print("\nper adjacent pair b/a: qps " + " ".join(f"{b['qps'] / a['qps']:.2f}"
              for a, b in pairs) + "; p99 " + " ".join(f"{b['p99_ms'] / a['p99_ms']:.2f}"
              for a, b in pairs))  # fmt: skip
        if "c" in med:
            print(f"ratio: qps spread/one scenario = {med['c']['qps'] / med['a']['qps']:.2f}x")
        print(f"load average at the end: {os.getloadavg()}")
        print(f"ratio: qps four/one scenarios = {med['b']['qps'] / med['a']['qps']:.2f}x")
        print(f"ratio: p99 four/one scenarios = {med['b']['p99_ms'] / med['a']['p99_ms']:.2f}x")
        if args.json:
            doc = {"args": vars(args) | {"workdir": work}, "rounds": results}
            args.json.write_text(json.dumps(doc, indent=1, default=str))
    finally:
        procs.stop()


if __name__ == "__main__":
    main()
