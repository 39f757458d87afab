"""A real HDFS for tests: MiniDFSCluster (scripts/hdfs, built by `make tools`) on loopback.

`MiniHdfs` starts `scripts/hdfs/minihdfs` in its own process group with free ports (the
JVM binds port 0 and reports the real ones), waits until the NameNode answers a real
`hdfs-native` client call *and* a DataNode accepts a block, and stops it: stdin closed
first (clean shutdown), then SIGTERM, then SIGKILL of the whole group. Because the JVM also
exits when its stdin closes, a test run that is killed outright leaves no java behind.

Missing Java or jars is a test failure telling you to run `make tools`, never a skip.
See docs/hdfs.md.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests import server_log

REPO = Path(__file__).resolve().parents[1]
LAUNCHER = REPO / "scripts" / "hdfs" / "minihdfs"
READY_PREFIX = "MINIHDFS READY "
START_TIMEOUT_S = float(os.environ.get("MINIHDFS_START_TIMEOUT", "180"))
STOP_TIMEOUT_S = 30.0
USER_ENV = "HADOOP_USER_NAME"  # what hdfs-native reads for simple authentication
TEST_ROOT = "/tests"  # world-writable and sticky: any HDFS_UGI user may create under it


def minihdfs_home() -> Path:
    return Path(os.environ.get("MINIHDFS_HOME", REPO / ".tools" / "hdfs"))


def require_minihdfs() -> None:
    """Fail (not skip) when Java or the bootstrapped jars are missing."""
    if shutil.which("java") is None:
        pytest.fail("java (17+) not on PATH: the test HDFS needs it; run `make tools`")
    jar = minihdfs_home() / "minihdfs.jar"
    if not jar.is_file():
        pytest.fail(f"{jar} missing: run `make tools` (scripts/bootstrap-tools.sh builds it)")


@contextlib.contextmanager
def hdfs_user(name: str | None) -> Iterator[None]:
    """Run a block with hdfs-native's user set to `name` (None: the OS user)."""
    old = os.environ.get(USER_ENV)
    if name is None:
        os.environ.pop(USER_ENV, None)
    else:
        os.environ[USER_ENV] = name
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(USER_ENV, None)
        else:
            os.environ[USER_ENV] = old


@dataclass
class MiniHdfs:
    """One MiniDFSCluster process; `start()` returns once it serves reads and writes."""

    base_dir: Path
    datanodes: int = 1
    advertise: str | None = None
    """An address of this machine other network namespaces reach (the test cluster's node
    IP): minihdfs --advertise, so pods get it for the NameNode and every DataNode."""
    url: str = ""
    nn_port: int = 0
    http_port: int = 0
    superuser: str = field(default_factory=getpass.getuser)
    start_seconds: float = 0.0
    _proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return server_log.log_path(self.base_dir)

    def log_tail(self, lines: int = 40) -> str:
        return server_log.log_tail(self.log_path, lines)

    def start(self, timeout: float = START_TIMEOUT_S) -> MiniHdfs:
        require_minihdfs()
        started = time.monotonic()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [str(LAUNCHER), "--base-dir", str(self.base_dir)]
                + ["--datanodes", str(self.datanodes), "--exit-on-stdin-close"]
                + (["--advertise", self.advertise] if self.advertise else []),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # its own process group: teardown kills all of it
                env={k: v for k, v in os.environ.items() if k != USER_ENV},
            )
        try:
            self._parse_ready(self._ready_line(timeout))
            self._wait_answers(started + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def _ready_line(self, timeout: float) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        result: list[str] = []
        stdout = self._proc.stdout

        def read() -> None:
            for raw in stdout:
                line = raw.decode(errors="replace").strip()
                if line.startswith(READY_PREFIX):
                    result.append(line)
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if not result:
            code = self._proc.poll()
            state = f"exited with {code}" if code is not None else f"not ready in {timeout}s"
            raise RuntimeError(f"minihdfs {state}; log {self.log_path}:\n{self.log_tail()}")
        return result[0]

    def _parse_ready(self, line: str) -> None:
        fields = dict(item.split("=", 1) for item in line[len(READY_PREFIX) :].split())
        self.url = fields["url"]
        self.nn_port = int(fields["nn-port"])
        self.http_port = int(fields["http-port"])

    def _wait_answers(self, deadline: float) -> None:
        """RPC port accepts, a metadata call and a one-block write round-trip succeed."""
        from hdfs_native import Client

        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"minihdfs exited; log:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.nn_port), timeout=2):
                    pass
                with hdfs_user(self.superuser):
                    client = Client(self.url)
                    client.get_file_info("/")
                    probe = "/.minihdfs-probe"
                    with client.create(probe) as fh:
                        fh.write(b"ok")
                    with client.read(probe) as fh:
                        if fh.read() != b"ok":
                            raise RuntimeError("probe read back different bytes")
                    client.delete(probe)
                    client.mkdirs(TEST_ROOT, permission=0o1777)
                    client.set_permission(TEST_ROOT, 0o1777)  # mkdirs applies the umask
                return
            except Exception as exc:  # connection refused, safe mode, no datanode yet
                last = exc
                time.sleep(0.25)
        raise RuntimeError(f"minihdfs never answered ({last}); log:\n{self.log_tail()}")

    def as_superuser(self, action):
        """Run ``action(client)`` with a fresh hdfs-native client of the HDFS superuser.

        Fresh because hdfs-native reads the user from the environment when it connects.
        """
        from hdfs_native import Client

        with hdfs_user(self.superuser):
            return action(Client(self.url))

    def make_open_dir(self, path: str, mode: int = 0o777) -> str:
        """Create ``path`` (and parents) as the superuser, writable by every user."""

        def mk(client) -> None:
            client.mkdirs(path, permission=mode, create_parent=True)
            client.set_permission(path, mode)  # mkdirs applies the umask

        self.as_superuser(mk)
        return f"{self.url}{path}"

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()  # asks for a clean shutdown
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S / 3)
            except subprocess.TimeoutExpired:
                self._signal_group(proc.pid, signal.SIGKILL)
                proc.wait(10)
        # Anything the launcher's group may still hold (nothing, normally) goes too.
        self._signal_group(proc.pid, signal.SIGKILL)
        if proc.stdout:
            proc.stdout.close()

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> MiniHdfs:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
