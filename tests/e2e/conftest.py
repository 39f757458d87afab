"""The one-node cluster with Volcano for the end-to-end tests (scripts/cluster/harness.py).

`kube_cluster` (package scope: torn down right after the last e2e test) starts etcd, the
Kubernetes control plane, a kubelet on its own containerd, kube-proxy, CoreDNS,
local-path-provisioner and Volcano as host processes in a tmp dir, with a local OCI registry
(`local_registry`, scripts/registry.sh) the kubelet pulls from. Its teardown fails the run
when it leaves a process, mount, bridge, iptables chain, cgroup or host path behind. A
start-up failure fails (never skips) with node conditions, pod events and component logs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import REPO, require_tool

sys.path.insert(0, str(REPO / "scripts" / "cluster"))
import harness  # noqa: E402


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="package")
def local_registry() -> str:
    """host:port of a local OCI registry (scripts/registry.sh, Debian's docker-registry on
    loopback); ELASTICCTR_REGISTRY names an already running one instead. Its blob store
    persists in ~/.cache/elasticctr/images/e2e-registry (by the same port when free), so a
    warm run's `publish.sh` does not upload ~2 GB of unchanged layers again; every image and
    the chart are still pushed, and the cluster's fresh containerd pulls them all."""
    if os.environ.get("ELASTICCTR_REGISTRY"):
        yield os.environ["ELASTICCTR_REGISTRY"]
        return
    script = REPO / "scripts" / "registry.sh"
    if not script.exists():
        pytest.fail(f"{script} missing: the cluster pulls images from the local registry")
    cache = os.environ.get("ELASTICCTR_IMAGES_CACHE", Path.home() / ".cache/elasticctr/images")
    state = Path(cache) / "e2e-registry"
    state.mkdir(parents=True, exist_ok=True)
    port_file = state / "port"
    port = int(port_file.read_text()) if port_file.exists() else 0
    if port:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                port = 0  # taken: a new port (the blobs stay)
    proc = subprocess.run(
        [str(script), "start", str(state), str(port)], capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        pytest.fail(f"scripts/registry.sh start failed: {proc.stderr[-2000:]}", pytrace=False)
    address = proc.stdout.strip().splitlines()[-1]
    port_file.write_text(address.rsplit(":", 1)[1])
    yield address
    subprocess.run([str(script), "stop", str(state)], capture_output=True, timeout=60)


@pytest.fixture(scope="package")
def published(local_registry, tmp_path_factory) -> dict:
    """Publish the built images and the packaged chart to the cluster's registry once for
    every e2e test (scripts/images/publish.sh, what `make publish` runs). Returns
    `{"registry": HOST:PORT, "chart": "oci://HOST:PORT/charts/elasticctr:V", "images": {...}}`;
    `chart_image_values(published)` are the values that make a chart directory (not the
    published package, which has them as defaults) pull these images."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [str(REPO / "scripts" / "images" / "publish.sh"), local_registry, str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=REPO,
    )
    if proc.returncode != 0:
        pytest.fail(f"publish.sh failed (run `make images` first):\n{proc.stderr[-3000:]}")
    (digests,) = out.glob("elasticctr-*.digests.json")
    meta = json.loads(digests.read_text())
    chart = meta["chart"]
    ref = chart["reference"] if isinstance(chart, dict) else chart
    return {"registry": meta["registry"], "chart": ref.split("@")[0], "images": meta["images"]}


def chart_image_values(published: dict) -> dict:
    """The `global.image.registry` publish.sh bakes into the packaged chart (its one edit of
    values.yaml), for installs of the chart directory (chart-testing)."""
    return {"global": {"image": {"registry": published["registry"]}}}


@pytest.fixture(scope="package")
def kube_cluster(tmp_path_factory, local_registry) -> harness.Harness:
    for name in ("kube", "etcd", "coredns", "local-path-provisioner", "vc-scheduler", "helm"):
        require_tool(name)
    h = harness.Harness(dir=tmp_path_factory.mktemp("kcluster"), registry=local_registry)
    try:
        h.up()
    except Exception as exc:  # noqa: BLE001 - report with diagnostics, then clean up
        report = h.diagnostics()
        try:
            h.down()
        except harness.ClusterError as down_exc:
            report += f"\n{down_exc}"
        pytest.fail(f"cluster start-up failed: {exc}\n{report}", pytrace=False)
    print(f"\ncluster up: {h.timings}")
    yield h
    seconds = h.down()
    print(f"\ncluster down in {seconds} s")


@pytest.fixture(scope="package")
def cluster_hdfs(kube_cluster, tmp_path_factory):
    """A real HDFS the cluster's pods reach (docs/hdfs.md): MiniDFSCluster with permissions
    on, serving on the node IP (`minihdfs --advertise`), for as long as the cluster runs."""
    from tests.hdfs_fixture import MiniHdfs

    hdfs = MiniHdfs(tmp_path_factory.mktemp("cluster-hdfs"), advertise=kube_cluster.info["node_ip"])
    hdfs.start()
    print(f"\ncluster HDFS {hdfs.url} up in {hdfs.start_seconds:.1f} s")
    yield hdfs
    hdfs.stop()


@pytest.fixture(scope="package")
def cluster_s3(kube_cluster, tmp_path_factory):
    """A real S3 server the cluster's pods reach (docs/storage.md): SeaweedFS with checked
    credentials, on the node IP, for as long as the cluster runs; bucket `TEST_BUCKET`."""
    from tests.s3_fixture import SeaweedS3

    s3 = SeaweedS3(tmp_path_factory.mktemp("cluster-s3"), host=kube_cluster.info["node_ip"])
    s3.start()
    print(f"\ncluster S3 {s3.endpoint} up in {s3.start_seconds:.1f} s")
    yield s3
    s3.stop()


def wait_until(
    what: str,
    probe,
    timeout: float,
    h: harness.Harness,
    namespace: str | None = None,
    logs: tuple[str, ...] = (),
):
    """Poll probe() until it returns a truthy value; on timeout fail with the diagnostics
    (with the log tails of the pods whose names hold one of `logs`, ready or not)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            result = probe()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - "not yet"
            last = exc
        time.sleep(0.5)
    pytest.fail(
        f"timed out after {timeout:.0f} s waiting for {what} (last error: {last})\n"
        f"{h.diagnostics(namespace, lines=40 if logs else 20, logs=logs)}",
        pytrace=False,
    )


__all__ = ["Path", "chart_image_values", "wait_until"]
