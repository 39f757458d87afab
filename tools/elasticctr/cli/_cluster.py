"""What `ectl`'s cluster-only verbs use through the Kubernetes API server, kept apart from
the verb modules (their imports stay free of the `kube` extra, which the images do not
install: tests/images/test_image_entrypoints.py):

  ProxiedTransfer  the release's cube-transfer through the API server's pod proxy, and
                   serving's replicas the same way (`ectl model`, the console)
  ClusterBackend   the console over a platform release on Kubernetes
"""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

from elasticctr import constants as C
from elasticctr import scenarios
from elasticctr.cli import _common as common
from elasticctr.cli._common import Target
from elasticctr.cli.console import _Backend, _transfer_call
from elasticctr.cli.model import (
    ADMIN_TOKEN_HEADER,
    TransferCallError,
    _error_text,
    _is_ours,
    served_version,
)
from elasticctr.errors import EctlError


class ProxiedTransfer:
    """The release's cube-transfer through the API server's pod proxy (what `ectl status`
    reads), and serving's replicas the same way for their versions."""

    def __init__(self, target: Target, token: str | None):
        from kubernetes import client

        from elasticctr.cli.forward import resolve_backend

        self.target = target
        self.namespace = target.resolved_namespace()
        self.api = common.kube_api_client(target)
        self.core = client.CoreV1Api(self.api)
        try:
            self.pod, self.port = resolve_backend(
                self.core, self.namespace, target.release, "cube-transfer"
            )
        except EctlError as exc:
            if exc.exit_code == common.EXIT_UNREACHABLE:
                raise
            raise EctlError(
                f"release {target.release} in namespace {self.namespace}: {exc.message}",
                hint="-R names the release that serves (a scenario's platform, with -s "
                "SCENARIO); `ectl status -R RELEASE` shows its cube-transfer",
            ) from exc
        self.where = f"cube-transfer pod {self.pod}"
        self._token = token

    @property
    def token(self) -> str | None:
        if self._token is None:
            self._token = self._secret_token()
        return self._token

    def _secret_token(self) -> str:
        """The admin token from the Secret the cube-transfer container takes it from."""
        try:
            pod = self.core.read_namespaced_pod(
                self.pod, self.namespace, _request_timeout=common.REQUEST_TIMEOUT
            )
        except Exception as exc:
            raise common.kube_error(exc, f"cannot read pod {self.pod}") from exc
        for container in pod.spec.containers:
            for env in container.env or []:
                ref = env.value_from and env.value_from.secret_key_ref
                if env.name != C.ENV_CUBE_ADMIN_TOKEN or not ref:
                    continue
                try:
                    secret = self.core.read_namespaced_secret(
                        ref.name, self.namespace, _request_timeout=common.REQUEST_TIMEOUT
                    )
                except Exception as exc:
                    raise common.kube_error(
                        exc, f"cannot read the cube admin token (Secret {ref.name})"
                    ) from exc
                data = (secret.data or {}).get(ref.key)
                if not data:
                    raise EctlError(f"Secret {ref.name} has no key {ref.key}")
                return base64.b64decode(data).decode()
        raise EctlError(
            f"pod {self.pod} takes no cube admin token from a Secret",
            hint=f"pass --admin-token (${C.ENV_CUBE_ADMIN_TOKEN})",
        )

    def call(self, method: str, path: str, *, query=None, body=None, timeout=30.0) -> Any:
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if method != "GET":
            headers[ADMIN_TOKEN_HEADER] = self.token
        resource = f"/api/v1/namespaces/{self.namespace}/pods/{self.pod}:{self.port}/proxy{path}"
        request = self.api.param_serialize(
            method,
            resource,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            resp = self.api.call_api(*request, _request_timeout=timeout)
            resp.read()
        except Exception as exc:  # urllib3's: the API server cannot be reached
            raise common.kube_error(exc, f"{method} {path} on {self.where}") from exc
        if resp.status >= 400:
            if _is_ours(resp.data):
                raise TransferCallError(resp.status, _error_text(resp.data))
            from kubernetes.client.exceptions import ApiException

            raise common.kube_error(
                ApiException(status=resp.status, reason=resp.reason, http_resp=resp),
                f"{method} {path} on {self.where}",
            )
        return json.loads(resp.data)

    def serving_versions(self, scenario: str | None) -> dict[str, str | None]:
        """Each ready serving pod of the release -> the version it answers `scenario` with
        (its /metrics, `elasticctr_serving_version_info`), None when it has none."""
        return {pod: served_version(text, scenario) for pod, text in self._serving_texts()}

    def serving_metrics(self) -> list[str]:
        """The /metrics text of every ready serving pod of the release."""
        return [text for _, text in self._serving_texts()]

    def _serving_texts(self) -> list[tuple[str, str]]:
        from elasticctr.cli.forward import _ready
        from elasticctr.cli.status import COMPONENT_LABEL, INSTANCE_LABEL

        pods = self.core.list_namespaced_pod(
            self.namespace,
            label_selector=f"{INSTANCE_LABEL}={self.target.release},{COMPONENT_LABEL}=serving",
            _request_timeout=common.REQUEST_TIMEOUT,
        ).items
        out = []
        for pod in sorted((p for p in pods if _ready(p)), key=lambda p: p.metadata.name):
            port = next(p.container_port for c in pod.spec.containers for p in c.ports or [])
            raw = self.core.connect_get_namespaced_pod_proxy_with_path(
                f"{pod.metadata.name}:{port}",
                self.namespace,
                "metrics",
                _request_timeout=common.REQUEST_TIMEOUT,
                _preload_content=False,
            )
            out.append((pod.metadata.name, raw.data.decode(errors="replace")))
        return out


class ClusterBackend(_Backend):
    """A platform release on Kubernetes (the target's kubeconfig, or in-cluster)."""

    def __init__(self, target, chart: str | None = None):
        self.target = target
        self.chart = chart
        self.platform = target.release
        self.namespace = target.resolved_namespace()
        self.transfer = ProxiedTransfer(target, None)
        self._lock = threading.Lock()  # the kubernetes client's pool is shared
        self._platform_values: tuple[float, dict[str, Any]] | None = None

    def registered(self) -> dict[str, scenarios.Scenario]:
        from elasticctr.cli.scenario import _registered

        return _registered(self.target, self.platform, self.namespace)

    def scenarios(self) -> list[dict[str, Any]]:
        from elasticctr.cli.scenario import collect

        return collect(self.target, self.platform, self.namespace)

    def versions(self, name: str) -> dict[str, Any]:
        with self._lock:
            doc = _transfer_call(self.transfer, "GET", "/v1/versions", query={"scenario": name})
            doc["serving"] = self.transfer.serving_versions(name)
        return doc

    def pin(self, name: str, version: str) -> dict[str, Any]:
        body = {"scenario": name, "version": version}
        with self._lock:
            return _transfer_call(self.transfer, "POST", "/v1/pin", body=body, timeout=600)

    def unpin(self, name: str) -> dict[str, Any]:
        with self._lock:
            return _transfer_call(self.transfer, "POST", "/v1/unpin", body={"scenario": name})

    def set_training(self, name: str, paused: bool) -> dict[str, Any]:
        from elasticctr.cli.scenario import set_training

        # pods gone, or the job Running again: a resumed job may wait for room a while
        return set_training(
            self.target, self.platform, self.namespace, name, paused=paused, wait_seconds=180
        )

    def remove(self, name: str) -> dict[str, Any]:
        import dataclasses

        from elasticctr.cli.scenario import remove_scenario

        # `ectl scenario remove NAME --yes` (the console asked for the name typed again);
        # its versions stay in the store and MLflow, and a pinned version refuses
        target = dataclasses.replace(self.target, release=name, namespace=self.namespace)
        return remove_scenario(target, self.platform, name)

    def serving_metrics(self) -> list[str]:
        with self._lock:
            return self.transfer.serving_metrics()

    def platform_values(self) -> dict[str, Any]:
        """The platform release's values (read once a minute at most: a form checks on
        every change)."""
        import time

        from elasticctr.cli.scenario import _platform_values

        now = time.monotonic()
        if self._platform_values is None or now - self._platform_values[0] > 60:
            self._platform_values = (
                now,
                _platform_values(self.target, self.platform, self.namespace),
            )
        return self._platform_values[1]

    def layers(self, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """`ectl scenario add`'s values under and over a scenario's file."""
        from elasticctr.cli.scenario import scenario_layers

        return scenario_layers(self.platform_values(), name, self.platform)

    def add(self, name: str, values_yaml: str) -> dict[str, Any]:
        """`ectl scenario add NAME -f FILE --platform PLATFORM` with the form's YAML as
        FILE (without --wait: the card shows the job coming up)."""
        import dataclasses
        import tempfile
        from pathlib import Path

        from elasticctr.cli.scenario import add_scenario

        target = dataclasses.replace(self.target, release=name, namespace=self.namespace)
        with tempfile.TemporaryDirectory(prefix="ectl-console-") as tmp:
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(values_yaml)
            add_scenario(target, self.platform, name, [path], chart=self.chart)
        return {"scenario": name, "installed": True, "release": name}
