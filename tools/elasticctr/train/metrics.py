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
