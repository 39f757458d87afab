"""Start and stop real `ectl serve` processes for the serving tests and bench."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from elasticctr.net import free_port

ECTL = [sys.executable, "-m", "elasticctr.cli.main"]


class ServeProc:
    def __init__(self, args: list[str], log: Path, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.fh = open(log, "wb")
        self.proc = subprocess.Popen(
            [*ECTL, "serve", "--port", str(self.port), *args],
            stdout=self.fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "GLOG_minloglevel": "2", **(env or {})},
            start_new_session=True,
            cwd=log.parent,  # anything the service writes relative (e.g. ./mlruns) stays there
        )

    def wait_ready(
        self, timeout: float = 90.0, headers: dict | None = None, loaded: bool = True
    ) -> dict:
        """Wait for /readyz 200 (with a loaded version unless `loaded` is false: serving is
        also ready while no model version exists yet); return its body."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ectl serve exited {self.proc.returncode}: {self.text()}")
            try:
                r = httpx.get(self.url + "/readyz", timeout=1)
                if r.status_code == 200 and (r.json().get("version") or not loaded):
                    return r.json()
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"ectl serve not ready in {timeout}s: {self.text()}")

    def text(self) -> str:
        self.fh.flush()
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.fh.close()
