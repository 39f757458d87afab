#!/usr/bin/env python3
"""Convert CustomResourceDefinitions into JSON schemas for `kubeconform -strict`.

    scripts/crd-to-jsonschema.py OUT_DIR CRD.yaml [CRD.yaml ...]

Writes OUT_DIR/{group}/{kind}_{version}.json (kind lower-case) for every served version,
matching kubeconform's `-schema-location 'OUT_DIR/{{ .Group }}/{{ .ResourceKind }}_{{
.ResourceAPIVersion }}.json'`. Like kubeconform's openapi2jsonschema.py in strict mode,
objects that list their properties reject unknown ones (unless the CRD says
x-kubernetes-preserve-unknown-fields), and int-or-string fields accept both.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def strict(node):
    """Return a copy of an OpenAPI v3 schema node made strict and JSON-Schema-valid."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict(value) for key, value in node.items()}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "string"}, {"type": "integer"}]
    preserve = out.pop("x-kubernetes-preserve-unknown-fields", False)
    for key in [k for k in out if k.startswith("x-kubernetes-")]:
        out.pop(key)
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


def convert(crd_path: Path, out_dir: Path) -> list[Path]:
    written = []
    for doc in yaml.safe_load_all(crd_path.read_text()):
        if not doc or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        group, kind = spec["group"], spec["names"]["kind"].lower()
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            schema = strict(version["schema"]["openAPIV3Schema"])
            # apiVersion/kind/metadata are checked by kubeconform and the API server.
            schema.setdefault("properties", {}).setdefault("metadata", {"type": "object"})
            schema["$schema"] = "http://json-schema.org/draft-07/schema#"
            target = out_dir / group / f"{kind}_{version['name']}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(schema, indent=1) + "\n")
            written.append(target)
    if not written:
        raise SystemExit(f"{crd_path}: no CustomResourceDefinition with a served version")
    return written


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out_dir = Path(argv[1])
    for crd in argv[2:]:
        for path in convert(Path(crd), out_dir):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
