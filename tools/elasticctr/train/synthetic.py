"""In-memory synthetic CTR batches for smoke tests and benchmarks of the training path.

Not a data format: files go through `elasticctr.data.parser`. This only produces arrays
with the same fields as its `SlotBatch` (slot-major ids/lengths, show, click) straight
from a seeded logistic ground truth, so the PS path can be exercised without files.
Feasigns are full-range uint64 (most above 2**63) to catch signedness bugs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

_MIX = np.uint64(0x9E3779B97F4A7C15)


@dataclass
class Batch:
    slots: tuple[int, ...]
    ids: list[np.ndarray]  # per slot, uint64
    lengths: list[np.ndarray]  # per slot, int32 [n]
    show: np.ndarray
    click: np.ndarray

    def __len__(self) -> int:
        return int(self.click.shape[0])


def feasign(slot: int, value: np.ndarray) -> np.ndarray:
    """Deterministic full-range uint64 feasign of (slot, value)."""
    with np.errstate(over="ignore"):
        x = (np.uint64(slot) << np.uint64(40)) | value.astype(np.uint64)
        x = (x + np.uint64(1)) * _MIX
        return x ^ (x >> np.uint64(29))


class Synthetic:
    """Logistic ground truth over `vocab` values per slot; the first slot is multi-valued."""

    def __init__(self, slots: Sequence[int], vocab: int = 1000, seed: int = 7, scale: float = 0.6):
        self.slots = tuple(int(s) for s in slots)
        rng = np.random.default_rng(seed)
        self.vocab = vocab
        self.weights = rng.normal(0.0, scale, size=(len(self.slots), vocab)).astype(np.float32)
        self.bias = -1.0

    def batches(self, n: int, batch_size: int, seed: int) -> Iterator[Batch]:
        for batch, _ in self.batches_with_prob(n, batch_size, seed):
            yield batch

    def batches_with_prob(
        self, n: int, batch_size: int, seed: int
    ) -> Iterator[tuple[Batch, np.ndarray]]:
        """Batches and each sample's true click probability (for the oracle AUC)."""
        rng = np.random.default_rng(seed)
        left = n
        while left > 0:
            b = min(batch_size, left)
            left -= b
            yield self._batch(rng, b)

    def _batch(self, rng: np.random.Generator, b: int) -> tuple[Batch, np.ndarray]:
        ids, lengths = [], []
        logit = np.full(b, self.bias, dtype=np.float64)
        for j, slot in enumerate(self.slots):
            # Zipf-like popularity so some feasigns are frequent, as in real logs.
            n_ids = rng.integers(0, 4, size=b) if j == 0 else np.ones(b, dtype=np.int64)
            values = np.minimum(rng.zipf(1.3, size=int(n_ids.sum())) - 1, self.vocab - 1)
            np.add.at(logit, np.repeat(np.arange(b), n_ids), self.weights[j, values])
            ids.append(feasign(slot, values))
            lengths.append(n_ids.astype(np.int32))
        prob = 1.0 / (1.0 + np.exp(-logit))
        click = (rng.random(b) < prob).astype(np.float32)
        return Batch(self.slots, ids, lengths, np.ones(b, np.float32), click), prob
