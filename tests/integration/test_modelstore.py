"""The model store against a real fileserver process that protects reads and writes.

Every part opens the store through elasticctr.modelstore, so the token reaches exports
(publish), cube (fetch, list) and serving (newest version); without it the error names
the URL, the HTTP status and the token variable, and is never mistaken for "no versions".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from elasticctr.constants import ENV_FILESERVER_TOKEN
from elasticctr.cube.modelstore import fetch_version, write_version
from elasticctr.errors import EctlError
from elasticctr.modelstore import open_store
from elasticctr.net import free_port, wait_for_port
from elasticctr.serving import store as serving_store

pytestmark = pytest.mark.integration

TOKEN = "store-t0ken"
VERSION = "20200401/05"


@pytest.fixture(scope="module")
def protected(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    token_file = root.parent / "token"
    token_file.write_text(TOKEN)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "elasticctr.cli.main", "fileserver", "--root", str(root)]
        + ["--port", str(port), "--token-file", str(token_file), "--protect-reads"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    wait_for_port(
        "127.0.0.1", port, timeout=30, what="fileserver", alive=lambda: proc.poll() is None
    )
    yield f"http://127.0.0.1:{port}/models", root
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


def _built(tmp_path):
    rng = np.random.default_rng(5)
    keys = np.unique(rng.integers(1, 2**40, 500, dtype=np.uint64))
    values = rng.random((keys.size, 4), dtype=np.float32)
    vdir = write_version(tmp_path / "local", VERSION, [(keys, values)])
    return vdir, keys, values


def test_publish_list_fetch_with_the_token_and_clear_errors_without(
    protected, tmp_path, monkeypatch
):
    url, root = protected
    vdir, keys, values = _built(tmp_path)
    monkeypatch.delenv(ENV_FILESERVER_TOKEN, raising=False)

    # Without the token: the publish fails with URL, status and hint (no traceback type).
    anonymous = open_store(url)
    with pytest.raises(EctlError) as err:
        anonymous.publish(vdir, VERSION)
    text = str(err.value)
    assert url in text and "HTTP 401" in text and ENV_FILESERVER_TOKEN in text, text
    assert not (root / "models").exists()  # nothing half-written

    # With the token (argument or environment) every operation works.
    store = open_store(url, token=TOKEN)
    target = store.publish(vdir, VERSION)
    assert target == f"{url}/versions/{VERSION}"
    assert (root / "models" / "versions" / VERSION / "donefile").is_file()
    assert store.list_versions() == [VERSION] and store.has_version(VERSION)
    with pytest.raises(EctlError, match="already exists"):
        store.publish(vdir, VERSION)

    # Reads are protected too: an unreadable store is an error, never "no versions".
    with pytest.raises(EctlError, match="HTTP 401"):
        anonymous.list_versions()
    with pytest.raises(EctlError, match="HTTP 401"):
        serving_store.latest_version(url)
    monkeypatch.setenv(ENV_FILESERVER_TOKEN, TOKEN)
    assert serving_store.latest_version(url) == VERSION
    mv = fetch_version(url, VERSION, tmp_path / "cache")
    got = np.concatenate([np.load(v) for _, v in mv.parts])
    assert np.array_equal(got, values) and mv.dim == 4


def test_a_corrupt_remote_version_is_rejected(protected, tmp_path, monkeypatch):
    url, root = protected
    monkeypatch.setenv(ENV_FILESERVER_TOKEN, TOKEN)
    version = "20200401/06"
    vdir, _, _ = _built(tmp_path)
    store = open_store(url)
    # Publish a copy whose donefile/manifest are right but one file is damaged afterwards.
    (vdir / "donefile").write_text(version + "\n")
    import json

    manifest = json.loads((vdir / "manifest.json").read_text())
    manifest["version"] = version
    (vdir / "manifest.json").write_text(json.dumps(manifest))
    store.publish(vdir, version)
    part = root / "models" / "versions" / version / "sparse" / "part-00000.values.npy"
    part.write_bytes(part.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(EctlError, match="part-00000.values.npy: sha256 differs"):
        store.fetch(version, tmp_path / "cache2")
    assert not (tmp_path / "cache2" / version).exists()


def test_cli_names_url_status_and_token_on_a_refused_store(protected, tmp_path):
    url, _ = protected
    env = {k: v for k, v in os.environ.items() if k != ENV_FILESERVER_TOKEN}
    run = subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "cube", "build", "--model-store", url]
        + ["--version", VERSION, "--cube-root", str(tmp_path / "cube"), "--shards", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stderr
    assert "internal error" not in run.stderr
    assert "HTTP 401" in run.stderr and ENV_FILESERVER_TOKEN in run.stderr, run.stderr
