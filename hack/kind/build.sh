#!/usr/bin/env bash
# Builds kind from Go modules (like hack/kube-testbin) into $SHOAL_CACHE/kind/<version>, once, and prints the
# binary's path. Only `make e2e-kind` needs it, so it is built when that runs, after the container runtime check.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
KIND_VERSION=v0.29.0
# shellcheck source=/dev/null
source "$here/../kube-testbin/goenv.sh"
bin="$SHOAL_CACHE/kind/$KIND_VERSION/kind"
if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || { echo "error: building kind needs Go on PATH (https://go.dev/dl)" >&2; exit 1; }
  echo "building kind $KIND_VERSION from Go modules into $(dirname "$bin")" >&2
  GOFLAGS= GOBIN="$(dirname "$bin")" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$KIND_VERSION" >&2 \
    || { echo "error: go install sigs.k8s.io/kind@$KIND_VERSION failed (is $GOPROXY reachable?)" >&2; exit 1; }
fi
echo "$bin"
