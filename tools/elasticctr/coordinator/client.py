"""Trainer-side client of the coordinator API, tolerant of coordinator restarts."""

from __future__ import annotations

import time

import httpx

from elasticctr.errors import EctlError

UNREACHABLE = (
    httpx.NetworkError,  # refused, reset, broken pipe (connect, read, write, close)
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,  # closed before (or in the middle of) its answer
    httpx.ProxyError,
)
"""The coordinator unreachable, so the call is retried until `retry_seconds`: the
connection errors only. A read timeout is not among them: the call may have been served
(a lease granted), so it is raised as it is, not sent again."""


class CoordinatorClient:
    """Calls retry on connection errors for up to `retry_seconds` (a restarting
    coordinator is normal: Volcano restarts the job, local mode restarts the process)."""

    def __init__(
        self, url: str, trainer: str, *, retry_seconds: float = 120.0, timeout: float = 10.0
    ):
        self.url = url.rstrip("/")
        self.trainer = str(trainer)
        self.retry_seconds = retry_seconds
        self.timeout = timeout
        self._http = httpx.Client(timeout=timeout)

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.2
        while True:
            try:
                resp = self._http.request(
                    method,
                    self.url + path,
                    json=None if body is None else {"trainer": self.trainer, **body},
                    timeout=self.timeout,
                )
            except UNREACHABLE as exc:
                # Refused or reset: the coordinator is (re)starting, e.g. its pod is not
                # listening yet when the trainers of the same Volcano Job start.
                if time.monotonic() >= deadline:
                    raise EctlError(
                        f"coordinator at {self.url} unreachable for "
                        f"{self.retry_seconds:.0f}s: {exc}"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            if resp.status_code >= 400:
                raise EctlError(
                    f"coordinator {path} answered {resp.status_code}: {resp.text[:300]}"
                )
            return resp.json()

    def _post(self, path: str, body: dict) -> dict:
        return self._call("POST", path, body)

    def lease(self) -> dict:
        return self._post("/v1/lease", {})

    def heartbeat(self, lease: str) -> bool:
        return bool(self._post("/v1/heartbeat", {"lease": lease})["ok"])

    def complete(self, lease: str, samples: int) -> dict:
        return self._post("/v1/complete", {"lease": lease, "samples": int(samples)})

    def fail(self, lease: str, reason: str) -> None:
        self._post("/v1/fail", {"lease": lease, "reason": reason})

    def leave(self) -> int:
        return int(self._post("/v1/leave", {})["requeued"])

    def exported(self, partition: str, version: str, checkpoint: bool) -> None:
        self._post(
            "/v1/exported", {"partition": partition, "version": version, "checkpoint": checkpoint}
        )

    def loaded(self, version: str) -> None:
        self._post("/v1/loaded", {"version": version})

    def progress(self) -> dict:
        return self._call("GET", "/v1/progress")
