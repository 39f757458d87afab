# helm as the project builds it, the one place for its version and link flags (POSIX sh,
# sourced): scripts/bootstrap-tools.sh (.tools/bin/helm, which `make images` copies into the
# console image), scripts/images/build.sh (checks that copy) and images/Dockerfile's
# helm-source stage (a `docker build` from the repository root) all read this file.
# Built from its Go module with CGO_ENABLED=0, as helm's own Makefile and releases do: a
# static binary that runs on any Linux (the console image has no libc dependency on it).
HELM_VERSION=v3.19.5
HELM_PACKAGE=helm.sh/helm/v3/cmd/helm
# Like helm's Makefile, stamp the Kubernetes version of its client-go (else `helm template`
# and `helm lint` assume v1.20 and reject charts with kubeVersion >=1.25).
HELM_K8S_MINOR=34
HELM_LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR"
