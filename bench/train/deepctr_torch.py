"""Training throughput vs DeepCTR-Torch, same data, same features, same held-out rule.

One run:
1. `ectl data generate` writes H hourly partitions (default 26 slots, 2 hours) from a
   known logistic model; generator.json holds its oracle AUC.
2. ElasticCTR's default `dnn` trains one pass with `ectl train --local -p 1 -t 1`; its
   rate (`samples_per_sec_per_trainer`) and held-out AUC (scored from the exported
   version's files) come from each version's manifest.
3. The same files are read with ElasticCTR's parser (files sorted, batches of --batch
   lines per file) and split by the trainers' held-out rule: a sample is held out when
   the hash of its features says so (elastic.heldout_mask, 1 in 10). Feasigns become
   indices per slot (1..V, 0 is padding).
4. DeepCTR-Torch's DNN trains one epoch per hour on the same training samples in the same
   order, in one process with torch threads = 1 (one trainer's share of the machine):
   `WDL` with no wide features (its linear part is then zero) and one `VarLenSparseFeat`
   per slot (sum pooling, embedding dim 9) → DNN 400-400-400 ReLU → 1, Adam with
   ElasticCTR's rates (dense 0.001, embeddings 0.05), no L2, batch --batch, no shuffle.
   It runs in the separate venv .bench-venv/ (created from
   bench/train/requirements-deepctr.txt; torch never enters .venv).
5. A table: samples/s per trainer of both and their ratio, both held-out AUCs on the
   last hour's held-out batches, the oracle AUC of generator.json (whole last hour) and of
   the true model on exactly those held-out samples.

Rates: ElasticCTR's is trained samples / time of the training pass (file reading and
parsing included, table dump and export not); DeepCTR-Torch's is trained samples / time
of `fit()` on arrays already in memory (parsing and index mapping excluded, printed
separately). On a shared machine both also get "samples per CPU-second": the rate divided
by the cores used while training (median per-second CPU of ElasticCTR's trainer plus its
pserver; CPU time of DeepCTR-Torch's `fit()`), which other load disturbs less.

With trainer.threads > 0 (default 2, the chart's) ElasticCTR trains with the native
pipeline (elasticctr.train.native), else with the Python reader; both hold out the
samples of the feature-hash rule, so DeepCTR-Torch gets exactly that split. A second
ElasticCTR run with 2 trainers gives the 1 -> 2 trainer throughput ratio and the
pserver's cores (skip: --no-scale).
The trainer's CPU includes its reader processes (the pipe commands).

  .venv/bin/python bench/train/deepctr_torch.py --hours 2 --lines 250000
  make bench-deepctr ARGS="--lines 100000"

`--ectl-only` trains ElasticCTR alone (no .bench-venv: for variants compared with an
earlier DeepCTR-Torch result on the same --data), `--set batchSize=461` overrides
trainer.model keys (docs/training.md "Why the native path's AUC was below").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REQUIREMENTS = HERE / "requirements-deepctr.txt"
DEFAULT_VENV = REPO / ".bench-venv"
EMBEDDING_DIM = 9
HIDDEN = (400, 400, 400)


# --- the benchmark venv ------------------------------------------------------------------


def bench_python(venv: Path) -> Path:
    """The venv's python, created or refreshed from REQUIREMENTS when they changed."""
    py = venv / "bin" / "python"
    stamp = venv / ".requirements.sha256"
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if py.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return py
    if not py.exists():
        base = getattr(sys, "_base_executable", sys.executable)
        print(f"creating {venv} (torch + DeepCTR-Torch, ~5.6 GB) ...", flush=True)
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True)
    stamp.write_text(want + "\n")
    return py


# --- ElasticCTR side (project .venv) -------------------------------------------------------


class CpuWatch:
    """Cores the trainer and pserver processes use while the trainer trains.

    Polls every second; a second counts as training when the trainer used more than
    BUSY cores in it (start-up waits and table dumps do not). Reported: the median cores
    of the trainer and of the pserver over those seconds.
    """

    BUSY = 0.2

    def __init__(self, marker: str):
        self.marker = marker
        self.samples: list[tuple[float, float]] = []  # (trainer, pserver) cores per second
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cpu(self) -> dict[str, float]:
        import psutil

        found = {"trainer": 0.0, "pserver": 0.0}
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info["cmdline"] or []
            if self.marker not in cmd:
                continue
            role = next((r for r in found if r in cmd), None)
            if role is None:
                continue
            try:
                times = proc.cpu_times()
                # the native pipeline's reader processes: live ones, and reaped ones
                # (children_user/children_system) so none is missed between two polls
                live = sum(sum(c.cpu_times()[:2]) for c in proc.children(recursive=True))
            except psutil.Error:
                continue
            found[role] += (
                times.user + times.system + times.children_user + times.children_system + live
            )
        return found

    def _run(self) -> None:
        last, t_last = self._cpu(), time.monotonic()
        while not self._stop.wait(1.0):
            now, t_now = self._cpu(), time.monotonic()
            dt = max(t_now - t_last, 1e-6)
            trainer = (now["trainer"] - last["trainer"]) / dt
            pserver = (now["pserver"] - last["pserver"]) / dt
            if trainer > self.BUSY:
                self.samples.append((trainer, pserver))
            last, t_last = now, t_now

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def cores(self) -> tuple[float, float]:
        if not self.samples:
            return float("nan"), float("nan")
        arr = np.array(self.samples)
        return float(np.median(arr[:, 0])), float(np.median(arr[:, 1]))


def generate(data: Path, args) -> None:
    if (data / "generator.json").exists():
        return
    cmd = [sys.executable, "-m", "elasticctr.cli.main", "data", "generate", f"file://{data}"]
    cmd += ["--hours", str(args.hours), "--lines", str(args.lines), "--files", str(args.files)]
    cmd += ["--slots", args.slots, "--vocab", str(args.vocab), "--seed", str(args.seed)]
    subprocess.run([*cmd, "--workers", "2"], check=True)


def train_elasticctr(
    work: Path, data: Path, slots: list[int], parts, args, trainers: int = 1
) -> dict:
    import yaml

    work = work / f"ectl-t{trainers}"
    work.mkdir(parents=True, exist_ok=True)
    values = {
        "global": {
            "data": {
                "path": f"file://{data}",
                "slots": slots,
                "startDateHour": parts[0].id,
                "endDateHour": parts[-1].id,
            },
            "modelStore": str(work / "store"),
        },
        "trainer": {
            "model": {"name": "dnn", "batchSize": args.batch, **_model_overrides(args.set)},
            "trainer": {"threads": args.ectl_threads},
        },
    }
    values_path = work / "values.yaml"
    values_path.write_text(yaml.safe_dump(values))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    cmd = [sys.executable, "-m", "elasticctr.cli.main", "train", "--local", "-p", "1"]
    cmd += ["-t", str(trainers), "-f", str(values_path), "--log-dir", str(work / "logs"), "-q"]
    cmd += ["--checkpoint-dir", str(work / "checkpoint")]
    t0 = time.monotonic()
    with CpuWatch(str(values_path)) as watch:
        subprocess.run(cmd, check=True, env=env)
    wall = time.monotonic() - t0
    hours = []
    for part in parts:
        manifest = json.loads((work / "store" / "versions" / part.id / "manifest.json").read_text())
        hours.append({"version": part.id, **manifest["metrics"]})
    trainer_cores, pserver_cores = watch.cores
    return {
        "hours": hours,
        "wall_seconds": wall,
        "cores": trainer_cores,
        "pserver_cores": pserver_cores,
    }


def _model_overrides(pairs: list[str]) -> dict:
    """--set KEY=VALUE (repeatable) -> trainer.model overrides (VALUE parsed as YAML)."""
    import yaml

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set expects KEY=VALUE, got {pair!r}")
        out[key] = yaml.safe_load(value)
    return out


def _index_block(batch_ids, batch_lengths, vocab: np.ndarray, maxlen: int) -> np.ndarray:
    """One slot of a batch as [n, maxlen] int32 indices into `vocab` (+1; 0 = padding)."""
    lengths = np.asarray(batch_lengths, dtype=np.int64)
    n = lengths.size
    out = np.zeros((n, maxlen), dtype=np.int32)
    if batch_ids.size:
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        row = np.repeat(np.arange(n), lengths)
        col = np.arange(batch_ids.size) - np.repeat(starts, lengths)
        out[row, col] = np.searchsorted(vocab, batch_ids).astype(np.int32) + 1
    return out


def prepare_arrays(parts, slots: list[int], batch_size: int, out: Path) -> dict:
    """The batches and held-out split, as padded index arrays for DeepCTR-Torch.

    Held out: the samples elastic.heldout_mask picks (the trainers' rule, either reader).
    """
    from elasticctr.data.parser import iter_batches
    from elasticctr.data.partitions import data_files
    from elasticctr.train.elastic import heldout_mask, take

    t0 = time.monotonic()
    per_hour = []
    for part in parts:
        train, held = [], []
        for url in data_files(part):
            for batch in iter_batches(url, slots, batch_size):
                mask = heldout_mask(batch)  # a hash of the features
                train.append(take(batch, ~mask))
                held.append(take(batch, mask))
        train = [b for b in train if len(b)]
        held = [b for b in held if len(b)]
        per_hour.append((part.id, train, held))
    everything = [b for _, train, held in per_hour for b in (*train, *held)]
    vocabs, maxlens = [], []
    for j in range(len(slots)):
        vocabs.append(np.unique(np.concatenate([b.ids[j] for b in everything])))
        maxlens.append(max(1, max(int(np.max(b.lengths[j], initial=0)) for b in everything)))
    arrays: dict[str, np.ndarray] = {}
    for h, (_version, train, held) in enumerate(per_hour):
        for kind, batches in (("train", train), ("held", held)):
            arrays[f"x_{kind}_{h}"] = np.concatenate(
                [
                    np.concatenate(
                        [
                            _index_block(b.ids[j], b.lengths[j], vocabs[j], maxlens[j])
                            for j in range(len(slots))
                        ],
                        axis=1,
                    )
                    for b in batches
                ]
            )
            arrays[f"y_{kind}_{h}"] = np.concatenate([b.click for b in batches]).astype(np.float32)
    layout = {
        "hours": [v for v, _, _ in per_hour],
        "slots": slots,
        "maxlen": maxlens,
        "vocab": [int(v.size) + 1 for v in vocabs],
    }
    np.savez(out, layout=np.array(json.dumps(layout)), **arrays)
    return {
        "layout": layout,
        "prepare_seconds": time.monotonic() - t0,
        "held_last": per_hour[-1][2],
    }


def oracle_on(held, gen: dict, slots: list[int]) -> float:
    """AUC of the generating model's true probabilities on exactly these samples."""
    from elasticctr.data.generate import model_for, spec_from_json
    from elasticctr.data.parser import SlotBatch
    from elasticctr.train.metrics import auc

    model = model_for(spec_from_json(gen["spec"]))
    batch = SlotBatch.concat(held)
    n = len(batch)
    ranks = np.zeros((n, len(slots)), dtype=np.int64)
    present = np.zeros((n, len(slots)), dtype=bool)
    for j in range(len(slots)):
        lengths = np.asarray(batch.lengths[j])
        if lengths.max(initial=0) > 1:
            raise SystemExit("generated data has one feasign per slot; found more")
        order = np.argsort(model.feasigns[j])
        pos = np.searchsorted(model.feasigns[j], batch.ids[j], sorter=order)
        present[:, j] = lengths > 0
        ranks[present[:, j], j] = order[pos]
    return auc(batch.click, model.probability(ranks, present))


# --- DeepCTR-Torch side (.bench-venv; no elasticctr import) ----------------------------------


def _stub_requests() -> None:
    """deepctr_torch asks the package index for a newer release at import; answer 404."""
    import types

    stub = types.ModuleType("requests")
    stub.get = lambda *a, **k: types.SimpleNamespace(status_code=404, text="")
    stub.codes = types.SimpleNamespace(ok=200)
    sys.modules["requests"] = stub


def worker(args) -> None:
    # This file is named like the package: keep its folder off the import path.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    _stub_requests()
    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    import deepctr_torch
    from deepctr_torch.inputs import SparseFeat, VarLenSparseFeat
    from deepctr_torch.models import WDL
    from sklearn.metrics import log_loss, roc_auc_score

    data = np.load(args.worker)
    layout = json.loads(str(data["layout"]))
    names = [f"slot_{s}" for s in layout["slots"]]
    feats = [
        VarLenSparseFeat(SparseFeat(name, vocabulary_size=v, embedding_dim=EMBEDDING_DIM), m, "sum")
        for name, v, m in zip(names, layout["vocab"], layout["maxlen"], strict=True)
    ]
    model = WDL(
        [], feats, dnn_hidden_units=HIDDEN, l2_reg_linear=0, l2_reg_embedding=0, l2_reg_dnn=0,
        seed=args.seed, device="cpu",
    )  # fmt: skip
    emb = list(model.embedding_dict.parameters())
    emb_ids = {id(p) for p in emb}
    dense = [p for p in model.parameters() if id(p) not in emb_ids]
    optim = torch.optim.Adam(
        [{"params": emb, "lr": args.embedding_lr}, {"params": dense, "lr": args.dense_lr}]
    )
    model.compile(optim, "binary_crossentropy")
    bounds = np.cumsum([0, *layout["maxlen"]])

    def columns(x: np.ndarray) -> dict:
        return {n: x[:, bounds[j] : bounds[j + 1]] for j, n in enumerate(names)}

    hours = []
    for h, version in enumerate(layout["hours"]):
        x, y = data[f"x_train_{h}"], data[f"y_train_{h}"]
        t0, c0 = time.perf_counter(), time.process_time()
        model.fit(columns(x), y, batch_size=args.batch, epochs=1, verbose=0, shuffle=False)
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        xh, yh = data[f"x_held_{h}"], data[f"y_held_{h}"]
        prob = model.predict(columns(xh), batch_size=8192).reshape(-1)
        hours.append(
            {
                "version": version,
                "samples": int(y.size),
                "fit_seconds": secs,
                "samples_per_sec": y.size / secs,
                "cores": cpu / secs,
                "auc": float(roc_auc_score(yh, prob)),
                "logloss": float(log_loss(yh, np.clip(prob, 1e-7, 1 - 1e-7))),
                "eval_samples": int(yh.size),
            }
        )
        print(f"deepctr-torch {version}: {hours[-1]}", flush=True)
    result = {
        "hours": hours,
        "versions": {"torch": torch.__version__, "deepctr_torch": deepctr_torch.__version__},
        "threads": torch.get_num_threads(),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


# --- driver ---------------------------------------------------------------------------------


def _samples(hour: dict) -> int:
    """Samples trained in an hour: DeepCTR-Torch's `samples`; an
    elastic job's manifest has the chief's share (`samples_chief`: all with 1 trainer)."""
    return hour["samples"] if "samples" in hour else hour["samples_chief"]


def _rate(hours: list[dict], rate_key: str) -> float:
    """Samples/s over all hours: total samples / total time."""
    samples = sum(_samples(h) for h in hours)
    return samples / sum(_samples(h) / h[rate_key] for h in hours)


def _scale_rows(one: dict, two: dict | None, rate_one: float) -> list[tuple]:
    """1 -> 2 trainers: throughput ratio, pserver cores, trainers one pserver can feed."""
    if two is None:
        return []
    rate_two = _rate(two["hours"], "samples_per_sec_per_trainer")
    job_one, job_two = rate_one, 2 * rate_two
    # CPU-seconds per sample of the pserver vs of one trainer (1-trainer run): one pserver
    # core serves as many trainers as its per-sample cost fits into a trainer's.
    per_trainer = one["cores"] / rate_one
    per_pserver = one["pserver_cores"] / rate_one
    feeds = per_trainer / per_pserver if per_pserver > 0 else float("inf")
    return [
        (
            "2 trainers: job samples/s (ratio to 1 trainer)",
            f"{job_two:,.0f} ({job_two / job_one:.2f}x)",
            "",
            "",
        ),
        (
            "pserver cores, 1 -> 2 trainers",
            f"{one['pserver_cores']:.2f} -> {two['pserver_cores']:.2f}",
            "",
            "",
        ),
        (
            "trainers one pserver core can feed (CPU per sample, on paper)",
            f"{feeds:.1f} (trainer {per_trainer * 1e6:.0f} us, pserver {per_pserver * 1e6:.0f} us)",
            "",
            "",
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hours", type=int, default=2, help="hourly partitions (all trained)")
    ap.add_argument("--lines", type=int, default=250_000, help="samples per hour")
    ap.add_argument("--files", type=int, default=2, help="files per hour")
    ap.add_argument("--slots", default="0-25", help="slot ids (26 slots)")
    ap.add_argument("--vocab", type=int, default=10_000, help="distinct feasigns per slot")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=512, help="batch size of both (dnn default)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of DeepCTR-Torch")
    ap.add_argument(
        "--ectl-threads",
        type=int,
        default=2,
        help="ElasticCTR trainer.threads (0 = Python reader; default: the chart's 2)",
    )
    ap.add_argument("--no-scale", action="store_true", help="skip the 2-trainer ElasticCTR run")
    ap.add_argument(
        "--ectl-only", action="store_true", help="train ElasticCTR only (no DeepCTR-Torch, no venv)"
    )
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="trainer.model override for ElasticCTR (repeatable), e.g. batchSize=461",
    )  # fmt: skip
    ap.add_argument("--dense-lr", type=float, default=0.001, help="DeepCTR-Torch Adam, dense")
    ap.add_argument("--embedding-lr", type=float, default=0.05, help="... and embeddings")
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: temp)")
    ap.add_argument("--data", type=Path, default=None, help="reuse generated data here")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="DeepCTR-Torch venv")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # internal: arrays .npz
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return

    from elasticctr.data.partitions import list_partitions

    py = None if args.ectl_only else bench_python(args.venv)
    work = args.work or Path(tempfile.mkdtemp(prefix="ectl-deepctr-"))
    work.mkdir(parents=True, exist_ok=True)
    data = args.data or work / "data"
    generate(data, args)
    gen = json.loads((data / "generator.json").read_text())
    slots = [int(s) for s in (data / "slot.conf").read_text().split()]
    parts = list_partitions(f"file://{data}")
    print(f"data: {data} ({len(parts)} hours, {len(slots)} slots); work: {work}", flush=True)

    ectl = train_elasticctr(work, data, slots, parts, args)
    print(f"elasticctr: {json.dumps(ectl['hours'])}", flush=True)
    if args.ectl_only:
        hours = ectl["hours"]
        aucs = " / ".join(f"{h['auc']:.4f}" for h in hours)
        train = " / ".join(f"{h.get('train_auc', float('nan')):.4f}" for h in hours)
        rate = _rate(hours, "samples_per_sec_per_trainer")
        print(f"elasticctr held-out AUC per hour {aucs}; train_auc {train}; {rate:,.0f} samples/s")
        return
    scale = None if args.no_scale else train_elasticctr(work, data, slots, parts, args, 2)

    prep = prepare_arrays(parts, slots, args.batch, work / "arrays.npz")
    oracle_held = oracle_on(prep["held_last"], gen, slots)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    cmd = [str(py), str(Path(__file__).resolve()), "--worker", str(work / "arrays.npz")]
    cmd += ["--out", str(work / "deepctr.json"), "--threads", str(args.threads)]
    cmd += ["--batch", str(args.batch), "--seed", str(args.seed)]
    cmd += ["--dense-lr", str(args.dense_lr), "--embedding-lr", str(args.embedding_lr)]
    subprocess.run(cmd, check=True, env=env, cwd=work)
    torch_res = json.loads((work / "deepctr.json").read_text())

    e_hours, d_hours = ectl["hours"], torch_res["hours"]
    e_rate = _rate(e_hours, "samples_per_sec_per_trainer")
    d_rate = _rate(d_hours, "samples_per_sec")
    d_cpu_rate = sum(h["samples"] for h in d_hours) / sum(
        h["cores"] * h["fit_seconds"] for h in d_hours
    )
    e_last, d_last = e_hours[-1], d_hours[-1]
    if e_last["eval_samples"] != d_last["eval_samples"]:
        print(
            f"WARNING: held-out sizes differ: {e_last['eval_samples']} vs {d_last['eval_samples']}"
        )
    rows = [
        ("samples/s per trainer", f"{e_rate:,.0f}", f"{d_rate:,.0f}", f"{e_rate / d_rate:.2f}x"),
        (
            "  per hour",
            " / ".join(f"{h['samples_per_sec_per_trainer']:,.0f}" for h in e_hours),
            " / ".join(f"{h['samples_per_sec']:,.0f}" for h in d_hours),
            "",
        ),
        (
            f"held-out AUC, last hour ({d_last['eval_samples']:,} samples)",
            f"{e_last['auc']:.4f}",
            f"{d_last['auc']:.4f}",
            f"{e_last['auc'] - d_last['auc']:+.4f}",
        ),
        ("held-out logloss", f"{e_last['logloss']:.4f}", f"{d_last['logloss']:.4f}", ""),
        (
            "  AUC per hour",
            " / ".join(f"{h['auc']:.4f}" for h in e_hours),
            " / ".join(f"{h['auc']:.4f}" for h in d_hours),
            "",
        ),
        (
            "trained samples",
            f"{sum(_samples(h) for h in e_hours):,}",
            f"{sum(h['samples'] for h in d_hours):,}",
            "",
        ),  # fmt: skip
        (
            "cores used while training (median)",
            f"{ectl['cores']:.2f} trainer + {ectl['pserver_cores']:.2f} pserver",
            f"{np.median([h['cores'] for h in d_hours]):.2f} ({torch_res['threads']} torch thread)",
            "",
        ),
        (
            "samples per CPU-second (load-robust)",
            f"{e_rate / (ectl['cores'] + ectl['pserver_cores']):,.0f} (trainer + pserver)",
            f"{d_cpu_rate:,.0f}",
            f"{e_rate / (ectl['cores'] + ectl['pserver_cores']) / d_cpu_rate:.2f}x",
        ),
        ("oracle AUC, generator.json (whole last hour)", f"{gen['oracle_auc']:.4f}", "", ""),
        *_scale_rows(ectl, scale, e_rate),
        ("oracle AUC, same held-out samples", f"{oracle_held:.4f}", "", ""),
    ]
    head = (
        "",
        f"ElasticCTR dnn, 1 pserver + 1 trainer ({args.ectl_threads} threads)",
        "DeepCTR-Torch DNN, 1 thread",
        "ratio/diff",
    )
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(4)]
    print()
    print(
        f"{len(parts)} hours x {args.lines:,} lines, {len(slots)} slots, batch {args.batch}, "
        f"one pass; torch {torch_res['versions']['torch']}, deepctr-torch "
        f"{torch_res['versions']['deepctr_torch']}"
    )
    for r in [head, *rows]:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
    print(
        f"ElasticCTR wall {ectl['wall_seconds']:.0f}s (start-up, dumps and exports included); "
        f"DeepCTR-Torch input preparation (parse + index mapping, not in its rate) "
        f"{prep['prepare_seconds']:.1f}s"
    )


if __name__ == "__main__":
    main()
