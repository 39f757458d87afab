#!/usr/bin/env bash
# Install the pinned development and test tools into .tools/ (ignored by git):
#   helm (built from Go modules, version-stamped), kubeconform, helm-unittest (helm plugin),
#   yamllint (from .venv). Later parts add to this file, not a second script.
# Built binaries are cached per version in $ELASTICCTR_TOOLS_CACHE (default
# ~/.cache/elasticctr/tools) so fresh clones on the same machine reuse them.
# Prints every tool's version; exits non-zero when one is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

HELM_VERSION=v3.19.5
KUBECONFORM_VERSION=v0.7.0
# helm-unittest v1.0.1 fails `go install` here (checksum database has no record of it: 404);
# v1.0.0 verifies and builds with plain `go install`.
HELM_UNITTEST_VERSION=v1.0.0
# helm-docs: each chart's README.md from its values.yaml `# --` comments (docs/images.md).
HELM_DOCS_VERSION=v1.14.2

TOOLS="$ROOT/.tools"
BIN="$TOOLS/bin"
CACHE="${ELASTICCTR_TOOLS_CACHE:-$HOME/.cache/elasticctr/tools}"
mkdir -p "$BIN" "$CACHE"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

# go_tool NAME VERSION PACKAGE [LDFLAGS]: build once into $CACHE/NAME-VERSION, link into .tools/bin
go_tool() {
  local name=$1 version=$2 pkg=$3 ldflags=${4:-}
  # The cache key includes the ldflags: a changed version stamp means a new build.
  local cached
  cached="$CACHE/$name-$version-$(printf '%s' "$ldflags" | sha256sum | cut -c1-8)"
  if [ ! -x "$cached" ]; then
    echo "building $name $version from Go modules ..." >&2
    local tmp
    tmp=$(mktemp -d)
    GOBIN="$tmp" go install -ldflags "$ldflags" "$pkg@$version"
    mv "$tmp/$(basename "${pkg%%@*}")" "$cached"
    rm -rf "$tmp"
  fi
  ln -sf "$cached" "$BIN/$name"
}

command -v go >/dev/null || { echo "bootstrap-tools: Go is required (go not on PATH)" >&2; exit 1; }

# Like helm's Makefile, stamp the Kubernetes version of its client-go (else `helm template`
# and `helm lint` assume v1.20 and reject charts with kubeVersion >=1.25).
HELM_K8S_MINOR=34
go_tool helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
  "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR"
go_tool kubeconform "$KUBECONFORM_VERSION" github.com/yannh/kubeconform/cmd/kubeconform \
  "-s -w -X main.version=$KUBECONFORM_VERSION"
go_tool helm-unittest "$HELM_UNITTEST_VERSION" github.com/helm-unittest/helm-unittest/cmd/helm-unittest \
  "-s -w -X github.com/helm-unittest/helm-unittest/internal/build.version=$HELM_UNITTEST_VERSION"
go_tool helm-docs "$HELM_DOCS_VERSION" github.com/norwoodj/helm-docs/cmd/helm-docs \
  "-s -w -X main.version=$HELM_DOCS_VERSION"

# Register helm-unittest as the `helm unittest` plugin (what `helm plugin install` would lay out).
PLUGIN_DIR="$TOOLS/helm-plugins/helm-unittest"
mkdir -p "$PLUGIN_DIR/untt-bin"
ln -sf "$BIN/helm-unittest" "$PLUGIN_DIR/untt-bin/untt"
cat > "$PLUGIN_DIR/plugin.yaml" <<YAML
name: "unittest"
version: "${HELM_UNITTEST_VERSION#v}"
usage: "unittest for helm charts"
description: "Unit test for helm chart in YAML with ease to keep your chart functional and robust."
ignoreFlags: false
command: "\$HELM_PLUGIN_DIR/untt-bin/untt"
YAML

# yamllint comes from the Python environment (pinned in constraints.txt).
ln -sf "$ROOT/.venv/bin/yamllint" "$BIN/yamllint"

# Test HDFS (docs/hdfs.md): MiniDFSCluster from the pinned hadoop-minicluster jars, built by
# Maven from scripts/hdfs into $CACHE/hdfs-minicluster-<hash of scripts/hdfs sources> (jars
# also stay in ~/.m2) with a CDS archive for fast starts, linked as .tools/hdfs;
# scripts/hdfs/minihdfs runs it.
hdfs_minicluster() {
  local src="$ROOT/scripts/hdfs" hash cached tmp
  hash=$(cd "$src" && find pom.xml src -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum \
    | sha256sum | cut -c1-16)
  cached="$CACHE/hdfs-minicluster-$hash"
  if [ ! -f "$cached/minihdfs.jar" ]; then
    command -v mvn >/dev/null && command -v java >/dev/null \
      || { echo "bootstrap-tools: Java 17 and Maven (mvn) are required for the test HDFS" >&2; exit 1; }
    echo "building hdfs-minicluster $hash with Maven ..." >&2
    tmp=$(mktemp -d "$CACHE/.hdfs-build.XXXXXX") # same filesystem: the mv below is atomic
    cp -r "$src/pom.xml" "$src/src" "$tmp/"
    (cd "$tmp" && mvn -B -q -Dstyle.color=never package) >&2 \
      || { rm -rf "$tmp"; echo "bootstrap-tools: Maven build of scripts/hdfs failed" >&2; exit 1; }
    mkdir "$tmp/out" && mv "$tmp/target/minihdfs.jar" "$tmp/target/lib" "$tmp/out/"
    # Atomic publish; a concurrent bootstrap that won the race leaves its copy in place.
    mv -T "$tmp/out" "$cached" 2>/dev/null || [ -f "$cached/minihdfs.jar" ]
    rm -rf "$tmp"
  fi
  if [ ! -f "$cached/minihdfs.jsa" ]; then
    # One start/stop records a class-data-sharing archive: later starts load classes from it.
    echo "recording the hdfs-minicluster class-data-sharing archive ..." >&2
    tmp=$(mktemp -d "$CACHE/.hdfs-cds.XXXXXX")
    if MINIHDFS_HOME="$cached" MINIHDFS_CDS_RECORD="$tmp/minihdfs.jsa" \
      "$ROOT/scripts/hdfs/minihdfs" --base-dir "$tmp/dfs" --exit-when-ready \
      </dev/null >/dev/null 2>"$tmp/log" && [ -s "$tmp/minihdfs.jsa" ]; then
      mv -f "$tmp/minihdfs.jsa" "$cached/minihdfs.jsa"
    else
      echo "bootstrap-tools: no CDS archive for the test HDFS (it only starts slower):" >&2
      tail -n 3 "$tmp/log" >&2
    fi
    rm -rf "$tmp"
  fi
  ln -sfn "$cached" "$TOOLS/hdfs"
  ln -sf "$ROOT/scripts/hdfs/minihdfs" "$BIN/minihdfs"
}
hdfs_minicluster

# Real-cluster tests (docs/cluster-tests.md): kube-apiserver built from the wrapper module
# scripts/kube (k8s.io/kubernetes with every staging module pinned to its v0.X.Y), cached in
# $CACHE/kube-apiserver-<version>-<hash of the wrapper>; etcd from Debian's etcd-server,
# installed with apt when missing (CI machines start fresh; CI runs as root).
kube_apiserver() {
  local src="$ROOT/scripts/kube" version minor hash cached tmp
  version=$(awk '$1 == "require" {$1 = ""; $0 = $0} $1 == "k8s.io/kubernetes" {print $2; exit}' \
    "$src/go.mod")
  [ -n "$version" ] || { echo "bootstrap-tools: no k8s.io/kubernetes in $src/go.mod" >&2; exit 1; }
  minor=$(echo "$version" | cut -d. -f2)
  hash=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-16)
  cached="$CACHE/kube-apiserver-$version-$hash"
  if [ ! -x "$cached" ]; then
    echo "building kube-apiserver $version from Go modules (cold: ~8 min CPU, 22 min on a busy 2-core machine) ..." >&2
    tmp=$(mktemp "$CACHE/.kube-apiserver.XXXXXX") # same filesystem: the mv below is atomic
    (cd "$src" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -o "$tmp" -ldflags \
      "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" .) \
      || { rm -f "$tmp"; echo "bootstrap-tools: building kube-apiserver failed" >&2; exit 1; }
    mv -f "$tmp" "$cached"
  fi
  ln -sf "$cached" "$BIN/kube-apiserver"
  if [ ! -x /usr/bin/etcd ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing etcd (Debian etcd-server) ..." >&2
      apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >&2 \
        || { echo "bootstrap-tools: apt-get install etcd-server failed" >&2; exit 1; }
    else
      echo "bootstrap-tools: etcd is required for tests/cluster: apt-get install etcd-server" >&2
      exit 1
    fi
  fi
  ln -sf /usr/bin/etcd "$BIN/etcd"
}
kube_apiserver

# shellcheck source=tools-env.sh
source "$ROOT/scripts/tools-env.sh"
fail=0
report() { # NAME COMMAND...
  local name=$1; shift
  local out
  # Capture everything first: piping into `head -n 1` would SIGPIPE long outputs (pipefail).
  if out=$("$@" 2>&1) && out=${out%%$'\n'*} && [ -n "$out" ]; then
    printf '  %-14s %s\n' "$name" "$out"
  else
    printf '  %-14s MISSING (%s)\n' "$name" "$out" >&2
    fail=1
  fi
}
echo "tools in $BIN:"
report helm helm version --short
report helm-docs helm-docs --version
report kubeconform kubeconform -v
# `helm unittest --help` proves the plugin runs; the plugin list carries its version.
helm unittest --help >/dev/null 2>&1 || { echo "  helm-unittest  does not run" >&2; fail=1; }
report helm-unittest bash -c "helm plugin list | awk '\$1==\"unittest\" {print \"v\" \$2}'"
report yamllint yamllint --version
report hdfs-minicluster minihdfs --version
report kube-apiserver kube-apiserver --version
report etcd etcd --version
[ "$fail" -eq 0 ] || { echo "bootstrap-tools: a tool is missing (see above)" >&2; exit 1; }
