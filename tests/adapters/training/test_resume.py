"""Exact resume after SIGKILL (slow): ``python -m adapters.train`` killed mid-run, then resumed.

Two runs of the CLI with the same YAML config (embedded SmolLM2 with LoRA on a Plan-Path
corridor where rewards vary, so every step changes the weights and the optimizer state; CPU,
fixed seed): one uninterrupted, one killed with SIGKILL as soon as its first step is logged (so
during step 2 or while step 1's checkpoint is being written), then continued with
``--resume DIR``. The metrics (timings aside), the trajectory log and the final evaluation must
be identical: no trajectory line lost or duplicated.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
CORRIDOR = {"grid": ["..."], "start": [0, 0], "goal": [0, 2]}


def write_config(path: Path) -> Path:
    """A YAML run config: SmolLM2 on the 1x3 corridor with one worked example (see
    test_trainer_learning.py), so that rewards vary and every step really updates the adapter."""
    import yaml

    import envs

    example = envs.make("plan_path", mode="single", max_turns=1).unwrapped
    example.reset(
        seed=0, options={"instance": {"grid": [".", ".", "."], "start": [0, 0], "goal": [2, 0]}}
    )
    cfg = {
        "env": "plan_path",
        # the setting's default map size and a cold start made on it, not the CPU run's shipped
        # one and 14 x 14 maps: the seed below was measured with these
        "env_config": {"mode": "single", "max_turns": 1, "height": 10, "width": 10},
        "init": "cold-start:tool,planner=8",
        "instance": CORRIDOR,
        "prompt_prefix": [
            {"role": "user", "content": example.observe("planner")["prompt"]},
            {"role": "assistant", "content": "#### [D,D]"},
        ],
        "demos": 0,
        "model": "smollm2",
        "candidates": 4,
        "instances_per_step": 1,
        "steps": 3,
        "temperature": 1.0,  # with seed 4: rewards differ within the group at every step
        "max_new_tokens": 12,
        "lr": 1e-3,
        "ppo_minibatches": 1,  # as measured for seed 4 (the CPU recipe makes 4)
        "eval_episodes": 1,
        "device": "cpu",
        "seed": 4,  # seed 3: equal rewards at step 1 since 2026-12 (cause not found)
        "progress": False,
        "plot_every": 0,
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    return env


def _train(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "adapters.train", *args],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _comparable(path: Path) -> list[dict]:
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    return [
        {k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))} for r in rows
    ]


def test_sigkill_then_resume_reproduces_the_uninterrupted_run(tmp_path):
    try:
        from adapters.policies.models import embedded_gguf_path

        embedded_gguf_path()
    except ImportError as exc:  # pragma: no cover
        pytest.skip(f"embedded model not installed: {exc}")
    full, killed = tmp_path / "full", tmp_path / "killed"
    config = str(write_config(tmp_path / "run.yaml"))
    ref = _train("--config", config, "--output-dir", str(full))
    victim = _train("--config", config, "--output-dir", str(killed))
    deadline = time.time() + 300
    metrics = killed / "metrics.jsonl"
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 1:
            break
        if victim.poll() is not None:
            pytest.fail("the run ended before it could be killed:\n" + victim.stdout.read())
        time.sleep(0.05)
    else:
        pytest.fail("the run did not reach step 1 in time")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    out_ref, _ = ref.communicate(timeout=600)
    assert ref.returncode == 0, out_ref
    lines_at_kill = len(metrics.read_text().splitlines())
    assert lines_at_kill < 3  # killed mid-run

    resumed = _train("--resume", str(killed))
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert "resuming" in out

    rows = _comparable(full / "metrics.jsonl")
    assert _comparable(killed / "metrics.jsonl") == rows
    assert [r["step"] for r in rows] == [1, 2, 3]
    # the weights really change: before the kill (so the checkpoint holds trained LoRA weights and
    # Adam moments) and after the resume
    assert rows[0]["optimizer_steps"] >= 1 and rows[1]["optimizer_steps"] >= 1
    t_full = (full / "trajectories.jsonl").read_text().splitlines()
    t_killed = (killed / "trajectories.jsonl").read_text().splitlines()
    assert t_killed == t_full  # nothing lost, nothing duplicated
    steps = [json.loads(x)["train_step"] for x in t_killed]
    assert steps == sorted(steps) and set(steps) == {1, 2, 3}
    after_full = json.loads((full / "eval_after.json").read_text())
    after_killed = json.loads((killed / "eval_after.json").read_text())
    for key in ("success_rate", "team_reward", "reward_per_agent", "per_episode"):
        assert after_full[key] == after_killed[key]
