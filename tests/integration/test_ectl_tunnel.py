"""`ectl port-forward`'s tunnel and `ectl status`'s model-store reading, with the project's
real fileserver process behind them.

In a cluster each connection's far end is a Kubernetes port-forward stream; here it is a
TCP connection to a fileserver process, so the listener, the two-way byte pump, half-close
and concurrent connections are exercised for real. The Kubernetes stream itself is
covered by the cluster tests.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from elasticctr.cli.forward import tunnel
from elasticctr.constants import DONEFILE, ENV_FILESERVER_TOKEN
from elasticctr.errors import EctlError
from elasticctr.net import free_port, wait_for_port

pytestmark = pytest.mark.integration
TOKEN = "tunnel-test-token"


@pytest.fixture(scope="module")
def fileserver(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    blob = os.urandom(3 << 20)
    (root / "blob.bin").write_bytes(blob)
    versions = root / "models" / "versions"
    for version, done in (("20200331/23", True), ("20200401/00", True), ("20200401/01", False)):
        (versions / version).mkdir(parents=True)
        (versions / version / "manifest.json").write_text("{}")
        if done:
            (versions / version / DONEFILE).write_text("")
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
            "127.0.0.1", port, timeout=60, what="fileserver", alive=lambda: proc.poll() is None
        )
        yield port, hashlib.sha256(blob).hexdigest()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


def test_tunnel_carries_requests_both_ways(fileserver):
    port, digest = fileserver
    opened = []

    def connect() -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        opened.append(sock)
        return sock

    with tunnel(connect) as url:
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200

        def fetch(_: int) -> str:
            resp = httpx.get(f"{url}/blob.bin", timeout=60)
            resp.raise_for_status()
            return hashlib.sha256(resp.content).hexdigest()

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            assert list(pool.map(fetch, range(4))) == [digest] * 4
        upload = os.urandom(256 << 10)
        put = httpx.put(
            f"{url}/up/data.bin",
            content=upload,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=60,
        )
        assert put.status_code == 201, put.text
        assert httpx.get(f"{url}/up/data.bin", timeout=60).content == upload
    assert len(opened) >= 6  # one far-end connection per client connection
    with pytest.raises(httpx.TransportError):  # closed: nothing listens any more
        httpx.get(f"{url}/healthz", timeout=5)


def test_tunnel_reports_a_far_end_that_fails(capsys):
    def connect() -> socket.socket:
        raise ConnectionRefusedError("pod went away")

    with tunnel(connect) as url, pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/healthz", timeout=10)
    assert "pod went away" in capsys.readouterr().err


def test_tunnel_port_in_use_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(EctlError) as err, tunnel(lambda: None, local_port=port):
            pass
    assert f"cannot listen on 127.0.0.1:{port}" in str(err.value)


def test_status_finds_the_newest_complete_model_version(fileserver):
    """20200401/01 has no donefile yet, so it does not exist; 20200401/00 is the newest."""
    from elasticctr.cli.status import newest_version

    port, _ = fileserver

    def get(path: str):
        resp = httpx.get(
            f"http://127.0.0.1:{port}/{path}", headers={"Accept": "application/json"}, timeout=30
        )
        return resp.json() if resp.status_code == 200 else resp.text

    assert newest_version(get) == "20200401/00"
    assert newest_version(lambda path: "404 not found") is None


def test_a_command_runs_through_the_tunnel_with_the_url(fileserver):
    """`ectl port-forward serving -- ectl predict data.txt`: the command gets the URL."""
    from elasticctr.cli.forward import run_through

    port, _ = fileserver
    check = (
        "import os, sys, httpx\n"
        "url = sys.argv[1]\n"
        "ok = httpx.get(url + '/healthz', timeout=30).status_code == 200\n"
        "sys.exit(0 if ok and os.environ['ELASTICCTR_SERVING_URL'] == url else 3)\n"
    )
    with tunnel(lambda: socket.create_connection(("127.0.0.1", port), timeout=30)) as url:
        assert run_through(url, "serving", [sys.executable, "-c", check, "{url}"]) == 0
        assert run_through(url, "serving", [sys.executable, "-c", "raise SystemExit(7)"]) == 7
        with pytest.raises(EctlError) as err:
            run_through(url, "serving", ["/no/such/program"])
        assert "cannot run /no/such/program" in str(err.value)
