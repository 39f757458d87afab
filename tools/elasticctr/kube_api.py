"""The Kubernetes API from inside a pod, with the pod's service account.

What the runtime parts that talk to the API use (cube-transfer's scenario registry, the
coordinator giving room to kube-scheduler): plain REST over httpx, so the images need no
Kubernetes client library. The token is read again for every request: the kubelet
rotates a projected service-account token in place.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from elasticctr.errors import EctlError

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where the kubelet mounts a pod's service-account token, CA and namespace."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


class ApiError(EctlError):
    """The API server answered with an error status (`status`: the HTTP code)."""

    def __init__(self, message: str, status: int, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.status = status


class InCluster:
    """The API server of the pod's cluster, as the pod's service account.

    `api`, `namespace`, `token` and `ca` default to what Kubernetes gives every pod
    (KUBERNETES_SERVICE_HOST/PORT and the files in SA_DIR); tests pass their own.
    `purpose` names the caller in errors ("scenario registry", ...).
    """

    def __init__(
        self,
        *,
        purpose: str,
        namespace: str | None = None,
        api: str | None = None,
        token: str | None = None,
        ca: str | None = None,
        timeout: float = 10.0,
    ):
        self.purpose = purpose
        self.namespace = namespace or _read(SA_DIR / "namespace")
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.api = (api or (f"https://{host}:{port}" if host else "")).rstrip("/")
        self._token = token
        self.ca = ca if ca is not None else str(SA_DIR / "ca.crt")
        self.timeout = timeout
        if not self.api or not self.namespace:
            raise EctlError(
                f"{purpose} needs the Kubernetes API server and a namespace",
                hint="run inside a pod with a service account",
            )

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        token = self._token if self._token is not None else _read(SA_DIR / "token")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _verify(self) -> Any:
        return ssl.create_default_context(cafile=self.ca) if Path(self.ca).is_file() else True

    def _check(self, resp, what: str, hint: str | None) -> Any:
        if resp.status_code >= 300:
            raise ApiError(
                f"{self.purpose}: {what}: HTTP {resp.status_code} {resp.text[:200]}",
                resp.status_code,
                hint=hint,
            )
        return resp.json()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
        hint: str | None = None,
    ) -> Any:
        """One request; the JSON answer. HTTP errors raise ApiError, network errors EctlError."""
        import httpx

        data = None if body is None else json.dumps(body).encode()
        try:
            resp = httpx.request(
                method,
                f"{self.api}{path}",
                params=params,
                content=data,
                headers=self._headers(content_type if body is not None else None),
                verify=self._verify(),
                timeout=self.timeout,
            )
        except httpx.HTTPError as exc:
            raise EctlError(f"{self.purpose}: {method} {path}: {exc}") from exc
        return self._check(resp, f"{method} {path}", hint)

    def get(self, path: str, params: dict[str, str] | None = None, hint: str | None = None) -> Any:
        return self.request("GET", path, params=params, hint=hint)

    def json_patch(self, path: str, ops: list[dict[str, Any]], hint: str | None = None) -> Any:
        """An RFC 6902 JSON patch (its `test` operations make it conditional)."""
        return self.request(
            "PATCH", path, body=ops, content_type="application/json-patch+json", hint=hint
        )

    def watch(
        self,
        path: str,
        params: dict[str, str],
        stop: threading.Event,
        *,
        seconds: int = 60,
        hint: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The events of one watch of `path` (a list URL) from `params["resourceVersion"]`,
        ending after `seconds` (the server closes it) or once `stop` is set between
        events. An ERROR event (e.g. 410 Gone: list again) raises ApiError."""
        import httpx

        query = dict(params, watch="1", timeoutSeconds=str(seconds), allowWatchBookmarks="true")
        timeout = httpx.Timeout(self.timeout, read=seconds + self.timeout)
        try:
            with httpx.stream(
                "GET",
                f"{self.api}{path}",
                params=query,
                headers=self._headers(),
                verify=self._verify(),
                timeout=timeout,
            ) as resp:
                if resp.status_code >= 300:
                    resp.read()
                    self._check(resp, f"watch {path}", hint)
                for line in resp.iter_lines():
                    if stop.is_set():
                        return
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiError(
                            f"{self.purpose}: watch {path}: {status.get('message', status)}",
                            int(status.get("code") or 500),
                            hint=hint,
                        )
                    yield event
        except httpx.HTTPError as exc:
            raise EctlError(f"{self.purpose}: watch {path}: {exc}") from exc
