"""The control-plane harness itself: start-up retries and failure reports."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
from tests.cluster import conftest as harness
from tests.conftest import require_tool

pytestmark = pytest.mark.cluster


def _etcd(etcd: str, work):
    def argv(attempt: int, client_port: int, peer_port: int) -> list[str]:
        return [
            etcd,
            "--name=t",
            f"--data-dir={work / f'etcd-{attempt}'}",
            f"--listen-client-urls=http://127.0.0.1:{client_port}",
            f"--advertise-client-urls=http://127.0.0.1:{client_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=t=http://127.0.0.1:{peer_port}",
        ]

    def probe(client_port: int, _peer: int):
        def ready() -> bool:
            url = f"http://127.0.0.1:{client_port}/health"
            with urllib.request.urlopen(url, timeout=2) as resp:
                return b'"true"' in resp.read()

        return ready

    return argv, probe


def test_a_port_taken_meanwhile_is_retried(tmp_path, monkeypatch):
    etcd = require_tool("etcd")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        real = harness.free_ports
        picks = iter([[busy, real(1)[0]]])
        monkeypatch.setattr(harness, "free_ports", lambda n: next(picks, None) or real(n))
        procs = []
        argv, probe = _etcd(etcd, tmp_path)
        try:
            client, _ = harness._launch(
                "etcd", argv, probe, 2, tmp_path / "etcd.log", time.monotonic() + 60, procs
            )
            assert client != busy and len(procs) == 1 and procs[0].poll() is None
            assert "address already in use" not in (tmp_path / "etcd.log").read_text()
        finally:
            for p in procs:
                harness._stop(p)


def test_a_server_that_exits_is_reported_with_its_log(tmp_path):
    etcd = require_tool("etcd")
    procs = []

    def argv(_attempt: int, port: int) -> list[str]:
        return [etcd, f"--listen-client-urls=http://127.0.0.1:{port}", "--no-such-flag"]

    with pytest.raises(RuntimeError) as err:
        harness._launch(
            "etcd", argv, lambda p: lambda: False, 1, tmp_path / "l", time.monotonic() + 60, procs
        )
    assert "etcd exited with" in str(err.value) and "no-such-flag" in str(err.value)
    assert all(p.poll() is not None for p in procs)
