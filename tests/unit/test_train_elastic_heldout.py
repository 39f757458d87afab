"""The elastic held-out rule depends on the samples only, not on how a file is split."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from elasticctr.train.config import load
from elasticctr.train.elastic import HOLDOUT_MOD, _read, heldout_mask, take

pytestmark = pytest.mark.fast


def _cfg(tmp_path: Path):
    values = tmp_path / "v.yaml"
    values.write_text(
        "global:\n  data:\n    path: file:///unused\n    slots: [0,1,2,3]\n"
        "trainer:\n  model: {name: dnn, batchSize: 64}\n"
    )
    return load(values)


def _clicks_and_ids(batches) -> tuple[np.ndarray, list[np.ndarray]]:
    clicks = np.concatenate([b.click for b in batches])
    ids = [np.concatenate([b.ids[j] for b in batches]) for j in range(len(batches[0].ids))]
    return clicks, ids


def test_heldout_rows_are_the_same_whatever_the_byte_ranges(tmp_path: Path) -> None:
    data = tmp_path / "data"
    subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "data", "generate", f"file://{data}",
         "--hours", "1", "--lines", "3000", "--files", "1", "--slots", "0-3", "--seed", "1"],
        check=True, capture_output=True,
    )  # fmt: skip
    cfg = _cfg(tmp_path)
    (path,) = sorted(data.rglob("part-*"))
    url, size = f"file://{path}", path.stat().st_size
    whole = [take(b, heldout_mask(b)) for b in _read(cfg, url)]
    cuts = [0, size // 3, size // 3 + 17, 2 * size // 3, size]
    split = [
        take(b, heldout_mask(b))
        for lo, hi in zip(cuts, cuts[1:], strict=False)
        for b in _read(cfg, url, lo, hi)
    ]
    n_whole = sum(len(b) for b in whole)
    assert n_whole == sum(len(b) for b in split)
    # roughly one in HOLDOUT_MOD, never none or all
    assert 3000 / HOLDOUT_MOD * 0.7 < n_whole < 3000 / HOLDOUT_MOD * 1.3
    clicks_a, ids_a = _clicks_and_ids(whole)
    clicks_b, ids_b = _clicks_and_ids(split)
    np.testing.assert_array_equal(clicks_a, clicks_b)
    for a, b in zip(ids_a, ids_b, strict=True):
        np.testing.assert_array_equal(a, b)
    # complement: trained rows + held-out rows = all rows
    trained = sum(len(take(b, ~heldout_mask(b))) for b in _read(cfg, url))
    assert trained + n_whole == 3000


def test_a_checkpoint_of_another_layout_is_refused_before_loading(tmp_path: Path) -> None:
    import json

    import pytest

    from elasticctr.errors import EctlError
    from elasticctr.train.elastic import _load_checkpoint

    cfg = _cfg(tmp_path)
    ckpt = tmp_path / "checkpoint"
    (ckpt / "ps").mkdir(parents=True)
    progress = {"version": "20200401/00", "model": "dnn", "table_dim": 9, "slots": [0, 1, 2]}
    (ckpt / "ps" / "progress.json").write_text(json.dumps(progress))

    class NoLoad:  # the pservers must never be asked to load a mismatching checkpoint
        def __getattr__(self, name):
            raise AssertionError(f"runtime.{name} used")

    with pytest.raises(EctlError, match=r"another model layout \(slots: checkpoint \[0, 1, 2\]"):
        _load_checkpoint(cfg, NoLoad(), ckpt, "20200401/00")
    with pytest.raises(EctlError, match="holds 20200401/00"):
        _load_checkpoint(cfg, NoLoad(), ckpt, "20200401/01")
    with pytest.raises(EctlError, match="no checkpoint folder"):
        _load_checkpoint(cfg, NoLoad(), None, "20200401/00")
