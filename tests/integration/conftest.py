"""Fixtures for integration tests: a real HDFS (MiniDFSCluster), a real S3 server
(SeaweedFS) and a real MLflow tracking server, each shared by the session.

`hdfs_cluster` yields the ``hdfs://127.0.0.1:PORT`` URL of one MiniDFSCluster started for the
whole session (about 5 s to start; see docs/hdfs.md); `hdfs_dir` gives each test its own
empty, world-writable folder URL on it. Permissions are enforced, so HDFS_UGI matters: the
OS user running the tests is the HDFS superuser; any other user may write only under
`hdfs_dir` (and `/tests`).

`seaweed_s3` is one SeaweedFS S3 gateway for the session (docs/storage.md); `s3_prefix`
gives each test a fresh ``s3://ectl-tests/<random>`` and points this test's S3 client
environment (AWS_ENDPOINT_URL, credentials, path style) at the server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.hdfs_fixture import TEST_ROOT, MiniHdfs
from tests.s3_fixture import TEST_BUCKET, SeaweedS3

from elasticctr.net import free_port, wait_for_port


def _running(server, what: str):
    """Start a test server for the session (its failure fails the test) and stop it after."""
    try:
        server.start()
    except RuntimeError as exc:
        pytest.fail(f"the test {what} did not start: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def minihdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniHdfs]:
    """The running MiniDFSCluster process (ports, pid, log, superuser)."""
    yield from _running(MiniHdfs(tmp_path_factory.mktemp("minihdfs") / "cluster"), "HDFS")


@pytest.fixture(scope="session")
def hdfs_cluster(minihdfs: MiniHdfs) -> str:
    """``hdfs://127.0.0.1:PORT`` of the session's MiniDFSCluster."""
    return minihdfs.url


@pytest.fixture
def hdfs_dir(minihdfs: MiniHdfs) -> str:
    """A fresh, existing, world-writable (0777) folder URL on the test HDFS for this test."""
    return minihdfs.make_open_dir(f"{TEST_ROOT}/{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="session")
def seaweed_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """The running SeaweedFS server (endpoint, credentials, ports, log, client())."""
    yield from _running(SeaweedS3(tmp_path_factory.mktemp("seaweedfs") / "server"), "S3 server")


@pytest.fixture
def s3_prefix(seaweed_s3: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://ectl-tests/<random>``, with the S3 client environment set for this test."""
    for name, value in seaweed_s3.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    return f"s3://{TEST_BUCKET}/{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory):
    """A real MLflow tracking server (sqlite backend) on a free loopback port.

    It accepts http(s)/hdfs model-version sources (MLflow >= 3 refuses them by default),
    as docs/training.md asks of the MLflow server a fileserver/HDFS model store uses.
    """
    root = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    env = {
        **os.environ,
        "MLFLOW_ALLOWED_HOST_ADDRESSED_ARTIFACT_SCHEMES": "http,https,hdfs",
        # as the chart and the local stack run it: no job runner (six huey consumers of
        # ~200 MB each, busy polling beside the tests; ElasticCTR submits no MLflow jobs)
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    }
    log = open(root / "server.log", "wb")  # noqa: SIM115 - closed in teardown
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--default-artifact-root",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"

    def wait() -> str:
        wait_for_port(
            "127.0.0.1", port, timeout=180, what="mlflow server", alive=lambda: proc.poll() is None
        )
        return uri

    # Not waited for here: it starts (DB migrations, ~50 s on a busy 2-core box) while
    # the training runs; trainer 0 logs only after its first partition and retries.
    try:
        yield uri, wait
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
