"""Pieces shared by the operator verbs: output format, cluster options, helm and kube access.

Owns how `ectl` finds helm and the cluster and how it turns their failures into one clear
line. It must not know chart internals (values.py does) or the data layer.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import math
import os
import re
import shutil
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console

from elasticctr.constants import (
    DEFAULT_RELEASE,
    ENV_HELM,
    ENV_NAMESPACE,
    ENV_RELEASE,
    ENV_VERBOSE,
    repo_root,
)
from elasticctr.errors import EctlError

T = TypeVar("T")

EXIT_OK = 0
EXIT_USER_ERROR = 1
EXIT_VALIDATION = 2
EXIT_UNREACHABLE = 3
"""The cluster (or a release's service) could not be reached."""
EXIT_CHECKS_FAILED = 4
"""`ectl doctor` found at least one failing check."""
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

console = Console()
err_console = Console(stderr=True)


class OutputFormat(enum.StrEnum):
    """`-o` of the read verbs, as kubectl's: a table for people, json or yaml for scripts."""

    table = "table"
    json = "json"
    yaml = "yaml"

    @property
    def for_scripts(self) -> bool:
        """Only the document goes to stdout (progress and notes go to stderr or nowhere)."""
        return self is not OutputFormat.table


OUTPUT_OPTION = typer.Option(
    OutputFormat.table, "--output", "-o", help="table for people, json or yaml for scripts."
)


def print_json(data: Any) -> None:
    """JSON on stdout, nothing else: scripts pipe this into jq."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def print_json_line(data: Any) -> None:
    """One JSON document on one line (a stream of them: `status --watch -o json`)."""
    sys.stdout.write(json.dumps(data, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def print_yaml(data: Any) -> None:
    """YAML on stdout, nothing else; it loads back to exactly what `print_json` prints
    (the data goes through JSON first: dates, paths and enums become the same strings)."""
    import yaml

    plain = json.loads(json.dumps(data, sort_keys=False, default=str))
    sys.stdout.write(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, width=1 << 16))
    sys.stdout.flush()


def print_data(output: OutputFormat, data: Any) -> bool:
    """The one way a verb prints its result for scripts: `data` as JSON or YAML on stdout
    when `output` asks for it (True); False for `table`, which the caller draws."""
    if output is OutputFormat.json:
        print_json(data)
        return True
    if output is OutputFormat.yaml:
        print_yaml(data)
        return True
    return False


# --- durations ---------------------------------------------------------------------------

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
                   "m": 60.0, "h": 3600.0}  # fmt: skip
_DURATION_PART = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_SECONDS = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")
DURATION_FIX = "write e.g. 45s, 10m or 1h30m (Go's duration format; a bare number is seconds)"


def parse_duration(text: str) -> float:
    """Seconds in a duration as helm's --timeout and kubectl's --since take it (Go's
    format: 300ms, 45s, 10m, 1h30m, 1.5h); a bare number is seconds. ValueError otherwise
    (negative ones too)."""
    value = text.strip()
    if _SECONDS.fullmatch(value):
        return float(value)
    body = value.removeprefix("+")
    if not body or body.startswith("-"):
        raise ValueError(f"{text!r} is not a duration" if body else "empty duration")
    total, pos = 0.0, 0
    while pos < len(body):
        part = _DURATION_PART.match(body, pos)
        if part is None:
            raise ValueError(f"{text!r} is not a duration")
        total += float(part.group(1)) * _DURATION_UNITS[part.group(2)]
        pos = part.end()
    return total


def go_duration(value: str) -> str:
    """--timeout: a duration helm accepts, checked here (a bad one fails before any work,
    naming the flag); a bare number of seconds becomes `Ns`."""
    try:
        parse_duration(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}; {DURATION_FIX}") from None
    value = value.strip()
    return f"{value}s" if _SECONDS.fullmatch(value) else value


def whole_seconds(value: str) -> int:
    """--since: whole seconds, rounded up as kubectl does (0 = no limit)."""
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}; {DURATION_FIX}") from None
    return math.ceil(seconds)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


# --- cluster options --------------------------------------------------------------------


@dataclass
class Target:
    """Where a cluster verb acts: the release, its namespace and how to reach the cluster."""

    release: str
    namespace: str | None
    kubeconfig: Path | None
    context: str | None
    helm: str | None = None

    def resolved_namespace(self) -> str:
        """The namespace given, else the kubeconfig context's, else `default`."""
        if self.namespace:
            return self.namespace
        try:
            from kubernetes import config

            _, active = config.list_kube_config_contexts(
                config_file=str(self.kubeconfig) if self.kubeconfig else None
            )
            if self.context:
                contexts, _ = config.list_kube_config_contexts(
                    config_file=str(self.kubeconfig) if self.kubeconfig else None
                )
                active = next((c for c in contexts if c["name"] == self.context), active)
            namespace = (active or {}).get("context", {}).get("namespace")
        except Exception:  # no kubeconfig: the cluster call that follows says so clearly
            namespace = None
        return namespace or "default"


RELEASE_OPTION = typer.Option(
    DEFAULT_RELEASE,
    "--release",
    "-R",
    envvar=ENV_RELEASE,
    help=f"Helm release name (${ENV_RELEASE}).",
    show_default=True,
)
NAMESPACE_OPTION = typer.Option(
    None,
    "--namespace",
    "-n",
    envvar=ENV_NAMESPACE,
    help=f"Kubernetes namespace (${ENV_NAMESPACE}; default: the kubeconfig context's).",
)
KUBECONFIG_OPTION = typer.Option(
    None, "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)."
)
CONTEXT_OPTION = typer.Option(None, "--context", help="kubeconfig context to use.")
HELM_OPTION = typer.Option(
    None, "--helm", envvar=ENV_HELM, help=f"helm binary (${ENV_HELM}; default: helm on PATH)."
)


def find_helm(explicit: str | None) -> str:
    """The helm binary: --helm / $ELASTICCTR_HELM, else PATH, else the checkout's .tools/bin."""
    if explicit:
        found = shutil.which(explicit) or (explicit if os.access(explicit, os.X_OK) else None)
        if not found:
            raise EctlError(
                f"helm not found at {explicit}",
                hint=f"fix --helm / ${ENV_HELM}, or unset it to use helm from PATH",
            )
        return found
    found = shutil.which("helm")
    if found:
        return found
    bundled = repo_root() / ".tools" / "bin" / "helm"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    raise EctlError(
        "helm not found on PATH",
        hint=f"run `make tools` and `source scripts/tools-env.sh`, or set ${ENV_HELM}",
    )


def require_kube_extra(module: str) -> None:
    """The cluster verbs need the `kube` extra; say so instead of an ImportError."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise EctlError(
            f"the cluster verbs need the Python package {module}",
            hint="pip install 'elasticctr[kube]' (or `make venv` in a checkout)",
        )


def helm_client(target: Target):
    """A pyhelm3 client bound to the target's kubeconfig/context and helm binary."""
    require_kube_extra("pyhelm3")
    from pyhelm3 import Client

    if os.environ.get(ENV_VERBOSE) != "1":
        # pyhelm3 logs every failed helm call as a warning; ectl reports it once, clearly.
        logging.getLogger("pyhelm3").addHandler(logging.NullHandler())
        logging.getLogger("pyhelm3").propagate = False

    helm = find_helm(target.helm)
    try:
        return Client(
            executable=helm,
            kubeconfig=target.kubeconfig,
            kubecontext=target.context,
        )
    except Exception as exc:  # helm exists but `helm version` failed
        raise EctlError(
            f"cannot run {helm} version: {exc}", hint="reinstall with `make tools`"
        ) from exc


UNREACHABLE_MARKERS = (
    "kubernetes cluster unreachable",
    "connection refused",
    "no such host",
    "i/o timeout",
    "network is unreachable",
    "no configuration has been provided",
    "invalid configuration",
    "tls handshake timeout",
)

# helm's --wait gave up: the release exists but some resource did not become ready in time.
WAIT_TIMEOUT_MARKERS = ("context deadline exceeded", "timed out waiting for the condition")


def helm_error(exc: Exception, what: str) -> EctlError:
    """Turn a pyhelm3 failure into one line: unreachable cluster, missing release, or helm's."""
    stderr = getattr(exc, "stderr", b"")
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else str(stderr or exc)
    lines = [
        line.strip().removeprefix("Error: ")
        for line in text.splitlines()
        if line.strip() and not line.startswith("WARNING")
    ]
    message = lines[-1] if lines else str(exc) or type(exc).__name__
    message = message.removeprefix("Kubernetes cluster unreachable: ")
    low = text.lower()
    if "cluster unreachable" not in low and any(m in low for m in WAIT_TIMEOUT_MARKERS):
        return EctlError(
            f"{what}: timed out waiting for the release's pods and hook Jobs to become "
            f"ready ({message})",
            hint="`ectl status` shows which part is not ready (and why); raise --timeout",
        )
    if any(marker in low for marker in UNREACHABLE_MARKERS + WAIT_TIMEOUT_MARKERS):
        return EctlError(
            f"{what}: Kubernetes cluster unreachable ({message})",
            hint="check --kubeconfig/--context, then run `ectl doctor`",
            exit_code=EXIT_UNREACHABLE,
        )
    if "another operation" in low and "in progress" in low:
        return EctlError(
            f"{what}: {message}",
            hint="an earlier install/upgrade/rollback was interrupted: `ectl history`, then "
            "`ectl rollback` to the last deployed revision",
        )
    if "release: not found" in low or "not found" in low and "release" in low:
        return EctlError(
            f"{what}: {message}",
            hint="`ectl install` creates it; `helm list -A` shows existing releases",
        )
    return EctlError(f"{what}: {message}")


# --- kubernetes client ------------------------------------------------------------------


def kube_api_client(target: Target):
    """A kubernetes ApiClient from the kubeconfig (or the in-cluster service account)."""
    require_kube_extra("kubernetes")
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    try:
        config.load_kube_config(
            config_file=str(target.kubeconfig) if target.kubeconfig else None,
            context=target.context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (ConfigException, FileNotFoundError, OSError) as exc:
        if not (target.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST")):
            raise EctlError(
                f"no usable kubeconfig: {exc}",
                hint="pass --kubeconfig/--context or set $KUBECONFIG; `ectl doctor` checks access",
                exit_code=EXIT_UNREACHABLE,
            ) from exc
        config.load_incluster_config(client_configuration=configuration)  # inside a pod
    # Fail fast when the API server is down (urllib3 would retry 3 times per call); must
    # be set before the ApiClient builds its connection pool.
    configuration.retries = 1
    return client.ApiClient(configuration)


def kube_error(exc: Exception, what: str) -> EctlError:
    """A kubernetes-client failure as one line (unreachable, forbidden, or the API's reason)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        reason = exc.reason or ""
        try:
            reason = json.loads(exc.body).get("message", reason)
        except Exception:
            pass
        hint = "check RBAC for your user (`ectl doctor`)" if exc.status == 403 else None
        return EctlError(f"{what}: HTTP {exc.status} {reason}", hint=hint)
    return EctlError(
        f"{what}: Kubernetes cluster unreachable ({_short(exc)})",
        hint="check --kubeconfig/--context, then run `ectl doctor`",
        exit_code=EXIT_UNREACHABLE,
    )


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    reason = getattr(exc, "reason", None)
    if reason is not None and str(reason):
        text = str(reason).splitlines()
    line = text[-1] if text else type(exc).__name__
    errno = re.search(r"\[Errno -?\d+\] ([^)'\"]+)", line)
    if errno:
        return errno.group(1).strip()
    if "timed out" in line.lower():
        return "timed out"
    return line if len(line) < 200 else line[:197] + "..."


REQUEST_TIMEOUT = 10
"""Seconds for one Kubernetes API call from the CLI."""
