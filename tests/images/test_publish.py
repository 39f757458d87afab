"""The registry round trip, as a user would do it: `make publish`'s script pushes every
image and the packaged chart to a local OCI registry with no tags (scripts/registry.sh:
Debian's docker-registry on loopback); then the chart is rendered from oci:// by `helm template` and
by `ectl template --chart oci://...`, every image it references is in that registry under
the digest publish recorded, and `docker pull` of each works."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import httpx
import pytest
import yaml
from image_helpers import IMAGES, REPO, SCRIPTS, run
from tests.conftest import require_tool

pytestmark = [pytest.mark.images, pytest.mark.integration]

VERSION = yaml.safe_load((REPO / "charts" / "elasticctr" / "Chart.yaml").read_text())["appVersion"]
MANIFEST_TYPES = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
])  # fmt: skip


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def registry():
    """A local registry (scripts/registry.sh) for the round trip. Its blob store and port
    persist in ~/.cache/elasticctr/images/test-registry, so a warm run does not compress and
    upload ~2 GB of unchanged layers again (Docker skips a layer it knows that registry
    has); every tag is deleted before the start, so publish must push each image and the
    chart again, and a changed image is pushed in full."""
    cache = os.environ.get("ELASTICCTR_IMAGES_CACHE", Path.home() / ".cache/elasticctr/images")
    state = Path(cache) / "test-registry"
    port_file = state / "port"
    port = int(port_file.read_text()) if port_file.exists() else 0
    if port and not _port_free(port):
        shutil.rmtree(state)  # someone else has the port: start over, cold
        port = 0
    for tags in (state / "data").glob("docker/registry/v2/repositories/**/_manifests/tags"):
        shutil.rmtree(tags)
    done = run([str(SCRIPTS / "registry.sh"), "start", str(state), str(port)], timeout=60)
    assert done.returncode == 0, done.stderr
    addr = done.stdout.strip()
    port_file.write_text(addr.rsplit(":", 1)[1])
    try:
        catalog = httpx.get(f"http://{addr}/v2/_catalog").json()["repositories"]
        for repo in catalog:  # no tag survives from an earlier run
            tags = httpx.get(f"http://{addr}/v2/{repo}/tags/list").json().get("tags")
            assert not tags, (repo, tags)
        yield addr
    finally:
        run([str(SCRIPTS / "registry.sh"), "stop", str(state)], timeout=60)


def _images_of(docs) -> set[str]:
    found = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    found.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(list(docs))
    return found


def test_publish_then_install_from_the_registry(docker, images, registry, tmp_path):
    out = tmp_path / "dist"
    done = run([str(SCRIPTS / "images" / "publish.sh"), registry, str(out)], cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / f"elasticctr-{VERSION}.digests.json").read_text())
    assert record["registry"] == registry
    want = {f"{registry}/elasticctr/elasticctr-{i}:{VERSION}" for i in IMAGES}
    assert set(record["images"]) == want
    assert record["chart"]["reference"] == f"oci://{registry}/charts/elasticctr:{VERSION}"

    catalog = httpx.get(f"http://{registry}/v2/_catalog").json()["repositories"]
    assert set(catalog) == {f"elasticctr/elasticctr-{i}" for i in IMAGES} | {"charts/elasticctr"}

    helm = require_tool("helm")
    chart = f"oci://{registry}/charts/elasticctr"
    rendered = run([helm, "template", "ctr", chart, "--version", VERSION, "--plain-http"])
    assert rendered.returncode == 0, rendered.stderr
    assert _images_of(yaml.safe_load_all(rendered.stdout)) == want  # helm test hook included

    env = {**os.environ, "ELASTICCTR_HELM": helm}
    ectl = str(REPO / ".venv" / "bin" / "ectl")
    templ = run([ectl, "template", "--chart", f"{chart}:{VERSION}", "-o", "json"], env=env)
    assert templ.returncode == 0, templ.stderr
    assert _images_of(json.loads(templ.stdout)) == want
    bad = run([ectl, "template", "--chart", f"{chart}:9.9.9"], env=env)
    assert bad.returncode != 0 and "cannot pull chart" in bad.stderr + bad.stdout

    for ref, digest in record["images"].items():
        name, tag = ref.removeprefix(f"{registry}/").rsplit(":", 1)
        head = httpx.head(f"http://{registry}/v2/{name}/manifests/{tag}",
                          headers={"Accept": MANIFEST_TYPES})  # fmt: skip
        assert head.status_code == 200 and head.headers["Docker-Content-Digest"] == digest, ref
        docker("rmi", ref)  # drop the tag publish made; the local image stays
        docker("pull", ref, timeout=600)
        local = images[name.rsplit("/", 1)[-1].removeprefix("elasticctr-")]
        same = [docker("image", "inspect", "-f", "{{.Id}}", r).stdout for r in (ref, local)]
        assert same[0] == same[1], ref
        pulled = docker("image", "inspect", "-f", "{{json .RepoDigests}}", ref).stdout
        assert f"{registry}/{name}@{digest}" in json.loads(pulled)
