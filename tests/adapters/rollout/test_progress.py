"""Progress that moves (issue 49, item 4): the rollout engine reports agent steps after every
generation wave (``on_progress``), so a bar moves and has an ETA long before the first episode
finishes; its estimate of the steps left (each episode's step budget) is an upper bound that
tightens as episodes end early. Scripted policies, no model."""

from __future__ import annotations

import io

import pytest

import envs
from adapters.evaluation import evaluate
from adapters.policies import OraclePolicy, ScriptedPolicy
from adapters.policies.base import Completion, Policy
from adapters.rollout import (
    EpisodeSpec,
    RolloutConfig,
    RolloutEngine,
    RolloutProgress,
    follow_share,
    follow_steps,
)

GRID = {"height": 4, "width": 4, "min_distance": 3, "wall_density": 0.2, "max_turns": 3}


def _run(policy, episodes: int = 3, config=None, **rollout):
    """Roll out ``episodes`` Plan-Path episodes; the events in order: ``("progress", p)`` and
    ``("episode", e)``."""
    events: list[tuple[str, object]] = []
    cfg = dict(GRID) if config is None else config
    engine = RolloutEngine(
        "plan_path",
        policy,
        RolloutConfig(**{"candidates": 1, "sampling": "parallel", **rollout}),
        env_config=cfg,
    )
    specs = [EpisodeSpec("plan_path", seed=i, config=cfg) for i in range(episodes)]
    try:
        engine.run(
            specs,
            on_progress=lambda p: events.append(("progress", p)),
            on_episode=lambda e: events.append(("episode", e)),
        )
    finally:
        engine.close()
    return events


def _progress(events) -> list[RolloutProgress]:
    return [p for kind, p in events if kind == "progress"]  # type: ignore[misc]


def test_step_budget_is_turns_times_agents_and_bounds_the_episode():
    env = envs.make("plan_path", **GRID)
    assert env.unwrapped.step_budget() == 3 * 2
    assert envs.make("plan_path", mode="single", **GRID).unwrapped.step_budget() == 3
    assert envs.make("code", mode="single").unwrapped.step_budget() == 1  # single_turns
    assert envs.make("discussion").unwrapped.step_budget() is None  # its own schedule


def test_progress_moves_every_wave_before_the_first_episode_finishes():
    events = _run(ScriptedPolicy(lambda _p: "no answer"))  # never solves: every turn is played
    first_episode = next(i for i, (kind, _) in enumerate(events) if kind == "episode")
    before = _progress(events[:first_episode])
    assert [p.wave for p in before] == list(range(len(before))) and len(before) >= 5
    assert [p.steps for p in before] == [3 * w for w in range(len(before))]  # 3 live, 1 each
    assert all(p.episodes == 0 and p.live == 3 for p in before)
    # nobody ends early: the estimate is exact from the start
    assert {p.steps + p.steps_left for p in _progress(events)} == {3 * 6}
    last = _progress(events)[-1]
    assert (last.live, last.episodes, last.steps_left, last.share) == (0, 3, 0, 1.0)


def test_the_estimate_shrinks_when_episodes_end_early():
    progress = _progress(_run(OraclePolicy(), episodes=4))  # the oracle solves in one turn
    totals = [p.steps + p.steps_left for p in progress]
    assert totals[0] == 4 * 6 and totals[-1] == progress[-1].steps < totals[0]
    assert totals == sorted(totals, reverse=True)
    assert [p.share for p in progress] == sorted(p.share for p in progress)


def test_tree_sampling_counts_a_step_once_and_counts_tokens():
    class Counted(Policy):
        name = "counted"

        def generate(self, prompts, params=None):
            n = params.n if params is not None else 1
            return [[Completion("no answer", token_ids=[1, 2, 3]) for _ in range(n)]] * len(prompts)

    progress = _progress(_run(Counted(), episodes=2, candidates=3, sampling="tree"))
    first = progress[1]
    assert first.steps == 2 and first.tokens == 2 * 3 * 3  # 2 branches, K = 3 candidates each


def test_an_unknown_budget_is_estimated_and_never_zero_while_live():
    cfg = {"num_agents": 2}
    engine = RolloutEngine(
        "discussion",
        OraclePolicy(),
        RolloutConfig(candidates=1, sampling="parallel", max_steps=40),
        env_config=cfg,
    )
    seen: list[RolloutProgress] = []
    try:
        engine.run([EpisodeSpec("discussion", seed=0, config=cfg)], on_progress=seen.append)
    finally:
        engine.close()
    assert seen[0].steps_left == 40  # the max_steps cap before any episode has ended
    assert all(p.steps_left >= p.live for p in seen) and seen[-1].steps_left == 0


def _bar():
    from tqdm.auto import tqdm

    return tqdm(file=io.StringIO(), unit="step", smoothing=0, mininterval=0)


def test_an_evaluation_bar_moves_and_has_an_eta_after_the_first_wave():
    bar = _bar()
    follow = follow_steps(bar)
    seen: list[tuple[int, float, str]] = []

    def on_progress(p: RolloutProgress) -> None:
        follow(p)
        eta = bar.format_meter(**bar.format_dict).split("<")[1].split(",")[0]
        seen.append((p.episodes, bar.n, eta))

    evaluate(
        "plan_path",
        ScriptedPolicy(lambda _p: "no answer"),
        episodes=3,
        env_config=GRID,
        on_progress=on_progress,
    )
    episodes, n, eta = seen[1]  # after the first wave
    assert episodes == 0 and n == 3 and "?" not in eta
    assert bar.total == bar.n == 18 and "ep done" in str(bar.postfix)
    bar.close()


def test_a_bar_over_many_rollouts_moves_by_their_share():
    bar = _bar()
    bar.total = 10
    follow = follow_share(bar, 4, "chunk")
    follow(RolloutProgress(wave=1, live=4, episodes=0, steps=4, steps_left=12, tokens=0))
    assert bar.n == pytest.approx(1.0) and str(bar.postfix).startswith("chunk: wave 1")
    follow(RolloutProgress(wave=4, live=0, episodes=4, steps=16, steps_left=0, tokens=0))
    assert bar.n == pytest.approx(4.0)
    bar.close()
