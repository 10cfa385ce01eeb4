#!/usr/bin/env bash
# Builds the Prometheus Operator that go.mod here pins from the Go module proxy into
# $SHOAL_CACHE/prometheus-operator/<version>-<stamp>/: bin/operator, and crds/ (its CRDs, copied from the module's
# example/prometheus-operator-crd/ in the module cache), once. The stamp hashes everything that decides the output,
# as hack/kube-testbin/build.sh does.
#   build.sh        build if missing, print nothing else on a cache hit
#   build.sh --dir  print the directory the current pin maps to (no build)
# Why a module of our own: the operator's go.mod replaces its nested modules with local paths, so
# `go install github.com/prometheus-operator/prometheus-operator/cmd/operator@vX` refuses it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/../kube-testbin/goenv.sh"
module=github.com/prometheus-operator/prometheus-operator

fail() {
  echo "error: cannot build the Prometheus Operator: $*" >&2
  echo "  Its test (tests/operator/test_kube_prometheus_stack.py) skips without it. Fix the above and rerun 'make prometheus-operator'." >&2
  exit 1
}

command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH. Install Go >= 1.26 (its go.mod says go 1.26.0) and make sure 'go' is on PATH."
go_version="$(go env GOVERSION)"
case "$go_version" in
  go1.2[6-9]*|go1.[3-9][0-9]*) ;;
  *) fail "Go $go_version is too old; the Prometheus Operator's go.mod needs Go >= 1.26." ;;
esac
version="$(cd "$here" && go list -m -f '{{.Version}}' "$module")" || fail "no $module requirement in $here/go.mod"
version="${version#v}"

stamp="$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" "$here/../kube-testbin/goenv.sh" \
  <(echo "$go_version") | sha256sum | cut -c1-12)"
root="$SHOAL_CACHE/prometheus-operator/v${version}-${stamp}"
if [ "${1:-}" = "--dir" ]; then echo "$root"; exit 0; fi
if [ -f "$root/.complete" ]; then exit 0; fi

mkdir -p "$SHOAL_CACHE/prometheus-operator"
exec 9>"$SHOAL_CACHE/prometheus-operator/.lock"
flock 9
if [ -f "$root/.complete" ]; then exit 0; fi

tmp="$root.tmp"
rm -rf "$tmp"; mkdir -p "$tmp/bin" "$tmp/crds"
echo "building the Prometheus Operator v${version} with $go_version into $root (a few minutes cold on 2 cores)"
start=$SECONDS
cd "$here"
go mod download || fail "downloading modules from ${GOPROXY} failed (is the Go module proxy reachable? set GOPROXY if you use a mirror)."
go build -mod=readonly -trimpath \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=${version} -X github.com/prometheus/common/version.Branch=v${version}" \
  -o "$tmp/bin/" "$module/cmd/operator" || fail "go build failed (see above)."
source_dir="$(go list -m -f '{{.Dir}}' "$module")"
cp "$source_dir"/example/prometheus-operator-crd/*.yaml "$tmp/crds/" || fail "no CRDs in $source_dir/example/prometheus-operator-crd"
chmod -R u+w "$tmp"
touch "$tmp/.complete"
rm -rf "$root"; mv "$tmp" "$root"
echo "built in $((SECONDS - start))s: $root"
