"""Model-store versions (build, publish, verify, tamper detection), PS dump parsing, pooling,
empty-slot padding, and every zoo model's dense part building and learning."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from elasticctr import versions
from elasticctr.data.parser import SlotBatch
from elasticctr.errors import EctlError
from elasticctr.modelstore import open_store
from elasticctr.train import export
from elasticctr.train.feeds import PAD_FEASIGN, pad_empty


def _version(tmp_path: Path, version_id: str = "20200401/07") -> tuple[Path, dict]:
    dense = tmp_path / "dense-src"
    dense.mkdir()
    (dense / "model.pdmodel").write_bytes(b"program")
    (dense / "model.pdiparams").write_bytes(b"params" * 100)
    keys = np.array([3, 1, 2**64 - 1], dtype=np.uint64)
    values = np.arange(9, dtype=np.float32).reshape(3, 3)
    manifest = export.build_version(
        tmp_path / "built",
        version_id=version_id,
        dense_dir=dense,
        keys=keys,
        values=values,
        meta={"model": {"name": "dnn"}, "slots": [0, 1], "metrics": {"auc": 0.7}},
        rows_per_part=2,
    )
    return tmp_path / "built", manifest


@pytest.mark.fast
def test_build_publish_and_verify_a_version(tmp_path: Path) -> None:
    built, manifest = _version(tmp_path)
    assert manifest["sparse"] == {"rows": 3, "parts": 2}
    assert manifest["embedding_dim"] == 3
    assert set(manifest["files"]) == {
        "dense/model.pdmodel",
        "dense/model.pdiparams",
        "sparse/part-00000.keys.npy",
        "sparse/part-00000.values.npy",
        "sparse/part-00001.keys.npy",
        "sparse/part-00001.values.npy",
    }
    store = tmp_path / "store"
    target = open_store(f"file://{store}").publish(built, "20200401/07")
    version = store / "versions" / "20200401" / "07"
    assert target.endswith("versions/20200401/07")
    assert versions.verify_version(version)["metrics"]["auc"] == 0.7
    assert (version / "donefile").read_text().strip() == "20200401/07"
    assert np.load(version / "sparse/part-00001.keys.npy").dtype == np.uint64
    with pytest.raises(EctlError, match="already exists"):
        open_store(str(store)).publish(built, "20200401/07")


@pytest.mark.fast
@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "extra", "donefile", "manifest"])
def test_verify_rejects_damaged_versions(tmp_path: Path, damage: str) -> None:
    built, _ = _version(tmp_path)
    values = built / "sparse/part-00000.values.npy"
    if damage == "truncate":
        values.write_bytes(values.read_bytes()[:-4])
    elif damage == "flip":
        data = bytearray(values.read_bytes())
        data[-1] ^= 0xFF
        values.write_bytes(bytes(data))
    elif damage == "delete":
        values.unlink()
    elif damage == "extra":
        (built / "sparse/part-00009.keys.npy").write_bytes(b"x")
    elif damage == "donefile":
        (built / "donefile").unlink()
    elif damage == "manifest":
        (built / "manifest.json").write_text("{not json")
    with pytest.raises(EctlError) as err:
        versions.verify_version(built)
    expected = {
        "truncate": "bytes, manifest says",
        "flip": "sha256 differs",
        "delete": "missing",
        "extra": "not in the manifest",
        "donefile": "incomplete",
        "manifest": "unreadable",
    }[damage]
    assert expected in str(err.value)


@pytest.mark.fast
def test_bad_version_id_is_rejected() -> None:
    with pytest.raises(EctlError, match="YYYYMMDD/HH"):
        versions.version_path("2020-04-01")
    for bad in ("20200401/99", "20200231/05", "20200401/24", " 20200401/00", "2020040/00"):
        with pytest.raises(EctlError, match="bad version id"):
            versions.check_version_id(bad)
    assert versions.check_version_id("20200229/23") == "20200229/23"


def _dump_line(key: int, embed_w: float, embedx: list[float], rule: str) -> str:
    head = ["0", "0", "1.5", "3", "1"]  # slot, unseen days, delta score, show, click
    if rule == "adam":
        embed = [embed_w, 0.1, 0.2, 0.9, 0.99]
        n = len(embedx)
        ex = embedx + [0.3] * n + [0.4] * n + [0.9, 0.99]
    elif rule == "adagrad":
        embed, ex = [embed_w, 0.5], embedx + [0.5]
    else:
        embed, ex = [embed_w], list(embedx)
    return " ".join([str(key), *head, *map(str, embed), *map(str, ex)])


@pytest.mark.fast
@pytest.mark.parametrize("rule", ["adam", "adagrad", "naive"])
def test_sparse_dump_is_parsed_for_every_rule(tmp_path: Path, rule: str) -> None:
    table = tmp_path / "000"
    table.mkdir()
    rows = {2**64 - 5: (0.5, [1.0, 2.0, 3.0]), 7: (-0.25, [4.0, 5.0, 6.0]), 0: (0.0, [0.0] * 3)}
    items = list(rows.items())
    with gzip.open(table / "part-000-00000.gz", "wt") as fh:
        fh.write("\n".join(_dump_line(k, w, x, rule) for k, (w, x) in items[:2]) + "\n")
    with gzip.open(table / "part-000-00001.gz", "wt") as fh:
        fh.write(_dump_line(items[2][0], *items[2][1], rule) + "\n")
    keys, values = export.read_sparse_dump(table, table_dim=4)
    assert keys.tolist() == [7, 2**64 - 5]  # sorted; padding feasign 0 dropped
    np.testing.assert_allclose(values, [[-0.25, 4, 5, 6], [0.5, 1, 2, 3]])


@pytest.mark.fast
def test_one_wide_table_dump_keeps_its_embedx_state_columns(tmp_path: Path) -> None:
    """lr's 1-wide rows: adam writes 5 + 5 (embed) + 2 (empty embedx's beta powers)."""
    table = tmp_path / "000"
    table.mkdir()
    (table / "part-000-00000").write_text(_dump_line(9, 0.75, [], "adam") + "\n")
    assert len(_dump_line(9, 0.75, [], "adam").split()) == 1 + 12
    keys, values = export.read_sparse_dump(table, table_dim=1)
    assert keys.tolist() == [9] and values.tolist() == [[0.75]]


@pytest.mark.fast
def test_unrecognised_dump_width_is_an_error(tmp_path: Path) -> None:
    table = tmp_path / "000"
    table.mkdir()
    (table / "part-000-00000").write_text("5 1 2 3\n")
    with pytest.raises(EctlError, match="unrecognised sparse table dump"):
        export.read_sparse_dump(table, table_dim=9)


@pytest.mark.fast
def test_plain_and_empty_parts_read_and_a_cut_line_is_a_clear_error(tmp_path: Path) -> None:
    """The pservers' plain dumps (one part per shard, some shards empty); a line cut short
    (a damaged dump) names its file instead of yielding wrong columns."""
    table = tmp_path / "000"
    table.mkdir()
    (table / "part-000-00000").write_text(_dump_line(3, 0.5, [1.0, 2.0], "adagrad") + "\n")
    (table / "part-000-00001").write_text("")
    (table / "part-000-00002").write_text(_dump_line(2, 0.25, [3.0, 4.0], "adagrad") + "\n")
    keys, values = export.read_sparse_dump(table, table_dim=3)
    assert keys.tolist() == [2, 3] and values.tolist() == [[0.25, 3, 4], [0.5, 1, 2]]
    cut = _dump_line(4, 0.5, [1.0, 2.0], "adagrad").rsplit(" ", 2)[0]
    (table / "part-000-00002").write_text(_dump_line(2, 0.25, [3.0, 4.0], "adagrad") + f"\n{cut}\n")
    with pytest.raises(EctlError, match="part-000-00002: unreadable sparse table dump"):
        export.read_sparse_dump(table, table_dim=3)


@pytest.mark.fast
def test_pool_sums_known_keys_per_slot_and_ignores_unknown() -> None:
    keys = np.array([10, 20, 2**64 - 1], dtype=np.uint64)
    values = np.array([[1, 1], [2, 2], [4, 4]], dtype=np.float32)
    batch = SlotBatch(
        slots=(0, 1),
        ids=[
            np.array([10, 20, 99, 2**64 - 1], dtype=np.uint64),  # sample0: 10,20 ; sample2: 99,max
            np.array([20], dtype=np.uint64),  # sample1 only
        ],
        lengths=[np.array([2, 0, 2], np.int32), np.array([0, 1, 0], np.int32)],
        show=np.ones(3, np.float32),
        click=np.zeros(3, np.float32),
    )
    pooled = export.pool(keys, values, batch)
    np.testing.assert_allclose(pooled[:, 0], [[3, 3], [0, 0], [4, 4]])
    np.testing.assert_allclose(pooled[:, 1], [[0, 0], [2, 2], [0, 0]])


@pytest.mark.fast
def test_pad_empty_fills_each_empty_sequence_once_in_order() -> None:
    ids = np.array([5, 6, 7], dtype=np.uint64)
    lengths = np.array([0, 2, 0, 1, 0])
    out, new_lengths = pad_empty(ids, lengths)
    assert new_lengths.tolist() == [1, 2, 1, 1, 1]
    assert out.tolist() == [PAD_FEASIGN, 5, 6, PAD_FEASIGN, 7, PAD_FEASIGN]
    same, same_len = pad_empty(ids, np.array([1, 2]))
    assert same is ids and same_len.tolist() == [1, 2]


@pytest.mark.parametrize("name", ["dnn", "lr", "wide_deep", "deepfm", "dcn", "xdeepfm"])
def test_every_zoo_model_builds_and_learns(name: str) -> None:
    """The dense part of each model, fed pooled embeddings, fits a separable target."""
    import os

    os.environ["FLAGS_enable_pir_api"] = "0"
    import paddle

    from elasticctr.train.models import dense_logit, resolve_spec

    paddle.enable_static()
    small = {"hiddenUnits": [16], "embeddingDim": 4} if name != "lr" else {}
    if name == "dcn":
        small["crossLayers"] = 2
    if name == "xdeepfm":
        small["cinLayers"] = [4]
    spec = resolve_spec({"name": name, "learningRate": 0.05, **small})
    slots, dim = 3, spec.table_dim
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        pooled = paddle.static.data("pooled", [-1, slots, dim], "float32")
        label = paddle.static.data("label", [-1, 1], "float32")
        logit = dense_logit(spec, pooled, slots)
        loss = paddle.mean(paddle.nn.functional.binary_cross_entropy_with_logits(logit, label))
        paddle.optimizer.Adam(0.05).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, slots, dim)).astype(np.float32)
    # the threshold needs a learned bias even for lr (whose only dense parameter it is)
    y = (x[:, :, 0].sum(axis=1, keepdims=True) > 1.5).astype(np.float32)
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        first = last = None
        for _ in range(60):
            (value,) = exe.run(main, feed={"pooled": x, "label": y}, fetch_list=[loss])
            first = float(value) if first is None else first
            last = float(value)
    assert last < 0.8 * first, (name, first, last)
    json.dumps(spec.params)  # hyperparameters are logged to MLflow/manifest as JSON


def test_resource_meter_counts_this_process_cpu_and_peak_memory() -> None:
    from elasticctr.train.metrics import ResourceMeter

    meter = ResourceMeter()
    block = np.ones((4000, 4000))  # 128 MB, touched
    total = 0.0
    for _ in range(5):
        total += float((block * 1.0001).sum())
    got = meter.read()
    assert got["trainer_cpu_seconds"] > 0.01 and got["trainer_cpu_cores"] > 0.05
    assert got["trainer_rss_peak_mb"] > 128
    meter.reset()
    assert meter.read()["trainer_cpu_seconds"] < got["trainer_cpu_seconds"]
    assert total > 0


@pytest.mark.fast
def test_train_auc_is_the_auc_of_the_last_quarter_of_the_batches() -> None:
    from sklearn.metrics import roc_auc_score

    from elasticctr.train.metrics import RecentBatches, train_auc

    rng = np.random.default_rng(4)
    labels = [rng.random(100) < 0.3 for _ in range(12)]
    # Predictions get better batch by batch: the last quarter scores highest.
    probs = [np.where(y, 0.2 + 0.05 * i, 0.5) + rng.random(100) * 0.3 for i, y in enumerate(labels)]
    want = roc_auc_score(np.concatenate(labels[-3:]), np.concatenate(probs[-3:]))
    assert train_auc(labels, probs) == pytest.approx(want, abs=1e-6)
    assert train_auc(labels, probs) > roc_auc_score(np.concatenate(labels), np.concatenate(probs))
    assert np.isnan(train_auc([], []))
    # Only the most recent samples are kept; the quarter counts every batch added.
    recent = RecentBatches(max_samples=250)
    for y, p in zip(labels, probs, strict=True):
        recent.add(y.astype(np.float32).reshape(-1, 1), p.reshape(-1, 1))
    assert recent.batches == 12 and len(recent.labels) == 3
    assert recent.auc() == pytest.approx(want, abs=1e-6)
