"""Traffic figures of the console's cards: predictions per second and p99 latency per
scenario from serving's `elasticctr_serving_predict_seconds` histogram (every ready
replica's /metrics summed), between two reads."""

from __future__ import annotations

import threading
import time
from typing import Any

PREDICT_SECONDS = "elasticctr_serving_predict_seconds"
"""Serving's predict latency histogram per scenario (elasticctr.metrics)."""


class Traffic:
    """Predictions per second and p99 latency per scenario, from serving's counters between
    two reads (every replica's /metrics summed); None until a second read."""

    def __init__(self):
        self._last: tuple[float, dict[str, dict[float, float]]] | None = None
        self._lock = threading.Lock()

    def update(self, texts: list[str], now: float | None = None) -> dict[str, dict[str, Any]]:
        now = time.monotonic() if now is None else now
        buckets = histogram_buckets(texts)
        with self._lock:
            last, self._last = self._last, (now, buckets)
        if last is None or now <= last[0]:
            return {}
        t0, before = last
        out = {}
        for name, cum in buckets.items():
            prev = before.get(name, {})
            delta = {le: n - prev.get(le, 0.0) for le, n in cum.items()}
            count = delta.get(float("inf"), 0.0)
            out[name] = {
                "qps": count / (now - t0),
                "p99_ms": None if count <= 0 else quantile(delta, 0.99) * 1000,
            }
        return out


def histogram_buckets(texts: list[str]) -> dict[str, dict[float, float]]:
    """scenario -> {bucket upper bound: cumulative count} of PREDICT_SECONDS, summed."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[float, float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name != PREDICT_SECONDS:
                continue
            for s in family.samples:
                if s.name.endswith("_bucket"):
                    per = out.setdefault(s.labels.get("scenario", ""), {})
                    le = float(s.labels["le"])
                    per[le] = per.get(le, 0.0) + s.value
    return out


def quantile(cumulative: dict[float, float], q: float) -> float:
    """The q-quantile of a cumulative histogram, linear within its bucket (as PromQL's
    histogram_quantile); the largest finite bound when it falls in the +Inf bucket."""
    bounds = sorted(cumulative)
    total = cumulative[bounds[-1]]
    rank = q * total
    lower, below = 0.0, 0.0
    for le in bounds:
        n = cumulative[le]
        if n >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * ((rank - below) / (n - below) if n > below else 1.0)
        lower, below = le, n
    return lower
