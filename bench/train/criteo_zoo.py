"""Every zoo model on real Criteo rows: converted with `ectl data convert`, trained with
`ectl train --local`, scored on held-out rows from the exported version's files.

The shared sample is the first 10,001 rows of Criteo Kaggle `train.txt`
(../shared/data/criteo, CC BY-NC-SA 4.0, Criteo Labs; never committed). The first
--train rows become --passes identical hourly partitions (one pass each, i.e. epochs),
the rest is the held-out hour.

  .venv/bin/python bench/train/criteo_zoo.py --models dnn,lr,wide_deep,deepfm,dcn,xdeepfm
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO.parent / "shared" / "data" / "criteo" / "kaggle_train_first10001.tsv"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", default="dnn,lr,wide_deep,deepfm,dcn,xdeepfm")
    ap.add_argument("--train", type=int, default=8000, help="rows for training")
    ap.add_argument("--passes", type=int, default=3, help="hourly copies of the training rows")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--sparse-lr", type=float, default=None, help="override sparseLearningRate")
    args = ap.parse_args()
    if not SAMPLE.exists():
        sys.exit(f"{SAMPLE} not found (../shared/data beside the checkout)")
    work = args.work or Path(tempfile.mkdtemp(prefix="ectl-criteo-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = SAMPLE.read_text().splitlines(keepends=True)
    (work / "train.tsv").write_text("".join(rows[: args.train]))
    (work / "test.tsv").write_text("".join(rows[args.train :]))
    ectl = [sys.executable, "-m", "elasticctr.cli.main"]
    data = work / "data"
    spec = work / "features.json"
    if not spec.exists():
        hours = [f"20200401/{h:02d}" for h in range(args.passes + 1)]
        subprocess.run(
            [
                *ectl,
                "data",
                "convert",
                str(work / "train.tsv"),
                "--from",
                "criteo",
                "--out",
                str(data),
                "--hour",
                hours[0],
                "--spec-out",
                str(spec),
            ],
            check=True,
        )
        for hour in hours[1:-1]:
            subprocess.run(
                [
                    *ectl,
                    "data",
                    "convert",
                    str(work / "train.tsv"),
                    "--from",
                    "criteo",
                    "--out",
                    str(data),
                    "--hour",
                    hour,
                    "--spec-in",
                    str(spec),
                ],
                check=True,
            )
        subprocess.run(
            [
                *ectl,
                "data",
                "convert",
                str(work / "test.tsv"),
                "--from",
                "criteo",
                "--out",
                str(data),
                "--hour",
                hours[-1],
                "--spec-in",
                str(spec),
            ],
            check=True,
        )
    from elasticctr.data.parser import iter_batches
    from elasticctr.data.partitions import data_files, list_partitions
    from elasticctr.train.export import evaluate_version

    parts = list_partitions(f"file://{data}")
    train_parts, held = parts[:-1], parts[-1]
    slot_conf = data / "slot.conf"
    if slot_conf.exists():
        slots = [int(s) for s in slot_conf.read_text().split()]
    else:
        import json

        slots = json.loads(spec.read_text())["slots"]
        slots = [int(s["slot"]) if isinstance(s, dict) else int(s) for s in slots]
    test = [b for f in data_files(held) for b in iter_batches(f, slots, 4096)]
    print(
        f"criteo: {args.train} train rows x {len(train_parts)} passes, "
        f"{sum(len(b) for b in test)} held-out rows, {len(slots)} slots"
    )
    for model in args.models.split(","):
        out = work / (model if args.sparse_lr is None else f"{model}-slr{args.sparse_lr}")
        hyper = {"name": model, "batchSize": args.batch}
        if args.sparse_lr is not None:
            hyper["sparseLearningRate"] = args.sparse_lr
        values = {
            "global": {
                "data": {
                    "path": f"file://{data}",
                    "slots": slots,
                    "startDateHour": train_parts[0].id,
                    "endDateHour": train_parts[-1].id,
                },
                "modelStore": str(out / "store"),
            },
            "trainer": {"model": hyper},
        }
        out.mkdir(exist_ok=True)
        (out / "values.yaml").write_text(yaml.safe_dump(values))
        t0 = time.monotonic()
        subprocess.run(
            [
                *ectl,
                "train",
                "--local",
                "-p",
                "1",
                "-t",
                "2",
                "-f",
                str(out / "values.yaml"),
                "--log-dir",
                str(out / "logs"),
                "-q",
                "--checkpoint-dir",
                str(out / "ckpt"),
            ],
            check=True,
        )
        result = evaluate_version(out / "store" / "versions" / train_parts[-1].id, test)
        print(
            f"{out.name:10s} held-out AUC {result['auc']:.4f}  logloss {result['logloss']:.4f}"
            f"  ({time.monotonic() - t0:.0f}s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
