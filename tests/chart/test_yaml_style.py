"""yamllint over the hand-written YAML of the chart part (values files, chart metadata,
helm-unittest suites, ct.yaml, the alerting rules and their promtool tests); Go templates
are not YAML and are checked by rendering."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from chart_helpers import CHART, REPO

pytestmark = pytest.mark.chart

CONFIG = """
extends: default
rules:
  # Expected values in the helm-unittest suites are long literal lines: warn, do not fail.
  line-length: {max: 140, level: warning}
  document-start: disable
  truthy: {check-keys: false}
  comments: {min-spaces-from-content: 1}
  braces: {max-spaces-inside: 1}
  brackets: {max-spaces-inside: 1}
  indentation: {indent-sequences: consistent}
"""


def yaml_files() -> list[str]:
    files = [REPO / "ct.yaml", *sorted((REPO / "values").glob("*.yaml"))]
    files += [CHART / "Chart.yaml", CHART / "values.yaml", *sorted((CHART / "ci").glob("*.yaml"))]
    files += sorted((CHART / "tests").glob("*.yaml"))
    files += sorted((CHART / "files").rglob("*.yaml"))
    files += sorted((REPO / "tests" / "prometheus").glob("*.yaml"))
    for sub in sorted((CHART / "charts").iterdir()):
        files += [sub / "Chart.yaml", sub / "values.yaml"]
    return [str(f) for f in files]


def test_yamllint_clean():
    yamllint = shutil.which("yamllint") or str(REPO / ".venv" / "bin" / "yamllint")
    result = subprocess.run(
        [yamllint, "-f", "parsable", "-d", CONFIG, *yaml_files()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
