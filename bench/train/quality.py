"""Training quality vs. the oracle: `ectl data generate` data, one pass, held-out AUC.

Generates H+1 hourly partitions with a known logistic model (`ectl data generate`), trains
the chosen zoo model with `ectl train --local` on the first H hours (one pass), then
scores the last exported version on the held-out hour from its exported files (the
way serving scores) and prints model AUC next to the oracle AUC of that hour.

  .venv/bin/python bench/train/quality.py --hours 4 --lines 500000 --model dnn

The oracle AUC is a ceiling no learner reaches from finite data; what one pass over the
same samples can reach at best: bench/train/quality_ceiling.py <work>/data.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hours", type=int, default=4, help="training hours (one more is held out)")
    ap.add_argument("--lines", type=int, default=500_000, help="samples per hour")
    ap.add_argument("--files", type=int, default=4, help="files per hour")
    ap.add_argument("--slots", default="0-25")
    ap.add_argument(
        "--vocab", type=int, default=None, help="feasigns per slot (generator default: 10000)"
    )
    ap.add_argument("--model", default="dnn")
    ap.add_argument("--pservers", type=int, default=1)
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: temp)")
    ap.add_argument("--data", type=Path, default=None, help="reuse generated data here")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model hyperparameter, e.g. --set batchSize=256 (YAML value)",
    )
    args = ap.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="ectl-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    data = args.data or work / "data"
    ectl = [sys.executable, "-m", "elasticctr.cli.main"]
    if not (data / "generator.json").exists():
        subprocess.run(
            [
                *ectl,
                "data",
                "generate",
                f"file://{data}",
                "--hours",
                str(args.hours + 1),
                "--lines",
                str(args.lines),
                "--files",
                str(args.files),
                "--slots",
                args.slots,
                "--workers",
                "2",
                *(["--vocab", str(args.vocab)] if args.vocab else []),
            ],
            check=True,
        )
    gen = json.loads((data / "generator.json").read_text())
    slots = [int(s) for s in (data / "slot.conf").read_text().split()]
    from elasticctr.data.partitions import data_files, list_partitions

    parts = list_partitions(f"file://{data}")
    train_parts, held = parts[: args.hours], parts[args.hours]
    values = {
        "global": {
            "data": {
                "path": f"file://{data}",
                "slots": slots,
                "startDateHour": train_parts[0].id,
                "endDateHour": train_parts[-1].id,
            },
            "modelStore": str(work / "store"),
        },
        "trainer": {
            "model": {
                "name": args.model,
                **{k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)},
            }
        },
    }
    (work / "values.yaml").write_text(yaml.safe_dump(values))
    t0 = time.monotonic()
    subprocess.run(
        [
            *ectl,
            "train",
            "--local",
            "-p",
            str(args.pservers),
            "-t",
            str(args.trainers),
            "-f",
            str(work / "values.yaml"),
            "--log-dir",
            str(work / "logs"),
            "-q",
        ],
        check=True,
    )
    train_seconds = time.monotonic() - t0

    from elasticctr.data.parser import iter_batches
    from elasticctr.train.export import evaluate_version

    version = work / "store" / "versions" / train_parts[-1].id
    batches = [b for f in data_files(held) for b in iter_batches(f, slots, 8192)]
    result = evaluate_version(version, batches)
    manifest = json.loads((version / "manifest.json").read_text())
    oracle = gen["oracle_auc"]  # true probabilities vs. sampled clicks of the last hour
    rate = manifest["metrics"].get("samples_per_sec_per_trainer")
    print(
        f"model {args.model} {' '.join(args.set)}: {args.hours} x {args.lines} samples, one pass, "
        f"{args.pservers} pserver(s) / {args.trainers} trainer(s), {train_seconds:.0f}s wall"
    )
    print(
        f"held-out hour {held.id}: model AUC {result['auc']:.4f} logloss "
        f"{result['logloss']:.4f}  |  oracle AUC {oracle:.4f}  |  gap "
        f"{oracle - result['auc']:.4f}"
    )
    print(f"last partition: {rate:.0f} samples/s per trainer")


if __name__ == "__main__":
    main()
