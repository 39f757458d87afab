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


# Work units of `make test`'s two workers (pytest-xdist, `-n 2 --dist loadfile
# --no-loadscope-reorder`): each file is a unit, so its module fixtures start once, except
# that the e2e tests share one cluster per machine, so the whole package is one unit. It goes
# first (its worker spends most of it waiting on pods), the heavy integration files next and
# the many short unit files last, so the two workers finish close together.
_ORDER = ("e2e", "integration", "images", "cluster", "chart", "unit")


def _rank(item: pytest.Item) -> int:
    rel = item.path.relative_to(REPO / "tests")
    top = rel.parts[0] if len(rel.parts) > 1 else ""
    return _ORDER.index(top) if top in _ORDER else len(_ORDER)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller schedules its list
        items.sort(key=_rank)  # stable: file and test order are kept


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: fine without xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """loadfile, with tests/e2e as one unit. (`--dist loadgroup` with xdist_group marks would
    say the same, but xdist 3.8 writes the group into `item._nodeid`, which pytest 9 no
    longer reads.)"""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndTheCluster(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/e2e" if path.startswith("tests/e2e/") else path

    return FilesAndTheCluster(config, log)


@pytest.fixture
def ectl_here(capsys, monkeypatch):
    """`ectl ARGS` through the console entry point (`run()`) in this process: the same exit
    codes and printing as the installed command, without its start-up; `stdin` is what
    the command reads from standard input."""
    import io
    import subprocess
    import sys

    from elasticctr.cli.main import run

    def call(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
        monkeypatch.setattr(sys, "argv", ["ectl", *args])
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = 0
        try:
            run()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return call
