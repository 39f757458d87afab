"""A real Kubernetes control plane for the cluster tests: etcd + kube-apiserver on loopback.

`scripts/bootstrap-tools.sh` builds kube-apiserver (k8s.io/kubernetes v1.32, wrapper module
scripts/kube) and links Debian's etcd into .tools/bin; a missing one fails the tests (never
skips). The fixture generates a CA, a serving certificate for 127.0.0.1, a service-account
key pair and an admin client certificate (O=system:masters), starts both processes on free
loopback ports with RBAC authorization, writes a kubeconfig, installs the Volcano CRDs
from ../shared/crds/volcano and stops everything afterwards. No controller-manager, scheduler
or kubelet: objects are stored and validated, no pod runs. See docs/cluster-tests.md.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from tests.conftest import REPO, require_tool, shared_path

sys.path.insert(0, str(REPO / "scripts" / "cluster"))
import harness as _harness  # noqa: E402

VOLCANO_CRDS = (
    "batch.volcano.sh_jobs.yaml",
    "scheduling.volcano.sh_podgroups.yaml",
    "scheduling.volcano.sh_queues.yaml",
)
START_TIMEOUT = 120.0  # seconds for etcd + kube-apiserver to become ready on a loaded machine


# --- certificates and kubeconfig: the cluster harness's (scripts/cluster/harness.py) ----------


def write_pki(directory: Path) -> dict[str, Path]:
    """CA, apiserver serving cert (127.0.0.1/localhost), service-account keys, admin cert."""
    directory.mkdir(parents=True, exist_ok=True)
    return _harness.write_pki(directory, "127.0.0.1")


def write_kubeconfig(path: Path, server: str, pki: dict[str, Path]) -> Path:
    return _harness.kubeconfig(path, server, pki, "admin")


# --- processes -----------------------------------------------------------------------------


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (all held bound while choosing, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


PORT_ATTEMPTS = 3  # another process may take a chosen port before the server binds it


def _launch(name: str, argv_for, probe_for, nports: int, log: Path, deadline: float, procs):
    """Start a server on fresh free ports; retry only when a port was taken meanwhile."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        ports = free_ports(nports)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv_for(attempt, *ports),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        procs.append(proc)
        try:
            _wait_ready(name, proc, log, probe_for(*ports), deadline)
            return ports
        except RuntimeError:
            if attempt == PORT_ATTEMPTS or "address already in use" not in _tail(log, 200):
                raise
            _stop(proc)
            procs.remove(proc)
    raise AssertionError("unreachable")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_ready(name: str, proc: subprocess.Popen, log: Path, probe, deadline: float) -> None:
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{_tail(log)}")
        try:
            if probe():
                return
        except (OSError, urllib.error.URLError) as exc:
            last = str(exc)
        time.sleep(0.5)
    raise RuntimeError(f"{name} not ready in {START_TIMEOUT:.0f} s ({last}):\n{_tail(log)}")


@dataclass
class Cluster:
    server: str
    kubeconfig: Path
    pki: dict[str, Path]
    workdir: Path
    start_seconds: float

    def api(self):
        """A kubernetes ApiClient as the admin user (close it after use)."""
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        return client.ApiClient(configuration)


def _https_ready(server: str, pki: dict[str, Path]) -> bool:
    ctx = ssl.create_default_context(cafile=str(pki["ca.crt"]))
    ctx.load_cert_chain(str(pki["admin.crt"]), str(pki["admin.key"]))
    try:
        with urllib.request.urlopen(f"{server}/readyz", context=ctx, timeout=5) as resp:
            return resp.status == 200
    except urllib.error.HTTPError:
        return False  # 500 while post-start hooks are still running


def install_crds(cluster: Cluster, paths: list[Path], timeout: float = 60.0) -> None:
    """Create the CRDs and wait until each is Established (served by the API server)."""
    from kubernetes import client

    api = cluster.api()
    try:
        ext = client.ApiextensionsV1Api(api)
        names = []
        for path in paths:
            doc = yaml.safe_load(path.read_text())
            ext.create_custom_resource_definition(doc)
            names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                crd = ext.read_custom_resource_definition(name)
                conds = {c.type: c.status for c in (crd.status.conditions or [])}
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {name} not Established: {conds}")
                time.sleep(0.2)
    finally:
        api.close()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    etcd = require_tool("etcd")
    apiserver = require_tool("kube-apiserver")
    crds = [shared_path("crds", "volcano", name) for name in VOLCANO_CRDS]
    work = tmp_path_factory.mktemp("cluster")
    pki = write_pki(work / "pki")
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    deadline = started + START_TIMEOUT
    try:

        def etcd_argv(attempt: int, client_port: int, peer_port: int) -> list[str]:
            client_url = f"http://127.0.0.1:{client_port}"
            peer_url = f"http://127.0.0.1:{peer_port}"
            return [
                etcd,
                "--name=test",
                f"--data-dir={work / f'etcd-{attempt}'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=test={peer_url}",
                "--log-level=warn",
            ]

        def etcd_probe(client_port: int, _peer_port: int):
            def ready() -> bool:
                url = f"http://127.0.0.1:{client_port}/health"
                with urllib.request.urlopen(url, timeout=5) as resp:
                    return b'"true"' in resp.read()

            return ready

        etcd_port, _ = _launch("etcd", etcd_argv, etcd_probe, 2, work / "etcd.log", deadline, procs)

        def apiserver_argv(_attempt: int, port: int) -> list[str]:
            return [
                apiserver,
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={work / 'certs'}",
                f"--tls-cert-file={pki['apiserver.crt']}",
                f"--tls-private-key-file={pki['apiserver.key']}",
                f"--client-ca-file={pki['ca.crt']}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki['sa.pub']}",
                f"--service-account-signing-key-file={pki['sa.key']}",
                "--authorization-mode=RBAC",
                # Its finalizer is removed by the controller-manager, which is absent:
                # deleted PVCs would stay Terminating forever.
                "--disable-admission-plugins=StorageObjectInUseProtection",
                "--profiling=false",
                "--v=1",
            ]

        (api_port,) = _launch(
            "kube-apiserver",
            apiserver_argv,
            lambda port: lambda: _https_ready(f"https://127.0.0.1:{port}", pki),
            1,
            work / "kube-apiserver.log",
            deadline,
            procs,
        )
        server = f"https://127.0.0.1:{api_port}"
        c = Cluster(
            server=server,
            kubeconfig=write_kubeconfig(work / "kubeconfig", server, pki),
            pki=pki,
            workdir=work,
            start_seconds=time.monotonic() - started,
        )
        install_crds(c, crds)
        yield c
    finally:
        for proc in reversed(procs):
            _stop(proc)
