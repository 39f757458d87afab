"""Prediction load for the tests that count failed requests through an event (a cube
replica or serving pod going away, a rollout): client threads posting 5-line batches to
serving's /v1/predict without retries; every answer other than 200 and every transport
error is a failed request."""

from __future__ import annotations

import threading
import time

import httpx


class PredictionLoad:
    """`threads` clients of `url` (`http`: httpx.Client arguments), `pause` seconds
    between one client's requests; records what was sent, failed (with the time), each
    answer's latency and the model versions that answered."""

    def __init__(
        self,
        url: str,
        lines: list[bytes],
        http: dict | None = None,
        threads: int = 2,
        pause: float = 0.05,
    ):
        self.url, self.lines, self.pause, self.http = url, lines, pause, http or {}
        self.sent = 0
        self.failed: list[str] = []
        self.latencies: list[float] = []
        self.versions: set[str] = set()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(threads)]

    def _run(self, i: int) -> None:
        with httpx.Client(timeout=30, **self.http) as c:
            k = i * 1000
            while not self.stop.is_set():
                body = b"\n".join(self.lines[k % len(self.lines) :][:5]) + b"\n"
                k += 5
                self.sent += 1
                t0 = time.monotonic()
                try:
                    r = c.post(self.url + "/v1/predict", content=body,
                               headers={"Content-Type": "text/plain"})  # fmt: skip
                except httpx.HTTPError as exc:
                    self.failed.append(f"{time.strftime('%T')} {type(exc).__name__}: {exc}")
                    continue
                self.latencies.append(time.monotonic() - t0)
                if r.status_code != 200:
                    self.failed.append(f"{time.strftime('%T')} {r.status_code} {r.text[:1000]}")
                else:
                    self.versions.add(r.json().get("version"))
                if self.pause:
                    self.stop.wait(self.pause)

    def __enter__(self) -> PredictionLoad:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)
