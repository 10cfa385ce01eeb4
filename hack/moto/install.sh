#!/usr/bin/env bash
# Installs moto's standalone S3 server (`moto[server]`, with boto3 and botocore) into a venv of its own at
# $SHOAL_CACHE/moto-venv, once; the fetcher tests (tests/fetch) start its moto_server as the S3-compatible stand-in
# and run botocore there as the SigV4 reference. It cannot share .venv: botocore pins python-dateutil<3, which
# kubernetes (the dev extra) refuses. The pins below decide the venv: a change rebuilds it.
#   install.sh            install if missing, print the path of the venv's python
#   install.sh --path     print the path the venv's python has once installed (no install)
#   install.sh --check    exit 0 when the venv is installed with the pins below, 1 when not (no install)
set -euo pipefail
PINS="moto[server]==5.2.5 boto3==1.44.8 botocore==1.44.8"
SHOAL_CACHE="${SHOAL_CACHE:-$HOME/.cache/shoal}"
venv="${MOTO_VENV:-$SHOAL_CACHE/moto-venv}"
python="$venv/bin/python"
installed() { [ -x "$python" ] && [ -x "$venv/bin/moto_server" ] && [ "$(cat "$venv/.complete" 2>/dev/null)" = "$PINS" ]; }
case "${1:-}" in
  --path) echo "$python"; exit 0 ;;
  --check) installed; exit ;;
esac
if installed; then echo "$python"; exit 0; fi

fail() {
  echo "error: cannot install moto into $venv: $*" >&2
  echo "  The fetcher tests need it and are never skipped. Fix the above and rerun 'make moto'." >&2
  exit 1
}
base="${PYTHON:-python3}"
command -v "$base" >/dev/null 2>&1 || fail "'$base' is not on PATH (set PYTHON to a Python >= 3.9)."

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9   # a person and CI installing at once would write into the same venv
if installed; then echo "$python"; exit 0; fi

# Whatever is there is a stale pin or an install cut short: start over. .complete is written last.
rm -rf "$venv"
echo "installing $PINS into $venv (about a minute and 320 MB)" >&2
"$base" -m venv "$venv" >&2 || fail "'$base -m venv $venv' failed."
# shellcheck disable=SC2086  # PINS is a list of requirements
"$venv/bin/pip" install -q --disable-pip-version-check $PINS >&2 || fail "pip install $PINS failed (is PyPI reachable?)."
"$python" -c "import moto.server, botocore.auth, boto3" >&2 || fail "'import moto.server, botocore.auth, boto3' fails in $venv."
[ -x "$venv/bin/moto_server" ] || fail "$venv/bin/moto_server is missing."
printf '%s' "$PINS" > "$venv/.complete"
echo "$python"
