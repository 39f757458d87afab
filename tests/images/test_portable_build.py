"""`docker build` of the images as a user on any Docker host runs it (docs/images.md,
"Build anywhere"): from the repository root, on a plain Debian bookworm base given as BASE,
the build installs images/packages.txt with apt and fetches the pinned wheels itself
(CONTEXT=source). The public `debian:bookworm-slim` is not reachable here, so the base is
the same thing made from Debian packages: a debootstrap minbase with nothing added
(`scripts/images/base.sh --plain`). The machine reaches PyPI through a TLS-intercepting
proxy whose CA the host trusts, so the tests pass that bundle as the build secret the
Dockerfile documents for such proxies.

The source-built images must hold exactly what `make images` puts in them (same pins, same
project, user and entry point), and serve. arm64: the cube and train images (the ones with
native code of their own: uvloop, Paddle, the static reader) are built for linux/arm64
through qemu-user-static (scripts/images/qemu.sh) on an arm64 debootstrap base and run
there; the build of all five for arm64 is measured in docs/images.md. The console's helm is
compiled by a source build on GO_IMAGE (default: the public golang image, not reachable here
either): the host's Go toolchain (what `make tools` builds helm with) on the plain base
stands in for it."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from image_helpers import IMAGES, REPO, SCRIPTS, Docker, run
from test_image_entrypoints import (
    CONSOLE_KUBE_CHECK,
    NATIVE_READER_CHECK,
    _helm_version,
    _packages,
    _pins,
)
from test_image_smoke import TOKEN, _fileserver, check_cube_shard

pytestmark = [pytest.mark.images, pytest.mark.slow]

CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
TAG = "ectl-test-source"


def _plain_base(arch: str | None = None) -> str:
    args = [str(SCRIPTS / "images" / "base.sh"), "--plain"]
    if arch:
        args += ["--arch", arch]
    done = run(args, timeout=1800, cwd=REPO)
    assert done.returncode == 0, f"base.sh {' '.join(args[1:])} failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


def _build(docker: Docker, target: str, base: str, *extra: str) -> str:
    """`docker build` of one target from the repository root, as docs/images.md shows it."""
    arch = "arm64" if "linux/arm64" in extra else "amd64"
    ref = f"{TAG}/elasticctr-{target}:{arch}"
    secret = ("--secret", f"id=ca-certificates,src={CA_BUNDLE}") if CA_BUNDLE.is_file() else ()
    done = subprocess.run(
        [docker.binary, "build", "-f", "images/Dockerfile", "--target", target,
         "--build-arg", f"BASE={base}", *secret, *extra, "-t", ref, "."],
        cwd=REPO, capture_output=True, text=True, timeout=3600,
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, f"docker build --target {target} failed:\n{done.stderr[-5000:]}"
    return ref


def _go_image(docker: Docker, base: str) -> str:
    """A GO_IMAGE for the console's helm-source stage: the host's Go on the plain base."""
    go = shutil.which("go")
    if not go:
        pytest.fail("Go is needed (as for `make tools`): the stand-in for GO_IMAGE copies it")
    goroot, version = run([go, "env", "GOROOT", "GOVERSION"]).stdout.split()
    ref = f"{TAG}/go:{version}"
    dockerfile = (
        f"FROM {base}\nCOPY . /usr/local/go\n"
        "ENV GOPATH=/go PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
    )
    done = subprocess.run(
        [docker.binary, "build", "-f", "-", "-t", ref, goroot], input=dockerfile,
        capture_output=True, text=True, timeout=1800,
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, f"the Go stand-in image failed:\n{done.stderr[-3000:]}"
    return ref


@pytest.fixture(scope="module")
def source_images(docker) -> dict[str, str]:
    base = _plain_base()
    go = ("--build-arg", f"GO_IMAGE={_go_image(docker, base)}")
    return {
        image: _build(docker, image, base, *(go if image == "console" else ())) for image in IMAGES
    }


@pytest.fixture(scope="module")
def arm64_images(docker) -> dict[str, str]:
    if platform.machine() != "x86_64":
        pytest.fail("these tests build arm64 on an x86-64 host through qemu")
    qemu = run([str(SCRIPTS / "images" / "qemu.sh")], timeout=900)
    assert qemu.returncode == 0, f"scripts/images/qemu.sh failed:\n{qemu.stderr[-3000:]}"
    base, build_base = _plain_base("arm64"), _plain_base()
    return {
        image: _build(
            docker,
            image,
            base,
            "--platform",
            "linux/arm64",
            "--build-arg",
            f"BUILD_BASE={build_base}",
        )  # fmt: skip
        for image in ("cube", "train")
    }


@pytest.mark.parametrize("image", IMAGES)
def test_source_build_holds_what_make_images_holds(docker, images, source_images, image):
    ours, theirs = source_images[image], images[image]
    python = "/opt/mlflow/bin/python" if image == "mlflow" else "python"
    assert _packages(docker, ours, python) == _packages(docker, theirs, python)
    config = [
        json.loads(docker("image", "inspect", ref).stdout)[0]["Config"] for ref in (ours, theirs)
    ]
    for key in ("User", "Entrypoint", "Cmd", "WorkingDir"):
        assert config[0][key] == config[1][key], key
    assert config[0]["User"] == "10001:10001"
    # The Debian side: the same packages of images/packages.txt, at the host's versions.
    lines = (REPO / "images" / "packages.txt").read_text().splitlines()
    want = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    query = ("dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *want)
    dpkg = [docker.run(ref, *query, options=("--entrypoint", "")) for ref in (ours, theirs)]
    assert dpkg[0].returncode == 0, dpkg[0].stderr
    assert dpkg[0].stdout == dpkg[1].stdout
    version = docker.run(ours, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("ectl " if image != "mlflow" else "mlflow, version ")


def test_source_built_train_image_has_the_native_reader(docker, source_images):
    done = docker.run(
        source_images["train"], "-c", NATIVE_READER_CHECK, options=("--entrypoint", "python")
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "/opt/elasticctr/bin/ectl-slotfeed"


def test_source_built_console_image_runs_its_helm(docker, source_images):
    """helm-source built helm from its Go module for the target: the same version stamp
    as `make tools`' helm, and pyhelm3 runs it."""
    ref = source_images["console"]
    done = docker.run(ref, "version", "--short", options=("--entrypoint", "helm"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == _helm_version()
    done = docker.run(ref, "-c", CONSOLE_KUBE_CHECK, options=("--entrypoint", "python"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:3] == ["10001", "/opt/elasticctr/bin/helm", "elasticctr"]


def test_source_built_fileserver_serves(docker, source_images, scratch):
    root = scratch / "srv"
    (root / "data").mkdir(parents=True)
    (root / "data" / "hello.txt").write_text("hello\n")
    root.chmod(0o777)
    name = _fileserver(docker, source_images["fileserver"], root)
    base = f"http://{docker.published(name, 8080)}"
    assert httpx.get(f"{base}/data/hello.txt").text == "hello\n"
    r = httpx.put(f"{base}/x.bin", content=b"\x01", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code in (200, 201), r.text


ARM64 = ("--platform", "linux/arm64")


@pytest.mark.parametrize("image", ["cube", "train"])
def test_arm64_image_is_arm64_with_the_same_pins(docker, images, arm64_images, image):
    ref = arm64_images[image]
    assert json.loads(docker("image", "inspect", ref).stdout)[0]["Architecture"] == "arm64"
    machine = docker.run(ref, "-c", "import platform; print(platform.machine())",
                         options=(*ARM64, "--entrypoint", "python"))  # fmt: skip
    assert machine.stdout.strip() == "aarch64", machine.stderr
    assert _packages(docker, ref) == _packages(docker, images[image])


def test_arm64_cube_shard_answers_lookups(docker, arm64_images, scratch):
    # A version built on this x86-64 host, served by an arm64 shard: the format is portable.
    check_cube_shard(docker, arm64_images["cube"], scratch, ARM64)


def test_arm64_train_image_runs_paddle_and_the_native_reader(docker, arm64_images):
    done = docker.run(arm64_images["train"], "-c", NATIVE_READER_CHECK + "import paddle\n"
                      "print(paddle.__version__, paddle.device.get_device())\n",
                      options=(*ARM64, "--entrypoint", "python"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    paddle = _pins()["paddlepaddle"]
    assert done.stdout.split() == ["/opt/elasticctr/bin/ectl-slotfeed", paddle, "cpu"]
