"""The test S3 server itself (tests/s3_fixture.py): it starts on free loopback ports with
checked credentials, stops without leaving `weed` behind (also when the test process is
killed), and a missing build is a failure that says `make tools`."""

from __future__ import annotations

import subprocess
import time

import pytest
from tests.integration._servers import alive, check_dies_with_its_parent, port_open, wait_gone
from tests.s3_fixture import SeaweedS3, require_weed

pytestmark = pytest.mark.integration


def weed_pid(shell_pid: int) -> int:
    """The `weed` process under the fixture's supervisor shell."""
    out = subprocess.run(["pgrep", "-P", str(shell_pid), "-x", "weed"], capture_output=True,
                         text=True, check=False).stdout.split()  # fmt: skip
    assert len(out) == 1, out
    return int(out[0])


def test_server_starts_on_its_own_ports_and_stops_cleanly(tmp_path):
    server = SeaweedS3(tmp_path / "server").start()
    shell = server.pid
    assert shell is not None
    weed = weed_pid(shell)
    try:
        assert alive(weed) and len(set(server.ports.values())) == 8
        assert all(port_open(port) for port in server.ports.values())
        assert server.endpoint == f"http://127.0.0.1:{server.ports['s3']}"
        assert 0 < server.start_seconds < 120
        # Bound to loopback only, and the identities are checked.
        wrong = server.client(access_key="someone-else")
        with pytest.raises(Exception, match="InvalidAccessKeyId|AccessDenied"):
            wrong.list_buckets()
    finally:
        server.stop()
    assert wait_gone(weed, 5) and not alive(shell)
    deadline = time.monotonic() + 10
    while (still := [n for n, p in server.ports.items() if port_open(p)]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert not still, f"ports still accepting after the stop: {still}"
    assert "Start Seaweed S3 API Server" in server.log_path.read_text()


def test_killing_the_test_process_takes_the_server_down(tmp_path):
    """pytest killed with SIGKILL runs no teardown: the supervisor shell must notice."""
    check_dies_with_its_parent(
        f"""
        from pathlib import Path
        from tests.integration.test_seaweedfs import weed_pid
        from tests.s3_fixture import SeaweedS3
        server = SeaweedS3(Path({str(tmp_path / "s")!r})).start()
        group, pid, port = server.pid, weed_pid(server.pid), server.ports["s3"]
        """,
        "weed",
    )


def test_missing_build_fails_with_make_tools(monkeypatch, tmp_path):
    monkeypatch.setenv("ELASTICCTR_WEED", str(tmp_path / "no-weed"))
    with pytest.raises(pytest.fail.Exception, match="run `make tools`"):
        require_weed()
    with pytest.raises(pytest.fail.Exception, match="run `make tools`"):
        SeaweedS3(tmp_path / "s").start()
