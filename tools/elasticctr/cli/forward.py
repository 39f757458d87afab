"""`ectl port-forward COMPONENT`: reach a release's Service from this machine.

A local TCP listener whose connections are tunnelled, one Kubernetes port-forward stream
each, to a ready pod behind the release's Service (serving, mlflow, fileserver,
coordinator, cube-transfer, console). `ectl predict --url` then talks to the printed address; other
code uses `forward_service()` directly. Owns the tunnel only, not what runs through it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import typer

from elasticctr.cli import _common as common
from elasticctr.cli._common import (
    CONTEXT_OPTION,
    KUBECONFIG_OPTION,
    NAMESPACE_OPTION,
    RELEASE_OPTION,
    REQUEST_TIMEOUT,
    Target,
    console,
)
from elasticctr.cli.status import COMPONENT_LABEL, INSTANCE_LABEL, LABEL_OF
from elasticctr.constants import ENV_SERVING_URL
from elasticctr.errors import EctlError

SERVICES = ("serving", "mlflow", "fileserver", "coordinator", "cube-transfer", "cube", "console")


def _ready(pod) -> bool:
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or [])
    )


def resolve_backend(core, namespace: str, release: str, component: str) -> tuple[str, int]:
    """(pod name, container port) of a ready pod behind the component's Service.

    The coordinator (a task of the Volcano Job) and cube-transfer have no Service: their
    pod is used directly (a ready one, else a running one), on its first declared port.
    """
    label = LABEL_OF.get(component, component)
    selector = f"{INSTANCE_LABEL}={release},{COMPONENT_LABEL}={label}"
    try:
        services = core.list_namespaced_service(
            namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
        ).items
    except Exception as exc:
        raise common.kube_error(exc, f"cannot find the {component} service") from exc
    services = [s for s in services if s.spec.selector and s.spec.ports]
    if not services:
        return _pod_backend(core, namespace, release, component, selector)
    svc = services[0]
    selector = ",".join(f"{k}={v}" for k, v in sorted(svc.spec.selector.items()))
    try:
        pods = core.list_namespaced_pod(
            namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
        ).items
    except Exception as exc:
        raise common.kube_error(exc, f"cannot list {component} pods") from exc
    ready = sorted((p for p in pods if _ready(p)), key=lambda p: p.metadata.name)
    if not ready:
        raise EctlError(
            f"no ready {component} pod behind Service {svc.metadata.name}",
            hint=f"`ectl status` and `ectl logs {component}` show why",
        )
    pod = ready[0]
    target = svc.spec.ports[0].target_port or svc.spec.ports[0].port
    if isinstance(target, str) and not target.isdigit():
        ports = [
            p.container_port
            for c in pod.spec.containers
            for p in (c.ports or [])
            if p.name == target
        ]
        if not ports:
            raise EctlError(f"pod {pod.metadata.name} has no container port named {target}")
        return pod.metadata.name, ports[0]
    return pod.metadata.name, int(target)


def _pod_backend(
    core, namespace: str, release: str, component: str, selector: str
) -> tuple[str, int]:
    try:
        pods = core.list_namespaced_pod(
            namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
        ).items
    except Exception as exc:
        raise common.kube_error(exc, f"cannot list {component} pods") from exc
    # Ready pods first; else a running one: no Service routes to these pods, and a
    # cube-transfer that cannot read its store is not ready, which is when its /v1/status
    # is wanted most.
    running = [p for p in pods if p.status.phase == "Running"]
    for pod in sorted(running, key=lambda p: (not _ready(p), p.metadata.name)):
        ports = [p.container_port for c in pod.spec.containers for p in (c.ports or [])]
        if ports:
            return pod.metadata.name, ports[0]
    raise EctlError(
        f"release {release} has no {component} Service or running pod in {namespace}",
        hint="is the component enabled in the values? `ectl status` lists what runs",
    )


def _pump(src, dst) -> None:
    try:
        while True:
            chunk = src.recv(65536)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def tunnel(
    connect: Callable[[], socket.socket], local_port: int = 0, host: str = "127.0.0.1"
) -> Iterator[str]:
    """Listen on host:local_port; pipe each accepted connection through `connect()`.

    Yields the local `http://host:port`; on exit the listener closes and no new
    connection is accepted (open ones finish on their own daemon threads).
    """
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, local_port))
    except OSError as exc:
        listener.close()
        raise EctlError(f"cannot listen on {host}:{local_port}: {exc.strerror}") from exc
    listener.listen(16)

    def handle(conn: socket.socket) -> None:
        try:
            remote = connect()
        except Exception as exc:
            common.err_console.print(f"tunnel: {exc}", markup=False, style="yellow")
            conn.close()
            return
        back = threading.Thread(target=_pump, args=(remote, conn), daemon=True)
        back.start()
        _pump(conn, remote)
        back.join(timeout=30)
        conn.close()
        remote.close()

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # listener shut down
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"http://{host}:{listener.getsockname()[1]}"
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        listener.close()
        acceptor.join(timeout=5)


@contextlib.contextmanager
def forward_service(
    target: Target, component: str, local_port: int = 0, host: str = "127.0.0.1"
) -> Iterator[str]:
    """Yield `http://host:port` tunnelled to the component's Service until the block ends."""
    common.require_kube_extra("kubernetes")
    from kubernetes import client
    from kubernetes.stream import portforward

    namespace = target.resolved_namespace()
    api = common.kube_api_client(target)
    try:
        core = client.CoreV1Api(api)
        pod, port = resolve_backend(core, namespace, target.release, component)

        def connect() -> socket.socket:
            # One port-forward stream per connection, like kubectl port-forward.
            stream = portforward(
                core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port)
            )
            return stream.socket(port)

        with tunnel(connect, local_port, host) as url:
            yield url
    finally:
        api.close()


def console_token(target: Target) -> str | None:
    """The administrator token of the release's console: the Secret its pod's
    $ELASTICCTR_CONSOLE_TOKEN comes from (the chart's own, or `console.auth.existingSecret`);
    None when the caller may not read it."""
    import base64

    from kubernetes import client

    from elasticctr.constants import ENV_CONSOLE_TOKEN

    namespace = target.resolved_namespace()
    api = common.kube_api_client(target)
    try:
        core = client.CoreV1Api(api)
        selector = f"{INSTANCE_LABEL}={target.release},{COMPONENT_LABEL}=console"
        pods = core.list_namespaced_pod(
            namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT
        ).items
        refs = [
            e.value_from.secret_key_ref
            for p in pods
            for c in p.spec.containers
            for e in c.env or []
            if e.name == ENV_CONSOLE_TOKEN and e.value_from and e.value_from.secret_key_ref
        ]
        if not refs:
            return None
        secret = core.read_namespaced_secret(
            refs[0].name, namespace, _request_timeout=REQUEST_TIMEOUT
        )
        raw = (secret.data or {}).get(refs[0].key)
        return base64.b64decode(raw).decode() if raw else None
    except Exception:  # forbidden or gone: the link without the token
        return None
    finally:
        api.close()


def _component(value: str) -> str:
    if value not in SERVICES:
        raise typer.BadParameter(f"choose one of {', '.join(SERVICES)}")
    return value


URL_ENV = {"serving": ENV_SERVING_URL, "mlflow": "MLFLOW_TRACKING_URI"}
"""What a command run through the tunnel finds the URL in (besides `{url}` in its args)."""


def run_through(url: str, component: str, command: list[str]) -> int:
    """Run `command` with the tunnel's URL in its environment and `{url}` args; its exit code."""
    env = dict(os.environ)
    if component in URL_ENV:
        env[URL_ENV[component]] = url
    argv = [arg.replace("{url}", url) for arg in command]
    if argv and argv[0] == "ectl" and not shutil.which("ectl"):
        argv = [sys.executable, "-m", "elasticctr.cli.main", *argv[1:]]
    try:
        return subprocess.run(argv, env=env).returncode
    except OSError as exc:
        raise EctlError(f"cannot run {argv[0]}: {exc.strerror}") from exc


def port_forward(
    component: str = typer.Argument(
        ...,
        callback=_component,
        autocompletion=lambda: list(SERVICES),
        help=f"One of {', '.join(SERVICES)}.",
    ),
    command: list[str] | None = typer.Argument(
        None,
        help="After --: a command to run while the tunnel is open (gets the URL in "
        f"${ENV_SERVING_URL} for serving, $MLFLOW_TRACKING_URI for mlflow, and for `{{url}}`).",
    ),
    local_port: int = typer.Option(0, "--port", "-p", help="Local port (0 = a free one)."),
    release: str = RELEASE_OPTION,
    namespace: str | None = NAMESPACE_OPTION,
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    context: str | None = CONTEXT_OPTION,
) -> None:
    """Forward a local port to a release's Service (until Ctrl-C, or around one command).

    ElasticCTR's -c (predict against the deployment) is one line:

      ectl port-forward serving -- ectl predict data.txt

    Examples:

      ectl port-forward serving -p 8600 &
      ectl predict data.txt --url http://127.0.0.1:8600

      ectl port-forward mlflow -p 5000          # then open http://127.0.0.1:5000

      ectl port-forward fileserver -- curl -s {url}/healthz

      ectl port-forward console                 # prints a link that signs in
    """
    target = Target(release, namespace, kubeconfig, context)
    with forward_service(target, component, local_port) as url:
        if command:
            code = run_through(url, component, command)
            if code:
                raise typer.Exit(code)
            return
        link = url
        if component == "console":
            token = console_token(target)
            link = f"{url}/#token={token}" if token else url
            if not token:
                console.print(
                    "(the console's token Secret is not readable with this kubeconfig: "
                    "sign in with a token from your platform's administrator)",
                    style="yellow",
                )
        console.print(
            f"{component} of {release}: [bold]{link}[/bold] (Ctrl-C stops)", soft_wrap=True
        )
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


def register(app: typer.Typer) -> None:
    app.command("port-forward")(port_forward)
