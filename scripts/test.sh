#!/usr/bin/env bash
# Set up everything the test suite needs and run it:  bash scripts/test.sh [pytest args]
#
# Installs the project with its test extras (scripts/setup.sh --test), makes sure a Docker Engine
# is running (starting dockerd if none answers, and stopping it again at the end), builds the
# sandbox image if it is missing and the OpenEnv server image, lints and type-checks, runs pytest in .venv, then builds .venv-vllm
# (scripts/setup_vllm.sh --train) and runs the vLLM tests there. Docker and vLLM tests are required here,
# not skipped (MAS_REQUIRE_DOCKER=1, MAS_REQUIRE_VLLM=1). MAS_SKIP_VLLM=1 skips the vLLM stage.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh --test

started_dockerd=""
cleanup() {
  if [ -n "$started_dockerd" ]; then
    echo "[test] stopping the dockerd this script started (pid $started_dockerd)"
    kill "$started_dockerd" 2>/dev/null || true
    wait "$started_dockerd" 2>/dev/null || true
  fi
}
trap cleanup EXIT

if ! docker info >/dev/null 2>&1; then
  echo "[test] no Docker Engine answers; starting dockerd"
  dockerd >/tmp/mas-dockerd.log 2>&1 &
  started_dockerd=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "[test] dockerd did not start; see /tmp/mas-dockerd.log" >&2; exit 1; }
fi
bash scripts/build_sandbox_image.sh
bash scripts/build_env_server_image.sh  # the OpenEnv server image (tests/integrations/test_env_server_image.py)

export MAS_REQUIRE_DOCKER=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1

.venv/bin/python -m ruff check .
.venv/bin/python -m ruff format --check .
.venv/bin/python -m mypy envs verifiers sandboxes adapters
.venv/bin/python -m pytest --ignore=tests/vllm "$@"

if [ "${MAS_SKIP_VLLM:-0}" != 1 ]; then
  bash scripts/setup_vllm.sh --train  # --train: the 2-rank training run against a vLLM server
  MAS_REQUIRE_VLLM=1 .venv-vllm/bin/python -m pytest tests/vllm -q -p no:cacheprovider
fi
