#!/usr/bin/env python3
"""Lay out the Kubernetes JSON schemas of the `kubernetes-validate` package for kubeconform.

    scripts/k8s-jsonschema.py OUT_DIR 1.30 [1.34 ...]

kubernetes-validate ships `vX.Y.0-local-strict/<kind>-<group>-<version>.json` whose `$ref`s
point at `/api/_definitions.json` relative to an `https://kubernetes.io/...` `$id`, i.e. to
the internet. This copies one folder per version to OUT_DIR/vX.Y.0-local-strict with those
references rewritten to the local `_definitions.json`, so `kubeconform -schema-location
'OUT_DIR/vX.Y.0-local-strict/{{ .ResourceKind }}{{ .KindSuffix }}.json'` works offline.
"""

from __future__ import annotations

import sys
from pathlib import Path

import kubernetes_validate

REMOTE_DEFINITIONS = '"/api/_definitions.json'


def layout(out_dir: Path, version: str) -> Path:
    """Write the rewritten folder of Kubernetes `version` (e.g. "1.30"); return its path."""
    name = f"v{version}.0-local-strict"
    source = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / name
    if not source.is_dir():
        raise SystemExit(f"kubernetes-validate has no schemas for Kubernetes {version} ({source})")
    target = out_dir / name
    target.mkdir(parents=True, exist_ok=True)
    local = '"' + (target / "_definitions.json").resolve().as_uri()
    for schema in source.glob("*.json"):
        text = schema.read_text()
        (target / schema.name).write_text(text.replace(REMOTE_DEFINITIONS, local))
    return target


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: k8s-jsonschema.py OUT_DIR VERSION [VERSION ...]", file=sys.stderr)
        return 2
    for version in argv[2:]:
        print(layout(Path(argv[1]), version))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
