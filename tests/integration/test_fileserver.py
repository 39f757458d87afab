"""The fileserver as a real process: reads through fsspec, token-protected atomic writes."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys

import fsspec
import httpx
import pytest

from elasticctr.constants import ENV_FILESERVER_TOKEN
from elasticctr.net import free_port, wait_for_port

pytestmark = pytest.mark.integration
TOKEN = "t0ken-for-tests"


@pytest.fixture(scope="module")
def fileserver(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    (root / "slot.conf").write_text("0\n1\n2\n")
    (root / "versions" / "20200401" / "00").mkdir(parents=True)
    (root / "versions" / "20200401" / "00" / "donefile").write_text("")
    port = free_port()
    env = {**os.environ, ENV_FILESERVER_TOKEN: TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "elasticctr.cli.main", "fileserver", "--root", str(root)]
        + ["--port", str(port), "--max-upload-bytes", "1000000"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    wait_for_port(
        "127.0.0.1", port, timeout=30, what="fileserver", alive=lambda: proc.poll() is None
    )
    yield f"http://127.0.0.1:{port}", root
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


def auth():
    return {"Authorization": f"Bearer {TOKEN}"}


def test_read_and_list_through_fsspec(fileserver):
    url, _ = fileserver
    fs = fsspec.filesystem("http")
    assert fs.cat(f"{url}/slot.conf") == b"0\n1\n2\n"
    names = {
        p.rstrip("/").rsplit("/", 1)[-1]
        for p in fs.ls(f"{url}/versions/20200401/00/", detail=False)
    }
    assert names == {"donefile"}
    assert fs.exists(f"{url}/versions/20200401/00/donefile")
    assert not fs.exists(f"{url}/versions/20200401/01/donefile")


def test_json_listing_and_ranges(fileserver):
    url, _ = fileserver
    listing = httpx.get(f"{url}/", headers={"Accept": "application/json"}, timeout=5).json()
    assert {"name": "slot.conf", "type": "file", "size": 6} in listing["entries"]
    part = httpx.get(f"{url}/slot.conf", headers={"Range": "bytes=2-3"}, timeout=5)
    assert part.status_code == 206 and part.content == b"1\n"
    suffix = httpx.get(f"{url}/slot.conf", headers={"Range": "bytes=-2"}, timeout=5)
    assert suffix.content == b"2\n"
    bad = httpx.get(f"{url}/slot.conf", headers={"Range": "bytes=100-"}, timeout=5)
    assert bad.status_code == 416


def test_write_requires_token_and_is_atomic(fileserver):
    url, root = fileserver
    denied = httpx.put(f"{url}/models/a.bin", content=b"x" * 10, timeout=5)
    assert denied.status_code == 401
    assert "bearer token" in denied.json()["error"]["message"]
    assert not (root / "models" / "a.bin").exists()
    wrong = httpx.put(
        f"{url}/models/a.bin", content=b"x", headers={"Authorization": "Bearer nope"}, timeout=5
    )
    assert wrong.status_code == 401
    ok = httpx.put(f"{url}/models/a.bin", content=b"payload", headers=auth(), timeout=5)
    assert ok.status_code == 201, ok.text
    assert (root / "models" / "a.bin").read_bytes() == b"payload"
    assert not [p for p in (root / "models").iterdir() if p.name.startswith(".tmp-")]


def test_fsspec_upload_with_token(fileserver, tmp_path):
    url, root = fileserver
    local = tmp_path / "m.txt"
    local.write_bytes(b"model-v1")
    fs = fsspec.filesystem("http", headers=auth())
    fs.put_file(str(local), f"{url}/up/m.txt")
    assert (root / "up" / "m.txt").read_bytes() == b"model-v1"


@pytest.mark.parametrize(
    "path,status",
    [("/../etc/passwd", 400), ("/%2e%2e/secret", 400), ("/missing.txt", 404)],
)
def test_bad_paths(fileserver, path, status):
    url, _ = fileserver
    # http.client sends the path as given (httpx would normalise "..").
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=5)
    conn.request("GET", path)
    got = conn.getresponse()
    assert got.status == status
    assert json.loads(got.read())["error"]["message"]
    conn.close()


def test_oversized_upload_rejected_and_old_file_kept(fileserver):
    url, root = fileserver
    httpx.put(f"{url}/big.bin", content=b"old", headers=auth(), timeout=5).raise_for_status()
    big = httpx.put(f"{url}/big.bin", content=b"x" * 2_000_000, headers=auth(), timeout=10)
    assert big.status_code == 413
    assert "exceeds the limit" in big.json()["error"]["message"]
    assert (root / "big.bin").read_bytes() == b"old"


def test_delete(fileserver):
    url, root = fileserver
    httpx.put(f"{url}/tmp/x", content=b"1", headers=auth(), timeout=5).raise_for_status()
    assert httpx.delete(f"{url}/tmp/x", timeout=5).status_code == 401
    assert httpx.delete(f"{url}/tmp/x", headers=auth(), timeout=5).status_code == 204
    assert not (root / "tmp" / "x").exists()
    assert httpx.delete(f"{url}/", headers=auth(), timeout=5).status_code == 400


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics:\n{text}")


def test_metrics_count_reads_writes_deletes_and_refusals(fileserver):
    url, root = fileserver
    before = httpx.get(f"{url}/metrics", timeout=5)
    assert before.status_code == 200 and before.headers["Content-Type"].startswith("text/plain")
    served0 = _metric(before.text, "elasticctr_fileserver_served_bytes_total")
    stored0 = _metric(before.text, "elasticctr_fileserver_stored_files_total")
    refused0 = _metric(before.text, "elasticctr_fileserver_unauthorized_total")
    deletes0 = _metric(before.text, "elasticctr_fileserver_deletes_total")

    put = httpx.put(f"{url}/m/one.bin", content=b"x" * 1000, headers=auth(), timeout=5)
    put.raise_for_status()
    assert httpx.get(f"{url}/m/one.bin", timeout=5).content == b"x" * 1000
    ranged = httpx.get(f"{url}/m/one.bin", headers={"Range": "bytes=0-9"}, timeout=5)
    assert ranged.status_code == 206
    assert httpx.put(f"{url}/m/two.bin", content=b"y", timeout=5).status_code == 401
    assert httpx.delete(f"{url}/m/one.bin", headers=auth(), timeout=5).status_code == 204

    after = httpx.get(f"{url}/metrics", timeout=5).text
    assert _metric(after, "elasticctr_fileserver_served_bytes_total") == served0 + 1010
    assert _metric(after, "elasticctr_fileserver_stored_files_total") == stored0 + 1
    assert _metric(after, "elasticctr_fileserver_unauthorized_total") == refused0 + 1
    assert _metric(after, "elasticctr_fileserver_deletes_total") == deletes0 + 1
    assert "elasticctr_fileserver_http_connections " in after
    # /metrics is reserved: writing a file of that name is refused, nothing is stored.
    reserved = httpx.put(f"{url}/metrics", content=b"z", headers=auth(), timeout=5)
    assert reserved.status_code == 400 and "reserved" in reserved.json()["error"]["message"]
    assert not (root / "metrics").exists()
