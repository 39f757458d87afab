"""Elastic training under failures: held-out AUC next to undisturbed runs, recovery times.

Runs `ElasticJob` (coordinator + 1 pserver + 2 elastic trainers) on two generated hours,
`--runs` times per scenario, and prints one row per run and a summary per scenario:

- undisturbed
- kill-trainer: trainer 1 SIGKILLed once 5 tasks are done (recovery = until the task it
  held is done by trainer 0: lease expiry plus one task)
- kill-coordinator: the coordinator SIGKILLed once 5 tasks are done (recovery = until the
  restarted coordinator records the next task)
- kill-pserver: pserver 0 SIGKILLed while hour 01 trains, after hour 00's checkpoint
  (recovery = until the restarted job, having loaded the checkpoint, finishes a task)

AUC is of the last hour's exported version, scored on its held-out samples.

  .venv/bin/python bench/train/elastic_recovery.py --runs 2
  .venv/bin/python bench/train/elastic_recovery.py --runs 3 --model '{"name": "dnn"}'
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from elasticctr.local.training import ElasticJob
from elasticctr.versions import verify_version

HOURS = ("20200401/00", "20200401/01")
SCENARIOS = ("undisturbed", "kill-trainer", "kill-coordinator", "kill-pserver")


def _wait(cond, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit("timed out")


def _progress(job: ElasticJob) -> dict | None:
    try:
        return job.client().progress()
    except Exception:  # noqa: BLE001 - the coordinator is restarting
        return None


def _disturb(job: ElasticJob, scenario: str) -> dict:
    """Inject the failure; return what is needed to time the recovery."""
    client = job.client()
    if scenario == "kill-pserver":

        def second_hour_started():
            parts = client.progress()["partitions"]
            return len(parts) == 2 and parts[0]["exported"] and parts[1]["done"] >= 3

        _wait(second_hour_started)
        job.kill("pserver-0", signal.SIGKILL)
        return {"killed_at": time.monotonic()}
    _wait(lambda: client.progress()["tasks_done"] >= 5)
    if scenario == "kill-trainer":
        # Freeze trainer 1 until the coordinator says it holds a lease, then kill it.
        for _ in range(400):
            job.kill("trainer-1", signal.SIGSTOP)
            held = client.progress()["trainers"].get("1", {}).get("leased", [])
            if held:
                break
            job.sup.kill("trainer-1", signal.SIGCONT)
            time.sleep(0.02)
        job.kill("trainer-1", signal.SIGKILL)
        return {"killed_at": time.monotonic(), "held": held}
    done = client.progress()["tasks_done"]
    job.kill("coordinator", signal.SIGKILL)
    return {"killed_at": time.monotonic(), "done": done}


def _watch_recovery(job: ElasticJob, scenario: str, info: dict):
    """An on_tick for ElasticJob.wait: sets info["recovered_at"] when the job made
    progress again after the kill (the task held by a killed trainer done elsewhere; a
    task recorded by the restarted coordinator; a task done by the restarted job)."""

    def tick() -> None:
        if "recovered_at" in info:
            return
        if scenario == "kill-pserver":
            restart = job.restarts[0] if job.restarts else {}
            if "resumed_at" in restart:
                info["recovered_at"] = restart["resumed_at"]
            return
        progress = _progress(job)
        if progress is None:
            return
        if scenario == "kill-trainer":
            state = json.loads((job.log_dir / "coordinator.json").read_text())["done"]
            if info["held"] and all(t in state for t in info["held"]):
                info["recovered_at"] = time.monotonic()
        elif progress["tasks_done"] > info["done"]:
            info["recovered_at"] = time.monotonic()

    return tick


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--lines", type=int, default=200_000, help="lines per hour")
    ap.add_argument("--model", default='{"name": "lr", "batchSize": 512}')
    ap.add_argument("--lease-seconds", type=float, default=4.0)
    ap.add_argument("--task-mb", type=float, default=0.25)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = ap.parse_args()
    model = json.loads(args.model)
    root = Path(tempfile.mkdtemp(prefix="elastic-bench-"))
    data = root / "data"
    subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "data", "generate", f"file://{data}",
         "--hours", "2", "--lines", str(args.lines), "--files", "2", "--slots", "0-7",
         "--seed", "3"],
        check=True, capture_output=True,
    )  # fmt: skip
    rows = []
    for scenario in args.scenarios.split(","):
        for i in range(args.runs):
            name = f"{scenario}-{i}"
            values = root / f"{name}.yaml"
            values.write_text(
                yaml.safe_dump(
                    {
                        "global": {
                            "data": {
                                "path": f"file://{data}",
                                "slots": list(range(8)),
                                "startDateHour": HOURS[0],
                                "endDateHour": HOURS[-1],
                            },
                            "modelStore": f"file://{root / name}",
                        },
                        "trainer": {"model": model},
                    }
                )
            )
            t0 = time.monotonic()
            job = ElasticJob(
                values, root / f"{name}-logs", lease_seconds=args.lease_seconds,
                task_mb=args.task_mb,
            )  # fmt: skip
            info: dict = {}
            with job:
                tick = None
                if scenario != "undisturbed":
                    info = _disturb(job, scenario)
                    tick = _watch_recovery(job, scenario, info)
                job.wait(900, on_tick=tick)
                progress = job.client().progress()
            recovery = info["recovered_at"] - info["killed_at"] if "recovered_at" in info else None
            manifest = verify_version(root / name / "versions" / HOURS[-1])
            row = {
                "scenario": scenario,
                "auc": round(manifest["metrics"]["auc"], 4),
                "job_s": round(time.monotonic() - t0, 1),
                "recovery_s": None if recovery is None else round(recovery, 1),
                "retried": progress["tasks_retried"],
                "restarts": len(job.restarts),
                "samples": progress["samples"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    base = [r["auc"] for r in rows if r["scenario"] == "undisturbed"]
    ref = statistics.mean(base) if base else float("nan")
    print(f"\nmodel {model}, {args.lines} lines/hour, 2 hours, 1 pserver + 2 trainers")
    print(f"{'scenario':18} {'AUC min':>8} {'AUC max':>8} {'max |Δ| vs undisturbed':>23} "
          f"{'recovery s':>11}")  # fmt: skip
    for scenario in args.scenarios.split(","):
        got = [r for r in rows if r["scenario"] == scenario]
        aucs = [r["auc"] for r in got]
        worst = max(abs(a - ref) for a in aucs)
        rec = [r["recovery_s"] for r in got if r["recovery_s"] is not None]
        rec_text = f"{min(rec):.1f}-{max(rec):.1f}" if rec else "-"
        print(f"{scenario:18} {min(aucs):8.4f} {max(aucs):8.4f} {worst:23.4f} {rec_text:>11}")
    print(f"(runs in {root})")


if __name__ == "__main__":
    main()
