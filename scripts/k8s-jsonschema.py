#!/usr/bin/env python3
"""Lay out the Kubernetes JSON schemas of the `kubernetes-validate` package for kubeconform.

    scripts/k8s-jsonschema.py OUT_DIR 1.28 [1.34 ...]

kubernetes-validate ships `vX.Y.0-local-strict/<kind>-<group>-<version>.json` whose `$ref`s
point into one shared `_definitions.json` through an `https://kubernetes.io/...` `$id`, i.e.
to the internet, and make every kind compile the whole 1.5 MB definitions file. This writes
OUT_DIR/vX.Y.0-local-strict/<same name>.json for every resource kind (objects with
apiVersion and kind; lists skipped) as a standalone schema: the definitions it uses,
transitively, copied into its own `$defs`. kubeconform then works offline and about ten
times faster, with
`-schema-location 'OUT_DIR/vX.Y.0-local-strict/{{ .ResourceKind }}{{ .KindSuffix }}.json'`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate

SHARED = "/api/_definitions.json#/$defs/"
LOCAL = "#/$defs/"


def _names(node: Any, defs: dict[str, Any], found: set[str]) -> set[str]:
    """Every definition `node` refers to, transitively."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith((SHARED, LOCAL)):
            name = ref.split("/$defs/", 1)[1]
            if name not in found:
                found.add(name)
                _names(defs[name], defs, found)
        for value in node.values():
            _names(value, defs, found)
    elif isinstance(node, list):
        for value in node:
            _names(value, defs, found)
    return found


def _local(node: Any) -> Any:
    """The same schema with references into the shared file made document-local."""
    if isinstance(node, dict):
        return {
            key: (LOCAL + value[len(SHARED) :])
            if key == "$ref" and isinstance(value, str) and value.startswith(SHARED)
            else _local(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_local(value) for value in node]
    return node


def layout(out_dir: Path, version: str) -> Path:
    """Write the standalone schemas of Kubernetes `version` (e.g. "1.28"); return the folder."""
    name = f"v{version}.0-local-strict"
    source = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / name
    if not source.is_dir():
        raise SystemExit(f"kubernetes-validate has no schemas for Kubernetes {version} ({source})")
    target = out_dir / name
    target.mkdir(parents=True, exist_ok=True)
    defs = json.loads((source / "_definitions.json").read_text())["$defs"]
    for path in sorted(source.glob("*.json")):
        if path.name.startswith("_") or "list-" in path.name:
            continue
        schema = json.loads(path.read_text())
        props = schema.get("properties", {})
        if "apiVersion" not in props or "kind" not in props:
            continue  # a nested type, not a resource kubeconform looks up
        needed = _names(schema, defs, set())
        standalone = _local(schema)
        standalone.pop("$id", None)
        standalone["$defs"] = {n: _local(defs[n]) for n in sorted(needed)}
        (target / path.name).write_text(json.dumps(standalone, separators=(",", ":")))
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
