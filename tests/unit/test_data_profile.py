"""`ectl data profile`: exact and sketched statistics, recommendations, bad-line report."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.conftest import shared_path
from typer.testing import CliRunner

from elasticctr.cli.main import _register, app
from elasticctr.data.profile import HyperLogLog, next_prime, profile, resolve_files
from elasticctr.errors import EctlError

pytestmark = pytest.mark.fast

TEXT = (
    "1 1 10:0 20:1 30:2 31:2\n"
    "1 0 10:0 21:1 99:4\n"
    "2 1 11:0 20:1\n"
    "bad line here\n"
    "1 0 10:0 20:1 7:3\n"
    "\n"
)


@pytest.fixture(scope="module", autouse=True)
def registered():
    _register()


def test_exact_statistics(tmp_path):
    path = tmp_path / "part-00000"
    path.write_text(TEXT)
    prof = profile([str(path)])
    report = prof.to_dict(top_k=2, min_coverage=0.3)
    assert report["samples"] == 4 and report["lines"] == 6 and report["blank_lines"] == 1
    assert report["shows"] == 5 and report["clicks"] == 2 and report["ctr"] == 0.4
    assert report["malformed"]["lines"] == 1
    assert report["malformed"]["examples"] == [
        f"{path}:4: show is not a non-negative integer: 'bad'"
    ]
    slots = {row["slot"]: row for row in report["slots"]}
    assert set(slots) == {0, 1, 2, 3, 4}
    assert slots[0]["coverage"] == 1.0 and slots[0]["cardinality"] == 2
    assert slots[0]["top"][0] == {"feasign": 10, "count": 3, "ctr": 1 / 3}
    assert slots[2]["values_per_line"] == 2.0 and slots[2]["coverage"] == 0.25
    assert slots[2]["ctr_when_present"] == 1.0
    rec = report["recommendation"]
    # slot 2/3/4 appear in 1 of 4 samples (< 30%)
    assert rec["slots"] == [0, 1]
    assert set(rec["dropped"]) == {"2", "3", "4"}
    assert rec["distinct_feasigns"] == 2 + 2
    assert rec["sparse_dim"] == next_prime(1000)


def test_constant_slot_is_not_recommended(tmp_path):
    path = tmp_path / "f"
    path.write_text("".join(f"1 0 5:0 {i}:1\n" for i in range(20)))
    rec = profile([str(path)]).recommend()
    assert rec["slots"] == [1] and "single feasign" in rec["dropped"]["0"]


def test_sketch_beyond_exact_limit_and_hll_accuracy(tmp_path):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 2**63, size=30_000, dtype=np.uint64)
    heavy = 123456789
    lines = [f"1 0 {heavy}:0 {i}:0" for i in ids.tolist()]
    path = tmp_path / "f"
    path.write_text("\n".join(lines) + "\n")
    prof = profile([str(path)], exact_limit=5_000, block_bytes=50_000)
    slot = prof.slots[0]
    assert not slot.exact
    assert abs(slot.cardinality - 30_001) / 30_001 < 0.05
    assert slot.top(1)[0] == {"feasign": heavy, "count": 30_000, "ctr": 0.0}
    exact = profile([str(path)])
    assert exact.slots[0].exact and exact.slots[0].cardinality == len(set(ids.tolist()) | {heavy})
    small = HyperLogLog()
    small.add(np.arange(50, dtype=np.uint64))
    assert abs(small.estimate() - 50) < 3


def test_max_lines_and_file_resolution(tmp_path):
    for hour in ("00", "01"):
        folder = tmp_path / "20200401" / hour
        folder.mkdir(parents=True)
        (folder / "part-00000").write_text("1 0 1:0\n" * 10)
        (folder / "donefile").write_text("")
    (tmp_path / "20200401" / "02").mkdir()
    (tmp_path / "20200401" / "02" / "part-00000").write_text("1 0 1:0\n")  # not ready
    files = resolve_files(str(tmp_path))
    assert len(files) == 2
    assert resolve_files(str(tmp_path / "20200401" / "02")) == [
        str(tmp_path / "20200401" / "02" / "part-00000")
    ]
    prof = profile(files, max_lines=15, block_bytes=7)
    assert prof.stats.lines == 15 and prof.truncated
    with pytest.raises(EctlError, match="no data files"):
        resolve_files(str(tmp_path / "20200401"))
    with pytest.raises(EctlError, match="not found"):
        resolve_files(str(tmp_path / "nothing"))


def test_cli_profile_real_demo_file(tmp_path):
    path = shared_path("data", "elasticctr", "serving_demo_data.txt")
    out = tmp_path / "slot.conf"
    result = CliRunner().invoke(
        app, ["data", "profile", str(path), "-o", "json", "--write-slot-conf", str(out)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["samples"] == 100 and report["clicks"] == 22
    assert len(report["slots"]) == 27
    assert out.read_text().split() == [str(s) for s in report["recommendation"]["slots"]]
    table = CliRunner().invoke(app, ["data", "profile", str(path)])
    assert table.exit_code == 0 and "recommended slot.conf" in table.output
    assert "SPARSE_DIM" in table.output
