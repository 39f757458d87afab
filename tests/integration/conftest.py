"""Fixtures for integration tests: a real HDFS (MiniDFSCluster) shared by the session.

`hdfs_cluster` yields the ``hdfs://127.0.0.1:PORT`` URL of one MiniDFSCluster started for the
whole session (about 5 s to start; see docs/hdfs.md); `hdfs_dir` gives each test its own
empty, world-writable folder URL on it. Permissions are enforced, so HDFS_UGI matters: the
OS user running the tests is the HDFS superuser; any other user may write only under
`hdfs_dir` (and `/tests`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from tests.hdfs_fixture import TEST_ROOT, MiniHdfs


@pytest.fixture(scope="session")
def minihdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniHdfs]:
    """The running MiniDFSCluster process (ports, pid, log, superuser)."""
    cluster = MiniHdfs(tmp_path_factory.mktemp("minihdfs") / "cluster")
    try:
        cluster.start()
    except RuntimeError as exc:
        pytest.fail(f"the test HDFS did not start: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def hdfs_cluster(minihdfs: MiniHdfs) -> str:
    """``hdfs://127.0.0.1:PORT`` of the session's MiniDFSCluster."""
    return minihdfs.url


@pytest.fixture
def hdfs_dir(minihdfs: MiniHdfs) -> str:
    """A fresh, existing, world-writable (0777) folder URL on the test HDFS for this test."""
    return minihdfs.make_open_dir(f"{TEST_ROOT}/{uuid.uuid4().hex[:12]}")
