#!/usr/bin/env bash
# Create .venv and install elasticctr with the given extras, pinned by constraints.txt.
# Idempotent: reinstalls only when pyproject.toml or constraints.txt changed.
# Usage: scripts/bootstrap-python.sh [extras]   (default: dev)
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.9.9
EXTRAS="${1:-dev}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

stamp=".venv/.installed-$EXTRAS"
# "bytecode": venvs made before site-packages was compiled get reinstalled once.
want="$( (cat pyproject.toml constraints.txt; echo bytecode) | sha256sum | cut -c1-16)"
# The native training reader (elasticctr.train.native): compiled once per source version
# into ~/.cache/elasticctr/native with gcc; without a compiler trainers use the Python reader.
build_native() {
  .venv/bin/python -m elasticctr.train.native --build >/dev/null \
    || echo "bootstrap: native reader not built (no gcc?); trainers use the Python reader" >&2
  # The package itself (an editable install, so not in site-packages): its bytecode next
  # to the sources, refreshed for the files that changed (a stale .pyc is never used).
  .venv/bin/python -m compileall -q tools/elasticctr >/dev/null
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv/bin/ectl ]; then
  build_native
  exit 0
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python - <<'PYCHECK'
import sys
if sys.version_info[:2] != (3, 11):
    sys.exit(f"Python 3.11 is required, .venv has {sys.version.split()[0]}")
PYCHECK
if ! .venv/bin/python -m uv --version 2>/dev/null | grep -q "uv $UV_VERSION"; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
# --compile-bytecode: every module of site-packages compiled once here. Without it, and
# with PYTHONDONTWRITEBYTECODE set (as on CI machines and in our images' environment),
# every process compiles what it imports again: `import paddle` 3.2 CPU-s instead of 1.2,
# s3fs 1.0 instead of 0.5 -- paid by each ectl command, role and test subprocess.
.venv/bin/python -m uv pip install --quiet --python .venv/bin/python --compile-bytecode \
  -c constraints.txt -e ".[$EXTRAS]"
echo "$want" > "$stamp"
build_native
echo "python env ready: .venv ($( .venv/bin/ectl --version ))"
