"""`ectl predict`: send sample lines to the service, collect probabilities, score them.

ElasticCTR's `-c` client: lines are checked locally with the data parser first (a bad
line is reported with file:line before anything is sent), then sent in chunks; the labels
of the lines give AUC and logloss.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx
import numpy as np

from elasticctr.data.parser import FileStats, LineParser
from elasticctr.errors import EctlError, ValidationError
from elasticctr.scenarios import DEFAULT, check_name


@dataclass
class PredictResult:
    probabilities: np.ndarray
    labels: np.ndarray
    versions: list[str]
    auc: float | None
    logloss: float


def auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """ROC AUC by ranks (ties averaged); None when only one class is present."""
    labels = np.asarray(labels) > 0
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        return None
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = np.asarray(scores)[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    i = 0
    while i < len(scores):  # average ranks over ties
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


def logloss(labels: np.ndarray, probs: np.ndarray, eps: float = 1e-7) -> float:
    p = np.clip(np.asarray(probs, np.float64), eps, 1 - eps)
    y = np.asarray(labels, np.float64)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


class NoModelYet(ValidationError):
    """The service runs but no model version exists yet (503 `no_model`)."""


RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0)
"""Seconds before each retry of a call that a replica could not answer (connection error,
timeout, 502/503/504 other than `no_model`): predictions and version reads are idempotent,
and a new connection through the Service reaches another replica."""


def retry_delays_for(wait_seconds: float) -> tuple[float, ...]:
    """RETRY_DELAYS, then 2 s pauses until they add up to `wait_seconds` (`ectl predict
    --wait-ready`)."""
    delays = list(RETRY_DELAYS)
    while sum(delays) < wait_seconds:
        delays.append(min(2.0, wait_seconds - sum(delays)))
    return tuple(delays)


class ServingClient:
    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = 30.0,
        scenario: str | None = None,
        retry_delays: tuple[float, ...] = RETRY_DELAYS,
    ):
        """`scenario`: a scenario of the platform (`/v1/scenarios/{name}/...`); None or
        `default` = the default scenario's `/v1/predict`."""
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout
        self.url = url.rstrip("/")
        if scenario and scenario != DEFAULT:
            self.prefix = f"/v1/scenarios/{check_name(scenario, field_name='--scenario')}"
        else:
            self.prefix = "/v1"
        self.retry_delays = retry_delays
        self.retries = 0
        self.http = self._client()

    def _client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=self.timeout)

    def close(self):
        self.http.close()

    @staticmethod
    def _retryable(resp: httpx.Response) -> bool:
        if resp.status_code not in (502, 503, 504):
            return False
        try:
            return resp.json()["error"]["code"] != "no_model"
        except (ValueError, KeyError, TypeError):
            return True

    def _call(self, method: str, path: str, **kw) -> httpx.Response:
        for delay in (*self.retry_delays, None):
            try:
                resp = self.http.request(method, path, **kw)
            except httpx.TransportError as exc:
                if delay is None:
                    raise EctlError(
                        f"cannot reach the prediction service at {self.url}: {exc}",
                        hint="check --url (or ELASTICCTR_SERVING_URL) and that `ectl serve` runs",
                    ) from exc
            else:
                if delay is None or not self._retryable(resp):
                    break
            # Another replica: drop this one's keep-alive connections, then ask again.
            self.retries += 1
            self.http.close()
            self.http = self._client()
            time.sleep(delay)
        if resp.status_code >= 400:
            try:
                err = resp.json()["error"]
                msg = err["message"]
                problems = err.get("problems", [])
            except (ValueError, KeyError, TypeError):
                msg, problems, err = resp.text[:300], [], {}
            cls = NoModelYet if err.get("code") == "no_model" else ValidationError
            raise cls(f"{self.url}{path}: {resp.status_code} {msg}", problems)
        return resp

    def version(self) -> dict:
        return self._call("GET", f"{self.prefix}/version").json()

    def predict_lines(self, data: bytes) -> tuple[str, list[float]]:
        resp = self._call(
            "POST", f"{self.prefix}/predict", content=data, headers={"Content-Type": "text/plain"}
        )
        doc = resp.json()
        return doc["version"], doc["probabilities"]

    def predict_file(self, data: bytes, source: str, chunk: int = 500) -> PredictResult:
        info = self.version()
        parser = LineParser(info["slots"], info.get("sparse_dim"))
        stats = FileStats(source=source)
        batch = parser.parse(data, stats)
        if stats.malformed:
            raise ValidationError(
                f"{source}: {stats.malformed} malformed line(s); nothing was sent",
                problems=stats.examples,
            )
        if stats.ignored_slots:
            raise ValidationError(
                f"{source}: slot(s) {sorted(stats.ignored_slots)[:10]} are not slots of model "
                f"version {info['version']} ({info['slots']})"
            )
        if len(batch) == 0:
            raise EctlError(f"{source}: no samples")
        lines = [ln for ln in data.split(b"\n") if ln.strip()]
        probs: list[float] = []
        versions: list[str] = []
        for start in range(0, len(lines), chunk):
            version, p = self.predict_lines(b"\n".join(lines[start : start + chunk]) + b"\n")
            probs.extend(p)
            if version not in versions:
                versions.append(version)
        probs_arr = np.asarray(probs, dtype=np.float64)
        labels = batch.click.astype(np.float64)
        return PredictResult(probs_arr, labels, versions, auc(labels, probs_arr),
                             logloss(labels, probs_arr))  # fmt: skip
