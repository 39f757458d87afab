"""Fixtures of the image tests: a Docker engine (scripts/images/dockerd.sh), the built
images (scripts/images/build.sh, cached: `make test` builds them first) and containers that
are removed at the end, whatever happens. Nothing here skips: no engine or no image fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from image_helpers import IMAGES, REPO, SCRIPTS, Docker, run


@pytest.fixture(scope="session")
def docker() -> Iterator[Docker]:
    done = run([str(SCRIPTS / "images" / "dockerd.sh")], timeout=900)
    if done.returncode != 0:
        pytest.fail(f"scripts/images/dockerd.sh failed:\n{done.stderr[-3000:]}")
    client = Docker(done.stdout.strip())
    yield client
    client.cleanup()


@pytest.fixture(scope="session")
def images(docker: Docker) -> dict[str, str]:
    """image name -> local reference, built (or found cached) by scripts/images/build.sh."""
    done = run([str(SCRIPTS / "images" / "build.sh")], timeout=3600, cwd=REPO)
    if done.returncode != 0:
        pytest.fail(f"scripts/images/build.sh failed:\n{done.stderr[-4000:]}")
    refs = {}
    for line in done.stdout.splitlines():
        ref = line.split()[0]
        refs[ref.rsplit("/", 1)[-1].split(":")[0].removeprefix("elasticctr-")] = ref
    assert set(refs) == set(IMAGES), done.stdout
    return refs


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A host directory the containers' user (uid 10001) can write."""
    tmp_path.chmod(0o777)
    return tmp_path
