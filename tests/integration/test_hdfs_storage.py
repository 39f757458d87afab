"""The data path on a real HDFS (MiniDFSCluster, tests/hdfs_fixture.py): hourly partitions
written to `hdfs://`, discovered and parsed by the same functions the coordinator and the
trainers call (`elasticctr.data.storage`, `.partitions`, `.parser`, `.config`,
`elasticctr.coordinator.runtime.discover`), with the HDFS user taken from HDFS_UGI.
"""

from __future__ import annotations

import gzip
import json
import urllib.parse
import urllib.request

import pytest
from tests.conftest import shared_path
from tests.integration import _store_cases
from tests.integration._store_cases import SLOTS, assert_same_batch, sample_lines

from elasticctr.constants import DONEFILE
from elasticctr.data import partitions, storage
from elasticctr.data.config import read_data_config, read_slot_conf
from elasticctr.data.parser import iter_batches, parse_bytes, read_file
from elasticctr.errors import EctlError, ValidationError

pytestmark = pytest.mark.integration

UGI = "ctruser,ctrpassword"  # ElasticCTR's HDFS_UGI: "user,password"


def write_partition(root: str, hour: str, files: dict[str, bytes], done: bool = True) -> str:
    return _store_cases.write_partition(root, hour, files, done, UGI)


def owner(url: str) -> str:
    fs, path = storage.url_to_fs(url, UGI)
    return fs.info(path)["owner"]


def test_cluster_is_a_real_namenode_on_loopback(minihdfs, hdfs_cluster):
    assert hdfs_cluster == f"hdfs://127.0.0.1:{minihdfs.nn_port}"
    # The NameNode's own JMX (its HTTP port) reports one live DataNode and the pinned version.
    query = urllib.parse.quote("Hadoop:service=NameNode,name=NameNodeInfo")
    http = f"http://127.0.0.1:{minihdfs.http_port}/jmx?qry={query}"
    with urllib.request.urlopen(http, timeout=60) as resp:  # a loaded machine: slow JMX
        info = json.load(resp)["beans"][0]
    assert info["Version"].startswith("3.5.0")
    assert len(json.loads(info["LiveNodes"])) == 1


def test_hourly_partitions_round_trip(hdfs_dir):
    root = storage.join(hdfs_dir, "dataset")
    written = {}
    for hour, seed in (("20200401/00", 1), ("20200401/01", 2), ("20200401/23", 3)):
        files = {"part-00000": sample_lines(300, seed), "part-00001": sample_lines(50, seed + 10)}
        written[hour] = write_partition(root, hour, files)
    # Hours are folders {YYYYMMDD}/{HH}; the writer's atomic temp files are gone.
    assert storage.list_names(root, UGI) == [("20200401", True)]
    assert storage.list_names(storage.join(root, "20200401"), UGI) == [
        ("00", True),
        ("01", True),
        ("23", True),
    ]
    assert storage.list_names(written["20200401/01"], UGI) == [
        (DONEFILE, False),
        ("part-00000", False),
        ("part-00001", False),
    ]
    # Byte-identical read-back.
    assert storage.read_bytes(storage.join(written["20200401/01"], "part-00000"), UGI) == (
        sample_lines(300, 2)
    )
    # HDFS_UGI's user owns everything it wrote.
    assert owner(storage.join(written["20200401/23"], "part-00001")) == "ctruser"
    assert owner(written["20200401/23"]) == "ctruser"


def test_partition_discovery_needs_the_donefile(hdfs_dir):
    _store_cases.check_partition_discovery(storage.join(hdfs_dir, "dataset"), UGI)


def test_follow_waits_for_an_hour_that_arrives_later(hdfs_dir, caplog):
    _store_cases.check_follow_waits_for_the_donefile(storage.join(hdfs_dir, "dataset"), caplog, UGI)


def test_coordinator_discovery_reads_sizes_from_hdfs(hdfs_dir):
    _store_cases.check_coordinator_discovery(hdfs_dir, UGI)


def test_parser_reads_real_elasticctr_demo_data_from_hdfs(hdfs_dir):
    demo = shared_path("data", "elasticctr", "serving_demo_data.txt")
    slots = list(range(27))
    url = write_partition(hdfs_dir, "20200401/00", {"part-00000": demo.read_bytes()})
    local, local_stats = read_file(str(demo), slots)
    remote, remote_stats = read_file(storage.join(url, "part-00000"), slots, hdfs_ugi=UGI)
    assert len(remote) == 100 and remote_stats.malformed == 0
    assert remote_stats.samples == local_stats.samples
    assert_same_batch(remote, local)


def test_streaming_batches_across_hdfs_blocks(minihdfs, hdfs_dir):
    data = sample_lines(30_000, 7)
    assert len(data) > 3 << 20  # the test cluster's block size is 1 MiB: 4+ blocks
    url = storage.join(write_partition(hdfs_dir, "20200401/00", {"part-00000": data}), "part-00000")
    # The NameNode really stored it as several blocks (WebHDFS on its HTTP port).
    path = urllib.parse.urlparse(url).path
    http = f"http://127.0.0.1:{minihdfs.http_port}/webhdfs/v1{path}?op=GET_BLOCK_LOCATIONS"
    with urllib.request.urlopen(http + "&user.name=ctruser", timeout=10) as resp:
        blocks = json.load(resp)["LocatedBlocks"]["locatedBlocks"]
    assert len(blocks) >= 4

    expected, _ = parse_bytes(data, SLOTS)
    stream = iter_batches(url, SLOTS, 4096, hdfs_ugi=UGI, block_bytes=300_000)
    batches = list(stream)
    assert [len(b) for b in batches[:-1]] == [4096] * (len(batches) - 1)
    assert stream.stats.samples == 30_000 and stream.stats.malformed == 0
    got = batches[0].concat(batches)
    assert_same_batch(got, expected)


def test_gzip_part_files_are_decompressed(hdfs_dir):
    data = sample_lines(500, 11)
    url = write_partition(hdfs_dir, "20200401/00", {"part-00000.gz": gzip.compress(data)})
    got, stats = read_file(storage.join(url, "part-00000.gz"), SLOTS, hdfs_ugi=UGI)
    assert stats.samples == 500
    assert_same_batch(got, parse_bytes(data, SLOTS)[0])


def test_data_config_and_slot_conf_on_hdfs_drive_the_read(hdfs_cluster, hdfs_dir):
    """ElasticCTR's inputs as users bring them: data.config names the namenode, the dataset
    path and the HDFS_UGI; everything after that uses only what it says."""
    dataset = urllib.parse.urlparse(hdfs_dir).path + "/dataset"
    port = urllib.parse.urlparse(hdfs_cluster).port
    config_text = (
        "# ElasticCTR data.config\n"
        f"export HDFS_ADDRESS=hdfs://127.0.0.1:{port}\n"
        f'HDFS_UGI="{UGI}"\n'
        "START_DATE_HR=20200401/00\n"
        "END_DATE_HR=20200401/01\n"
        f"DATASET_PATH={dataset}\n"
    )
    storage.write_text(storage.join(hdfs_dir, "data.config"), config_text, UGI)
    storage.write_text(storage.join(hdfs_dir, "slot.conf"), "0\n1\n2\n5\n7\n", UGI)
    cfg = read_data_config(storage.join(hdfs_dir, "data.config"), UGI)
    slots = read_slot_conf(storage.join(hdfs_dir, "slot.conf"), cfg.hdfs_ugi)
    assert slots == SLOTS and cfg.hdfs_ugi == UGI
    assert cfg.dataset_url == f"{hdfs_cluster}{dataset}"

    for hour, seed in (("20200401/00", 1), ("20200401/01", 2), ("20200401/02", 3)):
        write_partition(cfg.dataset_url, hour, {"part-00000": sample_lines(40, seed)})
    found = partitions.list_partitions(
        cfg.dataset_url, cfg.start_date_hour, cfg.end_date_hour, hdfs_ugi=cfg.hdfs_ugi
    )
    assert [p.id for p in found] == ["20200401/00", "20200401/01"]
    total = 0
    for part in found:
        for url in partitions.data_files(part, cfg.hdfs_ugi):
            for batch in iter_batches(url, slots, 16, hdfs_ugi=cfg.hdfs_ugi):
                total += len(batch)
    assert total == 80
    assert owner(f"{cfg.dataset_url}/20200401/00/part-00000") == "ctruser"


def test_too_many_malformed_lines_on_hdfs_name_the_file(hdfs_dir):
    good = sample_lines(20, 3)
    bad = b"1 0 notafeasign:1\n1 2 5:1\n"  # bad token; click > show
    url = storage.join(
        write_partition(hdfs_dir, "20200401/00", {"part-00000": good + bad}), "part-00000"
    )
    with pytest.raises(ValidationError, match="part-00000: 2 of 22 lines malformed"):
        list(iter_batches(url, SLOTS, 8, hdfs_ugi=UGI, max_error_rate=0.01))
    # Within the allowed rate the good lines are all kept and the bad ones counted.
    stream = iter_batches(url, SLOTS, 8, hdfs_ugi=UGI, max_error_rate=0.5)
    assert sum(len(b) for b in stream) == 20 and stream.stats.malformed == 2


def test_missing_files_and_partitions_are_clear_errors(hdfs_dir):
    missing = storage.join(hdfs_dir, "nope", "part-00000")
    with pytest.raises(EctlError, match="nope/part-00000: not found"):
        storage.read_bytes(missing, UGI)
    with pytest.raises(EctlError, match="not found"):
        list(iter_batches(missing, SLOTS, 8, hdfs_ugi=UGI))
    assert not storage.exists(missing, UGI)
    assert partitions.list_partitions(storage.join(hdfs_dir, "no-dataset"), hdfs_ugi=UGI) == []


def test_permission_denied_is_one_clear_line_and_writes_nothing(minihdfs):
    """A folder the HDFS_UGI user may not write: a clear EctlError, not a Java stack."""
    import uuid

    locked = minihdfs.make_open_dir(f"/locked-{uuid.uuid4().hex[:8]}", mode=0o755)
    target = storage.join(locked, "20200401", "00", "part-00000")
    with pytest.raises(EctlError, match="permission denied on HDFS") as info:
        storage.write_bytes(target, b"1 0 1:0\n", hdfs_ugi=UGI)
    assert "\n" not in str(info.value) and "at org.apache" not in str(info.value)
    assert storage.list_names(locked, UGI) == []


def test_reading_a_folder_as_a_file_says_so(hdfs_dir):
    storage.write_bytes(storage.join(hdfs_dir, "d", "f"), b"x", hdfs_ugi=UGI)
    with pytest.raises(EctlError, match="d"):
        storage.read_bytes(storage.join(hdfs_dir, "d"), UGI)


def test_the_console_profiles_a_teams_closed_folder_as_its_hdfs_user(minihdfs):
    """The console's new-scenario profile (elasticctr.console.newscenario) reads as the
    scenario's HDFS_UGI: a folder its owner alone may read is denied to anyone else, in one
    clear line, and profiled for the owner; the two answers are kept apart."""
    import uuid

    from elasticctr.console.newscenario import Profiles

    home = f"/team-{uuid.uuid4().hex[:8]}"

    def closed(client) -> None:
        client.mkdirs(home, permission=0o700, create_parent=True)
        client.set_permission(home, 0o700)
        client.set_owner(home, UGI.split(",")[0], UGI.split(",")[0])

    minihdfs.as_superuser(closed)
    data = f"{minihdfs.url}{home}/train_data"
    lines = sample_lines(200, seed=5)
    for hour in ("20200401/00", "20200401/01"):
        write_partition(data, hour, {"part-00000": lines})
    profiles = Profiles()
    with pytest.raises(EctlError, match="permission denied on HDFS") as info:
        profiles.get(data, "someone,else")
    assert "\n" not in info.value.message
    prof = profiles.get(data, UGI)
    assert prof["hours"] == ["20200401/00", "20200401/01"] and prof["samples"] == 400
    assert profiles.cached(data, UGI) is prof and profiles.cached(data, "someone,else") is None
