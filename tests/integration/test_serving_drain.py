"""Serving drains on SIGTERM (docs/serving.md "Drain"): a real `ectl serve` process under
constant load is sent SIGTERM; it turns not ready at once, answers every request it had
received and every new connection during the drain window, then exits 0."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest
from serving_helpers import ServeProc
from test_serving import SLOTS, V1
from tests.conftest import shared_path

pytestmark = pytest.mark.integration

DRAIN_SECONDS = 1.5
WAIT_MS = 200  # every request waits this long in the batcher: many are in flight at once


def test_sigterm_drains_every_request_in_flight(tmp_path):
    from elasticctr.serving.testing import keys_of_file, write_version

    demo = shared_path("data", "elasticctr", "serving_demo_data.txt")
    write_version(tmp_path / "store", V1, slots=SLOTS, dim=8, keys=keys_of_file(demo, SLOTS))
    proc = ServeProc(
        ["--store", str(tmp_path / "store"), "--version", V1, "--poll-interval", "0",
         "--max-wait-ms", str(WAIT_MS), "--drain-seconds", str(DRAIN_SECONDS),
         "--cache", str(tmp_path / "cache")],
        tmp_path / "serve.log",
    )  # fmt: skip
    lines = demo.read_bytes().splitlines()[:20]
    ok: list[float] = []  # when each 200 arrived
    failed: list[str] = []
    refused: list[float] = []
    stop = threading.Event()

    def client(i: int) -> None:
        with httpx.Client(timeout=30) as c:  # keep-alive: the drain must close it cleanly
            while not stop.is_set():
                try:
                    r = c.post(proc.url + "/v1/predict", content=lines[i % len(lines)],
                               headers={"Content-Type": "text/plain"})  # fmt: skip
                except httpx.ConnectError:  # not listening any more: the request never left
                    refused.append(time.monotonic())
                    return
                except httpx.HTTPError as exc:  # sent, and no answer: what a drain must avoid
                    failed.append(f"{type(exc).__name__}: {exc}")
                    return
                if r.status_code == 200:
                    ok.append(time.monotonic())
                else:
                    failed.append(f"{r.status_code} {r.text[:200]}")

    try:
        proc.wait_ready()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        time.sleep(2.0)
        before = len(ok)
        t_term = time.monotonic()
        os.killpg(proc.proc.pid, signal.SIGTERM)
        time.sleep(0.1)
        ready = httpx.get(proc.url + "/readyz", timeout=5)
        assert ready.status_code == 503, ready.text
        assert ready.json()["error"]["code"] == "draining"
        rc = proc.proc.wait(30)
        t_exit = time.monotonic()
        stop.set()
        for t in threads:
            t.join(30)
    finally:
        stop.set()
        proc.stop()
    after = [t for t in ok if t > t_term]
    print(
        f"drain: {before} answered before SIGTERM, {len(after)} after it "
        f"(last {max(after) - t_term:.2f}s after), exit {t_exit - t_term:.2f}s after SIGTERM, "
        f"{len(refused)} clients refused once it stopped listening, {len(failed)} failed"
    )
    assert rc == 0, proc.log.read_text(errors="replace")[-3000:]
    assert not failed, failed[:5]
    assert before > 0
    # Requests kept being answered through the drain window (new connections included:
    # every answer while draining closes its connection).
    assert max(after) - t_term >= DRAIN_SECONDS - WAIT_MS / 1000, proc.log.read_text(
        errors="replace"
    )[-3000:]
    assert len(refused) == len(threads)
    assert "drained in" in proc.log.read_text(errors="replace")[-3000:]
