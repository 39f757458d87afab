"""Every image's entry points run inside a container of the built image: `ectl --version`,
each role's `--help`, and an import of every module the role's entry points reach (read from
the source by reach.py), plus what each image must be: non-root, OCI labels, tag = the
chart's appVersion, the shared Paddle and core layers, the right packages and nothing more;
the console image's helm (scripts/helm-version.sh's version, run by pyhelm3)."""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from image_helpers import IMAGES, REPO

sys.path.insert(0, str(REPO / "tests" / "images"))
from reach import reach  # noqa: E402

pytestmark = [pytest.mark.images, pytest.mark.integration]

CHART = yaml.safe_load((REPO / "charts" / "elasticctr" / "Chart.yaml").read_text())
VERSION = CHART["appVersion"]
# The `ectl` commands each image runs in the chart (the chart's args; templates/tests too).
ROLES = {
    "train": [("train", "pserver"), ("train", "trainer"), ("coordinator",)],
    "serving": [("serve",), ("predict",)],
    "cube": [("cube", "server"), ("cube", "transfer")],
    "fileserver": [("fileserver",)],
    "console": [("console",)],
}
# The command function behind each role (module elasticctr.cli.<module>, function).
FUNCTIONS = {
    ("train", "pserver"): ("train", "pserver"),
    ("train", "trainer"): ("train", "trainer"),
    ("coordinator",): ("coordinator", "coordinator"),
    ("serve",): ("serve", "serve"),
    ("predict",): ("serve", "predict"),
    ("cube", "server"): ("cube", "server"),
    ("cube", "transfer"): ("cube", "transfer"),
    ("fileserver",): ("fileserver", "fileserver"),
    ("console",): ("console", "console"),
}
# Distribution names of import names that differ.
DIST = {"yaml": "pyyaml", "paddle": "paddlepaddle", "hdfs_native": "hdfs-native"}


def _verb_modules() -> list[str]:
    from elasticctr.cli import main

    return sorted(set(main.VERB_MODULE.values()))


def _reached(image: str):
    entries = [("elasticctr.cli.main", "run")]
    entries += [(f"elasticctr.cli.{m}", None) for m in _verb_modules()]
    entries += [(f"elasticctr.cli.{FUNCTIONS[r][0]}", FUNCTIONS[r][1]) for r in ROLES[image]]
    return reach(entries)


@pytest.mark.parametrize("image", [i for i in IMAGES if i != "mlflow"])
def test_ectl_version(docker, images, image):
    done = docker.run(images[image], "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ectl {VERSION}"


@pytest.mark.parametrize(
    "image,role", [(i, r) for i, roles in ROLES.items() for r in roles], ids=lambda x: str(x)
)
def test_role_help(docker, images, image, role):
    done = docker.run(images[image], *role, "--help")
    assert done.returncode == 0, done.stderr
    assert f"Usage: ectl {' '.join(role)}" in done.stdout, done.stdout


# Run by `python -c` in a train image: the trainer code finds the compiled reader.
NATIVE_READER_CHECK = (
    "import os\n"
    "from elasticctr.train import native\n"
    "assert native.unavailable() is None, native.unavailable()\n"
    "assert str(native.binary()) == os.environ['ELASTICCTR_SLOTFEED']\n"
    "print(native.binary())\n"
)


def test_train_image_ships_the_native_reader(docker, images):
    """The chart's trainers train on the native pipeline: the image has the compiled reader
    ($ELASTICCTR_SLOTFEED; the image has no compiler) and the trainer code finds it."""
    done = docker.run(
        images["train"], "-c", NATIVE_READER_CHECK, options=("--entrypoint", "python")
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "/opt/elasticctr/bin/ectl-slotfeed"


# Run by `python -c` in a cube image: the shards find the compiled lookup extension and it
# answers as the numpy path does.
CUBE_NATIVE_CHECK = (
    "import os, pathlib, tempfile\n"
    "import numpy as np\n"
    "from elasticctr.cube import native\n"
    "from elasticctr.cube.format import ShardFile, write_shard\n"
    "assert native.unavailable() is None, native.unavailable()\n"
    "path = pathlib.Path(tempfile.mkdtemp()) / 's.cube'\n"
    "keys = np.arange(1, 5001, dtype=np.uint64) * 7919\n"
    "write_shard(path, keys, np.ones((5000, 4), np.float32), shard=0, num_shards=1)\n"
    "sf = ShardFile(path)\n"
    "q = np.concatenate([keys[::3], keys[:50] + 1])\n"
    "body, missing = native.module().lookup(sf.native, q.tobytes(), 0, q.size, 0, b'v', False)\n"
    "rows, expect = sf.lookup(q)\n"
    "assert missing == expect == 50 and body[32:] == rows.tobytes()\n"
    "print(os.environ['ELASTICCTR_CUBEFAST'])\n"
)


def test_cube_image_ships_the_native_lookup_path(docker, images):
    """The chart's shards serve through cubefast.c: the image has it built
    ($ELASTICCTR_CUBEFAST; the image has no compiler) and it answers like numpy."""
    done = docker.run(images["cube"], "-c", CUBE_NATIVE_CHECK, options=("--entrypoint", "python"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "/opt/elasticctr/lib/cubefast.so"


def test_default_command_prints_help(docker, images):
    for image in ("train", "cube", "console"):
        done = docker.run(images[image])
        assert done.returncode == 0 and "Usage: ectl" in done.stdout, done.stderr
    done = docker.run(images["console"])
    assert "Usage: ectl console" in done.stdout, done.stdout


def _helm_version() -> str:
    """HELM_VERSION of scripts/helm-version.sh: what `make tools` and the images build."""
    text = (REPO / "scripts" / "helm-version.sh").read_text()
    (version,) = re.findall(r"^HELM_VERSION=(v\S+)$", text, re.M)
    return version


def test_console_image_runs_helm(docker, images):
    """pyhelm3 shells out to `helm` on PATH: the image has the static helm of
    scripts/helm-version.sh's version at /opt/elasticctr/bin/helm, run as uid 10001."""
    done = docker.run(
        images["console"], "-c", "id -u; id -g; command -v helm; helm version --short",
        options=("--entrypoint", "sh"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    uid, gid, path, version = done.stdout.split()
    assert (uid, gid, path) == ("10001", "10001", "/opt/elasticctr/bin/helm")
    assert version == _helm_version() == "v3.19.5"


# Run by `python -c` in the console image: its venv has the kube extra, and ectl's helm
# lookup and pyhelm3 find the image's helm and run it (`helm show chart` of the chart the
# wheel carries, which the console installs new scenarios from).
CONSOLE_KUBE_CHECK = (
    "import asyncio, os\n"
    "import kubernetes, pyhelm3\n"
    "from elasticctr.cli._common import find_helm\n"
    "from elasticctr.constants import chart_dir\n"
    "helm = find_helm(None)\n"
    "chart = asyncio.run(pyhelm3.Client(executable=helm).get_chart(chart_dir()))\n"
    "print(os.getuid(), helm, chart.metadata.name, chart.metadata.version)\n"
)


def test_console_image_has_the_kube_extra_and_pyhelm3_runs_helm(docker, images):
    done = docker.run(images["console"], "-c", CONSOLE_KUBE_CHECK,
                      options=("--entrypoint", "python"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    chart = yaml.safe_load((REPO / "charts" / "elasticctr" / "Chart.yaml").read_text())
    assert done.stdout.split() == [
        "10001", "/opt/elasticctr/bin/helm", "elasticctr", str(chart["version"])
    ]  # fmt: skip


@pytest.mark.parametrize("image", list(ROLES))
def test_every_reached_module_imports_in_the_image(docker, images, image):
    found = _reached(image)
    assert len(found.modules) > 3, found
    # fsspec opens http:// stores through aiohttp, imported only when a store is opened.
    http = "fsspec" in found.third_party
    script = (
        "import importlib, json, sys\n"
        f"mods = {sorted(found.modules)!r}\n"
        f"third = {sorted(found.third_party)!r}\n"
        "failed = {}\n"
        "for m in mods + third:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except Exception as exc:\n"
        "        failed[m] = repr(exc)\n"
        + (
            "try:\n"
            "    import fsspec\n"
            "    fsspec.filesystem('http')\n"
            "except Exception as exc:\n"
            "    failed['fsspec http'] = repr(exc)\n"
            if http
            else ""
        )
        + "print(json.dumps(failed))\n"
    )
    done = docker.run(
        images[image], "-c", script, options=("--entrypoint", "python", "-e", "GLOG_minloglevel=2")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert failed == {}, failed
    assert (image in ("train", "serving")) == ("paddle" in found.third_party)


def _inspect(docker, ref: str) -> dict:
    return json.loads(docker("image", "inspect", ref).stdout)[0]


@pytest.mark.parametrize("image", IMAGES)
def test_image_metadata(docker, images, image):
    ref = images[image]
    assert ref.endswith(f"/elasticctr-{image}:{VERSION}")
    config = _inspect(docker, ref)["Config"]
    assert config["User"] == "10001:10001"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.title"] == f"elasticctr-{image}"
    revision = labels["org.opencontainers.image.revision"]
    assert len(revision.removesuffix("-dirty")) == 40, revision
    assert labels["org.opencontainers.image.source"]
    done = docker.run(ref, "-c", "import os; print(os.getuid(), os.getgid())",
                      options=("--entrypoint", "python"))  # fmt: skip
    assert done.stdout.split() == ["10001", "10001"], done.stderr


def _prefix(a: list[str], b: list[str]) -> list[str]:
    out = []
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        out.append(x)
    return out


def test_train_and_serving_share_the_paddle_layers(docker, images):
    layers = {i: _inspect(docker, images[i])["RootFS"]["Layers"] for i in IMAGES}
    # base + core venv + paddle are the same layers; each image adds its own on top.
    shared = _prefix(layers["train"], layers["serving"])
    assert len(shared) == 3, layers
    assert _prefix(layers["cube"], layers["train"]) == shared[:2]  # base + core, no paddle
    assert _prefix(layers["fileserver"], layers["train"]) == shared[:2]
    # The console: base + core (fileserver's whole dependency part), then its kube layer.
    assert _prefix(layers["console"], layers["fileserver"]) == shared[:2]
    assert len(layers["console"]) > len(shared[:2]) + 2  # kube deps, project, helm
    assert _prefix(layers["mlflow"], layers["train"]) == shared[:1]  # only the Debian base


def _packages(docker, ref: str, python: str = "python") -> dict[str, str]:
    done = docker.run(ref, "-m", "pip", "list", "--format", "json",
                      "--disable-pip-version-check", options=("--entrypoint", python))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(done.stdout)}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.strip().partition("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


@pytest.mark.parametrize("image", IMAGES)
def test_packages_are_the_pinned_ones_and_only_what_the_image_needs(docker, images, image):
    installed = _packages(docker, images[image])
    pins = _pins()
    tooling = {"pip", "setuptools", "wheel"}
    for name, version in installed.items():
        if name in tooling or name == "elasticctr":
            continue
        assert pins.get(name) == version, f"{name}=={version} is not pinned by constraints.txt"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    if image == "mlflow":
        assert "elasticctr" not in installed
        assert {"mlflow", "psycopg", "psycopg-binary"} <= set(installed)
        return
    assert installed["elasticctr"] == project["version"]
    assert ("paddlepaddle" in installed) == (image in ("train", "serving"))
    assert "aiohttp" in installed  # fsspec's http:// stores
    assert "prometheus-client" in installed  # every service's /metrics (a core dependency)
    kube = {"kubernetes", "pyhelm3"}  # the kube extra: the console's alone
    assert (kube <= set(installed)) == (image == "console"), image
    for absent in ("pytest", "ruff", "scikit-learn", *([] if image == "console" else kube)):
        assert absent not in installed, f"{absent} (dev/kube extra) in {image}"
    if image in ("fileserver", "console"):
        assert "uvloop" not in installed and "mlflow-skinny" not in installed


def test_mlflow_server_and_its_postgresql_driver(docker, images):
    done = docker.run(images["mlflow"], "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(_pins()["mlflow"]), done.stdout
    done = docker.run(images["mlflow"], "server", "--help")
    assert done.returncode == 0 and "--backend-store-uri" in done.stdout, done.stderr
    # The URI form the chart documents: SQLAlchemy 2.1 opens postgresql:// with psycopg 3,
    # whose C implementation (psycopg-binary) must load.
    done = docker.run(
        images["mlflow"], "-c",
        "import psycopg, sqlalchemy; e = sqlalchemy.create_engine('postgresql://u@h/db'); "
        "print(e.dialect.driver, psycopg.__version__, psycopg.pq.__impl__)",
        options=("--entrypoint", "python"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["psycopg", _pins()["psycopg"], "binary"]


def _sbom(image: str) -> Path:
    cache = os.environ.get("ELASTICCTR_IMAGES_CACHE", Path.home() / ".cache/elasticctr/images")
    return Path(cache) / "sbom" / f"elasticctr-{image}-{VERSION}.cdx.json"


def test_sbom_is_valid_cyclonedx(images):
    """Schema validation (CycloneDX 1.6, strict) of one SBOM: ~30 s each on this machine,
    so the others get the structural checks below; all come from the same tool run."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    text = _sbom("fileserver").read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    broken = json.loads(text)
    broken["components"][0]["type"] = "no-such-type"
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(broken)) is not None


@pytest.mark.parametrize("image", IMAGES)
def test_sbom_lists_what_the_image_has(docker, images, image):
    sbom = _sbom(image)
    layers = _inspect(docker, images[image])["RootFS"]["Layers"]
    made_for = json.loads((sbom.parent / f"{sbom.name}.layers").read_text())
    assert made_for == layers, "the SBOM was made for other files than the image has"
    doc = json.loads(sbom.read_text())
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    listed = {
        c["name"].lower().replace("_", "-"): c["version"]
        for c in doc["components"]
        if c.get("type") == "library"
    }
    python = "/opt/mlflow/bin/python" if image == "mlflow" else "python"
    assert listed == _packages(docker, images[image], python)
    purls = [c.get("purl", "") for c in doc["components"]]
    assert all(p.startswith("pkg:pypi/") for p in purls), purls[:5]
