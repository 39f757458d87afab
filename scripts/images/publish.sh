#!/usr/bin/env bash
# `make publish REGISTRY=HOST:PORT`: push every image and the packaged chart to an OCI
# registry (docs/images.md).
#   scripts/images/publish.sh REGISTRY [OUT_DIR]       (OUT_DIR default: dist/)
# 1. tags each built image <REGISTRY>/<global.image.repository>/elasticctr-<image>:<appVersion>
#    and pushes it (`make images` first: this script builds nothing);
# 2. packages the chart from a copy whose values.yaml sets global.image.registry=REGISTRY
#    (the repository's chart is not changed), so the published chart pulls these images
#    by default, and pushes it with `helm push` to oci://REGISTRY/charts;
# 3. writes OUT_DIR/elasticctr-<version>.tgz and OUT_DIR/elasticctr-<version>.digests.json
#    (the registry, the chart reference and digest, each image reference with its digest),
#    OUT_DIR/elasticctr-<version>.digests-values.yaml (every part's image.digest: install
#    with it to pull each image by digest),
#    and copies each image's CycloneDX SBOM (made by build.sh) to OUT_DIR/sbom/.
# Plain HTTP for a registry on a loopback address (what scripts/registry.sh serves), TLS for
# any other (log in first with `docker login` and `helm registry login`).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
[ $# -ge 1 ] && [ -n "$1" ] || { echo "usage: $0 REGISTRY(HOST:PORT) [OUT_DIR]" >&2; exit 2; }
REGISTRY=${1%/}
OUT=$(mkdir -p "${2:-dist}" && cd "${2:-dist}" && pwd)
PY="$ROOT/.venv/bin/python"
DOCKER=$(scripts/images/dockerd.sh)
eval "$("$PY" scripts/images/meta.py shell)"   # VERSION, REPOSITORY, IMAGES
# shellcheck source=/dev/null
source scripts/tools-env.sh
command -v helm >/dev/null || { echo "publish.sh: helm missing: run \`make tools\`" >&2; exit 1; }

host=${REGISTRY%%/*}
host=${host%:*}
plain=()
case "$host" in localhost | 127.* | "[::1]") plain=(--plain-http) ;; esac

digests="$OUT/.digests.$$"
: >"$digests"
for image in $IMAGES; do
  local_ref="$REPOSITORY/elasticctr-$image:$VERSION"
  remote="$REGISTRY/$local_ref"
  "$DOCKER" image inspect "$local_ref" >/dev/null 2>&1 \
    || { echo "publish.sh: no image $local_ref: run \`make images\` first" >&2; exit 1; }
  "$DOCKER" tag "$local_ref" "$remote"
  out=$("$DOCKER" push "$remote" 2>&1) || { echo "$out" >&2; exit 1; }
  digest=$(echo "$out" | sed -n 's/.*digest: \(sha256:[0-9a-f]\{64\}\).*/\1/p' | tail -n 1)
  [ -n "$digest" ] || { echo "publish.sh: no digest in the push output of $remote:" >&2; echo "$out" >&2; exit 1; }
  echo "image $remote $digest" >>"$digests"
  echo "pushed $remote@$digest" >&2
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$digests"' EXIT
cp -r charts/elasticctr "$tmp/elasticctr"
"$PY" - "$tmp/elasticctr/values.yaml" "$REGISTRY" <<'PYEOF'
import sys
import yaml
path, registry = sys.argv[1], sys.argv[2]
text = open(path).read()
# Edit the one line, keep every `# --` comment (the published README and schema read them).
old = '    registry: ""\n'
assert text.count(old) == 1, "global.image.registry line not found in values.yaml"
text = text.replace(old, f'    registry: "{registry}"\n')
assert yaml.safe_load(text)["global"]["image"]["registry"] == registry
open(path, "w").write(text)
PYEOF
helm package "$tmp/elasticctr" --destination "$OUT" >/dev/null
pkg="$OUT/elasticctr-$(awk '$1 == "version:" {gsub(/"/, "", $2); print $2; exit}' charts/elasticctr/Chart.yaml).tgz"
out=$(helm push "$pkg" "oci://$REGISTRY/charts" "${plain[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
chart_ref=$(echo "$out" | sed -n 's/^Pushed: //p')
chart_digest=$(echo "$out" | sed -n 's/^Digest: //p')
[ -n "$chart_digest" ] || { echo "publish.sh: helm push printed no digest:" >&2; echo "$out" >&2; exit 1; }
echo "chart $chart_ref $chart_digest" >>"$digests"
echo "pushed oci://$chart_ref@$chart_digest" >&2

"$PY" - "$digests" "$REGISTRY" "$pkg" <<'PYEOF' >"${pkg%.tgz}.digests.json"
import json, sys
lines = [line.split() for line in open(sys.argv[1]) if line.strip()]
chart = next(l for l in lines if l[0] == "chart")
print(json.dumps({
    "registry": sys.argv[2],
    "chart": {"reference": f"oci://{chart[1]}", "digest": chart[2], "package": sys.argv[3]},
    "images": {l[1]: l[2] for l in lines if l[0] == "image"},
}, indent=2))
PYEOF
"$PY" scripts/images/meta.py digest-values "${pkg%.tgz}.digests.json" >"${pkg%.tgz}.digests-values.yaml"
mkdir -p "$OUT/sbom"
for image in $IMAGES; do
  sbom="${ELASTICCTR_IMAGES_CACHE:-$HOME/.cache/elasticctr/images}/sbom/elasticctr-$image-$VERSION.cdx.json"
  [ -s "$sbom" ] || { echo "publish.sh: no SBOM $sbom: run \`make images\`" >&2; exit 1; }
  cp "$sbom" "$OUT/sbom/"
done
echo "${pkg%.tgz}.digests.json"
