"""chart-testing (`ct lint`), the way chart repositories check charts in CI (issue 15).

`ct` v3.14.0 is built by scripts/bootstrap-tools.sh from ../shared/third_party/chart-testing;
it runs `helm lint` with every `ci/*-values.yaml` set, yamllint and the Chart.yaml schema
(yamale) with its own default configs (.tools/ct-etc). `ct install` needs a cluster: see
tests/e2e.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from chart_helpers import REPO
from tests.conftest import require_tool

pytestmark = pytest.mark.chart
CHART = REPO / "charts" / "elasticctr"


def ct_lint(chart_dir, cwd) -> subprocess.CompletedProcess:
    etc = REPO / ".tools" / "ct-etc"
    return subprocess.run(
        [
            require_tool("ct"),
            "lint",
            "--config",
            str(REPO / "ct.yaml"),
            "--charts",
            str(chart_dir),
            "--lint-conf",
            str(etc / "lintconf.yaml"),
            "--chart-yaml-schema",
            str(etc / "chart_schema.yaml"),
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "PATH": f"{REPO / '.tools' / 'bin'}:{REPO / '.venv' / 'bin'}:" + os.environ["PATH"],
        },  # fmt: skip
    )


def chart_copy(tmp_path):
    """The chart in `tmp_path/charts/elasticctr`: ct's `helm dependency build` writes a
    Chart.lock into the chart it lints, and the checkout's chart is read by other tests at
    the same time (a half-written lock fails their `helm template`); not the checkout's
    ignored Chart.lock either (one older than Chart.yaml fails ct's build)."""
    import shutil

    copy = tmp_path / "charts" / "elasticctr"
    shutil.copytree(CHART, copy, ignore=shutil.ignore_patterns("Chart.lock"))
    return copy


def test_ct_lint_passes_with_every_ci_values_set(tmp_path):
    require_tool("yamale")
    copy = chart_copy(tmp_path)
    proc = ct_lint(copy, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    linted = set(re.findall(r'Linting chart with values file "([^"]+)"', out))
    expected = {str(p.relative_to(tmp_path)) for p in (copy / "ci").glob("*-values.yaml")}
    assert {os.path.relpath(p, tmp_path) if os.path.isabs(p) else p for p in linted} == expected
    assert expected == {
        f"charts/elasticctr/ci/{p.name}" for p in (CHART / "ci").glob("*-values.yaml")
    }
    assert "All charts linted successfully" in out


def test_ct_lint_fails_on_a_broken_values_set(tmp_path):
    """The same check on a copy whose one ci values set breaks the schema fails, naming it."""
    copy = chart_copy(tmp_path)
    (copy / "ci" / "broken-values.yaml").write_text("trainer:\n  trainer:\n    replicas: two\n")
    proc = ct_lint(copy, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "broken-values.yaml" in out
