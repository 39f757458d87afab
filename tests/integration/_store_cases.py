"""The data-path checks every remote store passes (HDFS in test_hdfs_storage.py, S3 in
test_s3_storage.py): sample data, a producer's partition upload (donefile last), and the
checks whose logic does not depend on the store, given a writable folder URL and, for
HDFS, the HDFS_UGI."""

from __future__ import annotations

import logging
import threading

import numpy as np

from elasticctr.constants import DONEFILE
from elasticctr.coordinator.runtime import CoordinatorSettings, discover
from elasticctr.data import partitions, storage

SLOTS = [0, 1, 2, 5, 7]


def sample_lines(n: int, seed: int, slots: list[int] = SLOTS) -> bytes:
    """n valid ElasticCTR lines (uint64 feasigns incl. values above 2**63, missing and
    repeated slots), deterministic for a seed."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        click = int(rng.random() < 0.2)
        feats = []
        for slot in slots:
            for _ in range(int(rng.integers(0, 3))):  # 0: the slot is missing in this line
                feats.append(f"{int(rng.integers(0, 2**64 - 1, dtype=np.uint64))}:{slot}")
        out.append(" ".join(["1", str(click), *feats]))
    return ("\n".join(out) + "\n").encode()


def write_partition(
    root: str, hour: str, files: dict[str, bytes], done: bool = True, ugi: str | None = None
) -> str:
    """Upload one hour like a data producer: the part files, then the donefile last."""
    url = partitions.partition_url(root, hour)
    for name, data in files.items():
        storage.write_bytes(storage.join(url, name), data, hdfs_ugi=ugi)
    if done:
        storage.write_bytes(storage.join(url, DONEFILE), b"", hdfs_ugi=ugi)
    return url


def assert_same_batch(a, b) -> None:
    assert len(a) == len(b)
    assert np.array_equal(a.show, b.show) and np.array_equal(a.click, b.click)
    for j in range(len(a.slots)):
        assert np.array_equal(a.ids[j], b.ids[j])
        assert np.array_equal(a.lengths[j], b.lengths[j])


def check_partition_discovery(root: str, ugi: str | None = None) -> None:
    """Only hours with a donefile are partitions; other folders are ignored."""
    write_partition(root, "20200401/00", {"part-00000": sample_lines(10, 1)}, ugi=ugi)
    write_partition(root, "20200401/01", {"part-00000": sample_lines(10, 2)}, False, ugi)
    write_partition(root, "20200401/02", {"part-00000": sample_lines(10, 3)}, ugi=ugi)
    write_partition(root, "20200402/00", {"part-00000": sample_lines(10, 4)}, ugi=ugi)
    # Folders that are not hours are ignored, not fatal.
    storage.write_bytes(storage.join(root, "README"), b"not a day", hdfs_ugi=ugi)
    storage.write_bytes(storage.join(root, "20200401", "xx", DONEFILE), b"", hdfs_ugi=ugi)

    found = partitions.list_partitions(root, hdfs_ugi=ugi)
    assert [p.id for p in found] == ["20200401/00", "20200401/02", "20200402/00"]
    assert found[0].url == f"{root}/20200401/00"
    in_range = partitions.list_partitions(root, "20200401/01", "20200401/23", hdfs_ugi=ugi)
    assert [p.id for p in in_range] == ["20200401/02"]
    assert partitions.is_ready(root, "20200401/00", ugi)
    assert not partitions.is_ready(root, "20200401/01", ugi)
    assert partitions.data_files(found[0], ugi) == [f"{root}/20200401/00/part-00000"]


def check_follow_waits_for_the_donefile(root: str, caplog, ugi: str | None = None) -> None:
    """Follow mode yields hour 01 only once its donefile lands (listings are not cached),
    and logs that its data are there without one."""
    write_partition(root, "20200401/00", {"part-00000": sample_lines(10, 1)}, ugi=ugi)
    write_partition(root, "20200401/01", {"part-00000": sample_lines(10, 2)}, False, ugi)
    stop = threading.Event()
    seen: list[str] = []

    def consume() -> None:
        for part in partitions.follow_partitions(
            root, "20200401/00", "20200401/01", poll_interval=0.2, stop=stop, hdfs_ugi=ugi
        ):
            seen.append(part.id)

    caplog.set_level(logging.WARNING, logger="elasticctr.data.partitions")
    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    try:
        reader.join(1.5)
        assert seen == ["20200401/00"]  # hour 01 has no donefile yet: still waiting
        assert f"{root}/20200401/01: data files but no donefile" in caplog.text
        storage.write_bytes(storage.join(root, "20200401", "01", DONEFILE), b"", hdfs_ugi=ugi)
        reader.join(30)
        assert not reader.is_alive()
        assert seen == ["20200401/00", "20200401/01"]
    finally:
        stop.set()
        reader.join(5)


def check_coordinator_discovery(folder: str, ugi: str | None = None) -> None:
    """The coordinator's own discovery (what hands data tasks to trainers) gives every
    file of a partition with its size in the store."""
    root = storage.join(folder, "dataset")
    a, b = sample_lines(200, 1), sample_lines(70, 2)
    write_partition(root, "20200401/05", {"part-00000": a, "part-00001": b}, ugi=ugi)
    settings = CoordinatorSettings(
        dataset_path=root,
        start="20200401/05",
        end="20200401/05",
        state_url=storage.join(folder, "model", "progress", "coordinator.json"),
        hdfs_ugi=ugi,
        poll_seconds=0.2,
    )
    specs = list(discover(settings, threading.Event()))
    assert [s.partition for s in specs] == ["20200401/05"]
    assert specs[0].files == (
        (f"{root}/20200401/05/part-00000", len(a)),
        (f"{root}/20200401/05/part-00001", len(b)),
    )
