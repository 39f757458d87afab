"""`ectl data` as real processes against real storage: a MiniDFSCluster (hdfs://) and the
project's fileserver (http://): generate -> discover -> profile -> stream, convert."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from tests.conftest import shared_path

from elasticctr.constants import DONEFILE, ENV_FILESERVER_TOKEN
from elasticctr.data import partitions, storage
from elasticctr.data.features import read_spec
from elasticctr.data.parser import iter_batches
from elasticctr.net import free_port, wait_for_port

pytestmark = pytest.mark.integration
UGI = "datauser,secret"
TOKEN = "data-tools-token"


def ectl(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def fileserver(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "elasticctr.cli.main", "fileserver", "--root", str(root)]
        + ["--port", str(port)],
        env={**os.environ, ENV_FILESERVER_TOKEN: TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for_port(
            "127.0.0.1", port, timeout=30, what="fileserver", alive=lambda: proc.poll() is None
        )
        yield f"http://127.0.0.1:{port}", root
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_generate_profile_and_stream_on_hdfs(hdfs_dir):
    root = f"{hdfs_dir}/synthetic"
    out = ectl(
        "data",
        "generate",
        root,
        "--hours",
        "2",
        "--lines",
        "3000",
        "--files",
        "2",
        "--slots",
        "0-7",
        "--vocab",
        "300",
        "--seed",
        "5",
        "--hdfs-ugi",
        UGI,
        "--workers",
        "2",  # worker processes open their own HDFS clients
    ).stdout
    assert "oracle AUC on held-out hour 20200401/01" in out
    found = partitions.list_partitions(root, hdfs_ugi=UGI)
    assert [p.id for p in found] == ["20200401/00", "20200401/01"]
    files = partitions.data_files(found[1], UGI)
    assert len(files) == 2
    fs, path = storage.url_to_fs(files[0], UGI)
    assert fs.info(path)["owner"] == "datauser"  # the HDFS_UGI user wrote it
    summary = json.loads(storage.read_text(f"{root}/generator.json", UGI))
    assert summary["lines_per_hour"] == 3000 and 0.5 < summary["oracle_auc"] < 1
    stream = iter_batches(files[0], list(range(8)), 256, hdfs_ugi=UGI, block_bytes=4096)
    assert sum(len(b) for b in stream) == 1500 and stream.stats.malformed == 0
    # the coordinator's byte-range tasks: every line read once across the ranges
    size = fs.size(path)
    bounds = [0, size // 3, 2 * size // 3 + 7, size]
    counts = [
        sum(
            len(b)
            for b in iter_batches(files[0], list(range(8)), 256, hdfs_ugi=UGI, start=lo, end=hi)
        )
        for lo, hi in zip(bounds, bounds[1:], strict=False)
    ]
    assert sum(counts) == 1500 and all(c > 0 for c in counts)
    report = json.loads(ectl("data", "profile", root, "-o", "json", env={"HDFS_UGI": UGI}).stdout)
    assert report["samples"] == 6000 and len(report["sources"]) == 4
    assert report["recommendation"]["slots"] == list(range(8))
    assert abs(report["clicks"] - sum(h["clicks"] for h in summary["per_hour"].values())) < 1


def test_generate_and_convert_through_the_fileserver(fileserver, tmp_path):
    url, root = fileserver
    env = {ENV_FILESERVER_TOKEN: TOKEN}
    ectl(
        "data",
        "generate",
        f"{url}/gen",
        "--hours",
        "1",
        "--lines",
        "500",
        "--slots",
        "4",
        "--vocab",
        "50",
        env=env,
    )
    assert (root / "gen" / "20200401" / "00" / DONEFILE).exists()
    assert [p.id for p in partitions.list_partitions(f"{url}/gen")] == ["20200401/00"]
    report = json.loads(ectl("data", "profile", f"{url}/gen", "-o", "json").stdout)
    assert report["samples"] == 500
    src = str(shared_path("data", "criteo", "paddlerec_part-0.tsv"))
    ectl(
        "data",
        "convert",
        src,
        "--from",
        "criteo",
        "--out",
        f"{url}/criteo",
        "--hour",
        "20200401/00",
        env=env,
    )
    spec = read_spec(f"{url}/criteo/features.json")
    assert len(spec.features) == 39
    assert (root / "criteo" / "20200401" / "00" / DONEFILE).exists()
    # without the token the fileserver refuses, and ectl says which variable to set
    denied = ectl(
        "data",
        "generate",
        f"{url}/nope",
        "--lines",
        "10",
        "--hours",
        "1",
        env={ENV_FILESERVER_TOKEN: ""},
        check=False,
    )
    assert denied.returncode == 1
    assert ENV_FILESERVER_TOKEN in denied.stderr and "Traceback" not in denied.stderr


def test_user_errors_are_one_clear_line(tmp_path):
    bad_start = ectl("data", "generate", str(tmp_path), "--start", "2020-04-01", check=False)
    assert bad_start.returncode == 2 and "YYYYMMDD/HH" in bad_start.stderr
    assert "Traceback" not in bad_start.stderr
    # A path longer than a console line: the examples stay whole lines for grep, also
    # when stdout is not a terminal (rich would wrap them at 80 columns).
    deep = tmp_path / ("hour-directory-with-a-long-name-" * 3)
    deep.mkdir()
    (deep / "part-0").write_text("1 0 1:0\n" + "garbage\n" * 3)
    missing = ectl("data", "profile", str(tmp_path / "absent"), check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr
    ok = ectl("data", "profile", str(deep / "part-0"))
    assert "3 malformed" in ok.stdout
    example = f"  {deep / 'part-0'}:2: need at least `show click`"
    assert example in ok.stdout.splitlines(), ok.stdout


def test_atomic_overwrite_on_hdfs(hdfs_dir):
    target = f"{hdfs_dir}/conf/slot.conf"
    storage.write_text(target, "0\n1\n", UGI)
    storage.write_text(target, "0\n1\n2\n", UGI)  # replaces in one rename (OVERWRITE)
    assert storage.read_text(target, UGI) == "0\n1\n2\n"
    assert storage.list_names(f"{hdfs_dir}/conf", UGI) == [("slot.conf", False)]
    with pytest.raises(RuntimeError):
        with storage.open_atomic(target, UGI) as fh:
            fh.write(b"half")
            raise RuntimeError("writer died")
    assert storage.read_text(target, UGI) == "0\n1\n2\n"
    fs, path = storage.url_to_fs(f"{hdfs_dir}/conf", UGI)
    assert [p.rsplit("/", 1)[1] for p in fs.ls(path, detail=False)] == ["slot.conf"]


def test_worker_processes_write_the_same_bytes(tmp_path):
    import datetime as dt

    from elasticctr.data.generate import GeneratorSpec, generate

    spec = GeneratorSpec(slots=[0, 1, 2, 5], vocab=200, seed=3)
    start = dt.datetime(2020, 4, 1, 22)
    one = generate(
        str(tmp_path / "one"), spec, start=start, hours=2, lines_per_hour=900, files_per_partition=3
    )
    two = generate(
        str(tmp_path / "two"),
        spec,
        start=start,
        hours=2,
        lines_per_hour=900,
        files_per_partition=3,
        workers=2,
    )
    files = sorted(
        p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file()
    )
    assert len(files) == 2 * 3 + 2 + 2  # part files, donefiles, slot.conf, generator.json
    for rel in files:
        assert (tmp_path / "one" / rel).read_bytes() == (tmp_path / "two" / rel).read_bytes()
    assert one.oracle_auc == two.oracle_auc
