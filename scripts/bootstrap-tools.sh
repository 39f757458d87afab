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

# helm's version and link flags: scripts/helm-version.sh (the console image builds the same).
# shellcheck source=helm-version.sh
source "$ROOT/scripts/helm-version.sh"
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
# (CGO_ENABLED=0 go_tool ...: a static build, cached apart from a cgo one).
go_tool() {
  local name=$1 version=$2 pkg=$3 ldflags=${4:-}
  # The cache key includes the ldflags: a changed version stamp means a new build.
  local cached
  cached="$CACHE/$name-$version-$(printf '%s' "$ldflags${CGO_ENABLED:+ CGO_ENABLED=$CGO_ENABLED}" | sha256sum | cut -c1-8)"
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

# Version-stamped like helm's Makefile (scripts/helm-version.sh) and static like its releases:
# build.sh copies this very binary into the console image.
CGO_ENABLED=0 go_tool helm "$HELM_VERSION" "$HELM_PACKAGE" "$HELM_LDFLAGS"
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

# Test S3 (docs/storage.md): SeaweedFS (Apache-2.0) with its S3 gateway, `weed`, built from the
# pinned Go module. `go install` refuses it (its go.mod has replace directives), so the module is
# downloaded (module proxy), copied writable and built with `go build ./weed`, once per version
# into $CACHE/seaweedfs-<version>/weed; linked as .tools/bin/weed (tests/s3_fixture.py runs it).
SEAWEEDFS_MODULE=github.com/seaweedfs/seaweedfs
SEAWEEDFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6
seaweedfs() {
  local cached="$CACHE/seaweedfs-$SEAWEEDFS_VERSION" src tmp
  if [ ! -x "$cached/weed" ]; then
    echo "building seaweedfs $SEAWEEDFS_VERSION from Go modules (cold: ~5 min, 7 CPU-min) ..." >&2
    tmp=$(mktemp -d "$CACHE/.seaweedfs.XXXXXX") # same filesystem: the mv below is atomic
    src=$(cd "$tmp" && go mod download -json "$SEAWEEDFS_MODULE@$SEAWEEDFS_VERSION" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$src" ] && [ -d "$src" ] \
      || { rm -rf "$tmp"; echo "bootstrap-tools: go mod download $SEAWEEDFS_MODULE failed" >&2; exit 1; }
    cp -r "$src" "$tmp/src" && chmod -R u+w "$tmp/src"
    mkdir "$tmp/out"
    (cd "$tmp/src" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags \
      "-s -w -X $SEAWEEDFS_MODULE/weed/util/version.COMMIT=${SEAWEEDFS_VERSION##*-}" \
      -o "$tmp/out/weed" ./weed) >&2 \
      || { rm -rf "$tmp"; echo "bootstrap-tools: building seaweedfs failed" >&2; exit 1; }
    rm -rf "$tmp/src"
    # Atomic publish; a concurrent bootstrap that won the race leaves its copy in place.
    mv -T "$tmp/out" "$cached" 2>/dev/null || [ -x "$cached/weed" ]
    rm -rf "$tmp"
  fi
  ln -sf "$cached/weed" "$BIN/weed"
}
seaweedfs

# prometheus-operator's CRDs (ServiceMonitor, PodMonitor, PrometheusRule) for kubeconform:
# the chart's monitors are validated against them (tests/chart/test_observability.py). From
# the pinned Go module (module proxy; its example/prometheus-operator-crd), linked as
# .tools/prometheus-operator-crd.
PROMETHEUS_OPERATOR_MODULE=github.com/prometheus-operator/prometheus-operator
PROMETHEUS_OPERATOR_VERSION=v0.85.0
prometheus_operator_crds() {
  local dir
  dir=$(cd "$CACHE" && go mod download -json "$PROMETHEUS_OPERATOR_MODULE@$PROMETHEUS_OPERATOR_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] && [ -f "$dir/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" ] \
    || { echo "bootstrap-tools: go mod download $PROMETHEUS_OPERATOR_MODULE failed" >&2; exit 1; }
  ln -sfn "$dir/example/prometheus-operator-crd" "$TOOLS/prometheus-operator-crd"
}
prometheus_operator_crds

# Real-cluster tests and the cluster harness (docs/cluster-tests.md).
# Debian packages: etcd (etcd-server), a containerd for the kubelet (containerd, runc), the CNI
# plugins (containernetworking-plugins), iptables/ipset/conntrack for kube-proxy, and a static
# busybox for the images the harness makes, the local OCI registry (docker-registry, run by
# scripts/registry.sh); installed with apt when missing (CI runs as root
# on a fresh machine).
CLUSTER_APT_PACKAGES=(etcd-server containerd runc containernetworking-plugins iptables ipset conntrack busybox-static docker-registry)
# promtool checks and unit-tests the alerting rules the chart ships (tests/prometheus,
# docs/operations.md): Debian's `prometheus` package, bookworm's 2.42 series (checked below).
PROMETHEUS_APT_PACKAGES=(prometheus)
PROMTOOL_SERIES=2.42
# The console's browser tests (tests/integration/test_quickstart.py, docs/console.md): Debian's
# Chromium and its WebDriver, driven by selenium (pinned in constraints.txt).
BROWSER_APT_PACKAGES=(chromium chromium-driver)
cluster_apt() {
  local missing=() pkg
  for pkg in "${CLUSTER_APT_PACKAGES[@]}" "${PROMETHEUS_APT_PACKAGES[@]}" "${BROWSER_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${missing[*]} (Debian) ..." >&2
    apt-get update -qq -o DPkg::Lock::Timeout=600 >&2 \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
        --no-install-recommends "${missing[@]}" >&2 \
      || { echo "bootstrap-tools: apt-get install ${missing[*]} failed" >&2; exit 1; }
  else
    echo "bootstrap-tools: the tests need: apt-get install ${missing[*]}" >&2
    exit 1
  fi
}
cluster_apt
ln -sf /usr/bin/etcd "$BIN/etcd"
ln -sf /usr/bin/promtool "$BIN/promtool"

# Kubernetes: one multi-call binary `kube` (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy, and kubectl for chart-testing's `ct install`) built
# from the wrapper module scripts/kube
# (k8s.io/kubernetes with every staging module pinned to its v0.X.Y), cached in
# $CACHE/kube-<version>-<hash of the wrapper>; each component is a symlink named after it.
KUBE_COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
kube_components() {
  local src="$ROOT/scripts/kube" version minor hash cached tmp c
  version=$(awk '$1 == "require" {$1 = ""; $0 = $0} $1 == "k8s.io/kubernetes" {print $2; exit}' \
    "$src/go.mod")
  [ -n "$version" ] || { echo "bootstrap-tools: no k8s.io/kubernetes in $src/go.mod" >&2; exit 1; }
  minor=$(echo "$version" | cut -d. -f2)
  hash=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-16)
  cached="$CACHE/kube-$version-$hash"
  if [ ! -x "$cached" ]; then
    echo "building kube $version (${KUBE_COMPONENTS[*]}) from Go modules (cold: ~14 min CPU) ..." >&2
    tmp=$(mktemp "$CACHE/.kube.XXXXXX") # same filesystem: the mv below is atomic
    (cd "$src" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -o "$tmp" -ldflags \
      "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" .) \
      || { rm -f "$tmp"; echo "bootstrap-tools: building kube failed" >&2; exit 1; }
    mv -f "$tmp" "$cached"
  fi
  ln -sf "$cached" "$BIN/kube"
  for c in "${KUBE_COMPONENTS[@]}"; do ln -sfn "$cached" "$BIN/$c"; done
}
kube_components

# Volcano v1.12.4 (scheduler, controller-manager, admission webhook) from the source kept in
# ../shared/third_party/volcano (the Go module proxy refuses volcano.sh/*; see its SOURCES.md):
# extracted and built in $CACHE/volcano-<version>-<hash of the tarballs>; .tools/volcano is its
# source (Helm chart, CRDs, scheduler config the harness uses), .tools/bin/vc-* its binaries.
VOLCANO_VERSION=v1.12.4
volcano() {
  local shared="${ELASTICCTR_SHARED:-$ROOT/../shared}/third_party/volcano" hash cached tmp b
  local src="$shared/volcano-$VOLCANO_VERSION-src.tar.gz" apis="$shared/volcano-apis-$VOLCANO_VERSION-src.tar.gz"
  [ -f "$src" ] && [ -f "$apis" ] \
    || { echo "bootstrap-tools: $src and $apis are required (../shared)" >&2; exit 1; }
  hash=$(cat "$src" "$apis" | sha256sum | cut -c1-16)
  cached="$CACHE/volcano-$VOLCANO_VERSION-$hash"
  if [ ! -x "$cached/bin/vc-webhook-manager" ]; then
    echo "building Volcano $VOLCANO_VERSION from ../shared/third_party/volcano (cold: ~6 min CPU) ..." >&2
    tmp=$(mktemp -d "$CACHE/.volcano.XXXXXX")
    tar -xzf "$src" -C "$tmp" && tar -xzf "$apis" -C "$tmp" \
      && (cd "$tmp/volcano" && go mod edit -replace volcano.sh/apis=../apis \
        && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags "-s -w" -o "$tmp/out/" \
          ./cmd/scheduler ./cmd/controller-manager ./cmd/webhook-manager) >&2 \
      || { rm -rf "$tmp"; echo "bootstrap-tools: building Volcano failed" >&2; exit 1; }
    mkdir "$tmp/bin"
    for b in scheduler controller-manager webhook-manager; do mv "$tmp/out/$b" "$tmp/bin/vc-$b"; done
    rm -rf "$tmp/out"
    mv -T "$tmp" "$cached" 2>/dev/null || { rm -rf "$tmp"; [ -x "$cached/bin/vc-webhook-manager" ]; }
  fi
  ln -sfn "$cached/volcano" "$TOOLS/volcano"
  for b in scheduler controller-manager webhook-manager; do ln -sf "$cached/bin/vc-$b" "$BIN/vc-$b"; done
}
volcano

# Cluster add-ons from the Go module proxy: CoreDNS (the version Kubernetes 1.32 ships) and
# local-path-provisioner (the default StorageClass); the pod sandbox ("pause") binary from
# scripts/cluster/pause (cached by the hash of its source).
COREDNS_VERSION=v1.11.3
LOCAL_PATH_PROVISIONER_VERSION=v0.0.30
go_tool coredns "$COREDNS_VERSION" github.com/coredns/coredns "-s -w"
go_tool local-path-provisioner "$LOCAL_PATH_PROVISIONER_VERSION" \
  github.com/rancher/local-path-provisioner "-s -w -X main.VERSION=$LOCAL_PATH_PROVISIONER_VERSION"
pause_binary() {
  local src="$ROOT/scripts/cluster/pause" hash cached tmp
  hash=$(cat "$src/go.mod" "$src/main.go" | sha256sum | cut -c1-16)
  cached="$CACHE/elasticctr-pause-$hash"
  if [ ! -x "$cached" ]; then
    tmp=$(mktemp "$CACHE/.pause.XXXXXX")
    (cd "$src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" -o "$tmp" .) \
      || { rm -f "$tmp"; echo "bootstrap-tools: building scripts/cluster/pause failed" >&2; exit 1; }
    mv -f "$tmp" "$cached"
  fi
  ln -sf "$cached" "$BIN/elasticctr-pause"
}
pause_binary

# chart-testing (ct lint / ct install) from the source kept in ../shared/third_party/chart-testing
# (the Go module proxy refuses github.com/helm/chart-testing/v3), cached by the tarball's hash;
# its default lint configs (etc/) are linked as .tools/ct-etc.
CT_VERSION=v3.14.0
chart_testing() {
  local tarball="${ELASTICCTR_SHARED:-$ROOT/../shared}/third_party/chart-testing/chart-testing-$CT_VERSION-src.tar.gz"
  local hash cached tmp
  [ -f "$tarball" ] || { echo "bootstrap-tools: $tarball is required (../shared)" >&2; exit 1; }
  hash=$(sha256sum "$tarball" | cut -c1-16)
  cached="$CACHE/ct-$CT_VERSION-$hash"
  if [ ! -x "$cached/ct" ]; then
    echo "building chart-testing $CT_VERSION from ../shared/third_party/chart-testing ..." >&2
    tmp=$(mktemp -d "$CACHE/.ct.XXXXXX")
    tar -xzf "$tarball" -C "$tmp" \
      && (cd "$tmp/chart-testing" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags \
        "-s -w -X github.com/helm/chart-testing/v3/ct/cmd.Version=$CT_VERSION" -o "$tmp/ct" ./ct) >&2 \
      || { rm -rf "$tmp"; echo "bootstrap-tools: building chart-testing failed" >&2; exit 1; }
    mkdir "$tmp/out" && mv "$tmp/ct" "$tmp/out/ct" && mv "$tmp/chart-testing/etc" "$tmp/out/etc"
    rm -rf "$tmp/chart-testing"
    mv -T "$tmp/out" "$cached" 2>/dev/null || [ -x "$cached/ct" ]
    rm -rf "$tmp"
  fi
  ln -sf "$cached/ct" "$BIN/ct"
  ln -sfn "$cached/etc" "$TOOLS/ct-etc"
}
chart_testing


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
report seaweedfs weed version
report kube-apiserver kube-apiserver --version
report kubelet kubelet --version
report kube-proxy kube-proxy --version
report kubectl kubectl version --client
report vc-scheduler bash -c "vc-scheduler --version 2>&1 | grep -m1 'API Version'"
report coredns coredns -version
report local-path local-path-provisioner --version
report containerd containerd --version
report ct ct version
report etcd etcd --version
report prom-op-crds bash -c "test -f '$TOOLS/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml' && echo $PROMETHEUS_OPERATOR_VERSION"
report chromedriver bash -c "chromedriver --version | head -1"
report promtool bash -c "promtool --version 2>&1 | grep -m1 -E '^promtool, version ${PROMTOOL_SERIES//./\\.}\\.'"
[ "$fail" -eq 0 ] || { echo "bootstrap-tools: a tool is missing (see above)" >&2; exit 1; }
