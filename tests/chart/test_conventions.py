"""Conventions of well-liked charts (issue 27): the chart as a subchart of a user's
umbrella, with the parent's own globals, rendered by the real helm."""

from __future__ import annotations

import shutil

import pytest
import yaml
from chart_helpers import CHART, run

pytestmark = pytest.mark.chart


@pytest.fixture(scope="module")
def parent_chart(tmp_path_factory):
    """A user's umbrella with this chart unpacked as its dependency and globals of its own
    (bitnami-style keys this chart does not know)."""
    parent = tmp_path_factory.mktemp("parent") / "platform"
    shutil.copytree(CHART, parent / "charts" / "elasticctr")
    chart = {
        "apiVersion": "v2",
        "name": "platform",
        "version": "1.0.0",
        "dependencies": [{"name": "elasticctr", "version": "0.1.0"}],
    }
    (parent / "Chart.yaml").write_text(yaml.safe_dump(chart))
    parent_values = {"global": {"storageClass": "fast", "imagePullSecrets": ["regcred"]}}
    (parent / "values.yaml").write_text(yaml.safe_dump(parent_values))
    return parent


def _template(helm, chart, *args):
    return run([helm, "template", "ctr", str(chart), "--kube-version", "1.34", *args])


def test_chart_renders_as_a_subchart_with_the_parents_globals(helm, parent_chart):
    rendered = _template(helm, parent_chart)
    assert rendered.returncode == 0, rendered.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(rendered.stdout) if d}
    assert {"Job", "StatefulSet", "Deployment", "Pod"} <= kinds
    lint = run([helm, "lint", "--strict", "--kube-version", "1.34", str(parent_chart)])
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_typos_in_our_own_globals_still_fail_as_a_subchart(helm, parent_chart):
    rendered = _template(
        helm,
        parent_chart,
        "--set",
        "global.image.tagg=1",
        "--set",
        "global.data.slotz={1}",
    )
    assert rendered.returncode != 0
    assert "at '/global/image': additional properties 'tagg' not allowed" in rendered.stderr
    assert "at '/global/data': additional properties 'slotz' not allowed" in rendered.stderr
