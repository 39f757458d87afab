"""The test HDFS itself (scripts/hdfs, tests/hdfs_fixture.py): it starts on free loopback
ports, stops without leaving a JVM behind (also when the test process is killed), and a
missing build is a failure that says `make tools`."""

from __future__ import annotations

import subprocess

import pytest
from tests.hdfs_fixture import LAUNCHER, MiniHdfs, require_minihdfs
from tests.integration._servers import alive, check_dies_with_its_parent, port_open

pytestmark = pytest.mark.integration


def test_second_cluster_gets_its_own_ports_and_stops_cleanly(minihdfs, tmp_path):
    cluster = MiniHdfs(tmp_path / "cluster").start()
    pid = cluster.pid
    try:
        assert pid is not None and alive(pid)
        assert cluster.nn_port not in (minihdfs.nn_port, 0)
        assert port_open(cluster.nn_port) and port_open(cluster.http_port)
        assert cluster.start_seconds > 0
    finally:
        cluster.stop()
    assert not alive(pid)
    assert not port_open(cluster.nn_port)
    assert "minihdfs: stopped in" in cluster.log_path.read_text()
    assert not (tmp_path / "cluster").exists()  # shutdown removed its storage


def test_killing_the_test_process_takes_the_cluster_down(tmp_path):
    """pytest killed with SIGKILL runs no teardown: the JVM must notice on its own."""
    check_dies_with_its_parent(
        f"""
        from pathlib import Path
        from tests.hdfs_fixture import MiniHdfs
        cluster = MiniHdfs(Path({str(tmp_path / "c")!r})).start()
        group = pid = cluster.pid  # the launcher execs java
        port = cluster.nn_port
        """,
        "minihdfs",
    )


def test_missing_build_fails_with_make_tools(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIHDFS_HOME", str(tmp_path / "empty"))
    with pytest.raises(pytest.fail.Exception, match="run `make tools`"):
        require_minihdfs()
    with pytest.raises(pytest.fail.Exception, match="run `make tools`"):
        MiniHdfs(tmp_path / "c").start()
    out = subprocess.run([str(LAUNCHER), "--version"], capture_output=True, text=True)
    assert out.returncode == 3 and "run make tools" in out.stderr


def test_missing_java_fails_with_make_tools(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.fail.Exception, match="java .* run `make tools`"):
        require_minihdfs()


def test_launcher_reports_version_and_rejects_bad_options():
    require_minihdfs()
    out = subprocess.run([str(LAUNCHER), "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "hadoop 3.5.0 MiniDFSCluster"
    for args, message in (
        (["--nn-port", "http"], "--nn-port must be a number, got http"),
        (["--nn-port", "70000"], "--nn-port must be 0..65535, got 70000"),
        (["--datanodes", "0"], "--datanodes must be 1..9, got 0"),
        (["--base-dir"], "missing value after --base-dir"),
        (["--bogus", "1"], "unknown option --bogus"),
    ):
        out = subprocess.run([str(LAUNCHER), *args], capture_output=True, text=True)
        assert out.returncode == 2, args
        assert message in out.stderr
