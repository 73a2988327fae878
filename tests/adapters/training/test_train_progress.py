"""Long work shows progress (issue 39, item 3): ``--steps 0`` evaluates once and says so; the
training bar moves per generation wave, by the rollout's share of agent steps times the share of
a step the rollout took, and its ETA survives a resume; the training curve leads with the task
measures and keeps equal series apart. Tiny char-level model from conftest."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from adapters.evaluation import evaluate
from adapters.policies.oracle import OraclePolicy
from adapters.rollout import RolloutProgress
from adapters.training.metrics import MetricsLogger, curve_figure, read_jsonl
from adapters.training.trainer import Trainer

from ..conftest import TINY_PLAN_PATH, char_models
from ..conftest import tiny_train_config as cfg


def test_steps_zero_evaluates_once_and_says_it_trained_nothing(tmp_path):
    lines: list[str] = []
    tr = Trainer(cfg(tmp_path, steps=0, eval_episodes=2), models=char_models(), log=lines.append)
    assert tr.train() == []
    tr.close()
    out = tmp_path / "run"
    assert any(x.startswith("--steps 0: nothing was trained") for x in lines)
    assert json.loads((out / "eval_before.json").read_text())["episodes"] == 2
    assert not (out / "eval_after.json").exists() and not (out / "checkpoints").exists()
    assert (out / "episodes.html").stat().st_size > 1000  # the viewer of that evaluation


def test_training_bar_moves_per_wave_and_its_eta_survives_resume(tmp_path):
    tr = Trainer(cfg(tmp_path, steps=2), models=char_models(), log=lambda _s: None)
    tr.train()
    tr.close()
    out = tmp_path / "run"
    quiet = Trainer.resume(out, models=char_models(), steps=3)  # progress off: no bar, no clock
    quiet.train()
    quiet.close()
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3]
    tr = Trainer.resume(out, models=char_models(), steps=4, progress=True)
    spent = sum(r["time/step"] for r in read_jsonl(out / "metrics.jsonl"))
    try:
        bar, step_done = tr._step_bar(4)
        d = bar.format_dict
        assert d["n"] == 3 and d["total"] == 4
        assert spent <= d["elapsed"] < spent + 5  # the earlier steps' time counts
        eta = bar.format_meter(**d).split("<")[1].split("]")[0]
        assert "?" not in eta  # an ETA at once, before any new step
        seen: list[tuple[int, int, float]] = []
        hook = tr._on_progress
        assert hook is not None

        def on_progress(p):
            hook(p)
            seen.append((p.wave, p.live, bar.n))

        tr._on_progress = on_progress
        tr.rollout(4)
        assert [w for w, _live, _n in seen] == list(range(len(seen))) and len(seen) >= 3
        assert seen[-1][1] == 0  # no branch live after the last wave
        assert 3 < seen[1][2] < seen[-1][2] < 4  # moved after the first wave, short of the end
        tr.step = 4
        step_done({"time/step": 2.0, "time/generation": 1.0, "time/env": 0.5})
        assert bar.n == 4
        # the next step's rollout moves the bar by its share of the step as measured: 3/4
        hook(RolloutProgress(wave=3, live=0, episodes=2, steps=6, steps_left=0, tokens=0))
        assert bar.n == pytest.approx(4.75)
        bar.close()
    finally:
        tr.close()


def test_eval_line_and_curve_lead_with_the_task_measures(tmp_path):
    rep = evaluate("plan_path", OraclePolicy(), episodes=3, env_config=TINY_PLAN_PATH, seed=1)
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log_eval(0, "before", rep)
    logger.log_eval(4, "after", rep)
    (line, _) = read_jsonl(tmp_path / "eval.jsonl")
    assert line["progress_label"] == "distance closed" and line["success_rate"] == 1.0
    for key in ("success_rate", "progress", "team_reward", "reward"):
        assert line[f"{key}_low"] <= line[key] <= line[f"{key}_high"], key
    rows = [
        {"step": s, "success_rate": 0.0, "team_reward": 0.0, "reward/tool": 0.1}
        for s in (1, 2, 3, 4)
    ]
    fig = curve_figure(rows, read_jsonl(tmp_path / "eval.jsonl"))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].startswith("validation: task measures")
    assert titles[1].startswith("validation: shaped reward")
    task = fig.axes[0]
    assert task.get_legend_handles_labels()[1] == ["success_rate", "distance closed", "team_reward"]
    lines = [c.lines[0] for c in task.containers]  # equal values (all 1.0), drawn apart
    xs = [tuple(float(x) for x in line.get_xdata()) for line in lines]
    assert len(set(xs)) == 3 and len({line.get_marker() for line in lines}) == 3
    episodes = fig.axes[2]  # success = team reward = 0: both visible, in two styles
    styles = {(line.get_marker(), line.get_linestyle()) for line in episodes.lines}
    assert len(styles) == 2
    for ax in fig.axes:
        assert all(float(t).is_integer() for t in ax.get_xticks())
