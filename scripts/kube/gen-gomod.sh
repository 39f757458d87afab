#!/usr/bin/env bash
# Regenerate go.mod/go.sum of this wrapper module for another Kubernetes release:
#   scripts/kube/gen-gomod.sh v1.32.13
# k8s.io/kubernetes replaces its k8s.io/* staging modules with ./staging/src paths that a
# module download lacks; pin each of them to the published v0.<minor>.<patch> instead.
set -euo pipefail
cd "$(dirname "$0")"
version=${1:?usage: gen-gomod.sh vX.Y.Z}
staging="v0.${version#v1.}"
gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
{
  echo '// Wrapper module that builds the multi-call kube binary from the Go module proxy (docs/cluster-tests.md).'
  echo '// k8s.io/kubernetes replaces its k8s.io/* staging modules with ./staging paths that a module'
  echo "// download lacks, so this module pins each of them to its published $staging instead."
  echo '// Regenerate the replace block with scripts/kube/gen-gomod.sh when changing the version.'
  echo 'module elasticctr.dev/kube'
  echo
  echo 'go 1.23.0'
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  echo 'replace ('
  # k8s.io/endpointslice v0.32.13 is not served by the module proxy here: v0.32.12 is.
  grep -E '=> \./staging' "$gomod" | awk -v v="$staging" '{
    ver = v; if ($1 == "k8s.io/endpointslice" && v == "v0.32.13") ver = "v0.32.12"
    print "\t" $1 " => " $1 " " ver}'
  echo ')'
} > go.mod
rm -f go.sum
GOFLAGS=-mod=mod go mod tidy
