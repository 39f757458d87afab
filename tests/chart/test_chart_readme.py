"""Each chart's README.md is generated from its values.yaml `# --` comments by helm-docs
(built from its Go module by scripts/bootstrap-tools.sh) and must be current:
regenerate with `make chart-docs` after changing a chart's values or Chart.yaml."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from chart_helpers import CHART, REPO
from tests.conftest import require_tool

pytestmark = pytest.mark.chart

CHARTS = [CHART, *sorted(p.parent for p in (CHART / "charts").glob("*/Chart.yaml"))]
# Named templates only, no values: its README says what it holds (README.md.gotmpl).
LIBRARIES = {"common"}


def _flags() -> list[str]:
    """`make chart-docs`'s helm-docs flags (HELM_DOCS_FLAGS in the Makefile)."""
    match = re.search(r"^HELM_DOCS_FLAGS := (.+)$", (REPO / "Makefile").read_text(), re.M)
    assert match, "HELM_DOCS_FLAGS missing from the Makefile"
    return match.group(1).split()


def _generate(root):
    done = subprocess.run(
        [require_tool("helm-docs"), "--chart-search-root", str(root), *_flags()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_every_chart_readme_is_generated_from_its_values(tmp_path):
    copy = tmp_path / "charts"
    shutil.copytree(REPO / "charts", copy)
    for readme in copy.rglob("README.md"):
        readme.unlink()
    _generate(copy)
    for chart in CHARTS:
        rel = chart.relative_to(REPO / "charts")
        want = (copy / rel / "README.md").read_text()
        have = chart / "README.md"
        assert have.is_file(), f"{have} missing: run `make chart-docs`"
        assert have.read_text() == want, f"{have} is stale: run `make chart-docs`"


def test_readme_documents_the_image_values(tmp_path):
    """The README carries the `# --` comments: one row per documented key."""
    text = (CHART / "README.md").read_text()
    assert '| global.image.registry | string | `""` |' in text
    mlflow = (CHART / "charts" / "mlflow" / "README.md").read_text()
    assert '| image.name | string | `"elasticctr-mlflow"` |' in mlflow


def test_umbrella_readme_lists_every_subcharts_values():
    """helm-docs --document-dependency-values: one README shows every key a user sets,
    the subcharts' prefixed with their name, each with its comment (the library has none)."""
    text = (CHART / "README.md").read_text()
    parts = [sub for sub in CHARTS[1:] if sub.name not in LIBRARIES]
    assert len(parts) == 6
    for sub in parts:
        assert f"| {sub.name}.image.name | string |" in text, sub.name
        assert f"| {sub.name}.serviceAccount.name | string |" in text, sub.name
        assert f"| {sub.name}.podAnnotations | object |" in text, sub.name
    assert "| cube.shards | int | `2` | Number of shards" in text
    assert '| trainer.model.name | string | `"dnn"` |' in text


def test_helm_docs_reads_the_comments(tmp_path):
    """The check has teeth: a changed comment changes the generated README."""
    copy = tmp_path / "charts"
    shutil.copytree(REPO / "charts" / "elasticctr" / "charts" / "fileserver", copy / "fs")
    values = copy / "fs" / "values.yaml"
    values.write_text(values.read_text().replace("# --", "# -- CHANGED", 1))
    _generate(copy)
    assert "CHANGED" in (copy / "fs" / "README.md").read_text()


def test_library_readme_lists_its_defines():
    """The library's README is helm-docs' too, from its own template: every define of the
    library is listed there (elasticctr.component.{name,...} counts each name)."""
    import itertools

    library = CHART / "charts" / "common"
    text = (library / "README.md").read_text()
    listed = set()
    for group in re.findall(r"`(elasticctr\.[\w.]*)\{([\w,]+)\}`", text):
        listed |= {group[0] + name for name in group[1].split(",")}
    listed |= set(re.findall(r"`(elasticctr\.[\w.]+)`", text))
    defined = set(
        itertools.chain.from_iterable(
            re.findall(r'define "([^"]+)"', f.read_text())
            for f in (library / "templates").glob("*.tpl")
        )
    )
    assert defined and defined <= listed, defined - listed
