"""Helpers of the image tests: the docker client with cleanup by label, paths."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
IMAGES = ("train", "serving", "cube", "fileserver", "mlflow", "console")


def run(cmd: list[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


class Docker:
    """The docker client, with every container and network it starts labelled for cleanup."""

    def __init__(self, binary: str):
        self.binary = binary
        self.label = f"elasticctr-test={uuid.uuid4().hex[:12]}"

    def __call__(self, *args: str, timeout: float = 600, check: bool = True):
        done = run([self.binary, *args], timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)}: exit {done.returncode}\n"
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")  # fmt: skip
        return done

    def run(self, image: str, *args: str, options: tuple[str, ...] = (), timeout: float = 300):
        """`docker run --rm` of one command; returns the finished process (not checked)."""
        return self(
            "run", "--rm", "--label", self.label, *options, image, *args,
            timeout=timeout, check=False,
        )  # fmt: skip

    def start(self, image: str, *args: str, name: str, options: tuple[str, ...] = ()) -> str:
        """A detached container; its id. Removed by cleanup() (never with --rm: logs stay)."""
        return self(
            "run", "-d", "--name", name, "--label", self.label, *options, image, *args
        ).stdout.strip()

    def network(self, name: str) -> str:
        self("network", "create", "--label", self.label, name)
        return name

    def logs(self, name: str) -> str:
        done = self("logs", "--tail", "80", name, check=False)
        return done.stdout + done.stderr

    def published(self, name: str, port: int) -> str:
        """host:port where a container's port is published (`-p 127.0.0.1::PORT`)."""
        out = self("port", name, f"{port}/tcp").stdout.split()[0]
        return out

    def wait_http(self, name: str, url: str, timeout: float = 90) -> httpx.Response:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            state = json.loads(self("inspect", name).stdout)[0]["State"]
            if not state["Running"]:
                raise AssertionError(f"{name} exited {state['ExitCode']}:\n{self.logs(name)}")
            try:
                r = httpx.get(url, timeout=2)
                if r.status_code == 200:
                    return r
                last = f"{r.status_code} {r.text[:200]}"
            except httpx.HTTPError as exc:
                last = str(exc)
            time.sleep(0.3)
        raise AssertionError(f"{name}: {url} not ready in {timeout}s ({last}):\n{self.logs(name)}")

    def cleanup(self) -> None:
        ids = self("ps", "-aq", "--filter", f"label={self.label}", check=False).stdout.split()
        if ids:
            self("rm", "-f", *ids, check=False, timeout=120)
        nets = self("network", "ls", "-q", "--filter", f"label={self.label}", check=False)
        if nets.stdout.split():
            self("network", "rm", *nets.stdout.split(), check=False)
