"""The run header's rough estimate of the wall time (issue 49, item 4): the forward passes are
timed on the run's own models in well under two seconds without changing what the run samples,
the run's shape counts what is left to do, and the line says what it assumed. Tiny char-level
model from conftest."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

import torch

from adapters.training import estimate as est
from adapters.training.trainer import Trainer

from ..conftest import char_models
from ..conftest import tiny_train_config as cfg

SHAPE = est.RunShape(
    episode_steps=8,
    short_steps=2,
    prompt_tokens=500,
    new_tokens=100,
    train_new_tokens=100,
    eval_episodes=64,
    evaluations=2,
    steps=6,
    rows=16,
    batch=16,
)
TIMING = est.Timing(prefill_s=0.001, step_s={64: 0.2, 16: 0.05}, update_s=0.001)


def test_the_estimate_grows_with_what_the_run_does():
    base = est.estimate(SHAPE, TIMING)
    low, high = base.total_s
    assert low < high and base.step_s[0] < base.step_s[1]
    assert low == pytest.approx(2 * base.evaluation_s + 6 * base.step_s[0])
    for change in (
        {"steps": 12},
        {"evaluations": 3},
        {"new_tokens": 200},
        {"prompt_tokens": 1000},
        {"episode_steps": 16},
        {"rows": 32},
    ):
        more = est.estimate(dataclasses.replace(SHAPE, **change), TIMING)
        assert more.total_s[1] > high, change
    no_eval = est.estimate(dataclasses.replace(SHAPE, eval_episodes=0), TIMING)
    assert no_eval.total_s == (6 * base.step_s[0], 6 * base.step_s[1])
    # rows decoded gen_batch_size at a time: twice the rows, twice the decode steps
    halves = est.estimate(dataclasses.replace(SHAPE, rows=32, batch=16), TIMING)
    assert halves.step_s[1] == pytest.approx(2 * base.step_s[1])


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    tr = Trainer(
        cfg(tmp_path_factory.mktemp("estimate"), steps=5, eval_episodes=3, eval_every=2),
        models=char_models(),
        log=lambda _s: None,
    )
    yield tr
    tr.close()


def test_the_run_shape_counts_what_is_left(trainer):
    shape = est.run_shape(trainer)
    assert shape.episode_steps == 2 * 2  # TINY_PLAN_PATH: 2 turns of tool + planner
    assert 1 <= shape.short_steps <= shape.episode_steps
    assert (shape.rows, shape.new_tokens, shape.train_new_tokens) == (2 * 2, 6, 6)
    assert (shape.steps, shape.eval_episodes) == (5, 3)
    assert shape.evaluations == 1 + 2 + 1  # before, after steps 2 and 4, after the last
    trainer.step = 2  # a resumed run: steps 3..5 left, the evaluation before was made
    (trainer.run.out / "eval_before.json").write_text("{}")
    try:
        assert est.run_shape(trainer).evaluations == 1 + 1  # after step 4, after the last
        assert est.run_shape(trainer).steps == 3
    finally:
        trainer.step = 0
        (trainer.run.out / "eval_before.json").unlink()


def test_timing_is_quick_and_leaves_the_random_state_alone(trainer):
    model = est.generating_model(trainer.run)
    training = next(iter(trainer.run.models.values())).model
    cpu_state = torch.random.get_rng_state()
    before = [p.detach().clone() for p in model.parameters()]
    t0 = time.perf_counter()
    timing = est.time_model(model, training, 40, {3, 4})
    assert time.perf_counter() - t0 < 2.0
    assert set(timing.step_s) == {3, 4} and all(v > 0 for v in timing.step_s.values())
    assert timing.prefill_s > 0 and timing.update_s > 0
    assert torch.equal(torch.random.get_rng_state(), cpu_state)
    assert all(torch.equal(p, q) for p, q in zip(before, model.parameters()))


def test_the_header_line_says_what_it_assumed(trainer):
    line = est.estimate_line(trainer)
    assert line is not None
    assert line.startswith("expected wall time (rough estimate): ~")
    assert "3 evaluations" not in line and "4 evaluations x" in line
    assert "5 training steps x" in line and "every sample trained" in line
    assert "as short as the oracle's" in line


def test_no_estimate_where_generation_runs_elsewhere(trainer, monkeypatch):
    compute = dataclasses.replace(trainer.run.cfg.compute, backend="vllm")
    vllm_cfg = dataclasses.replace(trainer.run.cfg, compute=compute)
    monkeypatch.setattr(trainer.run, "cfg", vllm_cfg)
    assert est.generating_model(trainer.run) is None
    assert est.estimate_line(trainer) is None


def test_a_run_with_the_estimate_samples_what_it_samples_without(tmp_path):
    """The header's measurement runs between loading and training: the run's samples, rewards
    and updates are those of the same run without it."""
    runs = []
    for name, measure in (("plain", False), ("measured", True)):
        tr = Trainer(cfg(tmp_path, name, steps=1), models=char_models(), log=lambda _s: None)
        try:
            if measure:
                assert est.estimate_line(tr) is not None
            tr.train()
        finally:
            tr.close()
        lines = (tmp_path / name / "trajectories.jsonl").read_text().splitlines()
        runs.append([json.loads(x) for x in lines])
    assert runs[0] == runs[1] and runs[0]
