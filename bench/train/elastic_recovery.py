"""Elastic training: held-out AUC spread of undisturbed vs. disturbed runs, recovery times.

Runs `ElasticJob` (coordinator + 1 pserver + 2 elastic trainers) on one generated hour
N times undisturbed and N times with trainer 1 SIGKILLed mid-run, and prints each run's
held-out AUC, duration, and retried tasks, then the spread (max - min) of each group.

  .venv/bin/python bench/train/elastic_recovery.py --runs 4 --lines 60000
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from elasticctr.train.elastic import ElasticJob
from elasticctr.train.export import verify_version


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--lines", type=int, default=60000)
    ap.add_argument("--lease-seconds", type=float, default=4.0)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="elastic-bench-"))
    data = root / "data"
    subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "data", "generate", f"file://{data}",
         "--hours", "1", "--lines", str(args.lines), "--files", "2", "--slots", "0-7",
         "--seed", "3"],
        check=True, capture_output=True,
    )  # fmt: skip
    rows = []
    for mode in ("undisturbed", "kill-trainer"):
        for i in range(args.runs):
            store = root / f"{mode}-{i}"
            values = root / f"{mode}-{i}.yaml"
            values.write_text(
                yaml.safe_dump(
                    {
                        "global": {
                            "data": {
                                "path": f"file://{data}",
                                "slots": list(range(8)),
                                "startDateHour": "20200401/00",
                                "endDateHour": "20200401/00",
                            },
                            "modelStore": f"file://{store}",
                        },
                        "trainer": {"model": {"name": "dnn", "batchSize": 256}},
                    }
                )
            )
            t0 = time.monotonic()
            job = ElasticJob(
                values, root / f"{mode}-{i}-logs", lease_seconds=args.lease_seconds, task_mb=0.1
            )
            with job:
                if mode == "kill-trainer":
                    client = job.client()
                    while client.progress()["tasks_done"] < 5:
                        time.sleep(0.1)
                    job.kill("trainer-1", signal.SIGKILL)
                job.wait(600)
                progress = job.client().progress()
            manifest = verify_version(store / "versions" / "20200401" / "00")
            row = {
                "mode": mode,
                "auc": round(manifest["metrics"]["auc"], 4),
                "seconds": round(time.monotonic() - t0, 1),
                "retried": progress["tasks_retried"],
                "samples": progress["samples"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    for mode in ("undisturbed", "kill-trainer"):
        aucs = [r["auc"] for r in rows if r["mode"] == mode]
        print(
            f"{mode}: auc min {min(aucs):.4f} max {max(aucs):.4f} "
            f"spread {max(aucs) - min(aucs):.4f}"
        )
    print(f"(runs in {root})")


if __name__ == "__main__":
    main()
