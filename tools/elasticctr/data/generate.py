"""Synthetic hourly partitions in ElasticCTR format from a known logistic model.

Why synthetic data: training, serving and the benchmarks need data of any size whose
best possible AUC is known. Every sample is drawn from a fixed model, so the AUC of
the true click probabilities on a held-out hour (the *oracle AUC*) is the ceiling a
trained model can approach: a model far below it is undertrained or broken.

The model (fixed by the seed):
- per slot, a vocabulary of ``vocab`` feasigns (uint64 = splitmix64 of seed, slot,
  rank) drawn with Zipf-like popularity ``p(rank) ~ 1 / (rank + 1) ** zipf``;
- a slot is present in a sample with probability ``coverage`` (else the slot is empty);
- ``logit = bias + sum_slots w[slot][feasign] + sum_pairs <u_a[f_a], v_b[f_b]>`` with
  normal per-feasign weights and ``interactions`` random slot pairs (rank-4 factors);
  ``bias`` is calibrated so that the mean probability is ``ctr``;
- click ~ Bernoulli(sigmoid(logit)), show = 1.

Output: ``{out}/{YYYYMMDD}/{HH}/part-NNNNN`` + ``donefile`` (written last), and in
``{out}``: ``slot.conf`` and ``generator.json`` (parameters, per-hour counts, oracle AUC
and log loss on the held-out hour, which is the last generated hour).

Fast path: a file is built in blocks; every `` <feasign>:<slot>`` token is pre-rendered
once into a fixed-width byte table (NUL-padded, by array arithmetic); a block of lines
is one ``np.take`` of table rows followed by ``bytes.translate`` deleting the NULs.
Files are independent (own RNG stream), so ``workers`` processes produce identical
output to one process.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np

from elasticctr.constants import DATA_FILE_PREFIX, DONEFILE, SLOT_CONF
from elasticctr.data import storage
from elasticctr.data.config import format_slot_conf
from elasticctr.data.partitions import HOUR, partition_url
from elasticctr.errors import ValidationError
from elasticctr.versions import format_date_hour

GENERATOR_JSON = "generator.json"
BLOCK_LINES = 20_000
FACTOR_DIM = 4
_TABLE_BITS = 20
_MASK64 = (1 << 64) - 1


@dataclass
class GeneratorSpec:
    """Everything that determines the generated data (saved in generator.json)."""

    slots: list[int] = field(default_factory=lambda: list(range(27)))
    seed: int = 0
    vocab: int = 10_000
    zipf: float = 1.1
    coverage: float = 0.9
    ctr: float = 0.2
    weight_scale: float = 0.6
    interactions: int = 4
    interaction_scale: float = 0.5

    def validate(self) -> None:
        problems = []
        if not self.slots:
            problems.append("slots: at least one slot is needed")
        if len(set(self.slots)) != len(self.slots) or any(s < 0 for s in self.slots):
            problems.append(f"slots: must be distinct non-negative integers: {self.slots}")
        if self.vocab < 1:
            problems.append(f"vocab: must be >= 1, got {self.vocab}")
        if self.zipf < 0:
            problems.append(f"zipf: must be >= 0, got {self.zipf}")
        if not 0 < self.coverage <= 1:
            problems.append(f"coverage: must be in (0, 1], got {self.coverage}")
        if not 0 < self.ctr < 1:
            problems.append(f"ctr: must be in (0, 1), got {self.ctr}")
        if self.interactions < 0:
            problems.append(f"interactions: must be >= 0, got {self.interactions}")
        if problems:
            raise ValidationError("bad generator settings", problems=problems)


DEMO_VOCAB = 100
"""Feasigns per slot of the demo data (`ectl quickstart`, `ectl train --local
--synthetic-samples`). The default spec's 10,000 (5,000 in the old quickstart) leaves most
feasigns seen a handful of times in a demo's ~100k samples: one pass then ends ~0.07 below
the oracle AUC, which says nothing about the system. With 100 per slot even the rarest
feasign of 16 slots is seen ~100 times in 80k samples, so a trained model lands within
~0.02 of the oracle (docs/local.md)."""


def demo_spec(slots: list[int], seed: int = 0, vocab: int = DEMO_VOCAB) -> GeneratorSpec:
    """The demo data's model: the default spec with a vocabulary small enough that one
    pass over a demo's samples pins every weight down (DEMO_VOCAB)."""
    return GeneratorSpec(slots=list(slots), seed=seed, vocab=vocab)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """A well-mixed uint64 of each uint64 (the SplitMix64 finaliser); stable everywhere."""
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class SyntheticModel:
    """The true model: vocabularies, weights, interactions, calibrated bias."""

    def __init__(self, spec: GeneratorSpec):
        spec.validate()
        self.spec = spec
        rng = np.random.default_rng([spec.seed, 0x5EED])
        nslots, vocab = len(spec.slots), spec.vocab
        ranks = np.arange(vocab, dtype=np.float64)
        weights = 1.0 / (ranks + 1.0) ** spec.zipf
        self.cdf = np.cumsum(weights / weights.sum())
        self.cdf[-1] = 1.0
        # Sampling by table lookup: 10x faster than searchsorted on the CDF; a rank's
        # probability is off by at most 2^-20 (one table cell).
        cells = (np.arange(1 << _TABLE_BITS, dtype=np.float64) + 0.5) / (1 << _TABLE_BITS)
        self.rank_table = np.searchsorted(self.cdf, cells, side="right").astype(np.int32)
        np.minimum(self.rank_table, vocab - 1, out=self.rank_table)
        # feasign of (slot j, rank r): mixed from the seed so vocabularies differ per seed
        key = np.uint64((spec.seed * 0x2545F4914F6CDD1D) & _MASK64)
        grid = (np.arange(nslots, dtype=np.uint64)[:, None] << np.uint64(32)) | np.arange(
            vocab, dtype=np.uint64
        )[None, :]
        self.feasigns = splitmix64(grid ^ key)  # [nslots, vocab]
        scale = spec.weight_scale / math.sqrt(max(1.0, nslots * spec.coverage) / 4.0)
        self.weights = rng.normal(0.0, scale, size=(nslots, vocab)).astype(np.float32)
        pairs = []
        if nslots >= 2:
            for _ in range(spec.interactions):
                a, b = rng.choice(nslots, size=2, replace=False)
                pairs.append((int(a), int(b)))
        self.pairs = pairs
        fscale = spec.interaction_scale / math.sqrt(FACTOR_DIM)
        self.factors = [
            (
                rng.normal(0.0, fscale, size=(vocab, FACTOR_DIM)).astype(np.float32),
                rng.normal(0.0, fscale, size=(vocab, FACTOR_DIM)).astype(np.float32),
            )
            for _ in pairs
        ]
        self.bias = 0.0
        self.bias = self._calibrate(rng)
        self._table: np.ndarray | None = None
        self._rows: np.ndarray | None = None

    def _calibrate(self, rng: np.random.Generator) -> float:
        """Bias so that the mean click probability is spec.ctr (bisection on a sample)."""
        ranks, present = self.draw(rng, 20_000)
        logit = self.logit(ranks, present)
        lo, hi = -30.0, 30.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if float(np.mean(_sigmoid(logit + mid))) < self.spec.ctr:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def draw(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Feature ranks [n, slots] (Zipf-like) and presence mask [n, slots]."""
        nslots = len(self.spec.slots)
        ranks = self.rank_table[rng.integers(0, 1 << _TABLE_BITS, size=(n, nslots))]
        present = rng.random((n, nslots)) < self.spec.coverage
        return ranks, present

    def logit(self, ranks: np.ndarray, present: np.ndarray) -> np.ndarray:
        nslots = len(self.spec.slots)
        out = np.full(ranks.shape[0], self.bias, dtype=np.float64)
        for j in range(nslots):
            out += np.where(present[:, j], self.weights[j][ranks[:, j]], 0.0)
        for (a, b), (u, v) in zip(self.pairs, self.factors, strict=True):
            both = present[:, a] & present[:, b]
            dot = np.einsum("ij,ij->i", u[ranks[:, a]], v[ranks[:, b]])
            out += np.where(both, dot, 0.0)
        return out

    def probability(self, ranks: np.ndarray, present: np.ndarray) -> np.ndarray:
        return _sigmoid(self.logit(ranks, present))

    def token_table(self) -> np.ndarray:
        """Every `` <feasign>:<slot>`` token as a fixed-width row, NUL where unused.

        Rows ``j * vocab + rank``, then ``1 0``, ``1 1``, ``\\n`` and an empty row. Built
        with array arithmetic (no Python strings); the NUL bytes are deleted after
        gathering a block of rows, which is how variable-length tokens join cheaply.
        """
        if self._table is not None:
            return self._table
        slots, vocab = self.spec.slots, self.spec.vocab
        slot_texts = [f":{slot}".encode() for slot in slots]
        width = 1 + 20 + max(len(t) for t in slot_texts)
        table = np.zeros((len(slots) * vocab + 4, width), dtype=np.uint8)
        for j, slot_text in enumerate(slot_texts):
            rows = table[j * vocab : (j + 1) * vocab]
            rows[:, 0] = ord(" ")
            value = self.feasigns[j].copy()
            digits = np.zeros((vocab, 20), dtype=np.uint8)
            for col in range(19, -1, -1):
                digits[:, col] = (value % np.uint64(10)).astype(np.uint8)
                value //= np.uint64(10)
            # leading zeros become NUL (deleted later); the last digit always stays
            leading = np.cumsum(digits != 0, axis=1) == 0
            leading[:, -1] = False
            rows[:, 1:21] = np.where(leading, 0, digits + ord("0"))
            rows[:, 21 : 21 + len(slot_text)] = np.frombuffer(slot_text, dtype=np.uint8)
        base = len(slots) * vocab
        for k, text in enumerate((b"1 0", b"1 1", b"\n")):
            table[base + k, : len(text)] = np.frombuffer(text, dtype=np.uint8)
        self._table = table
        self._rows = table.view(f"V{width}").ravel()
        return table

    def render(self, ranks: np.ndarray, present: np.ndarray, clicks: np.ndarray) -> bytes:
        """ElasticCTR lines for a block of samples (show is always 1)."""
        self.token_table()
        n, nslots = ranks.shape
        base = nslots * self.spec.vocab
        rows = np.empty((n, nslots + 2), dtype=np.int64)
        rows[:, 0] = base + clicks
        np.add(ranks, np.arange(nslots, dtype=np.int64) * self.spec.vocab, out=rows[:, 1:-1])
        rows[:, 1:-1][~present] = base + 3
        rows[:, -1] = base + 2
        return np.take(self._rows, rows).tobytes().translate(None, b"\0")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -60, 60)))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney) formula; ties get average ranks."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    pos = int(labels.sum())
    neg = labels.size - pos
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg_rank = first + (counts + 1) / 2.0  # 1-based average rank of each tie group
    ranks = np.repeat(avg_rank, counts)
    rank_sum = ranks[labels[order]].sum()
    return float((rank_sum - pos * (pos + 1) / 2.0) / (pos * neg))


def log_loss(labels: np.ndarray, probs: np.ndarray) -> float:
    p = np.clip(np.asarray(probs, dtype=np.float64), 1e-12, 1 - 1e-12)
    y = np.asarray(labels, dtype=np.float64)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


# --- writing partitions -------------------------------------------------------------------

_MODEL: SyntheticModel | None = None  # this process's model (workers build their own)


@dataclass
class FileTask:
    root: str
    hour: dt.datetime
    file_index: int
    lines: int
    keep_probabilities: bool
    hdfs_ugi: str | None = None


def _file_rng(seed: int, hour: dt.datetime, file_index: int) -> np.random.Generator:
    ordinal = int(hour.timestamp()) // 3600
    return np.random.default_rng([seed, ordinal, file_index])


def _write_file(task: FileTask, progress: Callable[[int], None] | None = None):
    model = _MODEL
    assert model is not None
    rng = _file_rng(model.spec.seed, task.hour, task.file_index)
    url = storage.join(
        partition_url(task.root, task.hour), f"{DATA_FILE_PREFIX}{task.file_index:05d}"
    )
    clicks_total, prob_total = 0, 0.0
    kept_p, kept_y = [], []
    with storage.open_atomic(url, task.hdfs_ugi) as fh:
        done = 0
        while done < task.lines:
            n = min(BLOCK_LINES, task.lines - done)
            ranks, present = model.draw(rng, n)
            prob = model.probability(ranks, present)
            clicks = rng.random(n) < prob
            fh.write(model.render(ranks, present, clicks))
            clicks_total += int(clicks.sum())
            prob_total += float(prob.sum())
            if task.keep_probabilities:
                kept_p.append(prob.astype(np.float32))
                kept_y.append(clicks)
            done += n
            if progress:
                progress(n)
    probs = np.concatenate(kept_p) if kept_p else None
    labels = np.concatenate(kept_y) if kept_y else None
    return task, clicks_total, prob_total, probs, labels


def _init_worker(model: SyntheticModel) -> None:
    global _MODEL
    _MODEL = model


def _init_spawned_worker(spec: GeneratorSpec) -> None:
    # The model is a pure function of the spec: rebuilding it gives identical data.
    model = SyntheticModel(spec)
    model.token_table()
    _init_worker(model)


def split_lines(total: int, files: int) -> list[int]:
    base, extra = divmod(total, files)
    return [base + (1 if i < extra else 0) for i in range(files)]


@dataclass
class GenerateResult:
    root: str
    hours: list[str]
    lines: int
    clicks: int
    seconds: float
    oracle_auc: float
    oracle_logloss: float
    heldout: str
    summary_url: str
    setup_seconds: float = 0.0  # building the model and rendering vocabularies

    @property
    def steady_lines_per_second(self) -> float:
        """Lines/s once the model exists (what grows with the data size)."""
        busy = self.seconds - self.setup_seconds
        return self.lines / busy if busy > 0 else float("inf")

    @property
    def lines_per_second(self) -> float:
        return self.lines / self.seconds if self.seconds > 0 else float("inf")


def generate(
    root: str,
    spec: GeneratorSpec,
    *,
    start: dt.datetime,
    hours: int,
    lines_per_hour: int,
    files_per_partition: int = 1,
    workers: int = 1,
    hdfs_ugi: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> GenerateResult:
    """Write ``hours`` partitions from ``start``; the last hour is the held-out one."""
    if hours < 1 or lines_per_hour < 1 or files_per_partition < 1 or workers < 1:
        raise ValidationError(
            "hours, lines per hour, files per partition and workers must all be >= 1",
            problems=[
                f"hours={hours}",
                f"lines_per_hour={lines_per_hour}",
                f"files={files_per_partition}",
                f"workers={workers}",
            ],
        )
    began = time.perf_counter()
    model = SyntheticModel(spec)
    model.token_table()
    _init_worker(model)
    setup_seconds = time.perf_counter() - began
    hour_list = [start + HOUR * i for i in range(hours)]
    heldout = hour_list[-1]
    tasks = [
        FileTask(root, hour, i, n, hour == heldout, hdfs_ugi)
        for hour in hour_list
        for i, n in enumerate(split_lines(lines_per_hour, files_per_partition))
        if n > 0 or i == 0
    ]
    storage.makedirs(root, hdfs_ugi)
    per_hour: dict[str, dict[str, float]] = {
        format_date_hour(h): {"lines": 0, "clicks": 0, "mean_probability": 0.0} for h in hour_list
    }
    files_left = {h: sum(1 for t in tasks if t.hour == h) for h in hour_list}
    held_p, held_y = [], []

    def finished(result) -> None:
        task, clicks, prob_sum, probs, labels = result
        stats = per_hour[format_date_hour(task.hour)]
        stats["lines"] += task.lines
        stats["clicks"] += clicks
        stats["mean_probability"] += prob_sum
        if probs is not None:
            held_p.append(probs)
            held_y.append(labels)
        files_left[task.hour] -= 1
        if files_left[task.hour] == 0:
            # donefile last: the partition exists for readers only now
            storage.write_bytes(
                storage.join(partition_url(root, task.hour), DONEFILE), b"", hdfs_ugi
            )

    if workers == 1 or len(tasks) == 1:
        for task in tasks:
            finished(_write_file(task, progress))
    else:
        # spawn, not fork: storage clients (hdfs-native's Rust runtime, aiohttp loops) do
        # not survive a fork; the workers rebuild the model from the spec instead.
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            max_workers=workers,
            mp_context=ctx,
            initializer=_init_spawned_worker,
            initargs=(spec,),
        ) as pool:
            futures = [pool.submit(_write_file, t) for t in tasks]
            for fut in futures:
                result = fut.result()
                finished(result)
                if progress:
                    progress(result[0].lines)

    for stats in per_hour.values():
        if stats["lines"]:
            stats["mean_probability"] /= stats["lines"]
    probs = np.concatenate(held_p)
    labels = np.concatenate(held_y)
    oracle = auc(labels, probs)
    oracle_ll = log_loss(labels, probs)
    seconds = time.perf_counter() - began
    total_lines = lines_per_hour * hours
    total_clicks = int(sum(s["clicks"] for s in per_hour.values()))
    summary = {
        "format": "elasticctr-synthetic/1",
        "spec": asdict(spec),
        "bias": model.bias,
        "interaction_pairs": [[spec.slots[a], spec.slots[b]] for a, b in model.pairs],
        "start": format_date_hour(start),
        "hours": hours,
        "lines_per_hour": lines_per_hour,
        "files_per_partition": files_per_partition,
        "heldout": format_date_hour(heldout),
        "oracle_auc": oracle,
        "oracle_logloss": oracle_ll,
        "per_hour": per_hour,
    }
    summary_url = storage.join(root, GENERATOR_JSON)
    storage.write_text(summary_url, json.dumps(summary, indent=2) + "\n", hdfs_ugi)
    storage.write_text(storage.join(root, SLOT_CONF), format_slot_conf(spec.slots), hdfs_ugi)
    return GenerateResult(
        root=root,
        hours=[format_date_hour(h) for h in hour_list],
        lines=total_lines,
        clicks=total_clicks,
        seconds=seconds,
        oracle_auc=oracle,
        oracle_logloss=oracle_ll,
        heldout=format_date_hour(heldout),
        summary_url=summary_url,
        setup_seconds=setup_seconds,
    )


def parse_slot_spec(text: str) -> list[int]:
    """``27`` -> 0..26; ``0-9,12,20-22`` -> those ids (order kept, duplicates rejected)."""
    text = text.strip()
    if text.isdigit():
        count = int(text)
        if count < 1:
            raise ValidationError(f"slot count must be >= 1, got {text!r}")
        return list(range(count))
    slots: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValidationError(
                f"bad slot list {text!r}", hint="use a count (27) or ids/ranges (0-9,12)"
            )
        slots.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    if len(set(slots)) != len(slots):
        raise ValidationError(f"slot list {text!r} repeats a slot id")
    return slots


def spec_from_json(data: dict) -> GeneratorSpec:
    return GeneratorSpec(**data)


def model_for(spec: GeneratorSpec) -> SyntheticModel:
    """The exact model behind a generated dataset (e.g. from generator.json's spec)."""
    return SyntheticModel(spec)


__all__ = [
    "GENERATOR_JSON",
    "GenerateResult",
    "GeneratorSpec",
    "SyntheticModel",
    "DEMO_VOCAB",
    "auc",
    "demo_spec",
    "generate",
    "log_loss",
    "parse_slot_spec",
]
