"""A real S3 server for tests: SeaweedFS (`weed server`, built by `make tools`) on loopback.

`SeaweedS3` starts one `weed server` (master, volume server, filer and S3 gateway in one
process) in its own process group, on free loopback ports, with small volumes, no
telemetry and S3 identities from `-s3.config` (so credentials are checked: a wrong key is
refused). It waits until a signed PUT / GET / DELETE round trip through the S3 gateway
succeeds, and stops it with SIGTERM and, after a short grace, SIGKILL of the whole
group (its graceful shutdown stops the volume server first and then waits 15 s for a
metadata flush it can no longer do; the data are throwaway). A watchdog thread
inside the test process is not enough when the process is SIGKILLed, so `weed` runs under
a tiny shell that exits (and takes `weed` with it) when its stdin, a pipe from the test
process, closes: a test run that is killed outright leaves no server behind.

A missing binary is a test failure telling you to run `make tools`, never a skip.
See docs/storage.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests import server_log

from elasticctr import constants as C
from elasticctr.net import free_port

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = float(os.environ.get("SEAWEEDFS_START_TIMEOUT", "120"))
STOP_GRACE_S = 2.0
REGION = "us-east-1"
TEST_BUCKET = "ectl-tests"
"""Created at start (the readiness probe writes there); tests get their own prefix in it
(SeaweedFS keeps a volume collection per bucket, so a bucket per test would use up the
small volume budget, and the first write to a new bucket waits for its volume)."""

# `weed` dies with its parent: the shell waits for EOF on stdin (the test process holds
# the pipe's other end, closed on exit or SIGKILL), then sends weed SIGTERM and, after the
# grace, SIGKILL (weed's own graceful shutdown can hang for 15 s, see stop()).
_SUPERVISOR = (
    'trap "" INT; "$@" <&- & child=$!; cat >/dev/null; kill -TERM "$child"; '
    f'sleep {STOP_GRACE_S:g}; kill -KILL "$child" 2>/dev/null; wait'
)


def weed_binary() -> Path:
    return Path(os.environ.get("ELASTICCTR_WEED", REPO / ".tools" / "bin" / "weed"))


def require_weed() -> Path:
    """Fail (not skip) when the bootstrapped binary is missing."""
    weed = weed_binary()
    if not (weed.is_file() and os.access(weed, os.X_OK)):
        pytest.fail(
            f"{weed} missing: run `make tools` (scripts/bootstrap-tools.sh builds SeaweedFS)"
        )
    return weed


@dataclass
class SeaweedS3:
    """One `weed server -s3` process; `start()` returns once the S3 gateway serves."""

    base_dir: Path
    host: str = "127.0.0.1"
    """The address every port binds and the endpoint names: loopback, or an address of this
    machine that other network namespaces reach (the test cluster's node IP, for pods)."""
    access_key: str = "ectl-test-key"
    secret_key: str = field(default_factory=lambda: secrets.token_hex(16))
    endpoint: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    start_seconds: float = 0.0
    _proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return server_log.log_path(self.base_dir)

    def log_tail(self, lines: int = 40) -> str:
        return server_log.log_tail(self.log_path, lines)

    @property
    def env(self) -> dict[str, str]:
        """What a client needs (the names elasticctr.data.storage reads)."""
        return {
            C.ENV_S3_ENDPOINT: self.endpoint,
            C.ENV_S3_REGION: REGION,
            C.ENV_S3_PATH_STYLE: "true",
            C.ENV_S3_ACCESS_KEY_ID: self.access_key,
            C.ENV_S3_SECRET_ACCESS_KEY: self.secret_key,
        }

    def command(self, weed: Path) -> list[str]:
        p = self.ports
        return [
            str(weed),
            "server",
            f"-dir={self.base_dir / 'data'}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}",
            "-master.volumeSizeLimitMB=64",
            "-master.telemetry=false",
            "-master.vacuumIntervalSeconds=3600",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume_grpc']}",
            "-volume.max=32",
            "-volume.index=memory",
            "-volume.preStopSeconds=0",
            "-filer",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer_grpc']}",
            f"-filer.localSocket={self.base_dir / 'filer.sock'}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3_grpc']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={self.base_dir / 's3.sock'}",
            f"-s3.config={self.base_dir / 's3.json'}",
            "-s3.autoCreateBucket=false",  # a missing bucket must stay an error
        ]

    def start(self, timeout: float = START_TIMEOUT_S, attempts: int = 3) -> SeaweedS3:
        """Start weed on free ports. A port found free can be taken by another process
        before weed binds it (seen: the HDFS minicluster's JVM started just before, `s3
        failed to listen on grpc port ...: address already in use`): then again on new
        ports, up to `attempts` times."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once(timeout)
            except RuntimeError:
                if attempt == attempts or "address already in use" not in self.log_tail(200):
                    raise

    def _start_once(self, timeout: float) -> SeaweedS3:
        weed = require_weed()
        started = time.monotonic()
        (self.base_dir / "data").mkdir(parents=True, exist_ok=True)
        identities = {
            "identities": [
                {
                    "name": "ectl",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        (self.base_dir / "s3.json").write_text(json.dumps(identities))
        names = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc")
        self.ports = {name: free_port() for name in (*names, "s3", "s3_grpc")}
        self.endpoint = f"http://{self.host}:{self.ports['s3']}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        # Grow one volume per collection (bucket) at a time instead of 7: small and fast.
        env["WEED_MASTER_VOLUME_GROWTH_COPY_1"] = "1"
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                ["sh", "-c", _SUPERVISOR, "weed-supervisor", *self.command(weed)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.base_dir,
                start_new_session=True,  # its own process group: teardown kills all of it
                env=env,
            )
        try:
            self._wait_serves(started + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def client(self, access_key: str | None = None, secret_key: str | None = None):
        """A plain botocore client (not the code under test) for set-up and checks."""
        import botocore.session
        from botocore.config import Config

        return botocore.session.get_session().create_client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            config=Config(
                s3={"addressing_style": "path"},
                connect_timeout=2,
                read_timeout=30,
                retries={"max_attempts": 1},
            ),
        )

    def _wait_serves(self, deadline: float) -> None:
        """A signed bucket create, PUT, GET and DELETE succeed (master, volume server,
        filer and gateway are all up and the identities are loaded). The probe runs in
        the tests' bucket, so its first volume is grown here, not in the first test."""
        last: Exception | None = None
        probe = TEST_BUCKET
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(
                    f"weed exited with {self._proc.returncode}; log:\n{self.log_tail()}"
                )
            try:
                client = self.client()
                with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                    client.create_bucket(Bucket=probe)
                client.put_object(Bucket=probe, Key="probe", Body=b"ok")
                body = client.get_object(Bucket=probe, Key="probe")["Body"].read()
                if body != b"ok":
                    raise RuntimeError(f"probe read back {body!r}")
                client.delete_object(Bucket=probe, Key="probe")
                return
            except Exception as exc:  # refused, 5xx while the volume server registers
                last = exc
                time.sleep(0.2)
        raise RuntimeError(f"weed S3 never answered ({last}); log:\n{self.log_tail()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()  # the supervisor shell sends weed SIGTERM
        deadline = time.monotonic() + STOP_GRACE_S + 1
        while time.monotonic() < deadline:
            if proc.poll() is not None and not self._group_alive(proc.pid):
                break  # the shell is reaped here; weed, reparented, by init
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of the group is left
        proc.wait(10)

    @staticmethod
    def _group_alive(pgid: int) -> bool:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    @property
    def pid(self) -> int | None:
        """The supervisor shell's pid, also the process group of weed."""
        return self._proc.pid if self._proc else None


@contextlib.contextmanager
def s3_env(server: SeaweedS3, **overrides: str) -> Iterator[None]:
    """Run a block with the S3 client environment of `server` (plus overrides; "" unsets)."""
    wanted = {**server.env, **overrides}
    old = {name: os.environ.get(name) for name in wanted}
    try:
        for name, value in wanted.items():
            if value:
                os.environ[name] = value
            else:
                os.environ.pop(name, None)
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
