"""AUC and logloss in numpy (no scikit-learn at runtime; tests compare against it)."""

from __future__ import annotations

import numpy as np


def auc(label: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC with ties averaged (Mann-Whitney U); nan when only one class is present."""
    label = np.asarray(label).reshape(-1) > 0.5
    score = np.asarray(score, dtype=np.float64).reshape(-1)
    pos = int(label.sum())
    neg = label.size - pos
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(score, kind="mergesort")
    sorted_scores = score[order]
    ranks = np.empty(score.size, dtype=np.float64)
    # average ranks over ties
    edges = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [score.size]])
    avg = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(avg, ends - starts)
    return float((ranks[label].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


TRAIN_AUC_MAX_SAMPLES = 200_000
"""train_auc is measured on at most this many of the most recent samples."""


def train_auc(labels: list, probs: list, batches: int | None = None) -> float:
    """The trainer's `train_auc`: the AUC of its predictions (made before each batch's
    update) over the last quarter of a pass's `batches` (at least one batch; default
    len(labels)). `labels`/`probs` hold one array per batch, possibly only the most
    recent ones (RecentBatches): the quarter is then cut from those. nan without batches.
    """
    quarter = max(1, (len(labels) if batches is None else batches) // 4)
    if not labels:
        return float("nan")
    return auc(np.concatenate(labels[-quarter:]), np.concatenate(probs[-quarter:]))


class RecentBatches:
    """(label, prediction) arrays of the most recent batches, at most `max_samples`
    samples (older batches dropped), and how many batches were added in all."""

    def __init__(self, max_samples: int = TRAIN_AUC_MAX_SAMPLES) -> None:
        self.max_samples = max_samples
        self.labels: list = []
        self.probs: list = []
        self.batches = 0
        self._held = 0

    def add(self, label, prob) -> None:
        label = np.asarray(label).reshape(-1) > 0.5
        prob = np.asarray(prob, dtype=np.float32).reshape(-1)
        self.labels.append(label)
        self.probs.append(prob)
        self.batches += 1
        self._held += label.size
        while self._held - self.labels[0].size >= self.max_samples:
            self._held -= self.labels.pop(0).size
            self.probs.pop(0)

    def auc(self) -> float:
        """train_auc over the last quarter of every batch added (see train_auc)."""
        return train_auc(self.labels, self.probs, self.batches)


def logloss(label: np.ndarray, prob: np.ndarray, eps: float = 1e-7) -> float:
    label = np.asarray(label, dtype=np.float64).reshape(-1)
    prob = np.clip(np.asarray(prob, dtype=np.float64).reshape(-1), eps, 1 - eps)
    if label.size == 0:
        return float("nan")
    return float(-np.mean(label * np.log(prob) + (1 - label) * np.log(1 - prob)))


class ResourceMeter:
    """This process's CPU use and peak memory between `reset()` and `read()` (stdlib
    `resource`): what a trainer logs per partition next to its samples/s."""

    def __init__(self) -> None:
        self.reset()

    @staticmethod
    def _cpu() -> float:
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def reset(self) -> None:
        import time

        self._wall, self._cpu0 = time.monotonic(), self._cpu()

    def read(self) -> dict[str, float]:
        import resource
        import time

        cpu = self._cpu() - self._cpu0
        wall = max(time.monotonic() - self._wall, 1e-9)
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        return {
            "trainer_cpu_seconds": cpu,
            "trainer_cpu_cores": cpu / wall,
            "trainer_rss_peak_mb": peak_kib / 1024.0,
        }
