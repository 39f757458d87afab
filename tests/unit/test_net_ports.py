"""elasticctr.net.free_port: ports reserved among concurrent elasticctr processes."""

from __future__ import annotations

import os
import socket
import time

import pytest

from elasticctr import net

pytestmark = pytest.mark.fast


@pytest.fixture
def reservations(tmp_path, monkeypatch):
    monkeypatch.setattr(net, "PORT_RESERVATIONS", tmp_path / "ports")
    return tmp_path / "ports"


def test_ports_are_reserved_outside_the_ephemeral_range(reservations):
    low, high = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    ports = [net.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)  # never the same one twice while reserved
    assert all(net.PORT_RANGE[0] <= p < net.PORT_RANGE[1] for p in ports)
    assert net.PORT_RANGE[1] <= low or net.PORT_RANGE[0] > high
    # each one claimed (other threads of the test process may claim more meanwhile)
    assert set(ports) <= {int(f.name) for f in reservations.iterdir()}


def test_a_reserved_or_bound_port_is_skipped_and_an_expired_claim_taken_over(
    reservations, monkeypatch
):
    picks = iter([21000, 21001, 21002, 21002])
    monkeypatch.setattr(net.random, "randrange", lambda *_: next(picks))
    reservations.mkdir()
    (reservations / "21000").touch()  # another process's fresh claim
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 21001))  # a program that reserves nothing
        assert net.free_port() == 21002
    # 21002 is now claimed; once the claim expires it is handed out again
    old = time.time() - net.PORT_RESERVATION_SECONDS - 1
    os.utime(reservations / "21002", (old, old))
    picks = iter([21002])
    assert net.free_port() == 21002
    assert time.time() - (reservations / "21002").stat().st_mtime < 5


def test_listening_pids_names_the_holder():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert net.listening_pids(port) == set()  # bound, not listening
        sock.listen()
        assert net.listening_pids(port) == {os.getpid()}
