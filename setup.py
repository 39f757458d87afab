"""The wheel carries the umbrella chart of its own version (issue 27): `build_py` copies
charts/elasticctr into the built package as elasticctr/chart, so an `ectl` installed
outside a checkout installs the chart it was released with (constants.chart_dir()).
Everything else about the package is in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CHART = Path(__file__).resolve().parent / "charts" / "elasticctr"


class BuildPyWithChart(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads charts/ of the checkout
            return
        dest = Path(self.build_lib) / "elasticctr" / "chart"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(CHART, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithChart})
