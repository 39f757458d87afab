"""The test HDFS itself (scripts/hdfs, tests/hdfs_fixture.py): it starts on free loopback
ports, stops without leaving a JVM behind (also when the test process is killed), and a
missing build is a failure that says `make tools`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from tests.hdfs_fixture import LAUNCHER, REPO, MiniHdfs, require_minihdfs

pytestmark = pytest.mark.integration


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie counts as gone: it no longer runs, only its exit status waits to be read.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


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
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from tests.hdfs_fixture import MiniHdfs
        cluster = MiniHdfs(__import__("pathlib").Path({str(tmp_path / "c")!r})).start()
        print(cluster.pid, cluster.nn_port, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    line = ""
    try:
        line = parent.stdout.readline()
        assert line, "the helper process did not start a cluster"
        pid, port = (int(x) for x in line.split())
        assert alive(pid) and port_open(port)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert wait_gone(pid, 30), "minihdfs outlived its killed parent"
        assert not port_open(port)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if line:
            try:
                os.killpg(int(line.split()[0]), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


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
