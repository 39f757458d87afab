"""The data path and the model store on a real S3 server (SeaweedFS, tests/s3_fixture.py):
hourly partitions written to `s3://`, discovered and parsed by the same functions the
coordinator and the trainers call (`elasticctr.data.storage`, `.partitions`, `.parser`,
`.config`, `elasticctr.coordinator.runtime.discover`), and model versions published,
listed and fetched verified through `elasticctr.modelstore`. The S3 client is configured
only by the environment the chart sets (AWS_ENDPOINT_URL, AWS_REGION, credentials,
ELASTICCTR_S3_PATH_STYLE); SeaweedFS checks the credentials.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
import urllib.parse

import numpy as np
import pytest
from tests.conftest import shared_path
from tests.integration import _store_cases
from tests.integration._store_cases import (
    SLOTS,
    assert_same_batch,
    sample_lines,
    write_partition,
)
from tests.s3_fixture import TEST_BUCKET

from elasticctr import constants as C
from elasticctr.constants import DONEFILE
from elasticctr.cube.modelstore import write_version
from elasticctr.data import partitions, storage
from elasticctr.data.config import read_data_config, read_slot_conf
from elasticctr.data.parser import iter_batches, parse_bytes, read_file
from elasticctr.errors import EctlError
from elasticctr.modelstore import open_store
from elasticctr.net import free_port

pytestmark = pytest.mark.integration


def key_of(url: str) -> tuple[str, str]:
    parsed = urllib.parse.urlparse(url)
    return parsed.netloc, parsed.path.lstrip("/")


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def test_server_is_seaweedfs_on_loopback_and_checks_credentials(seaweed_s3):
    assert seaweed_s3.endpoint.startswith("http://127.0.0.1:")
    client = seaweed_s3.client()
    assert TEST_BUCKET in [b["Name"] for b in client.list_buckets()["Buckets"]]
    wrong = seaweed_s3.client(secret_key="not-the-secret")
    with pytest.raises(Exception, match="SignatureDoesNotMatch|AccessDenied"):
        wrong.list_objects_v2(Bucket=TEST_BUCKET)


def test_hourly_partitions_round_trip(seaweed_s3, s3_prefix):
    root = storage.join(s3_prefix, "dataset")
    written = {}
    for hour, seed in (("20200401/00", 1), ("20200401/01", 2), ("20200401/23", 3)):
        files = {"part-00000": sample_lines(300, seed), "part-00001": sample_lines(50, seed + 10)}
        written[hour] = write_partition(root, hour, files)
    assert storage.list_names(root) == [("20200401", True)]
    assert storage.list_names(storage.join(root, "20200401")) == [
        ("00", True),
        ("01", True),
        ("23", True),
    ]
    assert storage.list_names(written["20200401/01"]) == [
        (DONEFILE, False),
        ("part-00000", False),
        ("part-00001", False),
    ]
    part = storage.join(written["20200401/01"], "part-00000")
    assert storage.read_bytes(part) == sample_lines(300, 2)
    assert storage.exists(part) and not storage.exists(part + "x")
    # Written straight to the key: no temp objects, and a plain S3 client sees the bytes.
    bucket, key = key_of(part)
    listed = seaweed_s3.client().list_objects_v2(Bucket=bucket, Prefix=key_of(s3_prefix)[1])
    assert not [o["Key"] for o in listed["Contents"] if ".tmp-" in o["Key"]]
    body = seaweed_s3.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    assert body == sample_lines(300, 2)


def test_a_failed_write_leaves_the_old_object(s3_prefix):
    url = storage.join(s3_prefix, "part-00000")
    storage.write_bytes(url, b"old\n")
    big = b"x" * (storage.S3_BLOCK_BYTES + 1)  # past one block: a multipart upload starts
    for payload in (b"new, small\n", big):
        with pytest.raises(RuntimeError, match="producer died"):
            with storage.open_atomic(url) as fh:
                fh.write(payload)
                fh.write(payload)
                raise RuntimeError("producer died")
        assert storage.read_bytes(url) == b"old\n"
    assert storage.list_names(s3_prefix) == [("part-00000", False)]


def test_partition_discovery_needs_the_donefile(s3_prefix):
    _store_cases.check_partition_discovery(storage.join(s3_prefix, "dataset"))


def test_follow_waits_for_an_hour_that_arrives_later(s3_prefix, caplog):
    """Listings are not cached: a later donefile is seen by the next poll."""
    _store_cases.check_follow_waits_for_the_donefile(storage.join(s3_prefix, "dataset"), caplog)


def test_coordinator_discovery_reads_sizes_from_s3(s3_prefix):
    _store_cases.check_coordinator_discovery(s3_prefix)


def test_parser_reads_real_elasticctr_demo_data_from_s3(s3_prefix):
    demo = shared_path("data", "elasticctr", "serving_demo_data.txt")
    slots = list(range(27))
    url = write_partition(s3_prefix, "20200401/00", {"part-00000": demo.read_bytes()})
    local, local_stats = read_file(str(demo), slots)
    remote, remote_stats = read_file(storage.join(url, "part-00000"), slots)
    assert len(remote) == 100 and remote_stats.malformed == 0
    assert remote_stats.samples == local_stats.samples
    assert_same_batch(remote, local)


def test_streaming_and_byte_ranges_across_a_multipart_object(seaweed_s3, s3_prefix):
    one = sample_lines(30_000, 7)
    data = one * 6  # 21 MiB: a 3-part upload, read back in several ranged GETs
    assert len(data) > 2 * storage.S3_BLOCK_BYTES
    url = storage.join(
        write_partition(s3_prefix, "20200401/00", {"part-00000": data}), "part-00000"
    )
    bucket, key = key_of(url)
    etag = seaweed_s3.client().head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
    assert etag.endswith("-3"), etag  # a multipart object of three parts

    expected, _ = parse_bytes(one, SLOTS)
    stream = iter_batches(url, SLOTS, 4096, block_bytes=1 << 20)
    batches = list(stream)
    assert [len(b) for b in batches[:-1]] == [4096] * (len(batches) - 1)
    assert stream.stats.samples == 180_000 and stream.stats.malformed == 0
    got = batches[0].concat(batches)
    assert_same_batch(got.slice(30_000, 60_000), expected)
    # The coordinator's byte-range tasks: consecutive ranges read every line exactly once.
    cuts = [0, 1, 5 << 20, (8 << 20) + 17, 2 * storage.S3_BLOCK_BYTES, len(data)]
    total = 0
    for start, end in zip(cuts, cuts[1:], strict=False):
        total += sum(len(b) for b in iter_batches(url, SLOTS, 4096, start=start, end=end))
    assert total == 180_000


def test_open_range_to_the_end_of_an_object_a_whole_number_of_blocks_long(s3_prefix):
    # The read after the last full block starts at the object's size: S3 answers
    # InvalidRange (HTTP 416), which is the end of the object, not an error.
    data = bytes(range(256)) * 4096  # 1 MiB
    url = storage.join(s3_prefix, "blocks")
    storage.write_bytes(url, data)
    for start in (0, 1 << 18):
        got = b"".join(storage.open_range(url, start, None, block_bytes=1 << 18))
        assert got == data[start:]
    assert b"".join(storage.open_range(url, len(data), None)) == b""
    with pytest.raises(EctlError, match="ends at or before byte"):
        list(storage.open_range(url, 0, len(data) + 1, block_bytes=1 << 18))


def test_gzip_part_files_are_decompressed(s3_prefix):
    data = sample_lines(500, 11)
    url = write_partition(s3_prefix, "20200401/00", {"part-00000.gz": gzip.compress(data)})
    got, stats = read_file(storage.join(url, "part-00000.gz"), SLOTS)
    assert stats.samples == 500
    assert_same_batch(got, parse_bytes(data, SLOTS)[0])


def test_data_config_and_slot_conf_on_s3_drive_the_read(s3_prefix):
    dataset = storage.join(s3_prefix, "dataset")
    config_text = (
        "# ElasticCTR data.config\n"
        "START_DATE_HR=20200401/00\n"
        "END_DATE_HR=20200401/01\n"
        f"DATASET_PATH={dataset}\n"
    )
    storage.write_text(storage.join(s3_prefix, "data.config"), config_text)
    storage.write_text(storage.join(s3_prefix, "slot.conf"), "0\n1\n2\n5\n7\n")
    cfg = read_data_config(storage.join(s3_prefix, "data.config"))
    slots = read_slot_conf(storage.join(s3_prefix, "slot.conf"))
    assert slots == SLOTS and cfg.dataset_url == dataset

    for hour, seed in (("20200401/00", 1), ("20200401/01", 2), ("20200401/02", 3)):
        write_partition(cfg.dataset_url, hour, {"part-00000": sample_lines(40, seed)})
    found = partitions.list_partitions(cfg.dataset_url, cfg.start_date_hour, cfg.end_date_hour)
    assert [p.id for p in found] == ["20200401/00", "20200401/01"]
    total = 0
    for part in found:
        for url in partitions.data_files(part):
            total += sum(len(b) for b in iter_batches(url, slots, 16))
    assert total == 80


def test_model_store_publish_list_fetch_verified(seaweed_s3, s3_prefix, tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    keys = np.unique(rng.integers(1, 2**40, 500, dtype=np.uint64))
    values = rng.random((keys.size, 4), dtype=np.float32)
    version = "20200401/05"
    vdir = write_version(tmp_path / "local", version, [(keys, values)])
    url = storage.join(s3_prefix, "models")
    monkeypatch.setenv(C.ENV_MODEL_STORE, url)  # what the chart gives every part

    store = open_store()
    assert store.list_versions() == [] and store.latest_version() is None
    assert store.publish(vdir, version) == f"{url}/versions/{version}"
    assert store.list_versions() == [version] and store.has_version(version)
    with pytest.raises(EctlError, match="already exists"):
        store.publish(vdir, version)
    assert store.read_manifest(version)["version"] == version
    got = store.fetch(version, tmp_path / "cache")
    assert (got / DONEFILE).is_file()
    assert np.array_equal(np.load(got / "sparse" / "part-00000.keys.npy"), keys)

    # A version whose donefile is missing does not exist; a changed file is refused.
    bucket, key = key_of(f"{url}/versions/{version}")
    client = seaweed_s3.client()
    client.put_object(Bucket=bucket, Key=f"{key}/sparse/part-00000.values.npy", Body=b"bad")
    with pytest.raises(EctlError, match="sparse/part-00000.values.npy"):
        store.fetch(version, tmp_path / "cache2")
    client.delete_object(Bucket=bucket, Key=f"{key}/{DONEFILE}")
    assert store.list_versions() == [] and not store.has_version(version)


# --- bad input: one clear line naming the URL and the fix ------------------------------


def test_unreachable_endpoint(s3_prefix, monkeypatch):
    port = free_port()  # nothing listens there
    monkeypatch.setenv(C.ENV_S3_ENDPOINT, f"http://127.0.0.1:{port}")
    url = storage.join(s3_prefix, "dataset")
    with pytest.raises(EctlError) as exc:
        partitions.list_partitions(url)
    text = one_line(exc)
    assert url in text and f"cannot reach the S3 endpoint http://127.0.0.1:{port}" in text
    assert C.ENV_S3_ENDPOINT in exc.value.hint


def test_connect_makes_the_client_and_sends_nothing(s3_prefix, monkeypatch):
    # What a trainer calls at start: the client exists afterwards (the first read does
    # not pay for it); an endpoint that is down shows at the first read, not here.
    port = free_port()  # nothing listens there
    monkeypatch.setenv(C.ENV_S3_ENDPOINT, f"http://127.0.0.1:{port}")
    url = storage.join(s3_prefix, "part-00000")
    storage.connect(url)
    fs, _ = storage.url_to_fs(url)
    assert fs._s3 is not None  # s3fs's aiobotocore client, made by connect()
    with pytest.raises(EctlError, match=f"cannot reach the S3 endpoint http://127.0.0.1:{port}"):
        storage.read_bytes(url)


def test_wrong_credentials_are_refused(s3_prefix, monkeypatch):
    url = storage.join(s3_prefix, "part-00000")
    storage.write_bytes(url, b"1 0 1:0\n")
    monkeypatch.setenv(C.ENV_S3_SECRET_ACCESS_KEY, "wrong-secret")
    for action in (
        lambda: storage.read_bytes(url),
        lambda: storage.list_names(s3_prefix),
        lambda: storage.write_bytes(url, b"x"),
        lambda: open_store(s3_prefix).list_versions(),
    ):
        with pytest.raises(EctlError) as exc:
            action()
        text = one_line(exc)
        assert "refused the request" in text and "s3://" in text, text
        assert C.ENV_S3_ACCESS_KEY_ID in exc.value.hint
    monkeypatch.delenv(C.ENV_S3_SECRET_ACCESS_KEY)
    monkeypatch.setenv(C.ENV_S3_ACCESS_KEY_ID, "unknown-key")
    with pytest.raises(EctlError, match="refused the request"):
        storage.read_bytes(url)


def test_missing_bucket(seaweed_s3, s3_prefix):
    url = "s3://no-such-bucket-ectl/dataset"
    for action in (
        lambda: storage.list_names(url),
        lambda: storage.exists(f"{url}/x"),
        lambda: storage.read_bytes(f"{url}/20200401/00/part-00000"),
        lambda: storage.write_bytes(f"{url}/x", b"x"),
        lambda: partitions.list_partitions(url),
        lambda: open_store(url).list_versions(),
    ):
        with pytest.raises(EctlError) as exc:
            action()
        text = one_line(exc)
        assert "bucket 'no-such-bucket-ectl' does not exist at http://127.0.0.1" in text, text
        assert "create the bucket" in exc.value.hint
    names = [b["Name"] for b in seaweed_s3.client().list_buckets()["Buckets"]]
    assert "no-such-bucket-ectl" not in names  # never created behind the user's back


def test_missing_prefix(s3_prefix, caplog):
    """A prefix with nothing under it yet is waited for (the pipeline writes the first hour
    after the install), with a warning naming it; its first hour is then trained."""
    root = storage.join(s3_prefix, "no-dataset")
    assert partitions.list_partitions(root) == []
    stop = threading.Event()
    found: list = []

    def follow() -> None:
        found.extend(
            partitions.follow_partitions(
                root, "20200401/00", "20200401/00", poll_interval=0.1, stop=stop
            )
        )

    with caplog.at_level(logging.WARNING, logger="elasticctr.data.partitions"):
        thread = threading.Thread(target=follow)
        thread.start()
        time.sleep(0.5)
        assert thread.is_alive() and not found
        write_partition(root, "20200401/00", {"part-00000": b"1 0 5:1\n"})
        thread.join(10)
        stop.set()
    assert not thread.is_alive() and [p.id for p in found] == ["20200401/00"]
    assert f"{root}: nothing under the dataset root yet" in caplog.text
    with pytest.raises(EctlError, match="no-dataset/part-00000: not found"):
        storage.read_bytes(storage.join(root, "part-00000"))
    with pytest.raises(EctlError, match="not found"):
        list(iter_batches(storage.join(root, "part-00000"), SLOTS, 8))


def test_object_removed_while_being_read(seaweed_s3, s3_prefix):
    data = sample_lines(30_000, 3) * 5  # 18 MiB: several ranged GETs
    url = storage.join(
        write_partition(s3_prefix, "20200401/00", {"part-00000": data}), "part-00000"
    )
    stream = iter(iter_batches(url, SLOTS, 4096, block_bytes=1 << 20))
    next(stream)  # the first block is in memory, the rest is not
    bucket, key = key_of(url)
    seaweed_s3.client().delete_object(Bucket=bucket, Key=key)
    with pytest.raises(EctlError) as exc:
        for _ in stream:
            pass
    text = one_line(exc)
    assert f"{url}: removed while being read" in text or f"{url}: the object changed" in text


def test_bad_path_style_setting_names_the_variable(s3_prefix, monkeypatch):
    monkeypatch.setenv(C.ENV_S3_PATH_STYLE, "sometimes")
    with pytest.raises(EctlError, match=C.ENV_S3_PATH_STYLE):
        storage.list_names(s3_prefix)
    with pytest.raises(EctlError, match="needs the bucket"):
        storage.url_to_fs("s3:///nobucket")


# --- a real local training run: hours read from S3, versions published to S3 ----------


@pytest.mark.slow
def test_local_training_reads_s3_and_publishes_to_an_s3_model_store(
    seaweed_s3, s3_prefix, tmp_path
):
    """`ectl data generate` writes two hours to s3://, `ectl train --local` (coordinator,
    pserver, trainer as processes) trains on them and publishes one verified version per
    hour to an s3:// model store. The endpoint, region and path style come from the values
    file's global.s3 (as the chart gives pods), only the credentials from the shell."""
    import os
    import subprocess
    import sys

    import yaml

    ectl = [sys.executable, "-m", "elasticctr.cli.main"]
    data, store_url = storage.join(s3_prefix, "data"), storage.join(s3_prefix, "models")
    gen = subprocess.run(
        [*ectl, "data", "generate", data, "--hours", "2", "--lines", "6000", "--files", "2",
         "--slots", "0-5", "--seed", "3", "--vocab", "100"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert gen.returncode == 0, gen.stderr[-3000:]
    settings = (C.ENV_S3_ENDPOINT, C.ENV_S3_REGION, C.ENV_S3_PATH_STYLE)
    credentials_only = {k: v for k, v in os.environ.items() if k not in settings}
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "global": {
                    "data": {"path": data, "slots": list(range(6)),
                             "startDateHour": "20200401/00", "endDateHour": "20200401/01"},
                    "modelStore": store_url,
                    "s3": {"endpoint": seaweed_s3.endpoint, "region": "us-east-1",
                           "pathStyle": True},
                },
                "trainer": {"model": {"name": "lr", "batchSize": 256}},
            }
        )
    )  # fmt: skip
    run = subprocess.run(
        [*ectl, "train", "--local", "-p", "1", "-t", "1", "-f", str(values), "-q",
         "--log-dir", str(tmp_path / "logs"), "--checkpoint-dir", str(tmp_path / "ckpt"),
         "--timeout", "300"],
        capture_output=True, text=True, timeout=400, env=credentials_only,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    store = open_store(store_url)
    assert store.list_versions() == ["20200401/00", "20200401/01"]
    fetched = store.fetch("20200401/01", tmp_path / "cache")  # verified against its manifest
    manifest = store.read_manifest("20200401/01")
    assert manifest["slots"] == list(range(6)) and manifest["sparse"]["rows"] > 0
    assert (fetched / DONEFILE).is_file()
