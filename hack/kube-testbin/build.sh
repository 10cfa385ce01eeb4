#!/usr/bin/env bash
# Builds the Kubernetes test binaries (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, helm, kwok)
# from the Go module proxy into $SHOAL_CACHE/kube-testbin/<stamp>/bin, once: the stamp hashes everything that
# decides the output, so a pin change rebuilds and an unchanged tree reuses the cache.
#   build.sh            build if missing, print nothing else on a cache hit
#   build.sh --bin-dir  print the bin dir the current pins map to (no build)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/versions.env"
source "$here/goenv.sh"

fail() {
  echo "error: cannot build the Kubernetes test binaries: $*" >&2
  echo "  The kube tests need them and are never skipped. Fix the above and rerun 'make kube-testbin'." >&2
  exit 1
}

command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH. Install Go >= 1.24 (https://go.dev/dl, or Debian's golang-go when it is new enough) and make sure 'go' is on PATH."
go_version="$(go env GOVERSION)"
case "$go_version" in
  go1.2[4-9]*|go1.[3-9][0-9]*) ;;
  *) fail "Go $go_version is too old; k8s.io/kubernetes ${KUBE_VERSION} needs Go >= 1.24." ;;
esac

stamp="$(cat "$here/versions.env" "$here/go.mod" "$here/go.sum" "$here/build.sh" "$here/goenv.sh" \
  <(echo "$go_version") | sha256sum | cut -c1-12)"
root="$SHOAL_CACHE/kube-testbin/${KUBE_VERSION}-${stamp}"
if [ "${1:-}" = "--bin-dir" ]; then echo "$root/bin"; exit 0; fi
if [ -f "$root/bin/.complete" ]; then exit 0; fi

mkdir -p "$SHOAL_CACHE/kube-testbin"
exec 9>"$SHOAL_CACHE/kube-testbin/.lock"
flock 9   # two builds at once (a person and CI) would only fight over 2 cores
if [ -f "$root/bin/.complete" ]; then exit 0; fi

minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
# The module zip carries no git commit; the proxy's .info gives the release time, which /version reports as buildDate.
release_info="$(cd "$here" && go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"Info": "\(.*\)".*/\1/p')" \
  || fail "downloading k8s.io/kubernetes ${KUBE_VERSION} from ${GOPROXY} failed (is the Go module proxy reachable? set GOPROXY if you use a mirror)."
build_date="$(sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' "$release_info" 2>/dev/null || true)"
ldflags=(
  -s -w
  -X "k8s.io/component-base/version.gitVersion=${KUBE_VERSION}"
  -X "k8s.io/component-base/version.gitMajor=1"
  -X "k8s.io/component-base/version.gitMinor=${minor}"
  -X "k8s.io/component-base/version.gitTreeState=clean"
  -X "k8s.io/component-base/version.gitCommit="
  -X "k8s.io/component-base/version.buildDate=${build_date:-1970-01-01T00:00:00Z}"
  -X "k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION}"
  -X "k8s.io/client-go/pkg/version.gitMajor=1"
  -X "k8s.io/client-go/pkg/version.gitMinor=${minor}"
  -X "helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  -X "helm.sh/helm/v3/internal/version.gitTreeState=clean"
  -X "helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1"
  -X "helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${minor}"
  -X "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1"
  -X "helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${minor}"
)
packages=(
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
  go.etcd.io/etcd/server/v3
  helm.sh/helm/v3/cmd/helm
)

tmp="$root/bin.tmp"
rm -rf "$tmp"; mkdir -p "$tmp"
echo "building Kubernetes ${KUBE_VERSION} test binaries, helm ${HELM_VERSION}, kwok ${KWOK_VERSION} with $go_version into $root/bin"
echo "(a cold build takes about 20 minutes on 2 cores; module and build caches live under $SHOAL_CACHE/go)"
start=$SECONDS
cd "$here"
go mod download || fail "downloading modules from ${GOPROXY} failed (is the Go module proxy reachable? set GOPROXY if you use a mirror)."
go build -mod=readonly -trimpath -ldflags "${ldflags[*]}" -o "$tmp/" "${packages[@]}" || fail "go build failed (see above)."
mv "$tmp/server" "$tmp/etcd"
# kwok pins older k8s.io modules than the release above and does not compile against them: build it from its own
# go.mod (checksums verified through the proxy's checksum database).
GOFLAGS= GOBIN="$tmp" go install -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBE_VERSION}" \
  "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" || fail "go install of kwok ${KWOK_VERSION} failed (see above)."
for b in kube-apiserver kube-controller-manager kube-scheduler etcd helm kwok; do
  [ -x "$tmp/$b" ] || fail "$b was not produced"
done
touch "$tmp/.complete"
rm -rf "$root/bin"; mv "$tmp" "$root/bin"
echo "built in $((SECONDS - start))s: $root/bin"
