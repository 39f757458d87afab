"""Helpers for the cube integration tests: model versions whose rows name their version,
and real `ectl cube server` processes on free loopback ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from elasticctr.cube.modelstore import write_version
from elasticctr.net import free_port, wait_for_port

DIM = 4


def version_rows(keys: np.ndarray, tag: int) -> np.ndarray:
    """Rows that identify (version, key): column 0 is the version tag, the rest the key."""
    rows = np.empty((keys.size, DIM), dtype=np.float32)
    rows[:, 0] = tag
    rows[:, 1] = (keys % np.uint64(1000)).astype(np.float32)
    rows[:, 2] = (keys % np.uint64(997)).astype(np.float32)
    rows[:, 3] = -tag
    return rows


def make_version(store: Path, version: str, keys: np.ndarray, tag: int, parts: int = 2) -> Path:
    rows = version_rows(keys, tag)
    cuts = np.array_split(np.arange(keys.size), parts)
    return write_version(store, version, [(keys[c], rows[c]) for c in cuts], slots=[0, 1, 2])


def random_keys(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(1, 2**64 - 1, n + n // 10 + 10, dtype=np.uint64))[:n]
    rng.shuffle(keys)
    return keys


class ShardProc:
    """One `ectl cube server` process; restartable on the same state dir."""

    def __init__(
        self,
        cube_root: Path,
        state_dir: Path,
        shard: int,
        num_shards: int,
        keep=2,
        capacity_mib=0,
        env: dict[str, str] | None = None,
    ):
        self.args = [
            sys.executable, "-m", "elasticctr.cli.main", "cube", "server",
            "--cube-root", str(cube_root), "--state-dir", str(state_dir),
            "--shard", str(shard), "--num-shards", str(num_shards), "--keep", str(keep),
            "--capacity-mib", str(capacity_mib),
        ]  # fmt: skip
        self.state_dir = state_dir
        self.env = env or {}
        self.log = state_dir.parent / f"shard-{shard}.log"
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ShardProc:
        """Start (or restart on the same port: clients keep their shard URLs)."""
        self.port = self.port or free_port()
        self.proc = subprocess.Popen(
            [*self.args, "--port", str(self.port)],
            stdout=open(self.log, "ab"),  # noqa: SIM115 - the child owns it
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )
        wait_for_port(
            "127.0.0.1", self.port, timeout=60, what="cube server",
            alive=lambda: self.proc.poll() is None,
        )  # fmt: skip
        return self

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> int | None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode if self.proc else None

    def wait_ready(self, version: str | None = None, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"{self.url}/readyz", timeout=5)
                last = r.text
                if r.status_code == 200 and (version is None or r.json()["version"] == version):
                    return r.json()
            except httpx.HTTPError as exc:
                last = str(exc)
            time.sleep(0.1)
        raise AssertionError(f"shard at {self.url} not ready on {version}: {last}")
