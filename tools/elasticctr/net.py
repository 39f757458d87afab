"""Loopback/network helpers shared by local mode, launchers and tests."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import tempfile
import time
from pathlib import Path

from elasticctr.errors import EctlError

PORT_RANGE = (20000, 32000)
"""Where `free_port` picks: below Linux's ephemeral range (32768-60999 by default), so
neither another program's `bind(0)` nor an outgoing connection's local port lands on a
port picked here between the pick and the bind of the process it is for."""
PORT_RESERVATION_SECONDS = 300.0
"""How long a port `free_port` returned stays reserved for its caller on this machine."""
PORT_RESERVATIONS = Path(tempfile.gettempdir()) / "elasticctr-ports"
"""One empty file per reserved port, shared by every elasticctr process on the machine."""


def _reserve(port: int) -> bool:
    """Claim `port` for PORT_RESERVATION_SECONDS among elasticctr processes (O_EXCL file;
    an expired claim is taken over)."""
    path = PORT_RESERVATIONS / str(port)
    for _ in range(2):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return True
        except FileExistsError:
            try:
                if time.time() - path.stat().st_mtime < PORT_RESERVATION_SECONDS:
                    return False
                path.unlink()
            except OSError:  # gone meanwhile (try again), or another user's claim
                continue
        except OSError:  # the directory is not writable: no claim, the bind test decides
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now and reserved for the caller for a few minutes: concurrent
    local jobs, servers and tests on one machine never get the same port (a pserver or
    coordinator that lost its port to another job's would otherwise leave its clients
    talking to that job's). Picked at random in PORT_RANGE, outside the kernel's
    ephemeral ports; the OS picks when that range is exhausted."""
    try:
        PORT_RESERVATIONS.mkdir(mode=0o1777, exist_ok=True)
    except OSError:
        pass
    for _ in range(200):
        port = random.randrange(*PORT_RANGE)
        if not _reserve(port):
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:  # in use by something that does not reserve
                continue
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def listening_pids(port: int) -> set[int] | None:
    """PIDs of the processes with a TCP socket listening on `port` (any address), from
    /proc; None where /proc does not tell (not Linux, or no permission)."""
    inodes = set()
    try:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(FileNotFoundError), open(table) as fh:
                next(fh, None)
                for line in fh:
                    fields = line.split()
                    local, state, inode = fields[1], fields[3], fields[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{inode}]")
    except OSError:
        return None
    if not inodes:
        return set()
    pids = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry.name}/fd/{fd}") in inodes:
                    pids.add(int(entry.name))
                    break
            except OSError:
                continue
    return pids


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
