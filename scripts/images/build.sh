#!/usr/bin/env bash
# `make images`: build every image the chart runs from this checkout (docs/images.md).
#   scripts/images/build.sh [IMAGE ...]    default: train serving cube fileserver mlflow console
# Steps, each cached so a warm run does nothing and a Python change rebuilds one layer:
#   1. dockerd (scripts/images/dockerd.sh) and the Debian base image (scripts/images/base.sh)
#   2. the wheelhouse (scripts/images/wheelhouse.sh): every wheel the images install,
#      resolved by uv within constraints.txt and downloaded by pip for CPython 3.11
#      manylinux x86_64, cached in
#      $CACHE/wheelhouse-<hash of the layer lists, constraints.txt and the target platform>
#   3. the project wheel (uv build, offline from the wheelhouse; it carries the chart),
#      cached by a hash of tools/ and charts/elasticctr; the native code; helm for the
#      console image: `make tools`' .tools/bin/helm (static, scripts/helm-version.sh's version)
#   4. `docker build --target <image>` of images/Dockerfile with BuildKit, tagged
#      <global.image.repository>/elasticctr-<image>:<chart appVersion>
#   5. a CycloneDX SBOM per image: $CACHE/sbom/elasticctr-<image>-<tag>.cdx.json, remade
#      when the image's layers change ($CACHE/sbom/...cdx.json.layers)
# Prints one line per image: reference, image id, size in bytes.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CACHE="${ELASTICCTR_IMAGES_CACHE:-$HOME/.cache/elasticctr/images}"
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || { echo "build.sh: run \`make venv\` first" >&2; exit 1; }
mkdir -p "$CACHE"

ALL=(train serving cube fileserver mlflow console)
if [ $# -gt 0 ]; then WANT=("$@"); else WANT=("${ALL[@]}"); fi
for image in "${WANT[@]}"; do
  [[ " ${ALL[*]} " == *" $image "* ]] || { echo "build.sh: unknown image $image (one of: ${ALL[*]})" >&2; exit 2; }
done

# One build at a time per checkout: the build context below is shared.
mkdir -p "$ROOT/.cache"
exec 8>"$ROOT/.cache/images-build.lock"
flock 8
DOCKER=$(scripts/images/dockerd.sh)
eval "$("$PY" scripts/images/meta.py shell)"   # VERSION, REPOSITORY
BASE=$(scripts/images/base.sh)

# --- 2. wheelhouse (scripts/images/wheelhouse.sh) ----------------------------------------
CTX="$ROOT/.cache/images-context"
rm -rf "$CTX" && mkdir -p "$CTX/project"
IN=$(mktemp -d)
trap 'rm -rf "$IN"' EXIT
"$PY" scripts/images/meta.py requirements "$IN"
# The wheel set depends on the layer requirements, the pins and the target platform only.
WHEELHOUSE_RECIPE="2 cp311 manylinux_2_36_x86_64"
WH_KEY=$( { echo "$WHEELHOUSE_RECIPE"; cat constraints.txt "$IN"/*.in; } | sha256sum | cut -c1-16)
WH="$CACHE/wheelhouse-$WH_KEY"
if [ ! -f "$WH/.complete" ]; then
  echo "build.sh: preparing the wheelhouse (from constraints.txt) ..." >&2
  tmp=$(mktemp -d "$CACHE/.wheelhouse.XXXXXX")
  # Wheels the newest previous wheelhouse already has are reused (hard links), so a changed
  # pin downloads only what changed.
  prev=$(ls -dt "$CACHE"/wheelhouse-* 2>/dev/null | head -n 1 || true)
  PY="$PY" scripts/images/wheelhouse.sh amd64 "$tmp" "$prev" || { rm -rf "$tmp"; exit 1; }
  mv -T "$tmp" "$WH" 2>/dev/null || { rm -rf "$tmp"; [ -f "$WH/.complete" ]; }
  # Keep the newest two wheelhouses only (each is ~600 MB).
  ls -dt "$CACHE"/wheelhouse-* | tail -n +3 | xargs -r rm -rf
fi
# Per layer: its pinned list and exactly its wheels (hard links, no copy), so a layer's
# cache key changes only when its own pins do, and BuildKit sees unchanged files unchanged.
"$PY" scripts/images/meta.py context "$WH" "$CTX"

# --- 3. the project wheel ----------------------------------------------------------------
# The wheel carries the chart too (setup.py), so a chart change makes a new wheel.
SRC_KEY=$( { cat pyproject.toml setup.py MANIFEST.in README.md
  find tools charts/elasticctr -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-16)
PROJ="$CACHE/project-$SRC_KEY"
if ! ls "$PROJ"/elasticctr-*.whl >/dev/null 2>&1; then
  tmp=$(mktemp -d "$CACHE/.project.XXXXXX")
  # uv build: build isolation with setuptools from the wheelhouse (offline, independent of
  # .venv); 5 s where `pip wheel` takes 20.
  "$PY" -m uv build --wheel --quiet --no-index --find-links "$WH" --out-dir "$tmp" . >&2
  rm -rf build tools/*.egg-info
  mv -T "$tmp" "$PROJ" 2>/dev/null || rm -rf "$tmp"
  # Keep the newest few project wheels only.
  ls -dt "$CACHE"/project-* | tail -n +6 | xargs -r rm -rf
fi
cp "$PROJ"/elasticctr-*.whl "$CTX/project/"

# --- 3b. native code: the training reader (docs/training.md "Native path"), cube lookups --
# Built here, static (the base image has no compiler; Debian's libc.a on the host): the
# train image ships it as $ELASTICCTR_SLOTFEED, so the chart's trainers use the native pipeline.
mkdir -p "$CTX/native"
cc=${CC:-$(command -v gcc || command -v cc || true)}
[ -n "$cc" ] || { echo "build.sh: gcc is needed to build ectl-slotfeed (apt-get install gcc)" >&2; exit 1; }
"$cc" -O2 -std=gnu11 -static -o "$CTX/native/ectl-slotfeed" tools/elasticctr/train/slotfeed.c \
  || { echo "build.sh: building ectl-slotfeed failed (static: libc6-dev provides libc.a)" >&2; exit 1; }
# The cube shard's native lookup path (docs/cube.md), a CPython extension: compiled against
# Debian's python3 headers (the images' interpreter is the base's python3); the cube image
# ships it as $ELASTICCTR_CUBEFAST.
pyinc=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)
[ -f "$pyinc/Python.h" ] || { echo "build.sh: Debian's Python headers are needed to build cubefast.c (apt-get install python3-dev)" >&2; exit 1; }
"$cc" -O2 -std=gnu11 -shared -fPIC -I"$pyinc" -o "$CTX/native/cubefast.so" tools/elasticctr/cube/cubefast.c \
  || { echo "build.sh: building cubefast.c failed" >&2; exit 1; }

# --- 3c. helm for the console image (pyhelm3 runs it) -----------------------------------
# The binary `make tools` built from its Go module (scripts/bootstrap-tools.sh): the same
# version and link flags as the Dockerfile's helm-source stage (scripts/helm-version.sh),
# static (CGO_ENABLED=0), so it runs on the image's libc or none.
if [[ " ${WANT[*]} " == *" console "* ]]; then
  # shellcheck source=../helm-version.sh
  source scripts/helm-version.sh
  helm_bin=$(readlink -f .tools/bin/helm 2>/dev/null || true)
  [ -n "$helm_bin" ] && [ -x "$helm_bin" ] \
    || { echo "build.sh: .tools/bin/helm is missing (the console image ships it): run \`make tools\`" >&2; exit 1; }
  helm_version=$("$helm_bin" version --template '{{.Version}}' 2>/dev/null || true)
  [ "$helm_version" = "$HELM_VERSION" ] \
    || { echo "build.sh: .tools/bin/helm is ${helm_version:-not runnable}, not $HELM_VERSION (scripts/helm-version.sh): run \`make tools\`" >&2; exit 1; }
  ! readelf -l "$helm_bin" 2>/dev/null | grep -q 'Requesting program interpreter' \
    || { echo "build.sh: $helm_bin is dynamically linked (the image needs a static helm): run \`make tools\` (it builds helm with CGO_ENABLED=0)" >&2; exit 1; }
  mkdir -p "$CTX/helm"
  cp "$helm_bin" "$CTX/helm/helm"
fi

# --- 4. images ----------------------------------------------------------------------------
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- 2>/dev/null || REVISION="$REVISION-dirty"
SOURCE=$(git remote get-url origin 2>/dev/null || echo "file://$ROOT")
mkdir -p "$CACHE/sbom"
sboms=()
for image in "${WANT[@]}"; do
  ref="$REPOSITORY/elasticctr-$image:$VERSION"
  start=$(date +%s.%N)
  DOCKER_BUILDKIT=1 "$DOCKER" build --quiet -f images/Dockerfile --target "$image" \
    --build-arg CONTEXT=prepared --build-arg "BASE=$BASE" --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" \
    --build-arg "SOURCE=$SOURCE" -t "$ref" "$CTX" >/dev/null \
    || { echo "build.sh: docker build of $image failed (rerun without --quiet to see why:" \
      "DOCKER_BUILDKIT=1 docker build -f images/Dockerfile --build-arg CONTEXT=prepared --build-arg BASE=$BASE --target $image $CTX)" >&2; exit 1; }
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  id=$("$DOCKER" image inspect -f '{{.Id}}' "$ref")
  size=$("$DOCKER" image inspect -f '{{.Size}}' "$ref")
  printf '%s %s %s %.1fs\n' "$ref" "$id" "$size" "$secs"
  # The SBOM depends on the image's files only: keyed by its layers (a new label or
  # revision alone does not redo it).
  layers=$("$DOCKER" image inspect -f '{{json .RootFS.Layers}}' "$ref")
  sbom="$CACHE/sbom/elasticctr-$image-$VERSION.cdx.json"
  if [ ! -s "$sbom" ] || [ "$(cat "$sbom.layers" 2>/dev/null)" != "$layers" ]; then
    sboms+=("$image")
    echo "$layers" >"$sbom.layers.new"
  fi
done

# --- 5. SBOMs of the images whose files changed, in parallel --------------------------------
pids=()
for image in "${sboms[@]}"; do
  sbom="$CACHE/sbom/elasticctr-$image-$VERSION.cdx.json"
  ( scripts/images/sbom.sh "$REPOSITORY/elasticctr-$image:$VERSION" >"$sbom.tmp" 2>"$sbom.log" \
      || { cat "$sbom.log" >&2; echo "build.sh: SBOM of $image failed" >&2; exit 1; }
    mv "$sbom.tmp" "$sbom" && mv "$sbom.layers.new" "$sbom.layers" && rm -f "$sbom.log" "$sbom.id" ) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
