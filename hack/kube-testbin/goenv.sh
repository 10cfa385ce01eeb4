# Sourced by the build scripts: one stable module and build cache under $SHOAL_CACHE so later builds are warm,
# the local toolchain only (nothing but the module proxy is reachable), static binaries like upstream's.
SHOAL_CACHE="${SHOAL_CACHE:-$HOME/.cache/shoal}"
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$SHOAL_CACHE/go/mod}"
export GOCACHE="${GOCACHE_OVERRIDE:-$SHOAL_CACHE/go/build}"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
export GOPROXY="${GOPROXY:-https://proxy.golang.org}"
