"""Serving building blocks without processes: pooling, lookups, request decoding, metrics."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from elasticctr.data.parser import LineParser, parse_bytes
from elasticctr.serving.client import auc, logloss
from elasticctr.serving.model import LocalTable, Scorer, VersionInfo
from elasticctr.serving.samples import Limits, RequestError, decode, parse_checked, prepare

pytestmark = pytest.mark.fast

SLOTS = [0, 1, 5]


class _NoDense:
    def run(self, pooled):
        raise AssertionError("not used")


def _scorer(dim=3):
    info = VersionInfo.from_manifest({"slots": SLOTS, "embedding_dim": dim}, "20200101/00")
    return Scorer(info, _NoDense())


def test_pool_sums_each_slot_like_a_plain_loop():
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(40):
        feats = []
        for slot in SLOTS:
            for _ in range(int(rng.integers(0, 4))):  # 0..3 ids: empty and multi-valued
                feats.append(f"{int(rng.integers(0, 30))}:{slot}")
        lines.append("1 0 " + " ".join(feats))
    batch, _ = parse_bytes(("\n".join(lines) + "\n").encode(), SLOTS)
    keys = np.arange(0, 25, dtype=np.uint64)  # ids 25..29 are unknown -> zeros
    table = LocalTable(keys, rng.normal(size=(25, 3)).astype(np.float32))
    scorer = _scorer()
    uniq, inverse = Scorer.keys_of(batch)
    pooled = scorer.pool(batch, inverse, table.lookup(uniq))
    assert pooled.shape == (40, 3, 3)
    for i in range(40):
        sample = batch.sample(i)
        for j, slot in enumerate(SLOTS):
            want = np.zeros(3, np.float32)
            for fid in sample.get(slot, []):
                if fid < 25:
                    want += table.values[np.searchsorted(table.keys, fid)]
            np.testing.assert_allclose(pooled[i, j], want, rtol=1e-6, atol=1e-6)


def test_local_table_unknown_keys_are_zero_and_known_keys_exact():
    table = LocalTable(np.array([9, 3, 7], np.uint64), np.array([[9.0], [3.0], [7.0]], np.float32))
    got = table.lookup(np.array([3, 4, 9, 2**64 - 1], np.uint64))
    assert got[:, 0].tolist() == [3.0, 0.0, 9.0, 0.0]
    empty = LocalTable(np.zeros(0, np.uint64), np.zeros((0, 2), np.float32))
    assert empty.lookup(np.array([1], np.uint64)).tolist() == [[0.0, 0.0]]


def test_json_and_lines_decode_to_the_same_batch():
    parser = LineParser(SLOTS)
    body = json.dumps({"samples": [{"slots": {"0": [1, "2"], "5": [18446744073709551615]}},
                                   {"slots": {}}]}).encode()  # fmt: skip
    data, n = prepare(body, "application/json; charset=utf-8", parser, Limits())
    assert n == 2
    from_json = decode(body, "application/json", parser, Limits()).batch
    from_lines = decode(b"1 0 1:0 2:0 18446744073709551615:5\n1 0\n", "text/plain", parser,
                        Limits()).batch  # fmt: skip
    for j in range(len(SLOTS)):
        assert from_json.ids[j].tolist() == from_lines.ids[j].tolist()
        assert from_json.lengths[j].tolist() == from_lines.lengths[j].tolist()
    assert parse_checked(data, parser, Limits(), 2) is not None


@pytest.mark.parametrize(
    ("body", "ctype", "status", "code"),
    [
        (b"1 0 1:0\n", "text/csv", 415, "unsupported_media_type"),
        (b"1 0 1:0\n" * 3, "text/plain", 413, "too_many_samples"),
        (b"x" * 101, "text/plain", 413, "too_large"),
        (b" \n\t\n", "text/plain", 400, "empty"),
        (b'{"samples": [{"slots": {"0": [true]}}]}', "application/json", 400, "bad_feasign"),
        (b'{"samples": [{"slots": {"0": [1.5]}}]}', "application/json", 400, "bad_feasign"),
        (b'{"samples": [{"slots": {"0": [1, 2, 3]}}]}', "application/json", 413,
         "too_many_features"),
        (b'{"samples": [{"slots": {}, "click": 2}]}', "application/json", 400, "bad_json"),
    ],
)  # fmt: skip
def test_prepare_rejects(body, ctype, status, code):
    limits = Limits(max_samples=2, max_body_bytes=100, max_features=2)
    with pytest.raises(RequestError) as info:
        prepare(body, ctype, LineParser(SLOTS), limits)
    assert (info.value.status, info.value.code) == (status, code)


def test_bad_line_in_a_batch_is_found_and_attributed():
    parser = LineParser(SLOTS)
    limits = Limits(max_features=2)
    assert parse_checked(b"1 0 1:0\n1 0 1:9\n", parser, limits, 2) is None  # unknown slot
    assert parse_checked(b"1 0 1:0\n1 0 1:x\n", parser, limits, 2) is None  # malformed
    assert parse_checked(b"1 0 1:0 2:0 3:1\n", parser, limits, 1) is None  # too many feasigns
    with pytest.raises(RequestError, match="line:2: click 2 > show 1"):
        decode(b"1 0 1:0\n1 2 1:0\n", "text/plain", parser, Limits())


def test_auc_and_logloss_against_sklearn():
    from sklearn.metrics import log_loss, roc_auc_score

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 500).astype(float)
    p = np.round(rng.random(500), 2)  # ties on purpose
    assert auc(y, p) == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert logloss(y, p) == pytest.approx(log_loss(y, np.clip(p, 1e-7, 1 - 1e-7)), rel=1e-9)
    assert auc(np.ones(3), np.array([0.1, 0.2, 0.3])) is None


class _FakeVersion:
    """What the batcher needs of a ServingVersion: its parser and `predict`; records the
    size of every batch it scores."""

    def __init__(self):
        self.parser = LineParser(SLOTS)
        self.batches: list[int] = []

    async def predict(self, batch, lookup_seconds=None):
        self.batches.append(len(batch))
        await asyncio.sleep(0.02)  # a batch takes a while: others queue meanwhile
        return np.arange(len(batch), dtype=np.float32)


def test_a_lone_request_is_not_held_for_the_batch_window():
    """With --max-wait-ms set, a request alone in the queue with no batch running is run
    at once; requests that arrive together, or while a batch runs, wait for the window
    and go together."""
    from elasticctr.serving.app import Batcher, Metrics, ServeConfig

    async def main():
        batcher = Batcher(ServeConfig(store="unused", max_wait_ms=300), Metrics())
        batcher.start()
        sv = _FakeVersion()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        probs = await batcher.submit(sv, b"1 0 5:0\n", 1)
        alone = loop.time() - t0
        assert probs.tolist() == [0.0] and sv.batches == [1]
        assert alone < 0.2, alone  # not the 300 ms window
        # arriving together: one batch, after the window
        t0 = loop.time()
        results = await asyncio.gather(
            *(batcher.submit(sv, b"1 0 %d:0\n" % i, 1) for i in range(6))
        )
        assert sv.batches == [1, 6] and loop.time() - t0 >= 0.3
        assert [r.tolist() for r in results] == [[float(i)] for i in range(6)]
        # a lone request runs at once; 4 arriving while it runs wait the window, together
        t0 = loop.time()
        first = loop.create_task(batcher.submit(sv, b"1 0 5:0\n", 1))
        await asyncio.sleep(0.005)
        rest = await asyncio.gather(*(batcher.submit(sv, b"1 0 5:0\n", 1) for _ in range(4)))
        assert (await first).tolist() == [0.0] and [r.tolist() for r in rest] == [
            [0.0], [1.0], [2.0], [3.0]
        ]  # fmt: skip
        assert sv.batches == [1, 6, 1, 4] and loop.time() - t0 >= 0.3
        batcher.task.cancel()

    asyncio.run(main())
