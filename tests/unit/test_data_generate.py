"""Synthetic partitions: determinism, format, donefiles, oracle AUC, the CLI verb."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from typer.testing import CliRunner

from elasticctr.cli.main import _register, app
from elasticctr.constants import DONEFILE
from elasticctr.data import partitions
from elasticctr.data.generate import (
    GeneratorSpec,
    SyntheticModel,
    auc,
    generate,
    log_loss,
    parse_slot_spec,
    split_lines,
)
from elasticctr.data.parser import read_file
from elasticctr.errors import ValidationError

pytestmark = pytest.mark.fast
START = dt.datetime(2020, 4, 1, 22)


@pytest.fixture(scope="module", autouse=True)
def registered():
    _register()


def small_spec(**kw) -> GeneratorSpec:
    return GeneratorSpec(slots=kw.pop("slots", [0, 1, 2, 5, 9]), vocab=500, **kw)


def test_partitions_format_and_summary(tmp_path):
    result = generate(
        str(tmp_path),
        small_spec(),
        start=START,
        hours=3,
        lines_per_hour=1001,
        files_per_partition=2,
    )
    assert result.hours == ["20200401/22", "20200401/23", "20200402/00"]
    found = partitions.list_partitions(str(tmp_path))
    assert [p.id for p in found] == result.hours
    for part in found:
        files = partitions.data_files(part)
        assert [f.rsplit("/", 1)[1] for f in files] == ["part-00000", "part-00001"]
        counts = []
        for url in files:
            batch, stats = read_file(url, [0, 1, 2, 5, 9], max_error_rate=0.0)
            assert stats.malformed == 0 and stats.ignored_features == 0
            assert (batch.show == 1).all() and set(np.unique(batch.click)) <= {0.0, 1.0}
            assert all((lengths <= 1).all() for lengths in batch.lengths)
            counts.append(len(batch))
        assert counts == [501, 500]
        assert (tmp_path / part.id / DONEFILE).exists()
    summary = json.loads((tmp_path / "generator.json").read_text())
    assert summary["heldout"] == "20200402/00" and summary["oracle_auc"] == result.oracle_auc
    assert summary["spec"]["slots"] == [0, 1, 2, 5, 9]
    assert sum(h["lines"] for h in summary["per_hour"].values()) == 3003
    assert (tmp_path / "slot.conf").read_text() == "0\n1\n2\n5\n9\n"


def test_same_seed_same_bytes(tmp_path):
    """(Worker processes giving the same bytes: tests/integration/test_data_tools.py.)"""
    a = generate(
        str(tmp_path / "a"),
        small_spec(seed=3),
        start=START,
        hours=2,
        lines_per_hour=800,
        files_per_partition=2,
    )
    b = generate(
        str(tmp_path / "b"),
        small_spec(seed=3),
        start=START,
        hours=2,
        lines_per_hour=800,
        files_per_partition=2,
    )
    c = generate(
        str(tmp_path / "c"),
        small_spec(seed=4),
        start=START,
        hours=2,
        lines_per_hour=800,
        files_per_partition=2,
    )
    for rel in ("20200401/22/part-00000", "20200401/23/part-00001"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
        assert (tmp_path / "a" / rel).read_bytes() != (tmp_path / "c" / rel).read_bytes()
    assert a.oracle_auc == b.oracle_auc != c.oracle_auc


def test_model_properties_ctr_long_tail_and_learnable_signal():
    spec = GeneratorSpec(slots=list(range(8)), vocab=2000, ctr=0.15, seed=1)
    model = SyntheticModel(spec)
    rng = np.random.default_rng(0)
    ranks, present = model.draw(rng, 40_000)
    prob = model.probability(ranks, present)
    assert abs(prob.mean() - 0.15) < 0.01
    assert abs(present.mean() - spec.coverage) < 0.01
    # Zipf-like: the most popular feasign of a slot is far more frequent than the median one
    counts = np.bincount(ranks[:, 0], minlength=spec.vocab)
    assert counts[0] > 50 * max(1, np.median(counts))
    clicks = rng.random(prob.size) < prob
    oracle = auc(clicks, prob)
    assert 0.65 < oracle < 0.95
    assert abs(oracle - roc_auc_score(clicks, prob)) < 1e-9
    assert log_loss(clicks, prob) < log_loss(clicks, np.full(prob.size, clicks.mean()))
    # feasigns are distinct across slots and vocabularies differ by seed
    assert len(np.unique(model.feasigns)) == model.feasigns.size
    other = SyntheticModel(GeneratorSpec(slots=list(range(8)), vocab=2000, seed=2))
    assert not np.intersect1d(model.feasigns, other.feasigns).size


def test_auc_with_ties_matches_sklearn():
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 5, size=300).astype(float)
    labels = rng.random(300) < 0.3
    assert abs(auc(labels, scores) - roc_auc_score(labels, scores)) < 1e-12
    assert np.isnan(auc(np.zeros(3), np.arange(3)))


def test_bad_settings_are_validation_errors(tmp_path):
    with pytest.raises(ValidationError) as err:
        generate(
            str(tmp_path), small_spec(ctr=1.5, coverage=0), start=START, hours=1, lines_per_hour=10
        )
    assert any("ctr" in p for p in err.value.problems)
    assert any("coverage" in p for p in err.value.problems)
    with pytest.raises(ValidationError):
        generate(str(tmp_path), small_spec(), start=START, hours=0, lines_per_hour=10)


def test_slot_spec_and_line_split():
    assert parse_slot_spec("3") == [0, 1, 2]
    assert parse_slot_spec("0-2,7, 9") == [0, 1, 2, 7, 9]
    for bad in ("a", "1-", "1,1", "0"):
        with pytest.raises(ValidationError):
            parse_slot_spec(bad)
    assert split_lines(10, 3) == [4, 3, 3]


def test_cli_generate(tmp_path):
    out = tmp_path / "gen"
    result = CliRunner().invoke(
        app,
        [
            "data",
            "generate",
            str(out),
            "--hours",
            "2",
            "--lines",
            "300",
            "--slots",
            "0-3",
            "--vocab",
            "100",
            "--seed",
            "9",
            "--start",
            "20200401/00",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "oracle AUC on held-out hour 20200401/01" in result.output
    assert (out / "20200401" / "01" / DONEFILE).exists()
    summary = json.loads((out / "generator.json").read_text())
    assert f"{summary['oracle_auc']:.4f}" in result.output
    bad = CliRunner().invoke(app, ["data", "generate", str(out), "--start", "2020-04-01"])
    assert bad.exit_code != 0 and "YYYYMMDD/HH" in str(bad.exception)
