"""Storage URLs and partition discovery on local paths, file:// and the real fileserver."""

from __future__ import annotations

import os
import threading
import time

import pytest

from elasticctr.constants import DONEFILE, ENV_FILESERVER_TOKEN
from elasticctr.data import partitions, storage
from elasticctr.data.parser import read_file
from elasticctr.errors import EctlError
from elasticctr.fileserver.server import FileServer

pytestmark = pytest.mark.fast
TOKEN = "data-tests-token"


@pytest.fixture
def fileserver(tmp_path, monkeypatch):
    """The project's fileserver in a thread on a free loopback port, stopped after the test."""
    root = tmp_path / "store"
    root.mkdir()
    server = FileServer(("127.0.0.1", 0), root, token=TOKEN, max_upload_bytes=1 << 20)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    monkeypatch.setenv(ENV_FILESERVER_TOKEN, TOKEN)
    yield server.url, root
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def make_partition(root, day, hour, lines, done=True, files=1):
    folder = root / day / hour
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (folder / f"part-{i:05d}").write_text("".join(lines))
    if done:
        (folder / DONEFILE).write_text("")
    return folder


def test_url_to_fs_schemes(tmp_path, monkeypatch):
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)  # restored after the test
    fs, path = storage.url_to_fs(str(tmp_path))
    assert path == str(tmp_path) and fs.protocol[0] == "file"
    _, path = storage.url_to_fs(f"file://{tmp_path}/a")
    assert path == f"{tmp_path}/a"
    fs, path = storage.url_to_fs("hdfs://namenode:9000/data/ctr", hdfs_ugi="alice,secret")
    assert type(fs).__name__ == "HdfsFileSystem" and path == "/data/ctr"
    assert (fs.host, fs.port) == ("namenode", 9000)
    assert os.environ["HADOOP_USER_NAME"] == "alice"  # what hdfs-native reads
    fs, path = storage.url_to_fs("http://127.0.0.1:1/x/")
    assert path == "http://127.0.0.1:1/x/" and "http" in fs.protocol
    with pytest.raises(EctlError, match="unsupported storage URL scheme 'gs'"):
        storage.url_to_fs("gs://bucket/x")
    with pytest.raises(EctlError, match="needs the namenode"):
        storage.url_to_fs("hdfs:///data")
    with pytest.raises(EctlError, match="empty storage URL"):
        storage.url_to_fs("")


def test_hdfs_user_from_ugi():
    assert storage.hdfs_user("alice,secret") == "alice"
    assert storage.hdfs_user(" bob , grp") == "bob"
    assert storage.hdfs_user("") is None and storage.hdfs_user(None) is None
    with pytest.raises(EctlError, match="no user name"):
        storage.hdfs_user(",pw")


def test_local_exists_list_open_and_atomic_write(tmp_path):
    target = tmp_path / "a" / "b.txt"
    storage.write_text(str(target), "hello")
    assert target.read_text() == "hello"
    assert storage.exists(str(target)) and not storage.exists(str(tmp_path / "zz"))
    assert storage.list_names(str(tmp_path)) == [("a", True)]
    assert storage.list_names(str(tmp_path / "missing")) == []
    assert storage.read_text(f"file://{target}") == "hello"
    # a failing write leaves the old content and no temp file behind
    with pytest.raises(RuntimeError):
        with storage.open_atomic(str(target)) as fh:
            fh.write(b"half")
            raise RuntimeError("writer died")
    assert target.read_text() == "hello"
    assert sorted(p.name for p in target.parent.iterdir()) == ["b.txt"]
    with pytest.raises(EctlError, match="not found"):
        storage.read_bytes(str(tmp_path / "nope.txt"))


def test_fileserver_read_list_write(fileserver, monkeypatch):
    url, root = fileserver
    make_partition(root, "20200401", "00", ["1 0 5:0\n", "1 1 6:0\n"])
    assert storage.list_names(url) == [("20200401", True)]
    assert storage.list_names(url + "/20200401/00") == [("donefile", False), ("part-00000", False)]
    assert storage.exists(url + "/20200401/00/donefile")
    assert not storage.exists(url + "/20200401/01/donefile")
    batch, stats = read_file(url + "/20200401/00/part-00000", [0])
    assert batch.ids_of(0).tolist() == [5, 6] and stats.samples == 2
    storage.write_text(url + "/conf/slot.conf", "0\n1\n")
    assert (root / "conf" / "slot.conf").read_text() == "0\n1\n"
    monkeypatch.delenv(ENV_FILESERVER_TOKEN)
    with pytest.raises(EctlError, match=ENV_FILESERVER_TOKEN):
        storage.write_text(url + "/conf/other", "x")
    with pytest.raises(EctlError, match="not found"):
        storage.read_bytes(url + "/conf/missing")


@pytest.mark.parametrize("where", ["local", "fileserver"])
def test_list_partitions_needs_donefile_and_respects_range(tmp_path, fileserver, where):
    url, served = fileserver
    root, base = (tmp_path / "data", str(tmp_path / "data"))
    if where == "fileserver":
        root, base = served, url
    make_partition(root, "20200401", "22", ["1 0 1:0\n"], files=2)
    make_partition(root, "20200401", "23", ["1 0 1:0\n"])
    make_partition(root, "20200402", "00", ["1 0 1:0\n"], done=False)  # still uploading
    make_partition(root, "20200402", "01", ["1 0 1:0\n"])
    (root / "notes").mkdir()
    (root / "20200402" / "xx").mkdir()
    found = partitions.list_partitions(base, "20200401/23", "20200402/05")
    assert [p.id for p in found] == ["20200401/23", "20200402/01"]
    everything = partitions.list_partitions(base)
    assert [p.id for p in everything] == ["20200401/22", "20200401/23", "20200402/01"]
    files = partitions.data_files(everything[0])
    assert [f.rsplit("/", 1)[1] for f in files] == ["part-00000", "part-00001"]
    assert partitions.is_ready(base, "20200401/22")
    assert not partitions.is_ready(base, "20200402/00")
    assert partitions.partition_url(base, "20200402/01").endswith("/20200402/01")


def test_follow_waits_for_new_hours_and_stops(tmp_path):
    root = tmp_path / "data"
    make_partition(root, "20200401", "00", ["1 0 1:0\n"])
    stop = threading.Event()
    seen: list[str] = []

    def consume():
        for part in partitions.follow_partitions(
            str(root), "20200401/00", None, poll_interval=0.02, stop=stop
        ):
            seen.append(part.id)

    thread = threading.Thread(target=consume)
    thread.start()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == ["20200401/00"]
    make_partition(root, "20200401", "01", ["1 0 1:0\n"], done=False)
    time.sleep(0.1)
    assert seen == ["20200401/00"]  # no donefile yet: not ready
    (root / "20200401" / "01" / DONEFILE).write_text("")
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == ["20200401/00", "20200401/01"]
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_follow_bounded_range_and_skip_missing(tmp_path):
    root = tmp_path / "data"
    for hour in ("00", "02", "03"):
        make_partition(root, "20200401", hour, ["1 0 1:0\n"])
    got = partitions.follow_partitions(
        str(root), "20200401/00", "20200401/03", poll_interval=0.01, skip_missing_after=0.05
    )
    assert [p.id for p in got] == ["20200401/00", "20200401/02", "20200401/03"]
    # without skipping, the missing 01 blocks until stopped
    stop = threading.Event()
    seen = []
    gen = partitions.follow_partitions(
        str(root), "20200401/00", "20200401/03", poll_interval=0.01, stop=stop
    )
    seen.append(next(gen).id)
    timer = threading.Timer(0.1, stop.set)
    timer.start()
    seen.extend(p.id for p in gen)
    assert seen == ["20200401/00"]


def test_gzip_without_suffix_is_detected_by_its_magic_bytes(tmp_path, fileserver):
    """A gzip `part-00000` (no .gz) is read as text by profile and training, locally and
    over HTTP; a byte range of it (an elastic task) is refused with the fix."""
    import gzip

    from elasticctr.data.profile import profile
    from elasticctr.errors import ValidationError

    lines = b"".join(b"1 0 %d:0 %d:1\n" % (i + 1, i + 100) for i in range(500))
    packed = gzip.compress(lines)
    local = tmp_path / "part-00000"
    local.write_bytes(packed)
    url, root = fileserver
    (root / "part-00000").write_bytes(packed)
    for source in (str(local), f"{url}/part-00000"):
        with storage.open_input(source) as fh:
            assert fh.read() == lines and fh.ectl_compression == "gzip" and fh.ectl_sniffed
        batch, stats = read_file(source, [0, 1], max_error_rate=0.0)
        assert len(batch) == 500 and stats.malformed == 0
    prof = profile([str(local)])
    assert prof.stats.lines == 500 and prof.stats.malformed == 0
    with pytest.raises(ValidationError, match="gzip file without a .gz suffix") as err:
        read_file(str(local), [0, 1], start=0, end=len(packed) // 2)
    assert "*.gz" in str(err.value)
    # the whole file as one task is fine; plain text is untouched
    batch, _ = read_file(str(local), [0, 1], start=0, end=len(packed))
    assert len(batch) == 500
    (tmp_path / "plain").write_bytes(lines)
    with storage.open_input(str(tmp_path / "plain")) as fh:
        assert fh.read() == lines and fh.ectl_compression is None


# --- HDFS: a write the namenode refuses with NotReplicatedYetException is tried again ------
def test_a_not_replicated_yet_write_is_tried_again(monkeypatch):
    slept, calls = [], []
    monkeypatch.setattr(storage.time, "sleep", slept.append)

    def write():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError(
                'RPCError("org.apache.hadoop.hdfs.server.namenode.NotReplicatedYetException", '
                '"Not replicated yet: /x/.tmp-part-00001-8a09d4a3376f")'
            )

    storage._retry_hdfs_write("hdfs://nn:9000/x/part-00001", write)
    assert len(calls) == 3 and slept == [0.4, 0.8]


def test_other_errors_and_other_stores_are_not_retried(monkeypatch):
    monkeypatch.setattr(storage.time, "sleep", lambda s: None)
    calls = []

    def refused():
        calls.append(1)
        raise RuntimeError("org.apache.hadoop.security.AccessControlException: denied")

    with pytest.raises(RuntimeError, match="AccessControlException"):
        storage._retry_hdfs_write("hdfs://nn:9000/x", refused)
    assert len(calls) == 1

    def not_replicated():
        calls.append(1)
        raise RuntimeError("NotReplicatedYetException")

    with pytest.raises(RuntimeError):
        storage._retry_hdfs_write("file:///x", not_replicated)
    assert len(calls) == 2
    with pytest.raises(RuntimeError, match="NotReplicatedYet"):
        storage._retry_hdfs_write("hdfs://nn:9000/x", not_replicated)
    assert len(calls) == 2 + storage.HDFS_WRITE_ATTEMPTS
