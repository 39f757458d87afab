"""Facts the image scripts share, read from their one source each (docs/images.md).

  meta.py shell             VERSION (chart appVersion), REPOSITORY (global.image.repository),
                            IMAGES, as shell assignments
  meta.py requirements DIR  DIR/<layer>.in: the requirements of each image layer together
                            with those of the layers below it (a layer's venv holds both)
  meta.py context WHEELHOUSE DIR
                            DIR/req/<layer>.txt and DIR/wheels/<layer>/ (hard links) for
                            every image layer: the prepared build context's dependency part
  meta.py prune PINS WHEELHOUSE
                            delete the wheels of WHEELHOUSE that PINS does not name
  meta.py digest-values DIGESTS_JSON
                            the values file that pins every part's image by its digest
                            (`<part>.image.digest`), from publish.sh's digests record

Layer lists come from pyproject.toml's dependency groups; build.sh pins each layer's list
within constraints.txt (uv pip compile). `paddle` is what the train and serve extras share,
so train and serving share that layer; `kube` (the console's kubernetes client and pyhelm3)
sits on core, beside cube.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import tomllib
from pathlib import Path

import yaml
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "elasticctr"
# Image name suffix -> the chart's values key holding `image.name` (mlflow, console:
# subcharts too).
IMAGES = ("train", "serving", "cube", "fileserver", "mlflow", "console")
VALUES_KEY = {"train": "trainer"}  # the others: the suffix itself


def chart_facts() -> dict[str, str]:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return {
        "VERSION": str(chart["appVersion"]),
        "REPOSITORY": values["global"]["image"]["repository"],
        "IMAGES": " ".join(IMAGES),
    }


def layers() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    build = project["build-system"]["requires"]
    shared = [r for r in extras["train"] if r in extras["serve"]]
    return {
        "core": project["project"]["dependencies"],
        "paddle": shared,
        "train": [r for r in extras["train"] if r not in shared],
        "serve": [r for r in extras["serve"] if r not in shared],
        "cube": extras["cube"],
        # The console's cluster side: the Kubernetes API client and pyhelm3 (which runs the
        # image's helm binary).
        "kube": extras["kube"],
        "mlflow": extras["mlflow"],
        # Only for building the project wheel on the host (pip wheel, build isolation).
        "build": build,
    }


# Each layer's venv = its own requirements + those of the layers below it.
STACK = {
    "core": ["core"],
    "paddle": ["core", "paddle"],
    "train": ["core", "paddle", "train"],
    "serve": ["core", "paddle", "serve"],
    "cube": ["core", "cube"],
    "kube": ["core", "kube"],
    "mlflow": ["mlflow"],
    "build": ["build"],
}


def link(pinned: Path, wheelhouse: Path, out: Path) -> list[str]:
    """Hard-link the wheel of every pin of `pinned` into `out`; the pins with no wheel."""
    wanted, have = pins(pinned), wheels(wheelhouse)
    missing = sorted(f"{n}=={v}" for n, v in wanted - set(have))
    if not missing:
        out.mkdir(parents=True, exist_ok=True)
        for key in wanted:
            os.link(have[key], out / have[key].name)
    return missing


def pins(path: Path) -> set[tuple[str, str]]:
    text = path.read_text()
    return {
        (canonicalize_name(n), v) for n, v in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)
    }


def wheels(folder: Path) -> dict[tuple[str, str], Path]:
    out = {}
    for wheel in folder.glob("*.whl"):
        name, version, _, _ = parse_wheel_filename(wheel.name)
        out[(name, str(version))] = wheel
    return out


def digest_values(record: dict) -> dict:
    """Values that pull every published image by its digest: `{<part>: {image: {digest}}}`
    from publish.sh's record (`images`: reference `.../elasticctr-<image>:<tag>` -> digest).
    The helm test pod follows serving's."""
    out: dict = {}
    for ref, digest in sorted(record["images"].items()):
        image = ref.rsplit("/", 1)[-1].split(":", 1)[0].removeprefix("elasticctr-")
        if image not in IMAGES:
            raise ValueError(f"{ref}: not an image of the chart ({', '.join(IMAGES)})")
        out[VALUES_KEY.get(image, image)] = {"image": {"digest": digest}}
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["shell"]:
        for key, value in chart_facts().items():
            print(f"{key}={shlex.quote(value)}")
        return 0
    if len(argv) == 2 and argv[0] == "requirements":
        out = Path(argv[1])
        out.mkdir(parents=True, exist_ok=True)
        groups = layers()
        for name, stack in STACK.items():
            reqs = [r for group in stack for r in groups[group]]
            (out / f"{name}.in").write_text("".join(f"{r}\n" for r in reqs))
        return 0
    if len(argv) == 3 and argv[0] == "context":
        house, out = Path(argv[1]), Path(argv[2])
        (out / "req").mkdir(parents=True, exist_ok=True)
        for layer in STACK:
            if layer == "build":  # the project wheel's build only, no image layer
                continue
            pinned = house / "req" / f"{layer}.txt"
            (out / "req" / pinned.name).write_bytes(pinned.read_bytes())
            missing = link(pinned, house, out / "wheels" / layer)
            if missing:
                print(f"no wheel in {house} for: {', '.join(missing)}", file=sys.stderr)
                return 1
        return 0
    if len(argv) == 3 and argv[0] == "prune":
        wanted = pins(Path(argv[1]))
        for key, wheel in wheels(Path(argv[2])).items():
            if key not in wanted:
                wheel.unlink()
        return 0
    if len(argv) == 2 and argv[0] == "digest-values":
        import json

        record = json.loads(Path(argv[1]).read_text())
        print("# Every image by its digest (`make publish`); use with -f after your values.")
        print(yaml.safe_dump(digest_values(record), sort_keys=True), end="")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
