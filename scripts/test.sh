#!/usr/bin/env bash
# Set up everything the test suite needs and run it:
#
#   bash scripts/test.sh                  what CI runs (.ci/run): every stage below
#   bash scripts/test.sh --quick [ARGS]   the loop before a commit (under 5 minutes on 2 cores; no
#                                         set-up, root, Docker, images or vLLM): ruff, mypy and the
#                                         fast tests of tests/{envs,verifiers,data,sandboxes}, the
#                                         layering checks and the doctests, except those marked
#                                         docker or serial, on every core, stopping at the first
#                                         failure; ARGS go to pytest (e.g. -k NAME, --lf)
#   bash scripts/test.sh ARGS...          the full set-up, then pytest once with ARGS, no passes
#
# The full run, stage by stage (the table of their times is printed at the end, also when one
# fails):
#   system packages   scripts/setup.sh --test --system (apt: bubblewrap, Docker Engine,
#                     debootstrap, Chromium)
#   Docker Engine     dockerd is started if none answers (and stopped again at the end); from here
#                     the sandbox image (if missing) and the OpenEnv server image build in the
#                     background
#   set-up            scripts/setup.sh --test: .venv with the test extras; from here .venv-vllm
#                     (scripts/setup_vllm.sh --train) builds in the background, niced, so that it
#                     only takes the CPU the stages before the serial tests leave idle
#   lint              ruff, mypy; then the image builds are waited for
#   fast tests        pytest -m "not slow and not serial" on every core (pytest-xdist: -n,
#                     --dist worksteal; MAS_TEST_WORKERS workers, default the cores, at most 8);
#                     then .venv-vllm is waited for
#   serial tests      pytest -m "serial and not slow", with nothing else running: tests that
#                     measure this process's CPU time or memory, or wall-clock bounds that another
#                     test beside them would break (tests/conftest.py)
#   slow tests        pytest -m slow (model-based or long) on every core, longest first
#   vLLM tests        tests/vllm in .venv-vllm (MAS_SKIP_VLLM=1 skips the build and the stage)
# Docker, browser and vLLM tests are required here, not skipped (MAS_REQUIRE_DOCKER=1,
# MAS_REQUIRE_BROWSER=1, MAS_REQUIRE_VLLM=1). Background work logs to ${TMPDIR:-/tmp}/mas-test.*,
# shown if it fails. Each pytest pass lists its slowest tests (--durations), so the next cut of CI
# time starts from a measurement: a cold CI run must stay under 30 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0
if [ "${1:-}" = --quick ]; then
  QUICK=1
  shift
fi
WORKERS=${MAS_TEST_WORKERS:-$(n=$(nproc 2>/dev/null || echo 2); echo $((n < 8 ? n : 8)))}
XDIST=(-n "$WORKERS" --dist worksteal)

LOGS="$(mktemp -d "${TMPDIR:-/tmp}/mas-test.XXXXXX")"
stage_report=()
stage_name=""
stage_start=0
started_dockerd=""
declare -A bg_pid=()

begin() { stage_name="$1"; stage_start=$SECONDS; echo "[test] == $1"; }
end() { stage_report+=("$(printf '%-48s %6d s' "$stage_name" $((SECONDS - stage_start)))"); stage_name=""; }

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
    stage_report+=("$(printf '%-48s %6s s (failed)' "$label, in the background" "$(cat "$LOGS/$name.time" 2>/dev/null || echo '?')")")
    return 1
  fi
  end
  stage_report+=("$(printf '%-48s %6d s' "$label, in the background" "$(cat "$LOGS/$name.time")")")
}

finish() {
  local rc=$?
  if [ -n "$stage_name" ]; then
    stage_report+=("$(printf '%-48s %6d s (failed or interrupted)' "$stage_name" $((SECONDS - stage_start)))")
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
  echo "[test]   $(printf '%-48s %6d s' total "$SECONDS")"
  exit $rc
}
trap finish EXIT

export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1

lint() {
  begin "lint (ruff, mypy)"
  .venv/bin/python -m ruff check .
  .venv/bin/python -m ruff format --check .
  .venv/bin/python -m mypy envs verifiers sandboxes adapters
  end
}

if [ "$QUICK" = 1 ]; then
  if ! .venv/bin/python -c 'import xdist' 2>/dev/null; then
    echo "[test] --quick needs .venv with the dev extra: run 'bash scripts/setup.sh --test' first" >&2
    exit 1
  fi
  lint
  begin "quick tests, $WORKERS workers"
  .venv/bin/python -m pytest "${XDIST[@]}" -x -q -m "not slow and not docker and not serial" \
    tests/envs tests/verifiers tests/data tests/sandboxes tests/test_layering.py \
    envs verifiers sandboxes adapters --durations=10 "$@"
  end
  exit 0
fi

begin "system packages (setup.sh --test --system)"
bash scripts/setup.sh --test --system
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

# the sandbox image, then the OpenEnv server image on its base (tests/integrations/test_env_server_image.py):
# they need Docker and debootstrap only, so they build while the .venv installs
build_images() { bash scripts/build_sandbox_image.sh && bash scripts/build_env_server_image.sh; }
in_background images "image builds" build_images

begin "set-up (setup.sh --test)"
bash scripts/setup.sh --test
end

if [ "${MAS_SKIP_VLLM:-0}" != 1 ]; then
  # --train: the 2-rank training run against a vLLM server. It needs .venv and the network, so it
  # starts now, niced: it takes the CPU that lint and the fast tests leave idle.
  in_background vllm_venv ".venv-vllm build" nice -n 10 bash scripts/setup_vllm.sh --train
fi

export MAS_REQUIRE_DOCKER=1 MAS_REQUIRE_BROWSER=1

lint
await images

if [ $# -gt 0 ]; then
  if [ "${MAS_SKIP_VLLM:-0}" != 1 ]; then await vllm_venv; fi
  begin "tests (pytest $*)"
  .venv/bin/python -m pytest --ignore=tests/vllm "$@"
  end
else
  begin "fast tests, $WORKERS workers (-m 'not slow and not serial')"
  .venv/bin/python -m pytest --ignore=tests/vllm "${XDIST[@]}" -m "not slow and not serial" --durations=20
  end
  # nothing else runs during the serial tests
  if [ "${MAS_SKIP_VLLM:-0}" != 1 ]; then await vllm_venv; fi
  begin "serial tests (-m 'serial and not slow')"
  .venv/bin/python -m pytest tests --ignore=tests/vllm -m "serial and not slow" --durations=10
  end
  begin "slow tests, $WORKERS workers (-m slow)"
  .venv/bin/python -m pytest --ignore=tests/vllm "${XDIST[@]}" -m slow --durations=10
  end
fi

if [ "${MAS_SKIP_VLLM:-0}" != 1 ]; then
  begin "vLLM tests"
  MAS_REQUIRE_VLLM=1 .venv-vllm/bin/python -m pytest tests/vllm -q -p no:cacheprovider
  end
fi
