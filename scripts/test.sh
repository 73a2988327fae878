#!/usr/bin/env bash
# Set up everything the test suite needs and run it:  bash scripts/test.sh [pytest args]
#
# Installs the project with its test extras (scripts/setup.sh --test), makes sure a Docker Engine
# is running (starting dockerd if none answers, and stopping it again at the end), builds the
# sandbox image if it is missing and the OpenEnv server image, lints and type-checks, runs pytest in
# .venv (the fast tests, then those marked slow), then builds .venv-vllm (scripts/setup_vllm.sh
# --train) and runs the vLLM tests there. Docker, browser and vLLM tests are required here, not
# skipped (MAS_REQUIRE_DOCKER=1, MAS_REQUIRE_BROWSER=1, MAS_REQUIRE_VLLM=1). MAS_SKIP_VLLM=1
# skips the vLLM stage. With pytest arguments, pytest runs once with them instead of twice.
#
# Work that waits on the network or the Docker daemon overlaps with work that needs the CPU: the
# images are built while ruff and mypy run, and .venv-vllm is built while the main tests run
# (their output goes to logs under ${TMPDIR:-/tmp}, shown if they fail). The time of every stage
# is printed at the end, also when a stage fails, and each pytest stage lists its slowest tests
# (--durations), so the next cut of CI time starts from a measurement.
set -euo pipefail
cd "$(dirname "$0")/.."

LOGS="$(mktemp -d "${TMPDIR:-/tmp}/mas-test.XXXXXX")"
stage_report=()
stage_name=""
stage_start=0
started_dockerd=""
declare -A bg_pid=()

begin() { stage_name="$1"; stage_start=$SECONDS; echo "[test] == $1"; }
end() { stage_report+=("$(printf '%-40s %6d s' "$stage_name" $((SECONDS - stage_start)))"); stage_name=""; }

# background work: its own log, its time written to "$LOGS/NAME.time" when it finishes
declare -A bg_label=()
in_background() {
  local name="$1"; bg_label[$name]="$2"; shift 2
  ( t0=$SECONDS; rc=0; "$@" > "$LOGS/$name.log" 2>&1 || rc=$?; echo $((SECONDS - t0)) > "$LOGS/$name.time"; exit $rc ) &
  bg_pid[$name]=$!
  echo "[test] started in the background: ${bg_label[$name]} (log: $LOGS/$name.log)"
}
await() {
  local name="$1"
  local label="${bg_label[$name]}"
  begin "waiting for the $label"
  local pid="${bg_pid[$name]}"
  unset "bg_pid[$name]"
  if ! wait "$pid"; then
    tail -n 40 "$LOGS/$name.log" >&2
    echo "[test] the $label failed (full log: $LOGS/$name.log)" >&2
    stage_report+=("$(printf '%-40s %6s s (failed)' "$label, in the background" "$(cat "$LOGS/$name.time" 2>/dev/null || echo '?')")")
    return 1
  fi
  end
  stage_report+=("$(printf '%-40s %6d s' "$label, in the background" "$(cat "$LOGS/$name.time")")")
}

finish() {
  local rc=$?
  if [ -n "$stage_name" ]; then
    stage_report+=("$(printf '%-40s %6d s (failed or interrupted)' "$stage_name" $((SECONDS - stage_start)))")
  fi
  for pid in "${bg_pid[@]}"; do  # unfinished background work: its children, then itself
    pkill -TERM -P "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
  if [ -n "$started_dockerd" ]; then
    echo "[test] stopping the dockerd this script started (pid $started_dockerd)"
    kill "$started_dockerd" 2>/dev/null || true
    wait "$started_dockerd" 2>/dev/null || true
  fi
  echo "[test] time per stage:"
  for line in "${stage_report[@]}"; do echo "[test]   $line"; done
  echo "[test]   $(printf '%-40s %6d s' total "$SECONDS")"
  exit $rc
}
trap finish EXIT

begin "set-up (setup.sh --test)"
bash scripts/setup.sh --test
end

begin "Docker Engine"
if ! docker info >/dev/null 2>&1; then
  echo "[test] no Docker Engine answers; starting dockerd"
  dockerd >/tmp/mas-dockerd.log 2>&1 &
  started_dockerd=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "[test] dockerd did not start; see /tmp/mas-dockerd.log" >&2; exit 1; }
fi
end

# the sandbox image, then the OpenEnv server image on its base (tests/integrations/test_env_server_image.py)
build_images() { bash scripts/build_sandbox_image.sh && bash scripts/build_env_server_image.sh; }
in_background images "image builds" build_images

export MAS_REQUIRE_DOCKER=1 MAS_REQUIRE_BROWSER=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1

begin "lint (ruff, mypy)"
.venv/bin/python -m ruff check .
.venv/bin/python -m ruff format --check .
.venv/bin/python -m mypy envs verifiers sandboxes adapters
end

await images

if [ "${MAS_SKIP_VLLM:-0}" != 1 ]; then
  # --train: the 2-rank training run against a vLLM server
  in_background vllm_venv ".venv-vllm build" bash scripts/setup_vllm.sh --train
fi

if [ $# -gt 0 ]; then
  begin "tests (pytest $*)"
  .venv/bin/python -m pytest --ignore=tests/vllm "$@"
  end
else
  begin "fast tests (pytest -m 'not slow')"
  .venv/bin/python -m pytest --ignore=tests/vllm -m "not slow" --durations=20
  end
  begin "slow tests (pytest -m slow)"
  .venv/bin/python -m pytest --ignore=tests/vllm -m slow --durations=10
  end
fi

if [ "${MAS_SKIP_VLLM:-0}" != 1 ]; then
  await vllm_venv
  begin "vLLM tests"
  MAS_REQUIRE_VLLM=1 .venv-vllm/bin/python -m pytest tests/vllm -q -p no:cacheprovider
  end
fi
