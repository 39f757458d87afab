#!/usr/bin/env python3
"""A real one-node Kubernetes cluster with Volcano on this machine (docs/cluster-tests.md).

    harness.py up   [--dir DIR]     start it, write DIR/kubeconfig, print a summary
    harness.py down [--dir DIR]     stop it and leave the machine clean (idempotent)
    harness.py status [--dir DIR]   is it running? (exit 0 yes, 1 no)

Every part is a host process started from the binaries `scripts/bootstrap-tools.sh` builds
or installs (`.tools/bin`, Debian packages): etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubelet and kube-proxy (one multi-call binary `kube`), a separate containerd
(Debian's, CRI plugin) with CNI bridge/portmap/firewall/loopback (Debian's plugins), CoreDNS
(behind the `kube-dns` Service), local-path-provisioner (the default StorageClass) and
Volcano's scheduler, controller-manager and admission webhook. The pause and busybox images
are made here from local binaries and imported into containerd; any other image is pulled
from the local OCI registry over plain HTTP on loopback (`--registry`).

One cluster per machine: the kubelet's host paths, the iptables chains and cgroups are
global. `down` removes every process, container, mount, network namespace, the bridge, the
KUBE-*/CNI-* iptables chains, the kubelet's host paths and the kubepods cgroups, whether
the cluster started fully or not. The tests drive it through `Harness` (tests/e2e/conftest.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TOOLS_BIN = REPO / ".tools" / "bin"
TOOLS = REPO / ".tools"
SCHEDULER_CONF = Path(__file__).resolve().parent / "volcano-scheduler.conf"
STATE_POINTER = Path("/run/elasticctr-cluster")  # the one running cluster's directory
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian containernetworking-plugins

NODE_NAME = "elasticctr-node"
BRIDGE = "ectr-cni0"
POD_CIDR = "10.244.0.0/16"
POD_SUBNET = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "elasticctr.local/pause:3.10"
BUSYBOX_IMAGE = "elasticctr.local/busybox:1.35"
VOLCANO_NAMESPACE = "volcano-system"
# `sh -c RESTART_LOOP NAME ARGV...`: run ARGV again whenever it exits (see Harness.spawn)
RESTART_LOOP = (
    'while :; do "$@"; rc=$?; '
    'echo "harness: $0 exited with status $rc; starting it again in 1 s" >&2; sleep 1; done'
)
LOCAL_PATH_NAMESPACE = "local-path-storage"
STORAGE_CLASS = "local-path"
# Host paths the kubelet, CNI and cgroups use outside the harness directory.
HOST_PATHS = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni")
CGROUP_ROOT = Path("/sys/fs/cgroup")
IPTABLES_CHAIN = re.compile(r"^(KUBE-|CNI-)")
START_TIMEOUT = float(os.environ.get("ELASTICCTR_CLUSTER_START_TIMEOUT", "240"))


class ClusterError(RuntimeError):
    """Start-up or teardown failed; the message carries the diagnostics."""


# --- small helpers -------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def run(
    argv: list[str], check: bool = True, timeout: float = 60, **kw
) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise ClusterError(
            f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}"
        )
    return proc


def node_ip() -> str:
    """The machine's own address: the source address of its default route's interface."""
    override = os.environ.get("ELASTICCTR_CLUSTER_NODE_IP")
    if override:
        return override
    routes = json.loads(run(["ip", "-j", "-4", "route", "show", "default"]).stdout or "[]")
    devs = [r["dev"] for r in routes if "dev" in r]
    addrs = json.loads(run(["ip", "-j", "-4", "addr", "show", "scope", "global"]).stdout or "[]")
    candidates = []
    for link in addrs:
        for a in link.get("addr_info", []):
            candidates.append((link["ifname"] not in devs, link["ifname"], a["local"]))
    candidates = [c for c in candidates if c[1] != BRIDGE]
    if not candidates:
        raise ClusterError(
            "no non-loopback IPv4 address on this machine: pods reach the API server through "
            "it (set ELASTICCTR_CLUSTER_NODE_IP to choose one)"
        )
    return sorted(candidates)[0][2]


def tool(name: str) -> str:
    path = TOOLS_BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if not found:
        raise ClusterError(f"{name} not found (in .tools/bin or PATH): run `make tools`")
    return found


# --- PKI -----------------------------------------------------------------------------------


def write_pki(directory: Path, ip: str) -> dict[str, Path]:
    """CA; API server (127.0.0.1, node IP, kubernetes Service IP and names); client certs
    for admin, kubelet, controller-manager, scheduler, kube-proxy; SA keys; webhook cert."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)

    def key():
        return ec.generate_private_key(ec.SECP256R1())

    def pem_key(k) -> bytes:
        return k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def name(cn: str, org: str | None = None):
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else []
        return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(subject, k, issuer, signer, *, ca=False, usages=(), sans=()):
        b = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if usages:
            b = b.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        if ca:
            b = b.add_extension(
                x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                critical=True,
            )
        return b.sign(signer, hashes.SHA256())

    files: dict[str, bytes] = {}
    ca_key = key()
    ca_name = name("elasticctr-cluster-ca")
    ca = cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    files["ca.crt"] = ca.public_bytes(serialization.Encoding.PEM)
    files["ca.key"] = pem_key(ca_key)

    def issue(stem: str, subject, usages, sans=()):
        k = key()
        c = cert(subject, k, ca_name, ca_key, usages=usages, sans=sans)
        files[f"{stem}.crt"] = c.public_bytes(serialization.Encoding.PEM)
        files[f"{stem}.key"] = pem_key(k)

    server, client = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    ips = ("127.0.0.1", ip, KUBERNETES_SERVICE_IP)
    dns = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
    issue(
        "apiserver",
        name("kube-apiserver"),
        [server],
        [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
        + [x509.DNSName(d) for d in (*dns, f"kubernetes.default.svc.{CLUSTER_DOMAIN}")],
    )
    issue("admin", name("elasticctr-cluster-admin", "system:masters"), [client])
    issue("kubelet", name(f"system:node:{NODE_NAME}", "system:nodes"), [client])
    issue("controller-manager", name("system:kube-controller-manager"), [client])
    issue("scheduler", name("system:kube-scheduler"), [client])
    issue("kube-proxy", name("system:kube-proxy"), [client])
    issue(
        "webhook",
        name("volcano-admission"),
        [server],
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    sa = key()
    files["sa.key"] = pem_key(sa)
    files["sa.pub"] = sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    paths = {}
    for fname, data in files.items():
        p = directory / fname
        p.write_bytes(data)
        p.chmod(0o600)
        paths[fname] = p
    return paths


def kubeconfig(path: Path, server: str, pki: dict[str, Path], user: str) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "elasticctr",
                "cluster": {"server": server, "certificate-authority": str(pki["ca.crt"])},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki[f"{user}.crt"]),
                    "client-key": str(pki[f"{user}.key"]),
                },
            }
        ],
        "contexts": [{"name": "elasticctr", "context": {"cluster": "elasticctr", "user": user}}],
        "current-context": "elasticctr",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


# --- images made here ----------------------------------------------------------------------


def oci_image_tar(out: Path, ref: str, files: dict[str, tuple[bytes | str, int]], cmd: list[str]):
    """An OCI image layout tar with one layer (ctr/containerd import it by `ref`).

    files maps a path in the image to (content bytes, mode) or (symlink target str, 0).
    """
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as layer:
        dirs = sorted({str(Path(p).parent) for p in files} - {"."})
        seen: set[str] = set()
        for d in dirs:
            parts = Path(d).parts
            for i in range(1, len(parts) + 1):
                sub = str(Path(*parts[:i]))
                if sub not in seen:
                    seen.add(sub)
                    info = tarfile.TarInfo(sub)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    layer.addfile(info)
        for p, (content, mode) in sorted(files.items()):
            info = tarfile.TarInfo(p)
            if isinstance(content, str):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, content, 0o777
                layer.addfile(info)
            else:
                info.size, info.mode = len(content), mode
                layer.addfile(info, io.BytesIO(content))
    diff = raw.getvalue()
    blob = diff  # uncompressed: a few MB, imported locally, faster than gzip on a busy machine
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": cmd, "Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha256(diff).hexdigest()]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": "sha256:" + sha256(config).hexdigest(),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": "sha256:" + sha256(blob).hexdigest(),
                    "size": len(blob),
                }
            ],
        }
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": "sha256:" + sha256(manifest).hexdigest(),
                    "size": len(manifest),
                    "annotations": {
                        "io.containerd.image.name": ref,
                        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
                    },
                }
            ],
        }
    ).encode()
    with tarfile.open(out, "w") as t:

        def add(name: str, data: bytes):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", index)
        for data in (config, blob, manifest):
            add(f"blobs/sha256/{sha256(data).hexdigest()}", data)
    return out


def push_oci_tar(tar: Path, registry: str, repository: str, tag: str) -> str:
    """Push an image made by oci_image_tar to a registry over plain HTTP (the OCI
    distribution API: blob uploads, then the manifest); returns the pullable reference."""

    def request(method: str, url: str, data: bytes | None = None, headers=None):
        req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.headers
        except urllib.error.HTTPError as exc:
            if method == "HEAD" and exc.code == 404:
                return 404, exc.headers
            raise ClusterError(f"{method} {url}: {exc.code} {exc.read()[:300]!r}") from exc

    base = f"http://{registry}/v2/{repository}"
    with tarfile.open(tar) as t:
        index = json.load(t.extractfile("index.json"))
        mdesc = index["manifests"][0]
        manifest = t.extractfile(f"blobs/sha256/{mdesc['digest'][7:]}").read()
        doc = json.loads(manifest)
        for desc in [doc["config"], *doc["layers"]]:
            if request("HEAD", f"{base}/blobs/{desc['digest']}")[0] == 200:
                continue
            data = t.extractfile(f"blobs/sha256/{desc['digest'][7:]}").read()
            _, headers = request("POST", f"{base}/blobs/uploads/", b"")
            location = headers["Location"]
            if location.startswith("/"):
                location = f"http://{registry}{location}"
            sep = "&" if "?" in location else "?"
            request(
                "PUT",
                f"{location}{sep}digest={desc['digest']}",
                data,
                {"Content-Type": "application/octet-stream"},
            )
        request("PUT", f"{base}/manifests/{tag}", manifest, {"Content-Type": doc["mediaType"]})
    return f"{registry}/{repository}:{tag}"


def busybox_files() -> dict[str, tuple[bytes | str, int]]:
    busybox = Path("/bin/busybox")
    if not busybox.exists():
        raise ClusterError("/bin/busybox missing: apt-get install busybox-static (make tools)")
    applets = run([str(busybox), "--list"]).stdout.split()
    files: dict[str, tuple[bytes | str, int]] = {"bin/busybox": (busybox.read_bytes(), 0o755)}
    for a in applets:
        if a != "busybox":
            files[f"bin/{a}"] = ("busybox", 0)
    files["etc/passwd"] = (
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
        0o644,
    )
    files["etc/group"] = (b"root:x:0:\nnogroup:x:65534:\n", 0o644)
    files["tmp/.keep"] = (b"", 0o644)
    return files


# --- the harness ---------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    pid: int
    log: str


@dataclass
class Harness:
    """A cluster rooted at `dir`; `up()` starts it, `down()` removes every trace of it."""

    dir: Path
    registry: str | None = None  # host:port of the local OCI registry (plain HTTP, loopback)
    procs: list[Proc] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    # paths
    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    def save(self) -> None:
        self.state_file.write_text(
            json.dumps(
                {
                    "procs": [p.__dict__ for p in self.procs],
                    "info": self.info,
                    "timings": self.timings,
                    "registry": self.registry,
                },
                indent=1,
            )
        )

    @classmethod
    def load(cls, directory: Path) -> Harness:
        h = cls(dir=directory.resolve())
        if h.state_file.exists():
            state = json.loads(h.state_file.read_text())
            h.procs = [Proc(**p) for p in state.get("procs", [])]
            h.info = state.get("info", {})
            h.timings = state.get("timings", {})
            h.registry = state.get("registry")
        return h

    # processes
    def spawn(
        self, name: str, argv: list[str], env: dict | None = None, restart: bool = False
    ) -> Proc:
        """Start `argv` in its own session, logging to logs/<name>.log. With `restart`, a
        process that exits is started again after a second (as a Deployment would restart
        it), each exit noted in its log: Volcano's scheduler ends itself when it cannot
        renew its leader Lease in time, which a loaded 2-core machine can cause."""
        self.logs.mkdir(parents=True, exist_ok=True)
        logf = self.logs / f"{name}.log"
        if restart:
            argv = ["/bin/sh", "-c", RESTART_LOOP, name, *argv]
        with logf.open("ab") as out:
            p = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
                cwd=self.dir,
            )
        proc = Proc(name, p.pid, str(logf))
        self._popen = getattr(self, "_popen", {})
        self._popen[p.pid] = p
        self.procs.append(proc)
        self.save()
        return proc

    def alive(self, proc: Proc) -> bool:
        popen = getattr(self, "_popen", {}).get(proc.pid)
        if popen is not None:
            return popen.poll() is None
        try:
            os.kill(proc.pid, 0)
        except ProcessLookupError:
            return False
        # not our child (make cluster-up then down): check it is still the same program
        try:
            return not Path(f"/proc/{proc.pid}/stat").read_text().split()[2] == "Z"
        except OSError:
            return False

    def wait_for(self, what: str, probe, procs: list[Proc], deadline: float, interval=0.3):
        last = ""
        while time.monotonic() < deadline:
            for p in procs:
                if not self.alive(p):
                    raise ClusterError(
                        f"{p.name} exited while waiting for {what}:\n{tail(Path(p.log))}"
                    )
            try:
                if probe():
                    return
            except Exception as exc:  # noqa: BLE001 - any probe failure means "not yet"
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(interval)
        logs = "\n".join(f"--- {p.name} log tail:\n{tail(Path(p.log), 15)}" for p in procs)
        raise ClusterError(f"timed out waiting for {what} ({last})\n{logs}")

    def http_ok(self, url: str, client: str | None = None, verify: bool = True) -> bool:
        ctx = None
        if url.startswith("https"):
            if verify:
                ctx = ssl.create_default_context(cafile=str(self.dir / "pki" / "ca.crt"))
            else:
                ctx = ssl._create_unverified_context()  # noqa: S323 - component healthz on loopback
            if client:
                ctx.load_cert_chain(
                    str(self.dir / "pki" / f"{client}.crt"), str(self.dir / "pki" / f"{client}.key")
                )
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
                return resp.status == 200
        except urllib.error.HTTPError:
            return False

    # kubernetes client
    def api(self):
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        return client.ApiClient(configuration)

    def apply(self, docs: list[dict]) -> None:
        """Create the objects (server-side apply semantics are not needed: all new)."""
        from kubernetes import utils

        api = self.api()
        try:
            for doc in docs:
                utils.create_from_dict(api, doc)
        finally:
            api.close()

    # ------------------------------------------------------------------------------------
    def up(self) -> Harness:
        t0 = time.monotonic()
        deadline = t0 + START_TIMEOUT
        if self.dir.exists() and any(self.dir.iterdir()) and not self.state_file.exists():
            raise ClusterError(
                f"{self.dir} is not empty and holds no cluster: choose another --dir"
            )
        claim_machine(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)  # a fresh cluster: no old etcd data
        shutil.rmtree(ETCD_SHM, ignore_errors=True)  # one cluster per machine (claim_machine)
        self.dir.mkdir(parents=True)
        self.save()
        ip = node_ip()
        self.info.update(node_ip=ip, node=NODE_NAME)
        log(f"starting a one-node cluster in {self.dir} (node IP {ip})")
        pki = write_pki(self.dir / "pki", ip)
        kube = tool("kube")
        # Service and pod addresses never leave the machine: kube-proxy's DNAT happens before
        # routing, so only addresses it has not programmed (yet) hit these and are dropped.
        for cidr in (SERVICE_CIDR, POD_CIDR):
            run(["ip", "route", "replace", "blackhole", cidr])

        # etcd and containerd first, in parallel
        etcd_client, etcd_peer = free_ports(2)
        etcd = self.spawn(
            "etcd",
            [
                tool("etcd"),
                "--name=node",
                f"--data-dir={etcd_data_dir(self.dir)}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=node=http://127.0.0.1:{etcd_peer}",
                "--log-level=warn",
            ],
        )
        containerd = self.start_containerd()
        self.wait_for(
            "etcd",
            lambda: (
                b'"true"'
                in urllib.request.urlopen(
                    f"http://127.0.0.1:{etcd_client}/health", timeout=5
                ).read()
            ),
            [etcd],
            deadline,
        )
        (api_port,) = free_ports(1, ip)
        server = f"https://{ip}:{api_port}"
        self.info["server"] = server
        apiserver = self.spawn(
            "kube-apiserver",
            [
                kube,
                "kube-apiserver",
                f"--etcd-servers=http://127.0.0.1:{etcd_client}",
                f"--bind-address={ip}",
                f"--advertise-address={ip}",
                f"--secure-port={api_port}",
                f"--cert-dir={self.dir / 'apiserver-certs'}",
                f"--tls-cert-file={pki['apiserver.crt']}",
                f"--tls-private-key-file={pki['apiserver.key']}",
                f"--client-ca-file={pki['ca.crt']}",
                f"--kubelet-client-certificate={pki['admin.crt']}",
                f"--kubelet-client-key={pki['admin.key']}",
                # the node's address, never its name: no DNS lookup leaves the machine
                "--kubelet-preferred-address-types=InternalIP",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki['sa.pub']}",
                f"--service-account-signing-key-file={pki['sa.key']}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        for user in ("admin", "kubelet", "controller-manager", "scheduler", "kube-proxy"):
            target = self.kubeconfig if user == "admin" else self.dir / f"{user}.kubeconfig"
            kubeconfig(target, server, pki, user)
        self.wait_for(
            "kube-apiserver /readyz",
            lambda: self.http_ok(f"{server}/readyz", "admin"),
            [etcd, apiserver],
            deadline,
        )
        self.timings["apiserver_ready_s"] = round(time.monotonic() - t0, 1)
        self.wait_for(
            "containerd",
            lambda: self.ctr("version", check=False).returncode == 0,
            [containerd],
            deadline,
        )
        self.import_images()

        # control plane, node and add-ons, all at once
        cm_port, sch_port, kl_port, kl_health, kp_health, kp_metrics = free_ports(6)
        cm = self.spawn(
            "kube-controller-manager",
            [
                kube,
                "kube-controller-manager",
                f"--kubeconfig={self.dir / 'controller-manager.kubeconfig'}",
                f"--authentication-kubeconfig={self.dir / 'controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={self.dir / 'controller-manager.kubeconfig'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={cm_port}",
                f"--service-account-private-key-file={pki['sa.key']}",
                f"--root-ca-file={pki['ca.crt']}",
                f"--cluster-signing-cert-file={pki['ca.crt']}",
                f"--cluster-signing-key-file={pki['ca.key']}",
                "--use-service-account-credentials",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--cluster-cidr={POD_CIDR}",
                "--profiling=false",
                "--v=1",
            ],
        )
        sch = self.spawn(
            "kube-scheduler",
            [
                kube,
                "kube-scheduler",
                f"--kubeconfig={self.dir / 'scheduler.kubeconfig'}",
                f"--authentication-kubeconfig={self.dir / 'scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={self.dir / 'scheduler.kubeconfig'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={sch_port}",
                "--profiling=false",
                "--v=1",
            ],
        )
        kubelet = self.start_kubelet(kube, pki, ip, kl_port, kl_health)
        proxy = self.spawn(
            "kube-proxy",
            [
                kube,
                "kube-proxy",
                f"--kubeconfig={self.dir / 'kube-proxy.kubeconfig'}",
                "--proxy-mode=iptables",
                f"--cluster-cidr={POD_CIDR}",
                f"--hostname-override={NODE_NAME}",
                "--conntrack-max-per-core=0",
                "--conntrack-tcp-timeout-established=0",
                "--conntrack-tcp-timeout-close-wait=0",
                "--iptables-localhost-nodeports=false",
                f"--healthz-bind-address=127.0.0.1:{kp_health}",
                f"--metrics-bind-address=127.0.0.1:{kp_metrics}",
                "--v=1",
            ],
        )
        self.install_volcano_objects(pki)
        volcano = self.start_volcano(pki)
        coredns = self.start_coredns(ip)
        self.install_local_path_objects()
        lpp = self.start_local_path()
        core = [etcd, apiserver, containerd, cm, sch, kubelet, proxy]
        self.wait_for(
            "kube-controller-manager healthz",
            lambda: self.http_ok(f"https://127.0.0.1:{cm_port}/healthz", verify=False),
            core,
            deadline,
        )
        self.wait_for(
            "kube-scheduler healthz",
            lambda: self.http_ok(f"https://127.0.0.1:{sch_port}/healthz", verify=False),
            core,
            deadline,
        )
        self.wait_for("node Ready", self.node_ready, core, deadline)
        self.timings["node_ready_s"] = round(time.monotonic() - t0, 1)
        self.wait_for(
            "kube-proxy healthz",
            lambda: self.http_ok(f"http://127.0.0.1:{kp_health}/healthz"),
            core,
            deadline,
        )
        self.wait_for(
            "CoreDNS ready",
            lambda: self.http_ok(f"http://127.0.0.1:{self.info['coredns_ready_port']}/ready"),
            [*core, coredns],
            deadline,
        )
        for name, port in self.info["volcano_healthz"].items():
            self.wait_for(
                f"{name} healthz",
                # the webhook serves its healthz with its TLS certificate (from the harness CA)
                lambda port=port, name=name: self.http_ok(
                    f"{'https' if name == 'vc-webhook-manager' else 'http'}://127.0.0.1:{port}/healthz"
                ),
                [*core, *volcano],
                deadline,
            )
        self.wait_for("the default ServiceAccount", self.default_sa, [*core, lpp], deadline)
        self.timings["start_s"] = round(time.monotonic() - t0, 1)
        self.save()
        log(f"cluster up in {self.timings['start_s']} s: KUBECONFIG={self.kubeconfig}")
        return self

    # ------------------------------------------------------------------------------------
    def ctr(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        return run(
            [
                "ctr",
                "--address",
                str(self.dir / "containerd" / "containerd.sock"),
                "-n",
                "k8s.io",
                *args,
            ],
            check=check,
            timeout=timeout,
        )

    def start_containerd(self) -> Proc:
        c = self.dir / "containerd"
        (c / "certs.d").mkdir(parents=True, exist_ok=True)
        cni_conf = self.dir / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        if self.registry:
            host_dir = c / "certs.d" / self.registry
            host_dir.mkdir(parents=True, exist_ok=True)
            (host_dir / "hosts.toml").write_text(
                f'server = "http://{self.registry}"\n\n'
                f'[host."http://{self.registry}"]\n  capabilities = ["pull", "resolve"]\n'
            )
        (c / "config.toml").write_text(
            f"""version = 2
root = "{c / "root"}"
state = "{c / "state"}"
[grpc]
  address = "{c / "containerd.sock"}"
[ttrpc]
  address = "{c / "containerd.sock.ttrpc"}"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{c / "certs.d"}"
"""
        )
        (cni_conf / "10-elasticctr.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "elasticctr",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "ipMasq": True,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_SUBNET}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(self.dir / "cni" / "ipam"),
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                        {"type": "firewall", "backend": "iptables"},
                    ],
                },
                indent=1,
            )
        )
        (cni_conf / "99-loopback.conf").write_text(
            json.dumps({"cniVersion": "0.4.0", "name": "lo", "type": "loopback"})
        )
        return self.spawn("containerd", ["containerd", "--config", str(c / "config.toml")])

    def import_images(self) -> None:
        images = self.dir / "images"
        images.mkdir(exist_ok=True)
        pause = Path(tool("elasticctr-pause")).read_bytes()
        oci_image_tar(images / "pause.tar", PAUSE_IMAGE, {"pause": (pause, 0o755)}, ["/pause"])
        oci_image_tar(images / "busybox.tar", BUSYBOX_IMAGE, busybox_files(), ["/bin/sh"])
        for tar in ("pause.tar", "busybox.tar"):
            self.ctr("images", "import", "--no-unpack", str(images / tar))

    def start_kubelet(self, kube: str, pki, ip: str, port: int, healthz: int) -> Proc:
        kl = self.dir / "kubelet"
        (kl / "manifests").mkdir(parents=True, exist_ok=True)
        resolv = self.dir / "resolv.conf"
        resolv.write_text(f"nameserver {DNS_SERVICE_IP}\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": ip,
            "port": port,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz,
            "readOnlyPort": 0,
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.dir / 'containerd' / 'containerd.sock'}",
            "staticPodPath": str(kl / "manifests"),
            "podLogsDir": str(self.dir / "pod-logs"),
            "clusterDNS": [DNS_SERVICE_IP],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(resolv),
            "authentication": {
                "x509": {"clientCAFile": str(pki["ca.crt"])},
                "webhook": {"enabled": True},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "Webhook"},
            "evictionHard": {
                "nodefs.available": "2%",
                "imagefs.available": "2%",
                "memory.available": "100Mi",
            },
            "imageGCHighThresholdPercent": 99,
            "imageGCLowThresholdPercent": 98,
            "serializeImagePulls": False,
            "makeIPTablesUtilChains": True,
            "protectKernelDefaults": False,
            "shutdownGracePeriod": "0s",
        }
        (kl / "config.yaml").write_text(yaml.safe_dump(config))
        return self.spawn(
            "kubelet",
            [
                kube,
                "kubelet",
                f"--config={kl / 'config.yaml'}",
                f"--kubeconfig={self.dir / 'kubelet.kubeconfig'}",
                f"--root-dir={kl / 'root'}",
                f"--node-ip={ip}",
                f"--hostname-override={NODE_NAME}",
                "--v=1",
            ],
        )

    def node_ready(self) -> bool:
        from kubernetes import client

        api = self.api()
        try:
            node = client.CoreV1Api(api).read_node(NODE_NAME)
            return any(
                c.type == "Ready" and c.status == "True" for c in node.status.conditions or []
            )
        finally:
            api.close()

    def default_sa(self) -> bool:
        from kubernetes import client

        api = self.api()
        try:
            client.CoreV1Api(api).read_namespaced_service_account("default", "default")
            return True
        finally:
            api.close()

    # --- CoreDNS -----------------------------------------------------------------------
    def start_coredns(self, ip: str) -> Proc:
        (dns_port,) = free_ports(1, ip)
        health, ready = free_ports(2)
        self.info["coredns_ready_port"] = ready
        corefile = self.dir / "Corefile"
        corefile.write_text(
            f""".:{dns_port} {{
    bind {ip}
    errors
    health 127.0.0.1:{health}
    ready 127.0.0.1:{ready}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    cache 30
}}
"""
        )
        # The kube-dns Service has no selector: its EndpointSlice points at this host process.
        ports = [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": dns_port},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": dns_port},
        ]
        self.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {
                        "name": "kube-dns",
                        "namespace": "kube-system",
                        "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
                    },
                    "spec": {"clusterIP": DNS_SERVICE_IP, "ports": ports},
                },
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "name": "kube-dns-host",
                        "namespace": "kube-system",
                        "labels": {
                            "kubernetes.io/service-name": "kube-dns",
                            "endpointslice.kubernetes.io/managed-by": "elasticctr-cluster-harness",
                        },
                    },
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
                    "ports": [
                        {"name": "dns", "port": dns_port, "protocol": "UDP"},
                        {"name": "dns-tcp", "port": dns_port, "protocol": "TCP"},
                    ],
                },
            ]
        )
        return self.spawn("coredns", [tool("coredns"), "-conf", str(corefile)])

    # --- local-path-provisioner ----------------------------------------------------------
    def install_local_path_objects(self) -> None:
        storage = self.dir / "storage"
        storage.mkdir(exist_ok=True)
        config = json.dumps(
            {
                "nodePathMap": [
                    {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [str(storage)]}
                ]
            }
        )
        helper = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "helper-pod"},
            "spec": {
                "priorityClassName": "system-node-critical",
                "terminationGracePeriodSeconds": 1,
                "tolerations": [
                    {
                        "key": "node.kubernetes.io/disk-pressure",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                    }
                ],
                "containers": [
                    {"name": "helper-pod", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never"}
                ],
            },
        }
        (self.dir / "local-path-config.json").write_text(config)
        (self.dir / "local-path-helper-pod.yaml").write_text(yaml.safe_dump(helper))
        ns = LOCAL_PATH_NAMESPACE
        self.apply(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "local-path-provisioner-service-account", "namespace": ns},
                },
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "local-path-config", "namespace": ns},
                    "data": {
                        "config.json": config,
                        "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
                        "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n',
                        "helperPod.yaml": yaml.safe_dump(helper),
                    },
                },
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {
                        "name": STORAGE_CLASS,
                        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                    },
                    "provisioner": "rancher.io/local-path",
                    "volumeBindingMode": "WaitForFirstConsumer",
                    "reclaimPolicy": "Delete",
                },
            ]
        )

    def start_local_path(self) -> Proc:
        return self.spawn(
            "local-path-provisioner",
            [
                tool("local-path-provisioner"),
                "start",
                f"--kubeconfig={self.kubeconfig}",
                f"--namespace={LOCAL_PATH_NAMESPACE}",
                f"--config={self.dir / 'local-path-config.json'}",
                f"--helper-pod-file={self.dir / 'local-path-helper-pod.yaml'}",
                f"--helper-image={BUSYBOX_IMAGE}",
            ],
        )

    # --- Volcano -------------------------------------------------------------------------
    def volcano_src(self) -> Path:
        src = TOOLS / "volcano"
        if not (src / "installer").is_dir():
            raise ClusterError(
                f"{src} missing: run `make tools` (Volcano from ../shared/third_party)"
            )
        return src

    def install_volcano_objects(self, pki) -> None:
        from kubernetes import client

        chart = self.volcano_src() / "installer" / "helm" / "chart" / "volcano"
        crds = sorted((chart / "crd" / "bases").glob("*.yaml")) + sorted(
            (chart / "charts" / "jobflow" / "crd" / "bases").glob("*.yaml")
        )
        docs = [yaml.safe_load(p.read_text()) for p in crds]
        api = self.api()
        try:
            ext = client.ApiextensionsV1Api(api)
            for doc in docs:
                ext.create_custom_resource_definition(doc)
        finally:
            api.close()
        # The scheduler reads its configuration from this file; the ConfigMap holds the same
        # text under the chart's name and key, so `ectl doctor` reads what really runs. The
        # default is the configuration docs/chart.md recommends for elastic trainers
        # (preempt and reclaim; Volcano's own chart runs neither), which
        # tests/e2e/test_preemption.py needs.
        conf = os.environ.get("ELASTICCTR_VOLCANO_SCHEDULER_CONF") or str(SCHEDULER_CONF)
        self.info["volcano_scheduler_conf"] = conf
        self.apply(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": VOLCANO_NAMESPACE}},
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": "volcano-scheduler-configmap",
                        "namespace": VOLCANO_NAMESPACE,
                    },
                    "data": {"volcano-scheduler.conf": Path(conf).read_text()},
                },
            ]
        )
        (webhook_port,) = free_ports(1)
        self.info["volcano_webhook_port"] = webhook_port
        rendered = run(
            [
                tool("helm"),
                "template",
                "volcano",
                str(chart),
                "--namespace",
                VOLCANO_NAMESPACE,
                "--show-only",
                "templates/webhooks.yaml",
            ]
        ).stdout
        ca = pki["ca.crt"].read_bytes()
        import base64

        webhooks = []
        for doc in yaml.safe_load_all(rendered):
            if not doc:
                continue
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{webhook_port}{path}",
                    "caBundle": base64.b64encode(ca).decode(),
                }
            webhooks.append(doc)
        self.info["volcano_webhooks"] = [d["metadata"]["name"] for d in webhooks]
        self.apply(webhooks)
        deadline = time.monotonic() + 60
        api = self.api()
        try:
            ext = client.ApiextensionsV1Api(api)
            for doc in docs:
                while True:
                    crd = ext.read_custom_resource_definition(doc["metadata"]["name"])
                    if any(
                        c.type == "Established" and c.status == "True"
                        for c in crd.status.conditions or []
                    ):
                        break
                    if time.monotonic() > deadline:
                        raise ClusterError(f"CRD {doc['metadata']['name']} not Established")
                    time.sleep(0.2)
        finally:
            api.close()

    def start_volcano(self, pki) -> list[Proc]:
        chart = self.volcano_src() / "installer" / "helm" / "chart" / "volcano"
        admissions = yaml.safe_load((chart / "values.yaml").read_text())["custom"][
            "enabled_admissions"
        ]
        sched_health, sched_listen, ctl_health, ctl_listen, wh_health = free_ports(5)
        self.info["volcano_healthz"] = {
            "vc-scheduler": sched_health,
            "vc-controller-manager": ctl_health,
            "vc-webhook-manager": wh_health,
        }
        port = self.info["volcano_webhook_port"]
        common = [f"--kubeconfig={self.kubeconfig}", "--logtostderr", "-v=2"]
        return [
            self.spawn(
                "vc-webhook-manager",
                [
                    tool("vc-webhook-manager"),
                    *common,
                    f"--enabled-admission={admissions}",
                    f"--tls-cert-file={pki['webhook.crt']}",
                    f"--tls-private-key-file={pki['webhook.key']}",
                    f"--ca-cert-file={pki['ca.crt']}",
                    f"--admission-conf={chart / 'config' / 'volcano-admission.conf'}",
                    f"--webhook-url=https://127.0.0.1:{port}",
                    "--listen-address=127.0.0.1",
                    f"--port={port}",
                    "--enable-healthz=true",
                    f"--healthz-address=127.0.0.1:{wh_health}",
                ],
                restart=True,
            ),
            self.spawn(
                "vc-controller-manager",
                [
                    tool("vc-controller-manager"),
                    *common,
                    "--leader-elect=false",
                    "--enable-healthz=true",
                    f"--healthz-address=127.0.0.1:{ctl_health}",
                    f"--listen-address=127.0.0.1:{ctl_listen}",
                ],
                restart=True,
            ),
            self.spawn(
                "vc-scheduler",
                [
                    tool("vc-scheduler"),
                    *common,
                    f"--scheduler-conf={self.info['volcano_scheduler_conf']}",
                    # its Lease (volcano-system/volcano) is how `ectl doctor` sees it running;
                    # long deadlines: etcd stalls for 7 s on a loaded 2-core machine, and the
                    # default 10 s renew deadline then ends the scheduler (restarted anyway)
                    "--leader-elect=true",
                    f"--leader-elect-resource-namespace={VOLCANO_NAMESPACE}",
                    "--leader-elect-lease-duration=60s",
                    "--leader-elect-renew-deadline=45s",
                    "--leader-elect-retry-period=5s",
                    "--enable-healthz=true",
                    f"--healthz-address=127.0.0.1:{sched_health}",
                    f"--listen-address=127.0.0.1:{sched_listen}",
                ],
                restart=True,
            ),
        ]

    # --- diagnostics -------------------------------------------------------------------
    @staticmethod
    def _container_logs(core, ns: str, pod: str, cs, lines: int) -> list[str]:
        """The log tail of a container that is not ready or restarted: the current run's
        and, after a restart, the previous run's (why liveness or the process ended it)."""
        out = []
        for previous in (False, True) if cs.restart_count else (False,):
            try:
                text = core.read_namespaced_pod_log(
                    pod, ns, container=cs.name, tail_lines=lines, previous=previous,
                    _request_timeout=10,
                )  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - a missing log must not hide the rest
                text = f"(no log: {exc})"
            which = "previous run" if previous else "log"
            out.append(f"  --- {cs.name} {which} tail:")
            out.extend(f"    {ln}" for ln in (text or "").splitlines()[-lines:])
        return out

    def diagnostics(
        self, namespace: str | None = None, lines: int = 20, logs: tuple[str, ...] = ()
    ) -> str:
        """Node conditions, pods not Running/Succeeded with their events, component log tails.
        `logs`: parts of pod names whose log tails are shown even when they are ready (what
        a wait depended on, e.g. "serving")."""
        from kubernetes import client

        out = []
        try:
            api = self.api()
            try:
                core = client.CoreV1Api(api)
                for node in core.list_node(_request_timeout=10).items:
                    conds = ", ".join(f"{c.type}={c.status}" for c in node.status.conditions or [])
                    out.append(f"node {node.metadata.name}: {conds}")
                pods = (
                    core.list_namespaced_pod(namespace, _request_timeout=10)
                    if namespace
                    else core.list_pod_for_all_namespaces(_request_timeout=10)
                )
                for pod in pods.items:
                    ns, name = pod.metadata.namespace, pod.metadata.name
                    out.append(f"pod {ns}/{name}: {pod.status.phase}")
                    for cs in pod.status.container_statuses or []:
                        out.append(
                            f"  container {cs.name}: ready={cs.ready} "
                            f"restarts={cs.restart_count} state={cs.state.to_dict()}"
                        )
                        if not cs.ready or cs.restart_count or any(w in name for w in logs):
                            out.extend(self._container_logs(core, ns, name, cs, lines))
                    events = core.list_namespaced_event(
                        ns, field_selector=f"involvedObject.name={name}", _request_timeout=10
                    )
                    for ev in events.items[-8:]:
                        out.append(f"  event {ev.type} {ev.reason}: {ev.message}")
            finally:
                api.close()
        except Exception as exc:  # noqa: BLE001 - diagnostics must not hide the original error
            out.append(f"(API not reachable for diagnostics: {exc})")
        for p in self.procs:
            out.append(
                f"--- {p.name} (pid {p.pid}, {'alive' if self.alive(p) else 'EXITED'}) log tail:"
            )
            out.append(tail(Path(p.log), lines))
        return "\n".join(out)

    # --- teardown ------------------------------------------------------------------------
    def down(self) -> float:
        t0 = time.monotonic()
        problems: list[str] = []
        if self.kubeconfig.exists() and any(
            p.name == "kubelet" and self.alive(p) for p in self.procs
        ):
            self._delete_pods()
        # stop every process, newest first; containerd last so it can stop its shims
        order = [p for p in reversed(self.procs) if p.name != "containerd"]
        for p in order:
            self._stop(p, 10)
        self._kill_containers()
        for p in self.procs:
            if p.name == "containerd":
                self._stop(p, 10)
        sweep_machine(self.dir, problems)
        if STATE_POINTER.exists() and STATE_POINTER.read_text().strip() == str(self.dir):
            STATE_POINTER.unlink()
        self.timings["down_s"] = round(time.monotonic() - t0, 1)
        self.procs = []
        if self.dir.exists():
            self.save()
        if problems:
            raise ClusterError("teardown left something behind:\n" + "\n".join(problems))
        return self.timings["down_s"]

    def _stop(self, p: Proc, grace: float) -> None:
        if not self.alive(p):
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        end = time.monotonic() + grace
        while time.monotonic() < end and self.alive(p):
            time.sleep(0.1)
        if self.alive(p):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        popen = getattr(self, "_popen", {}).get(p.pid)
        if popen is not None:
            try:
                popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def _delete_pods(self) -> None:
        """Stop the controllers that recreate pods, then delete every pod so the kubelet tears
        its sandbox down through CNI (bounded: whatever remains is killed below)."""
        from kubernetes import client

        for p in self.procs:
            if p.name in (
                "vc-controller-manager",
                "kube-controller-manager",
                "vc-scheduler",
                "kube-scheduler",
            ):
                self._stop(p, 5)
        try:
            api = self.api()
            try:
                core = client.CoreV1Api(api)
                pods = core.list_pod_for_all_namespaces(_request_timeout=10).items
                for pod in pods:
                    try:
                        core.delete_namespaced_pod(
                            pod.metadata.name,
                            pod.metadata.namespace,
                            grace_period_seconds=0,
                            _request_timeout=10,
                        )
                    except client.ApiException:
                        pass
            finally:
                api.close()
        except Exception as exc:  # noqa: BLE001 - teardown goes on regardless
            log(f"could not delete pods through the API: {exc}")
            return
        # the kubelet stops the sandboxes; wait until containerd has none running
        end = time.monotonic() + 30
        while time.monotonic() < end:
            out = self.ctr("tasks", "list", "-q", check=False, timeout=20).stdout.split()
            sandboxes = self._crt_sandboxes()
            if not out and not sandboxes:
                break
            time.sleep(0.5)

    def _crt_sandboxes(self) -> list[str]:
        state = self.dir / "containerd" / "state" / "io.containerd.grpc.v1.cri" / "sandboxes"
        return [p.name for p in state.iterdir()] if state.is_dir() else []

    def _kill_containers(self) -> None:
        sock = self.dir / "containerd" / "containerd.sock"
        if not sock.exists():
            return
        tasks = self.ctr("tasks", "list", "-q", check=False, timeout=20).stdout.split()
        for t in tasks:
            self.ctr("tasks", "kill", "-a", "-s", "SIGKILL", t, check=False, timeout=20)
        end = time.monotonic() + 10
        while tasks and time.monotonic() < end:
            for t in tasks:
                self.ctr("tasks", "delete", "-f", t, check=False, timeout=20)
            tasks = self.ctr("tasks", "list", "-q", check=False, timeout=20).stdout.split()


# --- machine-wide state --------------------------------------------------------------------


def claim_machine(directory: Path) -> None:
    """One cluster per machine: refuse when another harness's cluster runs; clean up leftovers."""
    directory = directory.resolve()
    if STATE_POINTER.exists():
        other = Path(STATE_POINTER.read_text().strip())
        h = Harness.load(other)
        if any(h.alive(p) for p in h.procs):
            raise ClusterError(
                f"a cluster is already running from {other} (one per machine): stop it with "
                f"`scripts/cluster/harness.py down --dir {other}` (make cluster-down)"
            )
        problems: list[str] = []
        sweep_machine(other, problems)
    leftovers = machine_leftovers()
    if leftovers:
        log("cleaning leftovers of an earlier cluster: " + "; ".join(leftovers))
        problems = []
        sweep_machine(directory, problems)
    STATE_POINTER.write_text(str(directory))


def _procs_mentioning(directory: Path) -> list[int]:
    me = {os.getpid(), os.getppid()}
    found = []
    needle = str(directory).encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in me:
            continue
        try:
            if needle in (d / "cmdline").read_bytes():
                found.append(int(d.name))
        except OSError:
            continue
    return found


def _kubepods_cgroups() -> list[Path]:
    found = []
    if CGROUP_ROOT.is_dir():
        for controller in CGROUP_ROOT.iterdir():
            kp = controller / "kubepods"
            if kp.is_dir():
                found.append(kp)
    return found


def _iptables_chains() -> dict[str, list[str]]:
    chains: dict[str, list[str]] = {}
    for table in ("filter", "nat", "mangle", "raw"):
        out = run(["iptables-save", "-t", table], check=False).stdout
        names = [line[1:].split()[0] for line in out.splitlines() if line.startswith(":")]
        ours = [n for n in names if IPTABLES_CHAIN.match(n)]
        if ours:
            chains[table] = ours
    return chains


def machine_leftovers(directory: Path | None = None) -> list[str]:
    """What a cluster leaves on the machine that teardown must remove (empty when clean)."""
    left = []
    if directory is not None:
        pids = _procs_mentioning(directory)
        if pids:
            left.append(f"processes {pids}")
        mounts = [
            line.split()[1]
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if str(directory) in line
        ]
        if mounts:
            left.append(f"mounts {mounts[:5]}")
    for kp in _kubepods_cgroups():
        left.append(f"cgroup {kp}")
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        left.append(f"bridge {BRIDGE}")
    routes = run(["ip", "route", "show", "type", "blackhole"], check=False).stdout
    for cidr in (SERVICE_CIDR, POD_CIDR):
        if cidr in routes:
            left.append(f"route blackhole {cidr}")
    chains = _iptables_chains()
    if chains:
        left.append(f"iptables chains {chains}")
    for p in HOST_PATHS:
        if Path(p).exists():
            left.append(f"path {p}")
    kubelet_mounts = [
        line.split()[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if "/var/lib/kubelet" in line
    ]
    if kubelet_mounts:
        left.append(f"mounts {kubelet_mounts[:5]}")
    return left


ETCD_SHM = Path("/dev/shm/elasticctr-etcd")


def etcd_data_dir(directory: Path) -> Path:
    """Where the cluster in `directory` keeps etcd's data: in memory (/dev/shm) when it has
    room, so etcd's fsyncs cost nothing. On disk, a loaded 2-core machine stalled etcd's
    writes for 7 s and the API server then failed requests with "etcdserver: request timed
    out" (a `helm install` of the platform e2e test, 2026-12-03). The path names
    `directory`, so the sweep finds etcd by its command line like every other component."""
    try:
        room = shutil.disk_usage("/dev/shm").free
    except OSError:
        room = 0
    if room < 2 << 30:
        return directory / "etcd"
    return ETCD_SHM / str(directory.resolve()).lstrip("/") / "etcd"


def sweep_machine(directory: Path, problems: list[str]) -> None:
    """Remove everything a cluster in `directory` may have left, whatever state it is in."""
    # 1. processes: anything naming the directory (components, shims), anything in kubepods
    for attempt in range(3):
        pids = set(_procs_mentioning(directory))
        for kp in _kubepods_cgroups():
            for procs in kp.rglob("cgroup.procs"):
                try:
                    pids.update(int(x) for x in procs.read_text().split())
                except OSError:
                    pass
        pids.discard(os.getpid())
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5 * (attempt + 1))
    # 2. mounts under the directory and the kubelet's paths, deepest first
    for _ in range(3):
        mounts = [
            line.split()[1].replace("\\040", " ")
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if str(directory) in line.split()[1] or line.split()[1].startswith("/var/lib/kubelet")
        ]
        if not mounts:
            break
        for m in sorted(set(mounts), key=len, reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)
    # 3. network: the bridge, kube-proxy's and CNI's iptables chains
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)
    for cidr in (SERVICE_CIDR, POD_CIDR):
        subprocess.run(["ip", "route", "delete", "blackhole", cidr], capture_output=True)
    _remove_iptables_chains()
    # 4. cgroups (deepest first; empty after the kill above)
    for kp in _kubepods_cgroups():
        dirs = sorted(
            (p for p in kp.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        )
        for d in [*dirs, kp]:
            try:
                d.rmdir()
            except OSError:
                pass
    # 5. host paths, and etcd's data in memory
    for p in HOST_PATHS:
        shutil.rmtree(p, ignore_errors=True)
    shutil.rmtree(ETCD_SHM, ignore_errors=True)
    left = machine_leftovers(directory)
    problems.extend(left)


def _remove_iptables_chains() -> None:
    """Drop every rule that jumps to a KUBE-*/CNI-* chain, then flush and delete the chains."""
    for table in ("filter", "nat", "mangle", "raw"):
        out = run(["iptables-save", "-t", table], check=False).stdout
        chains = [line[1:].split()[0] for line in out.splitlines() if line.startswith(":")]
        ours = {c for c in chains if IPTABLES_CHAIN.match(c)}
        if not ours:
            continue
        for line in out.splitlines():
            if not line.startswith("-A "):
                continue
            parts = line.split()
            chain = parts[1]
            target = parts[parts.index("-j") + 1] if "-j" in parts else None
            if chain not in ours and target in ours:
                import shlex

                subprocess.run(
                    ["iptables", "-t", table, "-D", *shlex.split(line)[1:]], capture_output=True
                )
        for c in ours:
            subprocess.run(["iptables", "-t", table, "-F", c], capture_output=True)
        for c in ours:
            subprocess.run(["iptables", "-t", table, "-X", c], capture_output=True)


# --- CLI -----------------------------------------------------------------------------------


def default_dir() -> Path:
    return Path(os.environ.get("ELASTICCTR_CLUSTER_DIR", REPO / ".cluster"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument(
        "--dir", type=Path, default=None, help="cluster directory (default .cluster)"
    )
    parser.add_argument(
        "--registry",
        default=os.environ.get("ELASTICCTR_REGISTRY"),
        help="host:port of the local OCI registry the kubelet pulls from over plain HTTP",
    )
    args = parser.parse_args(argv)
    directory = (args.dir or default_dir()).resolve()
    if args.command == "up":
        h = Harness(dir=directory, registry=args.registry)
        try:
            h.up()
        except (ClusterError, Exception) as exc:
            log(f"start-up failed: {exc}")
            log("diagnostics:\n" + h.diagnostics())
            try:
                h.down()
            except ClusterError as down_exc:
                log(str(down_exc))
            return 1
        print(f"export KUBECONFIG={h.kubeconfig}")
        print(json.dumps({"timings": h.timings, **{k: h.info[k] for k in ("server", "node_ip")}}))
        return 0
    if args.command == "down":
        if not directory.exists() and STATE_POINTER.exists():
            directory = Path(STATE_POINTER.read_text().strip())
        h = Harness.load(directory)
        try:
            seconds = h.down()
        except ClusterError as exc:
            log(str(exc))
            return 1
        log(f"cluster down in {seconds} s; machine clean")
        return 0
    h = Harness.load(directory)
    alive = [p.name for p in h.procs if h.alive(p)]
    print(json.dumps({"dir": str(directory), "running": alive, **h.info}, indent=1))
    return 0 if alive else 1


if __name__ == "__main__":
    sys.exit(main())
