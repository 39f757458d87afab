"""Profile ElasticCTR data: per-slot coverage, cardinality, top feasigns, CTR, bad lines.

Answers the questions a user has before training: which slots carry information (the
slot.conf to use), how many distinct feasigns there are (the sparse dimension and
parameter-server memory), what the click rate is, and whether the files are clean.

Cardinality is exact while a slot has at most ``exact_limit`` distinct feasigns; beyond
that the table of counts is pruned to its heaviest keys (top feasigns stay right for
heavy hitters, counts become lower bounds) and the distinct count comes from a
HyperLogLog sketch (2^14 registers, ~0.8% standard error) kept for every slot.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from elasticctr.data import partitions, storage
from elasticctr.data.generate import splitmix64
from elasticctr.data.parser import DEFAULT_BLOCK_BYTES, FileStats, scan

HLL_BITS = 14
EXACT_LIMIT = 1_000_000
TOP_K = 10


class HyperLogLog:
    """Vectorised HyperLogLog over uint64 keys (keys are re-mixed, so any ids work)."""

    def __init__(self, bits: int = HLL_BITS):
        self.bits = bits
        self.registers = np.zeros(1 << bits, dtype=np.uint8)

    def add(self, keys: np.ndarray) -> None:
        if keys.size == 0:
            return
        h = splitmix64(keys.astype(np.uint64))
        index = (h >> np.uint64(64 - self.bits)).astype(np.int64)
        rest = h & np.uint64((1 << (64 - self.bits)) - 1)
        # bit length of `rest` from the float exponent (exact enough: < 2^-50 off)
        _, exponent = np.frexp(rest.astype(np.float64))
        rank = ((64 - self.bits) - exponent + 1).astype(np.uint8)
        np.maximum.at(self.registers, index, rank)

    def merge(self, other: HyperLogLog) -> None:
        np.maximum(self.registers, other.registers, out=self.registers)

    def estimate(self) -> float:
        m = float(self.registers.size)
        alpha = 0.7213 / (1 + 1.079 / m)
        raw = alpha * m * m / float(np.sum(np.exp2(-self.registers.astype(np.float64))))
        zeros = int(np.count_nonzero(self.registers == 0))
        if raw <= 2.5 * m and zeros:
            return m * math.log(m / zeros)  # linear counting for small sets
        return raw


@dataclass
class SlotProfile:
    slot: int
    lines: int = 0  # samples in which the slot occurs
    values: int = 0  # feasign occurrences
    clicks_present: float = 0.0
    shows_present: float = 0.0
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    clicks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    exact: bool = True
    hll: HyperLogLog = field(default_factory=HyperLogLog)
    _pending: list = field(default_factory=list, repr=False)
    _pending_size: int = 0

    def add(self, feasigns: np.ndarray, clicks: np.ndarray, exact_limit: int) -> None:
        self.hll.add(feasigns)
        uniq, inverse = np.unique(feasigns, return_inverse=True)
        self._pending.append(
            (
                uniq,
                np.bincount(inverse, minlength=uniq.size).astype(np.int64),
                np.bincount(inverse, weights=clicks, minlength=uniq.size).astype(np.int64),
            )
        )
        self._pending_size += uniq.size
        # merge rarely: re-sorting the whole table per chunk would be quadratic
        if self._pending_size > max(self.keys.size, 1 << 18):
            self.flush(exact_limit)

    def flush(self, exact_limit: int = EXACT_LIMIT) -> None:
        if not self._pending:
            return
        keys = np.concatenate([self.keys] + [p[0] for p in self._pending])
        counts = np.concatenate([self.counts] + [p[1] for p in self._pending])
        clicks = np.concatenate([self.clicks] + [p[2] for p in self._pending])
        self._pending, self._pending_size = [], 0
        uniq, inverse = np.unique(keys, return_inverse=True)
        self.keys = uniq
        self.counts = np.bincount(inverse, weights=counts, minlength=uniq.size).astype(np.int64)
        self.clicks = np.bincount(inverse, weights=clicks, minlength=uniq.size).astype(np.int64)
        if self.keys.size > exact_limit:
            keep = np.sort(np.argsort(-self.counts, kind="stable")[: max(1, exact_limit // 2)])
            self.keys, self.counts, self.clicks = (
                self.keys[keep],
                self.counts[keep],
                self.clicks[keep],
            )
            self.exact = False

    @property
    def cardinality(self) -> int:
        return int(self.keys.size) if self.exact else int(round(self.hll.estimate()))

    def top(self, k: int = TOP_K) -> list[dict[str, Any]]:
        order = np.argsort(-self.counts, kind="stable")[:k]
        return [
            {
                "feasign": int(self.keys[i]),
                "count": int(self.counts[i]),
                "ctr": float(self.clicks[i] / self.counts[i]) if self.counts[i] else 0.0,
            }
            for i in order
        ]


@dataclass
class Profile:
    sources: list[str] = field(default_factory=list)
    stats: FileStats = field(default_factory=lambda: FileStats(source="total"))
    files: list[FileStats] = field(default_factory=list)
    shows: float = 0.0
    clicks: float = 0.0
    slots: dict[int, SlotProfile] = field(default_factory=dict)
    truncated: bool = False

    @property
    def ctr(self) -> float:
        return self.clicks / self.shows if self.shows else 0.0

    def recommend(self, min_coverage: float = 0.01) -> dict[str, Any]:
        """slot.conf (informative slots, in id order) and a sparse dimension."""
        samples = max(1, self.stats.samples)
        chosen, dropped = [], {}
        for slot in sorted(self.slots):
            sp = self.slots[slot]
            coverage = sp.lines / samples
            if coverage < min_coverage:
                dropped[slot] = f"coverage {coverage:.2%} < {min_coverage:.0%}"
            elif sp.cardinality < 2:
                dropped[slot] = "a single feasign carries no information"
            else:
                chosen.append(slot)
        distinct = sum(self.slots[s].cardinality for s in chosen)
        # ~5% of feasigns share a bucket with another at 20 buckets per distinct feasign
        sparse_dim = next_prime(max(1000, 20 * distinct)) if distinct else 0
        return {
            "slots": chosen,
            "dropped": {str(k): v for k, v in dropped.items()},
            "distinct_feasigns": distinct,
            "sparse_dim": sparse_dim,
            "expected_collision_share": (
                1 - math.exp(-distinct / sparse_dim) if sparse_dim else 0.0
            ),
        }

    def to_dict(self, top_k: int = TOP_K, min_coverage: float = 0.01) -> dict[str, Any]:
        samples = max(1, self.stats.samples)
        return {
            "sources": self.sources,
            "lines": self.stats.lines,
            "samples": self.stats.samples,
            "truncated": self.truncated,
            "shows": self.shows,
            "clicks": self.clicks,
            "ctr": self.ctr,
            "malformed": {
                "lines": self.stats.malformed,
                "rate": self.stats.error_rate,
                "reasons": self.stats.reasons,
                "examples": self.stats.examples,
                "per_file": {f.source: f.malformed for f in self.files if f.malformed},
            },
            "blank_lines": self.stats.blank,
            "slots": [
                {
                    "slot": sp.slot,
                    "coverage": sp.lines / samples,
                    "values_per_line": sp.values / sp.lines if sp.lines else 0.0,
                    "cardinality": sp.cardinality,
                    "cardinality_exact": sp.exact,
                    "ctr_when_present": (
                        sp.clicks_present / sp.shows_present if sp.shows_present else 0.0
                    ),
                    "top": sp.top(top_k),
                }
                for sp in (self.slots[s] for s in sorted(self.slots))
            ],
            "recommendation": self.recommend(min_coverage),
        }


def next_prime(n: int) -> int:
    def is_prime(k: int) -> bool:
        if k < 2:
            return False
        if k % 2 == 0:
            return k == 2
        r = int(math.isqrt(k))
        return all(k % d for d in range(3, r + 1, 2))

    while not is_prime(n):
        n += 1
    return n


def resolve_files(url: str, hdfs_ugi: str | None = None) -> list[str]:
    """A data file, a partition folder (its part-* files) or a dataset root (all ready
    partitions' files)."""
    fs, path = storage.url_to_fs(url, hdfs_ugi)
    try:
        is_dir = fs.isdir(path)
    except OSError:
        is_dir = False  # not there: exists() below says so, or the store's reason
    except Exception as exc:  # hdfs-native: RuntimeError(RPCError(...)), e.g. denied
        raise storage.wrap_error(url, exc) from exc
    if not is_dir:
        if not storage.exists(url, hdfs_ugi):
            from elasticctr.errors import EctlError

            raise EctlError(f"{url}: not found")
        return [url]
    files = partitions.data_files(url, hdfs_ugi)
    if files:
        return files
    found = []
    for part in partitions.list_partitions(url, hdfs_ugi=hdfs_ugi):
        found.extend(partitions.data_files(part, hdfs_ugi))
    if not found:
        from elasticctr.errors import EctlError

        raise EctlError(
            f"{url}: no data files (part-*) and no ready partitions (YYYYMMDD/HH with donefile)"
        )
    return found


def profile(
    sources: Iterable[str],
    *,
    max_lines: int | None = None,
    exact_limit: int = EXACT_LIMIT,
    hdfs_ugi: str | None = None,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    progress: Callable[[int], None] | None = None,
) -> Profile:
    """Read files (all or the first ``max_lines`` lines) and collect the profile."""
    prof = Profile()
    for url in sources:
        if max_lines is not None and prof.stats.lines >= max_lines:
            prof.truncated = True
            break
        prof.sources.append(url)
        stats = FileStats(source=url)
        with storage.open_input(url, hdfs_ugi) as fh:
            rest = b""
            while True:
                block = fh.read(block_bytes)
                if not block and not rest:
                    break
                chunk = rest + block
                if block:
                    cut = chunk.rfind(b"\n")
                    if cut < 0:
                        rest = chunk
                        continue
                    chunk, rest = chunk[: cut + 1], chunk[cut + 1 :]
                else:
                    rest = b""
                if max_lines is not None:
                    room = max_lines - prof.stats.lines - stats.lines
                    if room <= 0:
                        prof.truncated = True
                        break
                    if chunk.count(b"\n") > room:
                        cut = _nth_newline(chunk, room)
                        chunk = chunk[: cut + 1]
                        prof.truncated = True
                before = stats.lines
                _add_chunk(prof, scan(chunk, stats), exact_limit)
                if progress:
                    progress(stats.lines - before)
                if prof.truncated or not block:
                    break
        prof.files.append(stats)
        prof.stats.merge(stats)
        prof.stats.source = "total"
    for sp in prof.slots.values():
        sp.flush(exact_limit)
    return prof


def _nth_newline(chunk: bytes, n: int) -> int:
    positions = np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10)
    return int(positions[n - 1])


def _add_chunk(prof: Profile, sc, exact_limit: int) -> None:
    prof.shows += float(sc.show.sum(dtype=np.float64))
    prof.clicks += float(sc.click.sum(dtype=np.float64))
    if sc.feasigns.size == 0:
        return
    sample_click = sc.click.astype(np.int64)
    sample_show = sc.show.astype(np.float64)
    order = np.argsort(sc.slots, kind="stable")
    slots_sorted = sc.slots[order]
    uniq, first = np.unique(slots_sorted, return_index=True)
    bounds = list(first) + [slots_sorted.size]
    for j, slot in enumerate(uniq.tolist()):
        idx = order[bounds[j] : bounds[j + 1]]
        sp = prof.slots.get(slot)
        if sp is None:
            sp = prof.slots[slot] = SlotProfile(slot)
        samples = np.unique(sc.sample[idx])
        sp.lines += int(samples.size)
        sp.values += int(idx.size)
        sp.clicks_present += float(sample_click[samples].sum())
        sp.shows_present += float(sample_show[samples].sum())
        sp.add(sc.feasigns[idx], sample_click[sc.sample[idx]], exact_limit)
