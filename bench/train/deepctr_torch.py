"""Training throughput vs DeepCTR-Torch, same data, same features, same held-out rule,
equal threads, from exact CPU of every process on both sides.

Data: `ectl data generate` writes H hourly partitions (default 26 slots, 2 hours) from a
known logistic model once (generator.json holds its oracle AUC); every round reuses them.

Each round runs, in this order (rounds interleaved: ectl, peer, ectl-2, ectl, peer, ...;
`--rounds`, default 3):
1. ElasticCTR: its default `dnn` trains one pass with `ectl train --local -p 1 -t 1`
   (coordinator, pserver, one elastic trainer with trainer.threads Hogwild threads and
   its reader processes); held-out AUC scored from each exported version's files (the
   manifests). It reads the hours as pods do, over HTTP from `ectl fileserver`
   (`--source fileserver`, the default; the fileserver runs inside the measured tree, so
   its CPU is ElasticCTR's), or the local files (`--source local`).
2. DeepCTR-Torch (the peer), in two measured processes: the parse (the same files read
   with ElasticCTR's Python parser, files sorted, batches of --batch lines, split by the
   trainers' held-out rule elastic.heldout_mask, feasigns mapped to indices per slot,
   1..V, 0 = padding; written to an .npz), then the trainer in the separate venv
   .bench-venv/ (created from bench/train/requirements-deepctr.txt; torch never enters
   .venv): torch import, `WDL` with no wide features (its linear part is then zero) and
   one `VarLenSparseFeat` per slot (sum pooling, embedding dim 9) -> DNN 400-400-400 ReLU
   -> 1, Adam with ElasticCTR's rates (dense 0.001, embeddings 0.05), no L2, batch
   --batch, no shuffle, one epoch per hour on the same training samples in the same
   order, then its held-out AUC per hour. Torch threads = ElasticCTR's trainer.threads
   (`--threads` overrides; interop threads 1).
3. ElasticCTR with 2 trainers (`-t 2`; skip: --no-scale): the job's throughput measured.

What is measured (bench/train/treecpu.py): each command runs under a reaper process that
is the child subreaper of its tree, so the CPU (user + system) of the whole tree, every
descendant included even after its parent exited, is exact (the kernel's accounting):
- ElasticCTR: the `ectl train --local` launcher and all its descendants (coordinator,
  pservers, trainers, reader processes, export keep-alives), and the fileserver with
  its wrapper (`--source fileserver`);
- DeepCTR-Torch: the parse process plus the trainer process (torch import, loading the
  arrays, fit, predict).
Two windows:
- end-to-end: launch -> exit (ElasticCTR: start-up, training, flushes, lease
  round-trips, per-hour exports with evaluation and checkpoints, shut-down; the peer:
  parse + torch import + fit + predict), wall and CPU;
- training: ElasticCTR from the first lease (trainer log `leased task`) to the last
  hour's published version (its `held-out auc` log line), so every flush, lease
  round-trip and the exports in between are in it; the tree's CPU is read from /proc at
  both marks (polled every 0.05 s). The peer: wall and `process_time()` around `fit()`,
  summed over the hours (its predict is not in it).
Rates: trained samples (coordinator state; the peer's training arrays) / wall seconds of
the window; samples per CPU-second: samples / CPU seconds of the tree in the window. The
2-trainer job: its samples / its wall, its tree's CPU; ratio to the 1-trainer job of the
same round. Every figure is the median over the rounds with its min-max; ratios are the
medians of the per-round ratios. The 1-minute load average is printed at the start and
end of every run.

The last lines are `ratio: <what> = N.NNx`.

  .venv/bin/python bench/train/deepctr_torch.py --hours 2 --lines 250000 --rounds 3
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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from treecpu import run_tree

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


def generate(data: Path, args) -> None:
    if (data / "generator.json").exists():
        return
    cmd = [sys.executable, "-m", "elasticctr.cli.main", "data", "generate", f"file://{data}"]
    cmd += ["--hours", str(args.hours), "--lines", str(args.lines), "--files", str(args.files)]
    cmd += ["--slots", args.slots, "--vocab", str(args.vocab), "--seed", str(args.seed)]
    subprocess.run([*cmd, "--workers", "2"], check=True)


class LogWatch:
    """Checks for run_tree's marks: has a line of the role logs in a folder
    (`trainer-*.log`, read as they grow) held a string yet?"""

    def __init__(self, folder: Path, pattern: str = "trainer-*.log"):
        self.folder, self.pattern = folder, pattern
        self.offsets: dict[Path, int] = {}
        self.needles: set[str] = set()
        self.found: set[str] = set()

    def _pump(self) -> None:
        for path in self.folder.glob(self.pattern):
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets.get(path, 0))
                    data = fh.read()
            except FileNotFoundError:
                continue
            cut = data.rfind(b"\n") + 1  # whole lines only
            self.offsets[path] = self.offsets.get(path, 0) + cut
            text = data[:cut].decode(errors="replace")
            self.found |= {n for n in self.needles - self.found if n in text}

    def has(self, needle: str):
        self.needles.add(needle)

        def check() -> bool:
            self._pump()
            return needle in self.found

        return check


def train_elasticctr(
    run_dir: Path, data: Path, slots: list[int], parts, args, trainers: int
) -> dict:
    """One `ectl train --local -p 1 -t T` job, its whole process tree measured."""
    import yaml

    from elasticctr.constants import ENV_FILESERVER_TOKEN
    from elasticctr.coordinator.core import progress_from_state

    work = run_dir / f"ectl-t{trainers}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    wrap: list[str] = []
    path = f"file://{data}"
    if args.source == "fileserver":
        # the pods' path: the hours read over HTTP from `ectl fileserver` (reads protected by
        # its token, ranges streamed to the readers), started inside the measured tree so
        # its CPU is ElasticCTR's
        from elasticctr.net import free_port

        port = free_port()
        path = f"http://127.0.0.1:{port}"
        env[ENV_FILESERVER_TOKEN] = FILESERVER_TOKEN
        wrap = [sys.executable, "-c", WITH_FILESERVER, str(data), str(port), str(work / "fs.log")]
    values = {
        "global": {
            "data": {
                "path": path,
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
    logs = work / "logs"
    cmd = [*wrap, sys.executable, "-m", "elasticctr.cli.main", "train", "--local", "-p", "1"]
    cmd += ["-t", str(trainers), "-f", str(values_path), "--log-dir", str(logs), "-q"]
    cmd += ["--checkpoint-dir", str(work / "checkpoint")]
    watch = LogWatch(logs)
    marks = {
        "first_lease": watch.has("leased task"),
        "last_export": watch.has(f"{parts[-1].id}: held-out auc"),
    }
    with open(work / "ectl.out", "wb") as out:
        run = run_tree(
            cmd, marks=marks, label=_role, env=env, stdout=out, stderr=subprocess.STDOUT,
            check=False,
        )  # fmt: skip
    if run.returncode != 0:
        tail = (work / "ectl.out").read_text(errors="replace").splitlines()[-20:]
        raise SystemExit(f"ectl train failed (exit {run.returncode}):\n" + "\n".join(tail))
    missing = [m for m in marks if m not in run.marks]
    if missing:
        raise SystemExit(f"ElasticCTR: no {' / '.join(missing)} line in {logs}/trainer-*.log")
    hours = []
    for part in parts:
        manifest = json.loads((work / "store" / "versions" / part.id / "manifest.json").read_text())
        hours.append({"version": part.id, **manifest["metrics"]})
    samples = progress_from_state((logs / "coordinator.json").read_text())["samples"]
    window = run.window("first_lease", "last_export")
    result = {
        "side": f"ectl-{trainers}",
        "samples": int(samples),
        "e2e": (run.wall, run.cpu),
        "train": window,
        "load": run.load,
        "hours": hours,
        # CPU-s in the training window per process (with its children): the launcher is
        # `ectl train --local` itself plus what it reaped (roles that exited)
        "roles": {} if run.late else run.window_by("first_lease", "last_export"),
        "note": ", ".join(
            [f"marks seen after exit: {run.late}"] * bool(run.late)
            + [f"{run.killed} leftover process(es) killed"] * bool(run.killed)
        ),
    }
    _check_measured(result)
    return result


ROLES = ("trainer", "pserver", "coordinator", "fileserver")

FILESERVER_TOKEN = "bench-deepctr-token"
WITH_FILESERVER = """
import subprocess, sys
from elasticctr.net import wait_for_port
root, port, log, *cmd = sys.argv[1:]
with open(log, "ab") as out:
    fs = subprocess.Popen(
        [sys.executable, "-m", "elasticctr.cli.main", "fileserver", "--root", root,
         "--port", port, "--protect-reads"], stdout=out, stderr=subprocess.STDOUT)
try:
    wait_for_port("127.0.0.1", int(port), timeout=60, what="fileserver",
                  alive=lambda: fs.poll() is None)
    rc = subprocess.call(cmd)
finally:
    fs.terminate()
    fs.wait(30)
sys.exit(rc)
"""
"""`--source fileserver`'s wrapper: `ectl fileserver` serving the data folder, then the
training command, then the fileserver stopped (one measured tree: its CPU is counted)."""


def _role(argv: list[str]) -> str | None:
    """A job process's role from its command line (`ectl train trainer ...`)."""
    return next((role for role in ROLES if role in argv), None)


def _check_measured(res: dict) -> None:
    for what in ("e2e", "train"):
        wall, cpu = res[what]
        if not (wall > 0 and cpu > 0):
            raise SystemExit(
                f"{res['side']}: no CPU measured in the {what} window (wall {wall:.2f}s, "
                f"CPU {cpu:.2f}s): is /proc readable and prctl(PR_SET_CHILD_SUBREAPER) allowed?"
            )


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


def prepare_main(args) -> None:
    """--prepare OUT: the peer's input, parsed from --data's files (a measured process)."""
    from elasticctr.data.partitions import list_partitions

    data = args.data.resolve()
    slots = [int(x) for x in (data / "slot.conf").read_text().split()]
    prep = prepare_arrays(list_partitions(f"file://{data}"), slots, args.batch, Path(args.prepare))
    print(f"deepctr-torch input: {json.dumps(prep['layout']['vocab'])} ids per slot", flush=True)


def heldout_last(part, slots: list[int], batch_size: int) -> list:
    """The held-out batches of one hour, as prepare_arrays splits them (for the oracle)."""
    from elasticctr.data.parser import iter_batches
    from elasticctr.data.partitions import data_files
    from elasticctr.train.elastic import heldout_mask, take

    held = []
    for url in data_files(part):
        for batch in iter_batches(url, slots, batch_size):
            held.append(take(batch, heldout_mask(batch)))
    return [b for b in held if len(b)]


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
                "fit_cpu_seconds": cpu,
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
        "interop_threads": torch.get_num_interop_threads(),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


# --- driver ---------------------------------------------------------------------------------


def train_peer(run_dir: Path, data: Path, py: Path, args, threads: int) -> dict:
    """DeepCTR-Torch: the parse process, then the trainer process, both measured."""
    run_dir.mkdir(parents=True, exist_ok=True)
    arrays, out = run_dir / "arrays.npz", run_dir / "deepctr.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--prepare", str(arrays)]
    cmd += ["--data", str(data), "--batch", str(args.batch)]
    prep = run_tree(cmd, stdout=subprocess.DEVNULL)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [str(py), str(Path(__file__).resolve()), "--worker", str(arrays)]
    cmd += ["--out", str(out), "--threads", str(threads)]
    cmd += ["--batch", str(args.batch), "--seed", str(args.seed)]
    cmd += ["--dense-lr", str(args.dense_lr), "--embedding-lr", str(args.embedding_lr)]
    with open(run_dir / "deepctr.out", "wb") as log:
        fit = run_tree(cmd, env=env, cwd=run_dir, stdout=log, stderr=subprocess.STDOUT)
    arrays.unlink()
    res = json.loads(out.read_text())
    hours = res["hours"]
    result = {
        "side": "peer",
        "samples": sum(h["samples"] for h in hours),
        "e2e": (prep.wall + fit.wall, prep.cpu + fit.cpu),
        "train": (sum(h["fit_seconds"] for h in hours), sum(h["fit_cpu_seconds"] for h in hours)),
        "parse": (prep.wall, prep.cpu),
        "load": (prep.load[0], fit.load[1]),
        "hours": hours,
        "threads": res["threads"],
        "interop_threads": res["interop_threads"],
        "versions": res["versions"],
        "note": f"parse {prep.wall:.1f}s wall, {prep.cpu:.1f} CPU-s",
    }
    _check_measured(result)
    return result


def _rates(res: dict) -> dict[str, float]:
    """samples/s and samples per CPU-second of both windows."""
    out = {}
    for what in ("e2e", "train"):
        wall, cpu = res[what]
        out[f"rate_{what}"] = res["samples"] / wall
        out[f"per_cpu_{what}"] = res["samples"] / cpu
    return out


def _spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    """Median (min-max) of the rounds; the value alone for one round."""
    med = statistics.median(values)
    if len(values) < 2:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def _line(rnd: int, res: dict) -> str:
    r = _rates(res)
    (ew, ec), (tw, tc) = res["e2e"], res["train"]
    note = f"; {res['note']}" if res.get("note") else ""
    if res.get("roles"):
        roles = ", ".join(f"{_role_name(k)} {v:.1f}" for k, v in res["roles"].items())
        note += f"; training-window CPU-s: {roles}"
    return (
        f"round {rnd} {res['side']}: {res['samples']:,} samples; end-to-end {ew:.1f}s wall "
        f"{ec:.1f} CPU-s ({r['rate_e2e']:,.0f}/s, {r['per_cpu_e2e']:,.0f}/CPU-s); training "
        f"window {tw:.1f}s {tc:.1f} CPU-s ({r['rate_train']:,.0f}/s, "
        f"{r['per_cpu_train']:,.0f}/CPU-s); load average {res['load'][0]:.2f} -> "
        f"{res['load'][1]:.2f}{note}"
    )


def _role_name(key: str) -> str:
    return "launcher" if key == "rest" else key


def _roles_row(runs: list[dict]) -> str:
    keys = [*ROLES, "rest"]
    if not all(r.get("roles") for r in runs):
        return "n/a"
    return " / ".join(
        f"{_role_name(k)} {statistics.median(r['roles'].get(k, 0.0) for r in runs):.1f}"
        for k in keys
    )


def _print_table(head: tuple, rows: list[tuple]) -> None:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


def _window_rows(label: str, runs: list[dict], peers: list[dict] | None) -> list[tuple]:
    """Rate rows of both windows: ElasticCTR runs vs peer runs (same rounds)."""
    names = {
        "rate": "samples/s",
        "per_cpu": "samples per CPU-second",
    }
    what_names = {"train": "training window", "e2e": "end-to-end"}
    rows = []
    for what in ("train", "e2e"):
        for key in ("rate", "per_cpu"):
            mine = [_rates(r)[f"{key}_{what}"] for r in runs]
            theirs = [_rates(p)[f"{key}_{what}"] for p in peers] if peers else []
            ratio = [m / t for m, t in zip(mine, theirs, strict=False)]
            rows.append(
                (
                    f"{label}{names[key]}, {what_names[what]}",
                    _spread(mine),
                    _spread(theirs) if theirs else "",
                    _spread(ratio, "{:.2f}x") if ratio else "",
                )
            )
    return rows


def _report(args, parts, slots, gen, oracle_held, ectl, peer, scale, threads) -> None:
    e_threads = args.ectl_threads
    print()
    versions = peer[0]["versions"] if peer else {}
    print(
        f"{len(parts)} hours x {args.lines:,} lines, {len(slots)} slots, batch {args.batch}, "
        f"one pass, {len(ectl)} round(s)"
        + (
            f"; torch {versions['torch']}, deepctr-torch {versions['deepctr_torch']}"
            if versions
            else ""
        )
    )
    peer_threads = f"{peer[0]['threads']} (interop {peer[0]['interop_threads']})" if peer else "-"
    print(
        f"threads: ElasticCTR trainer.threads {e_threads} "
        f"({'native pipeline' if e_threads > 0 else 'Python reader'}); DeepCTR-Torch torch "
        f"threads {peer_threads}"
    )
    print(
        "CPU: exact, whole process trees (ElasticCTR: launcher, coordinator, pserver, "
        "trainer(s), readers; DeepCTR-Torch: parse + trainer process); median (min-max)"
    )
    head = ("", "ElasticCTR 1 pserver + 1 trainer", "DeepCTR-Torch", "ratio/diff")
    rows = _window_rows("", ectl, peer)
    rows.append(
        (
            "CPU seconds: training window / end-to-end",
            f"{_spread([r['train'][1] for r in ectl], '{:.1f}')} / "
            f"{_spread([r['e2e'][1] for r in ectl], '{:.1f}')}",
            f"{_spread([r['train'][1] for r in peer], '{:.1f}')} / "
            f"{_spread([r['e2e'][1] for r in peer], '{:.1f}')}"
            if peer
            else "",
            "",
        )
    )
    rows.append(
        (
            "wall seconds: training window / end-to-end",
            f"{_spread([r['train'][0] for r in ectl], '{:.1f}')} / "
            f"{_spread([r['e2e'][0] for r in ectl], '{:.1f}')}",
            f"{_spread([r['train'][0] for r in peer], '{:.1f}')} / "
            f"{_spread([r['e2e'][0] for r in peer], '{:.1f}')}"
            if peer
            else "",
            "",
        )
    )
    rows.append(("  training window CPU-s by process (median)", _roles_row(ectl), "", ""))
    if peer:
        rows.append(
            (
                "  of which the peer's parse (CPU-s)",
                "",
                _spread([p["parse"][1] for p in peer], "{:.1f}"),
                "",
            )
        )
    rows.append(
        (
            "trained samples",
            f"{ectl[0]['samples']:,}",
            f"{peer[0]['samples']:,}" if peer else "",
            "",
        )
    )
    e_auc = [r["hours"][-1]["auc"] for r in ectl]
    e_loss = [r["hours"][-1]["logloss"] for r in ectl]
    e_last = ectl[0]["hours"][-1]
    if peer:
        d_auc = [p["hours"][-1]["auc"] for p in peer]
        d_last = peer[0]["hours"][-1]
        if e_last["eval_samples"] != d_last["eval_samples"]:
            print(
                f"WARNING: held-out sizes differ: {e_last['eval_samples']} vs "
                f"{d_last['eval_samples']}"
            )
    rows.append(
        (
            f"held-out AUC, last hour ({e_last['eval_samples']:,} samples)",
            _spread(e_auc, "{:.4f}"),
            _spread(d_auc, "{:.4f}") if peer else "",
            f"{statistics.median(e_auc) - statistics.median(d_auc):+.4f}" if peer else "",
        )
    )
    rows.append(
        (
            "held-out logloss",
            _spread(e_loss, "{:.4f}"),
            _spread([p["hours"][-1]["logloss"] for p in peer], "{:.4f}") if peer else "",
            "",
        )
    )
    rows.append(
        (
            "  AUC per hour (median)",
            " / ".join(
                f"{statistics.median(r['hours'][h]['auc'] for r in ectl):.4f}"
                for h in range(len(parts))
            ),
            " / ".join(
                f"{statistics.median(p['hours'][h]['auc'] for p in peer):.4f}"
                for h in range(len(parts))
            )
            if peer
            else "",
            "",
        )
    )
    if gen is not None:
        rows.append(("oracle AUC, generator.json (whole last hour)", f"{gen:.4f}", "", ""))
    if oracle_held is not None:
        rows.append(("oracle AUC, same held-out samples", f"{oracle_held:.4f}", "", ""))
    _print_table(head, rows)
    if scale:
        print()
        head2 = ("", "ElasticCTR 1 pserver + 2 trainers", "vs 1 trainer", "ratio")
        rows2 = []
        for what, name in (("train", "training window"), ("e2e", "end-to-end")):
            for key, label in (("rate", "job samples/s"), ("per_cpu", "samples per CPU-second")):
                two = [_rates(r)[f"{key}_{what}"] for r in scale]
                one = [_rates(r)[f"{key}_{what}"] for r in ectl]
                ratio = [t / o for t, o in zip(two, one, strict=False)]
                rows2.append(
                    (
                        f"{label}, {name}",
                        _spread(two),
                        _spread(one),
                        _spread(ratio, "{:.2f}x"),
                    )
                )
        rows2.append(
            (
                "CPU seconds, training window (cores)",
                f"{_spread([r['train'][1] for r in scale], '{:.1f}')} "
                f"({_spread([r['train'][1] / r['train'][0] for r in scale], '{:.2f}')})",
                f"{_spread([r['train'][1] for r in ectl], '{:.1f}')} "
                f"({_spread([r['train'][1] / r['train'][0] for r in ectl], '{:.2f}')})",
                "",
            )
        )
        rows2.append(("  by process (median CPU-s)", _roles_row(scale), _roles_row(ectl), ""))
        _print_table(head2, rows2)
    print()

    def ratio_line(what: str, values: list[float]) -> None:
        print(f"ratio: {what} = {statistics.median(values):.2f}x")

    if peer:
        equal = (
            "at equal threads"
            if peer[0]["threads"] == e_threads
            else (f"at {e_threads} vs {peer[0]['threads']} threads")
        )
        pairs = list(zip(ectl, peer, strict=False))
        for what, name in (("e2e", "end-to-end"), ("train", "training window")):
            ratio_line(
                f"ElasticCTR vs DeepCTR-Torch samples per CPU-second ({name})",
                [_rates(e)[f"per_cpu_{what}"] / _rates(d)[f"per_cpu_{what}"] for e, d in pairs],
            )
        for what, name in (("e2e", "end-to-end"), ("train", "training window")):
            ratio_line(
                f"ElasticCTR vs DeepCTR-Torch samples/s {equal} ({name})",
                [_rates(e)[f"rate_{what}"] / _rates(d)[f"rate_{what}"] for e, d in pairs],
            )
    if scale:
        pairs = list(zip(scale, ectl, strict=False))
        ratio_line(
            "2 vs 1 trainers job samples/s",
            [_rates(t)["rate_train"] / _rates(o)["rate_train"] for t, o in pairs],
        )
        ratio_line(
            "2 vs 1 trainers job samples/s (end-to-end)",
            [_rates(t)["rate_e2e"] / _rates(o)["rate_e2e"] for t, o in pairs],
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hours", type=int, default=2, help="hourly partitions (all trained)")
    ap.add_argument("--lines", type=int, default=250_000, help="samples per hour")
    ap.add_argument("--files", type=int, default=2, help="files per hour")
    ap.add_argument("--slots", default="0-25", help="slot ids (26 slots)")
    ap.add_argument("--vocab", type=int, default=10_000, help="distinct feasigns per slot")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=512, help="batch size of both (dnn default)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (interleaved), medians")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of DeepCTR-Torch (default: --ectl-threads, at least 1)",
    )
    ap.add_argument(
        "--ectl-threads",
        type=int,
        default=2,
        help="ElasticCTR trainer.threads (0 = Python reader; default: the chart's 2)",
    )
    ap.add_argument("--no-scale", action="store_true", help="skip the 2-trainer ElasticCTR run")
    ap.add_argument(
        "--source",
        choices=("fileserver", "local"),
        default="fileserver",
        help="where ElasticCTR reads the hours: `ectl fileserver` over HTTP, as pods do "
        "(default; its CPU counted as ElasticCTR's), or the local files",
    )
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
    ap.add_argument("--prepare", help=argparse.SUPPRESS)  # internal: write the arrays .npz
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.prepare:
        prepare_main(args)
        return
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")

    from elasticctr.data.partitions import list_partitions

    threads = args.threads if args.threads is not None else max(1, args.ectl_threads)
    py = None if args.ectl_only else bench_python(args.venv.resolve())
    # Absolute paths: the values file, the logs and the data are read by other processes.
    work = (args.work or Path(tempfile.mkdtemp(prefix="ectl-deepctr-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    data = (args.data or work / "data").resolve()
    generate(data, args)
    gen = json.loads((data / "generator.json").read_text())
    slots = [int(s) for s in (data / "slot.conf").read_text().split()]
    parts = list_partitions(f"file://{data}")
    print(f"data: {data} ({len(parts)} hours, {len(slots)} slots); work: {work}", flush=True)
    print(
        f"threads: ElasticCTR trainer.threads {args.ectl_threads}, DeepCTR-Torch torch "
        f"threads {threads}; {args.rounds} round(s); ElasticCTR reads the hours from "
        + ("`ectl fileserver` over HTTP" if args.source == "fileserver" else "local files"),
        flush=True,
    )

    ectl, peer, scale = [], [], []
    for rnd in range(1, args.rounds + 1):
        run_dir = work / f"round-{rnd}"
        load0 = os.getloadavg()[0]
        ectl.append(train_elasticctr(run_dir, data, slots, parts, args, 1))
        print(_line(rnd, ectl[-1]), flush=True)
        if not args.ectl_only:
            peer.append(train_peer(run_dir / "deepctr", data, py, args, threads))
            print(_line(rnd, peer[-1]), flush=True)
        if not args.no_scale:
            scale.append(train_elasticctr(run_dir, data, slots, parts, args, 2))
            print(_line(rnd, scale[-1]), flush=True)
        print(f"round {rnd}: load average {load0:.2f} -> {os.getloadavg()[0]:.2f}", flush=True)

    oracle_held = None
    if not args.ectl_only:
        oracle_held = oracle_on(heldout_last(parts[-1], slots, args.batch), gen, slots)
    _report(args, parts, slots, gen["oracle_auc"], oracle_held, ectl, peer, scale, threads)


if __name__ == "__main__":
    main()
