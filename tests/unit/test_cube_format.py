"""Cube shard files, model-store reading and the builder, in-process (no servers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from elasticctr.cube.builder import build_version, built_versions, read_cube_manifest
from elasticctr.cube.format import ShardFile, shard_of, write_shard
from elasticctr.cube.modelstore import (
    check_version_id,
    fetch_version,
    list_versions,
    verify_version,
    write_version,
)
from elasticctr.cube.protocol import decode_response, encode_response
from elasticctr.errors import EctlError, ValidationError

pytestmark = pytest.mark.fast


def _random_keys(rng, n):
    keys = np.unique(rng.integers(0, 2**64 - 1, n + n // 10 + 10, dtype=np.uint64))[:n]
    rng.shuffle(keys)
    return keys


def test_shard_file_finds_every_key_and_no_absent_one(tmp_path):
    rng = np.random.default_rng(1)
    keys = np.sort(_random_keys(rng, 20_000))
    values = rng.random((keys.size, 5), dtype=np.float32)
    sha, size = write_shard(tmp_path / "s.cube", keys, values, shard=0, num_shards=1)
    shard = ShardFile(tmp_path / "s.cube")
    assert (shard.count, shard.dim, shard.header.file_bytes) == (keys.size, 5, size)
    assert np.array_equal(shard.find(keys), np.arange(keys.size))
    absent = rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64)
    absent = absent[~np.isin(absent, keys)]
    assert (shard.find(absent) == -1).all()
    query = np.concatenate([keys[:300], absent[:50], keys[-10:]])
    rows, missing = shard.lookup(query)
    assert missing == 50
    assert np.array_equal(rows[:300], values[:300])
    assert not rows[300:350].any()
    assert np.array_equal(rows[350:], values[-10:])
    assert len(sha) == 64


def test_dense_small_keys_and_the_sentinel_value(tmp_path):
    # Keys 0..4999: the empty-slot sentinel is 5000, which must still read as absent.
    keys = np.arange(5000, dtype=np.uint64)
    values = np.repeat(np.arange(5000, dtype=np.float32)[:, None], 3, axis=1)
    write_shard(tmp_path / "s.cube", keys, values, shard=0, num_shards=1)
    shard = ShardFile(tmp_path / "s.cube")
    assert shard.header.sentinel == 5000
    assert np.array_equal(shard.find(keys), np.arange(5000))
    rows, missing = shard.lookup(np.array([5000, 4999, 5000, 0], dtype=np.uint64))
    assert missing == 2
    assert rows[:, 0].tolist() == [0.0, 4999.0, 0.0, 0.0]


def test_full_window_keys_fall_back_to_the_sorted_keys(tmp_path, monkeypatch):
    # A tiny table forces keys out of their probe window; lookups must still find them.
    import elasticctr.cube.format as fmt

    monkeypatch.setattr(fmt, "_table_slots", lambda count: 16)
    keys = np.arange(1, 33, dtype=np.uint64)  # 32 keys in 16 slots: long runs, a tail
    write_shard(tmp_path / "s.cube", keys, np.ones((32, 2), np.float32), shard=0, num_shards=1)
    monkeypatch.undo()
    shard = ShardFile(tmp_path / "s.cube")
    assert shard.header.table_tail > fmt.WINDOW - 1
    slot_of = {int(k): i for i, k in enumerate(shard.tkeys) if shard.trows[i] != fmt.EMPTY}
    home = fmt._home(keys, 16)
    assert max(slot_of[int(k)] - h for k, h in zip(keys, home, strict=True)) >= fmt.WINDOW
    assert np.array_equal(shard.find(keys), np.arange(32))
    assert (shard.find(np.array([0, 33, 2**63], dtype=np.uint64)) == -1).all()


def test_empty_shard_answers_zero_rows(tmp_path):
    write_shard(
        tmp_path / "s.cube", np.zeros(0, np.uint64), np.zeros((0, 4), np.float32),
        shard=1, num_shards=2,
    )  # fmt: skip
    rows, missing = ShardFile(tmp_path / "s.cube").lookup(np.array([1, 2], dtype=np.uint64))
    assert rows.shape == (2, 4) and not rows.any() and missing == 2


def test_corrupt_or_truncated_files_are_rejected_on_open(tmp_path):
    keys = np.arange(10, 110, dtype=np.uint64)
    write_shard(tmp_path / "s.cube", keys, np.ones((100, 4), np.float32), shard=0, num_shards=1)
    data = (tmp_path / "s.cube").read_bytes()
    (tmp_path / "trunc.cube").write_bytes(data[:-100])
    with pytest.raises(EctlError, match="truncated"):
        ShardFile(tmp_path / "trunc.cube")
    (tmp_path / "magic.cube").write_bytes(b"XXXXXXXX" + data[8:])
    with pytest.raises(EctlError, match="bad magic"):
        ShardFile(tmp_path / "magic.cube")
    (tmp_path / "tiny.cube").write_bytes(data[:10])
    with pytest.raises(EctlError, match="truncated"):
        ShardFile(tmp_path / "tiny.cube")


def test_write_shard_refuses_unsorted_or_mismatched_input(tmp_path):
    with pytest.raises(ValidationError, match="sorted and unique"):
        write_shard(
            tmp_path / "s.cube", np.array([3, 1], np.uint64), np.ones((2, 1), np.float32),
            shard=0, num_shards=1,
        )  # fmt: skip
    with pytest.raises(ValidationError, match="does not match"):
        write_shard(
            tmp_path / "s.cube", np.array([1, 3], np.uint64), np.ones((3, 1), np.float32),
            shard=0, num_shards=1,
        )  # fmt: skip
    assert not list(tmp_path.iterdir())


def test_shard_of_is_stable_and_balanced():
    keys = np.arange(100_000, dtype=np.uint64)
    owner = shard_of(keys, 4)
    assert owner.min() == 0 and owner.max() == 3
    counts = np.bincount(owner)
    assert counts.min() > 0.9 * 25_000

    # Serving and old shard files depend on this exact function: MurmurHash3 fmix64 % N,
    # checked against a plain-int reimplementation.
    def fmix64(x):
        m = (1 << 64) - 1
        x ^= x >> 33
        x = (x * 0xFF51AFD7ED558CCD) & m
        x ^= x >> 33
        x = (x * 0xC4CEB9FE1A85EC53) & m
        return x ^ (x >> 33)

    sample = [0, 1, 12345, 2**63 + 11, 2**64 - 1]
    expect = [fmix64(k) % 7 for k in sample]
    assert shard_of(np.array(sample, dtype=np.uint64), 7).tolist() == expect


def test_version_ids():
    assert check_version_id("20200401/07") == "20200401/07"
    for bad in ("2020040/07", "20200401/24", "20200401-07", "../x/00", ""):
        with pytest.raises(ValidationError, match="YYYYMMDD/HH"):
            check_version_id(bad)


def _make_version(store: Path, version: str, rng, n=3000, dim=4, parts=3):
    keys = _random_keys(rng, n)
    values = rng.random((n, dim), dtype=np.float32)
    cuts = np.array_split(np.arange(n), parts)
    write_version(store, version, [(keys[c], values[c]) for c in cuts], slots=[0, 1])
    return keys, values


def test_build_splits_by_shard_and_every_row_survives(tmp_path):
    rng = np.random.default_rng(2)
    keys, values = _make_version(tmp_path / "store", "20200401/00", rng)
    assert list_versions(str(tmp_path / "store")) == ["20200401/00"]
    mv = fetch_version(f"file://{tmp_path / 'store'}", "20200401/00", tmp_path / "cache")
    manifest = build_version(mv, tmp_path / "cube", 3)
    assert manifest["total_keys"] == keys.size and manifest["dim"] == 4
    assert sum(e["keys"] for e in manifest["shards"]) == keys.size
    assert built_versions(tmp_path / "cube") == ["20200401/00"]
    assert read_cube_manifest(tmp_path / "cube", "20200401/00") == manifest
    owner = shard_of(keys, 3)
    vdir = tmp_path / "cube" / "versions" / "20200401" / "00"
    for entry in manifest["shards"]:
        shard = ShardFile(vdir / entry["file"])
        mine = owner == entry["shard"]
        assert shard.header.shard == entry["shard"] and shard.count == entry["keys"]
        assert np.all(np.diff(shard.keys.astype(np.float64)) > 0)  # sorted
        rows, missing = shard.lookup(keys[mine])
        assert missing == 0 and np.array_equal(rows, values[mine])


def test_verify_rejects_missing_donefile_bad_sha_and_truncation(tmp_path):
    rng = np.random.default_rng(3)
    _make_version(tmp_path, "20200401/01", rng)
    vdir = tmp_path / "versions" / "20200401" / "01"
    verify_version(vdir)  # intact
    part = vdir / "sparse" / "part-00001.values.npy"
    good = part.read_bytes()
    part.write_bytes(good[:-8])
    with pytest.raises(EctlError, match="part-00001.values.npy: .* bytes, manifest says"):
        verify_version(vdir)
    part.write_bytes(good[:-4] + b"\x00\x00\x80\x7f")
    with pytest.raises(EctlError, match="part-00001.values.npy: sha256 differs"):
        verify_version(vdir)
    (vdir / "sparse" / "extra.npy").write_bytes(b"x")
    with pytest.raises(EctlError, match="extra.npy: not in the manifest"):
        verify_version(vdir)
    (vdir / "sparse" / "extra.npy").unlink()
    part.write_bytes(good)
    (vdir / "donefile").unlink()
    with pytest.raises(EctlError, match="donefile"):
        verify_version(vdir)
    assert list_versions(str(tmp_path)) == []


def test_manifest_layout_matches_the_contract(tmp_path):
    rng = np.random.default_rng(4)
    _make_version(tmp_path, "20200401/02", rng, parts=2)
    vdir = tmp_path / "versions" / "20200401" / "02"
    manifest = json.loads((vdir / "manifest.json").read_text())
    assert set(manifest["files"]) == {
        f"sparse/part-0000{i}.{kind}.npy" for i in range(2) for kind in ("keys", "values")
    }
    for meta in manifest["files"].values():
        assert set(meta) == {"sha256", "bytes"}
    assert manifest["embedding_dim"] == 4
    assert np.load(vdir / "sparse/part-00000.keys.npy").dtype == np.uint64


def test_duplicate_feasigns_across_parts_are_an_error(tmp_path):
    keys = np.array([5, 6, 7], dtype=np.uint64)
    write_version(tmp_path, "20200401/03", [(keys, np.ones((3, 2), np.float32))] * 2)
    mv = verify_version(tmp_path / "versions" / "20200401" / "03", "20200401/03")
    with pytest.raises(ValidationError, match="3 duplicate feasigns"):
        build_version(mv, tmp_path / "cube", 2)
    assert built_versions(tmp_path / "cube") == []


def test_binary_response_roundtrip_and_length_check():
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    body = b"".join(encode_response(rows, 1, 2, "20200401/05"))
    result = decode_response(body)
    assert (result.version, result.shard, result.missing) == ("20200401/05", 2, 1)
    assert np.array_equal(result.rows, rows)
    with pytest.raises(EctlError, match="promises"):
        decode_response(body[:-4])


def test_cube_builds_a_version_written_by_the_training_export(tmp_path):
    # The producer's own writer and publisher, so the two sides of the contract meet.
    from elasticctr.modelstore import open_store
    from elasticctr.train import export

    rng = np.random.default_rng(9)
    keys = _random_keys(rng, 2500)
    values = rng.random((keys.size, 6), dtype=np.float32)
    dense = tmp_path / "dense"
    dense.mkdir()
    (dense / "inference.pdmodel").write_bytes(b"dense model bytes")
    export.build_version(
        tmp_path / "local", version_id="20200401/09", dense_dir=dense, keys=keys,
        values=values, meta={"model": "dnn", "slots": [0, 1]}, rows_per_part=1000,
    )  # fmt: skip
    open_store(str(tmp_path / "store")).publish(tmp_path / "local", "20200401/09")
    assert list_versions(str(tmp_path / "store")) == ["20200401/09"]
    mv = fetch_version(str(tmp_path / "store"), "20200401/09", tmp_path / "cache")
    assert len(mv.parts) == 3 and mv.dim == 6
    manifest = build_version(mv, tmp_path / "cube", 2)
    vdir = tmp_path / "cube" / "versions" / "20200401" / "09"
    owner = shard_of(keys, 2)
    for entry in manifest["shards"]:
        rows, missing = ShardFile(vdir / entry["file"]).lookup(keys[owner == entry["shard"]])
        assert missing == 0 and np.array_equal(rows, values[owner == entry["shard"]])
