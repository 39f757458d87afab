#!/usr/bin/env bash
# The wheelhouse of the images (docs/images.md): every wheel they install, pinned.
#   scripts/images/wheelhouse.sh ARCH DIR [PREVIOUS]
# ARCH: amd64 or arm64 (Docker's names). Writes DIR/req/<layer>.txt, each layer's
# requirements (meta.py requirements) pinned by uv within constraints.txt for the images'
# interpreter (CPython 3.11 on glibc 2.36, Debian bookworm) on ARCH, DIR/*.whl exactly those
# wheels (binary only: nothing is compiled, every image step installs offline) and
# DIR/.complete. Wheels PREVIOUS (an older wheelhouse) has are hard-linked, not downloaded.
# Runs where `make images` runs (build.sh, on the host) and inside images/Dockerfile's
# wheels-source stage (a `docker build` without a prepared context): one recipe for both.
# PY: a Python with pip, uv, packaging and PyYAML (default: the checkout's .venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: $0 ARCH DIR [PREVIOUS]" >&2; exit 2; }
ARCH=$1 DIR=$2 PREV=${3:-}
PY=${PY:-$PWD/.venv/bin/python}
case "$ARCH" in
  amd64 | x86_64) machine=x86_64 ;;
  arm64 | aarch64) machine=aarch64 ;;
  *) echo "wheelhouse.sh: no wheels for architecture $ARCH (amd64 or arm64)" >&2; exit 2 ;;
esac
LAYERS=(core paddle train serve cube kube mlflow build)
mkdir -p "$DIR/req"
IN=$(mktemp -d)
trap 'rm -rf "$IN"' EXIT
"$PY" scripts/images/meta.py requirements "$IN"
# 1. uv pins each layer's requirements (with the layers below it).
for layer in "${LAYERS[@]}"; do
  "$PY" -m uv pip compile --quiet --no-header --no-annotate --python-version 3.11 \
    --python-platform "$machine-manylinux_2_36" --constraint constraints.txt "$IN/$layer.in" \
    -o "$DIR/req/$layer.txt" >&2 \
    || { echo "wheelhouse.sh: uv pip compile of the $layer layer ($ARCH) failed" >&2; exit 1; }
done
sort -u "$DIR"/req/*.txt >"$IN/all.txt"
# 2. pip downloads exactly those wheels (no resolution). Every manylinux tag glibc 2.36 runs
#    is allowed (pip does not widen a given --platform itself).
# (aarch64 wheels start at manylinux2014, that is glibc 2.17.)
platforms=()
oldest=5
[ "$machine" = x86_64 ] || oldest=17
for minor in $(seq 36 -1 $oldest); do platforms+=(--platform "manylinux_2_${minor}_$machine"); done
platforms+=(--platform "manylinux2014_$machine")
[ "$machine" != x86_64 ] || platforms+=(--platform manylinux2010_x86_64 --platform manylinux1_x86_64)
if [ -n "$PREV" ] && [ -d "$PREV" ]; then cp -l "$PREV"/*.whl "$DIR/" 2>/dev/null || true; fi
"$PY" -m pip download --disable-pip-version-check --quiet --no-deps --dest "$DIR" \
  --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 --abi abi3 \
  --abi none "${platforms[@]}" -r "$IN/all.txt" >&2 \
  || { echo "wheelhouse.sh: pip download ($ARCH) failed" >&2; exit 1; }
"$PY" scripts/images/meta.py prune "$IN/all.txt" "$DIR"   # exactly the pinned wheels
touch "$DIR/.complete"
