"""Loopback/network helpers shared by local mode, launchers and tests."""

from __future__ import annotations

import socket
import time

from elasticctr.errors import EctlError


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free right now (the OS picks it); racy by nature, retry on bind errors."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(host: str, port: int, *, timeout: float, what: str, alive=None) -> None:
    """Block until host:port accepts TCP connections, or raise a clear EctlError.

    `alive`, if given, is called between attempts; returning False means the process
    that should listen died, so waiting longer is pointless.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(host, port):
            return
        if alive is not None and not alive():
            raise EctlError(f"{what} exited before listening on {host}:{port}")
        time.sleep(0.1)
    raise EctlError(f"{what} did not listen on {host}:{port} within {timeout:.0f}s")


def wait_http_ok(url: str, *, timeout: float, what: str, alive=None) -> None:
    """Poll a GET endpoint until it answers 200 (e.g. MLflow's /health)."""
    import httpx

    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError as exc:
            last = str(exc)
        if alive is not None and not alive():
            raise EctlError(f"{what} exited before {url} answered")
        time.sleep(0.5)
    raise EctlError(f"{what} did not answer {url} within {timeout:.0f}s ({last})")
