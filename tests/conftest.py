"""Shared pytest fixtures: paths to the checkout, ../shared, and the tools bootstrap."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ELASTICCTR_SHARED", REPO.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """A file under ../shared, or skip the test with the reason when the clone lacks it.

    CI always has ../shared beside the checkout: there (CI=true) or with
    ELASTICCTR_REQUIRE_SHARED=1 a missing file is a failure instead of a skip.
    """
    path = SHARED.joinpath(*parts)
    if not path.exists():
        if os.environ.get("CI") == "true" or os.environ.get("ELASTICCTR_REQUIRE_SHARED") == "1":
            pytest.fail(f"{path} is required (ELASTICCTR_REQUIRE_SHARED=1) but missing")
        pytest.skip(f"{path} not present: this clone has no ../shared beside it")
    return path


def require_tool(name: str) -> str:
    """Path of a bootstrapped tool; fail (not skip) when missing: `make tools` installs it."""
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not on PATH: run `make tools` (scripts/bootstrap-tools.sh)")
    return found


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
