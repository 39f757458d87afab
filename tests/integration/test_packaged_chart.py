"""The chart ships with the CLI (issue 27): the wheel carries charts/elasticctr as
elasticctr/chart, and an `ectl` installed from it, outside any checkout, validates and
renders that chart by default."""

from __future__ import annotations

import filecmp
import os
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


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel `uv build` makes from this checkout, unpacked as a site directory (what
    pip install puts in site-packages)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "uv", "build", "--wheel", "-q", "--out-dir", str(out), str(REPO)],
        check=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    (wheel,) = out.glob("elasticctr-*.whl")
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site


def ectl(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTICCTR_")}
    env["PYTHONPATH"] = str(site)  # before the checkout's editable install
    env["PATH"] = f"{Path(require_tool('helm')).parent}:{env['PATH']}"
    return subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_wheel_carries_the_chart_of_its_version(installed):
    packaged = installed / "elasticctr" / "chart"
    want = sorted(str(p.relative_to(CHART)) for p in CHART.rglob("*") if p.is_file())
    got = sorted(str(p.relative_to(packaged)) for p in packaged.rglob("*") if p.is_file())
    assert got == want
    assert all(filecmp.cmp(CHART / f, packaged / f, shallow=False) for f in want)
    chart = yaml.safe_load((packaged / "Chart.yaml").read_text())
    metadata = (next(installed.glob("elasticctr-*.dist-info")) / "METADATA").read_text()
    assert f"Version: {chart['version']}" in metadata.splitlines()


def test_an_installed_ectl_renders_its_own_chart_outside_a_checkout(installed, tmp_path):
    where = ectl(installed, tmp_path, "-v", "--version")
    assert where.returncode == 0, where.stderr
    (tmp_path / "values.yaml").write_text("cube:\n  shards: 3\n")
    ok = ectl(installed, tmp_path, "validate", "-f", "values.yaml")
    assert ok.returncode == 0, ok.stderr
    done = ectl(installed, tmp_path, "template", "-f", "values.yaml", "--set", "serving.replicas=2")
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    cube = [d for d in docs if d["kind"] == "StatefulSet" and "cube" in d["metadata"]["name"]]
    assert cube and cube[0]["spec"]["replicas"] == 3
    bad = ectl(installed, tmp_path, "validate", "-f", "values.yaml", "--set", "cube.shards=x")
    assert bad.returncode == 2 and "cube.shards" in bad.stderr
    probe = subprocess.run(
        [sys.executable, "-c", "import elasticctr.constants as C; print(C.chart_dir())"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(installed)},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(probe.stdout.strip()) == installed / "elasticctr" / "chart"
