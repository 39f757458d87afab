"""`ectl` as users install it (issue 27): the wheel carries charts/elasticctr as
elasticctr/chart, and `pip install 'elasticctr[kube]'` of that wheel into a fresh venv of
Python 3.11, 3.12 or 3.13 (pyenv's interpreters on this machine) gives an ectl that, from a
folder outside any checkout, validates and renders the chart of its own version."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from tests.conftest import require_tool

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "elasticctr"


PROBE = "import elasticctr.constants as C; print(C.chart_dir())"
PYTHONS = ("3.11", "3.12", "3.13")


def interpreter(version: str) -> str:
    """python3.X on PATH or pyenv's; CI must have every one (a missing one fails there)."""
    pyenv = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
    found = str(pyenv[-1]) if pyenv else shutil.which(f"python{version}")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"python{version} is required in CI (pyenv's interpreters)")
        pytest.skip(f"no python{version} on this machine")
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `uv build` makes from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "uv", "build", "--wheel", "-q", "--out-dir", str(out), str(REPO)],
        check=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    (built,) = out.glob("elasticctr-*.whl")
    return built


def test_the_wheel_carries_the_chart_of_its_version(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path)
    packaged = tmp_path / "elasticctr" / "chart"
    want = sorted(str(p.relative_to(CHART)) for p in CHART.rglob("*") if p.is_file())
    got = sorted(str(p.relative_to(packaged)) for p in packaged.rglob("*") if p.is_file())
    assert got == want
    assert all(filecmp.cmp(CHART / f, packaged / f, shallow=False) for f in want)
    chart = yaml.safe_load((packaged / "Chart.yaml").read_text())
    metadata = (next(tmp_path.glob("elasticctr-*.dist-info")) / "METADATA").read_text()
    assert f"Version: {chart['version']}" in metadata.splitlines()


@pytest.mark.parametrize("version", PYTHONS)
def test_pip_installed_ectl_renders_its_own_chart(wheel, version, tmp_path):
    python = interpreter(version)
    venv = tmp_path / "venv"
    uv = [sys.executable, "-m", "uv"]
    subprocess.run([*uv, "venv", "-q", "-p", python, str(venv)], check=True, timeout=120)
    subprocess.run(
        [*uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
         "--constraint", str(REPO / "constraints.txt"), f"{wheel}[kube]"],
        check=True, timeout=900,
    )  # fmt: skip
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTICCTR_", "PYTHON"))}
    env["PATH"] = f"{Path(require_tool('helm')).parent}:{env['PATH']}"

    def ectl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(venv / "bin" / "ectl"), *args],
            cwd=work, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    assert (
        ectl("--version").stdout.strip()
        == f"ectl {yaml.safe_load((CHART / 'Chart.yaml').read_text())['version']}"
    )
    (work / "values.yaml").write_text("cube:\n  shards: 3\n")
    ok = ectl("validate", "-f", "values.yaml")
    assert ok.returncode == 0, ok.stderr
    done = ectl("template", "-f", "values.yaml", "--set", "serving.replicas=2")
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    kinds = {
        (d["kind"], d["metadata"]["labels"].get("app.kubernetes.io/component")): d for d in docs
    }
    assert kinds["StatefulSet", "cube"]["spec"]["replicas"] == 3 * 2  # -f: 3 shards x 2
    assert kinds["HorizontalPodAutoscaler", "serving"]["spec"]["minReplicas"] == 2  # --set
    bad = ectl("validate", "-f", "values.yaml", "--set", "cube.shards=x")
    assert bad.returncode == 2 and "cube.shards" in bad.stderr
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", PROBE],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(probe.stdout.strip()).is_relative_to(venv)
