#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` from the llama-cpp-python sdist on PyPI (which vendors llama.cpp) into
# $SHOAL_CACHE/llama-server/<version>/bin, once; the engine benchmarks compare Shoal against it on the same GGUF.
# -DGGML_NATIVE=ON tunes it for this CPU (AVX2 / AVX-512 / AMX as present), as a user building it here would.
#   build.sh            build if missing, print the path of llama-server
#   build.sh --path     print the path llama-server has once built (no build)
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
SHOAL_CACHE="${SHOAL_CACHE:-$HOME/.cache/shoal}"
root="$SHOAL_CACHE/llama-server/$VERSION"
binary="$root/bin/llama-server"
if [ "${1:-}" = "--path" ]; then echo "$binary"; exit 0; fi
if [ -x "$binary" ] && [ -f "$root/.complete" ]; then echo "$binary"; exit 0; fi

fail() { echo "error: cannot build llama-server: $*" >&2; exit 1; }
for tool in cmake ninja c++; do
  command -v "$tool" >/dev/null 2>&1 || fail "'$tool' is not on PATH (Debian: apt-get install cmake ninja-build g++)."
done
pip="${PIP:-pip}"
command -v "$pip" >/dev/null 2>&1 || pip="$(dirname "$0")/../../.venv/bin/pip"

mkdir -p "$SHOAL_CACHE/llama-server"
exec 9>"$SHOAL_CACHE/llama-server/.lock"
flock 9
if [ -x "$binary" ] && [ -f "$root/.complete" ]; then echo "$binary"; exit 0; fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$pip" download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$VERSION" \
  || fail "downloading the llama-cpp-python==$VERSION sdist from PyPI failed."
tar -xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"
[ -f "$src/CMakeLists.txt" ] || fail "the sdist has no vendor/llama.cpp."
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >&2
ninja -C "$work/build" -j "${JOBS:-2}" llama-server >&2
mkdir -p "$root/bin"
cp "$work/build/bin/llama-server" "$binary"
touch "$root/.complete"
echo "$binary"
