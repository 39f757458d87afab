#!/usr/bin/env bash
# CycloneDX SBOM (JSON) of one image's installed Python packages, on stdout (docs/images.md).
#   scripts/images/sbom.sh IMAGE_REF
# cyclonedx-bom (pinned in constraints.txt, installed in .venv by `make venv`) is pure Python:
# its packages are mounted read-only into a throw-away container of the image and run by the
# image's own interpreter against the image's virtualenv (`cyclonedx-py environment`), so
# what is listed is what the image has, with the versions and licenses of its metadata.
# Validation against the CycloneDX schema is left to tests/images (it takes 30 s here).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 1 ] || { echo "usage: $0 IMAGE_REF" >&2; exit 2; }
ref=$1
DOCKER=$(scripts/images/dockerd.sh)
SITE=$(.venv/bin/python -c 'import cyclonedx_py, pathlib; print(pathlib.Path(cyclonedx_py.__file__).parents[1])')
# The image's virtualenv: /opt/elasticctr, or /opt/mlflow for the MLflow image.
venv=$("$DOCKER" image inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$ref" \
  | sed -n 's#^PATH=\(/opt/[^/:]*\)/bin:.*#\1#p')
[ -n "$venv" ] || { echo "sbom.sh: $ref has no /opt/<venv>/bin first on PATH" >&2; exit 1; }
# The tool runs from the host's site-packages appended to sys.path of Debian's python3 (not
# the venv's, so the tool's own packages are not in the scanned environment).
"$DOCKER" run --rm --network none --read-only --tmpfs /tmp -v "$SITE:/sbom-tool:ro" \
  --entrypoint /usr/bin/python3 "$ref" -c '
import sys
sys.path.append("/sbom-tool")
from cyclonedx_py._internal.cli import run
sys.argv = ["cyclonedx-py", "environment", "--output-format", "JSON", "--output-file", "-",
            "--output-reproducible", "--no-validate", sys.argv[1] + "/bin/python"]
run()
' "$venv"
