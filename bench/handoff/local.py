"""Freshness hand-off on the local platform: an hour's data lands -> it is served.

The local platform (`LocalStack`: fileserver store, MLflow, 2 cube shards, cube-transfer,
serving) is set up as the chart sets it up -- cube-transfer polls the store every 30 s
(`cube.transfer.pollSeconds`), serving asks cube every 2 s and is not notified -- and one
streaming elastic job (coordinator, 1 pserver, 2 trainers) trains hours as they land. The
bench lands one generated hour at a time (its data files, then its donefile), waits until
serving serves that hour's version (GET /v1/version every 50 ms), waits a random 0-30 s
(the same seeded draws in both modes: hours land at any phase of the transfer's poll, as
real data does, instead of locked to it), then lands the next.

Two modes, interleaved round by round on fresh platforms:
- poke: the coordinator pokes cube-transfer after each export (the product's default);
- poll: no poke (what the product did before: the transfer finds the version at its poll).

Per hour, from the bench's clock (donefile written, version first served) and the
version's manifest timeline (the coordinator's data_found_at / trained_at, the export's
exported_at; same machine, same clock):
  donefile -> served, trained -> served (goal <= 15 s p50), exported -> served,
  found -> trained (the hour's training, for the "60 s plus training" goal).
Serving's own elasticctr_serving_handoff_seconds (count, sum) is printed beside.

  .venv/bin/python bench/handoff/local.py --rounds 2 --hours 4
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from elasticctr import constants as C
from elasticctr.data.generate import demo_spec, generate
from elasticctr.local.stack import LocalStack
from elasticctr.local.training import run_elastic
from elasticctr.net import wait_http_ok
from elasticctr.supervisor import Supervisor
from elasticctr.versions import MANIFEST, version_path

TRANSFER_POLL_SECONDS = 30.0  # the chart's cube.transfer.pollSeconds
START = dt.datetime(2020, 4, 1)


def _served(url: str) -> str | None:
    try:
        return httpx.get(f"{url}/v1/version", timeout=2).json().get("version")
    except (httpx.HTTPError, ValueError):
        return None


def _handoff_metrics(url: str) -> dict[str, tuple[float, float]]:
    """since -> (count, sum) of serving's elasticctr_serving_handoff_seconds."""
    out: dict[str, list[float]] = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("elasticctr_serving_handoff_seconds_") and "_bucket" not in line:
            name, value = line.rsplit(" ", 1)
            since = name.split('since="', 1)[1].split('"', 1)[0]
            slot = 0 if name.split("{", 1)[0].endswith("_count") else 1
            out.setdefault(since, [0.0, 0.0])[slot] = float(value)
    return {k: (v[0], v[1]) for k, v in out.items()}


def one_run(mode: str, hours: int, lines: int, workdir: Path, log, seed: int) -> list[dict]:
    stack = LocalStack.create(workdir, 2, fresh=True)
    ep = stack.endpoints
    staged, data = workdir / "staged", workdir / "data"
    result = generate(str(staged), demo_spec(list(range(1, 17)), seed=7), start=START,
                      hours=hours, lines_per_hour=lines)  # fmt: skip
    hour_ids = result.hours[:-1]  # the last generated hour is the held-out one
    values = stack.values_for_roles(
        {"trainer": {"model": {"name": "dnn"}},
         "global": {"data": {"path": str(data), "startDateHour": hour_ids[0],
                             "endDateHour": hour_ids[-1], "slots": list(range(1, 17))}}}
    )  # fmt: skip
    values_file = stack.write_values(values)
    env = {C.ENV_CUBE_TRANSFER_URL: ep.transfer} if mode == "poke" else {}
    rows: list[dict] = []
    with Supervisor(stack.logs, grace=10.0, echo=lambda m: None) as sup:
        for comp in stack.services(transfer_interval=TRANSFER_POLL_SECONDS, notify=False):
            sup.start(comp)
        wait_http_ok(f"{ep.mlflow}/health", timeout=300, what="mlflow")
        wait_http_ok(f"{ep.serving}/healthz", timeout=120, what="serving")
        failure: list[BaseException] = []

        def train() -> None:
            try:
                run_elastic(values_file, stack.logs / "train", 1, 2,
                            workdir / "checkpoint", env=env, timeout=3600)  # fmt: skip
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                failure.append(exc)

        trainer = threading.Thread(target=train, daemon=True)
        trainer.start()
        rng = random.Random(seed)
        for hour in hour_ids:
            time.sleep(rng.uniform(0, TRANSFER_POLL_SECONDS))
            src, dst = staged / hour, data / hour
            dst.mkdir(parents=True)
            for f in sorted(src.iterdir()):
                if f.name != C.DONEFILE:
                    shutil.copy(f, dst / f.name)
            shutil.copy(src / C.DONEFILE, dst / C.DONEFILE)  # the producer's last write
            done_at = time.time()
            while _served(ep.serving) != hour:
                if failure:
                    raise RuntimeError(f"training failed: {failure[0]}")
                if time.time() - done_at > 900:
                    raise RuntimeError(f"{hour} not served in 900 s (logs: {stack.logs})")
                time.sleep(0.05)
            served_at = time.time()
            manifest = json.loads((stack.store / version_path(hour) / MANIFEST).read_text())
            tl = manifest.get("timeline", {})
            row = {
                "mode": mode,
                "hour": hour,
                "donefile_to_served": served_at - done_at,
                "trained_to_served": served_at - tl["trained_at"],
                "exported_to_served": served_at - tl["exported_at"],
                "found_to_trained": tl["trained_at"] - tl["data_found_at"],
            }
            rows.append(row)
            log(
                f"  {mode} {hour}: donefile->served {row['donefile_to_served']:5.1f} s, "
                f"trained->served {row['trained_to_served']:5.1f} s, exported->served "
                f"{row['exported_to_served']:5.1f} s (training {row['found_to_trained']:.1f} s)"
            )
        trainer.join(600)
        metrics = _handoff_metrics(ep.serving)
        log(f"  {mode}: serving's histogram (count, sum s): {metrics}")
    return rows


def _stats(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return (
        f"median {statistics.median(values):6.1f} s  (q1 {q[0]:.1f}, q3 {q[2]:.1f}, "
        f"min {min(values):.1f}, max {max(values):.1f}, n={len(values)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="platforms per mode, interleaved")
    ap.add_argument("--hours", type=int, default=4, help="hours landed per run (>= 3)")
    ap.add_argument("--lines", type=int, default=20000, help="lines per hour")
    ap.add_argument("--modes", default="poke,poll")
    args = ap.parse_args()
    modes = args.modes.split(",")
    rows: list[dict] = []
    load: list[float] = []
    print(f"load average before: {os.getloadavg()}")
    for r in range(args.rounds):
        for mode in modes:
            print(f"round {r + 1}/{args.rounds}, {mode}:", flush=True)
            with tempfile.TemporaryDirectory(prefix="ectl-handoff-") as tmp:
                rows += one_run(mode, args.hours + 1, args.lines, Path(tmp),
                                lambda m: print(m, flush=True), seed=r)  # fmt: skip
            load.append(os.getloadavg()[0])
    print(f"\nload average (1 min) after each run: {', '.join(f'{x:.2f}' for x in load)}")
    medians: dict[tuple[str, str], float] = {}
    for mode in modes:
        mine = [row for row in rows if row["mode"] == mode]
        print(f"\n{mode} ({len(mine)} hours):")
        for key in ("donefile_to_served", "trained_to_served", "exported_to_served",
                    "found_to_trained"):  # fmt: skip
            values = [row[key] for row in mine]
            medians[(mode, key)] = statistics.median(values)
            print(f"  {key:20s} {_stats(values)}")
    if {"poke", "poll"} <= set(modes):
        for key in ("trained_to_served", "donefile_to_served"):
            ratio = medians[("poll", key)] / medians[("poke", key)]
            print(f"ratio: {key.replace('_', ' ')} median, poll/poke = {ratio:.2f}x")


if __name__ == "__main__":
    main()
