"""MarsRL's agentic pipeline (section 3.3, Fig. 3a) with a scripted policy: each training step
decodes one agent stage of every in-flight trajectory plus the Solver stage of new problems."""

from __future__ import annotations

import itertools
import re
from collections import defaultdict

import pytest

from adapters.policies import ScriptedPolicy
from adapters.rollout import EpisodeSpec, RolloutConfig, RolloutEngine
from adapters.rollout.pipeline import AgentPipeline
from adapters.rollout.segments import SegmentConfig

ENV = "solver_verifier_corrector"
REJECT = "Critical error: the final answer is wrong.\nVerdict: incorrect"
VERDICTS = [REJECT, "All steps hold.\nVerdict: correct", REJECT, "I am not sure."]


class Team:
    """Solver and corrector answer wrongly; each verifier group of 4 rejects twice, accepts once
    and gives no verdict once. Records every report the corrector is shown."""

    def __init__(self) -> None:
        self.verdicts = itertools.cycle(VERDICTS)
        self.reports: list[str] = []

    def __call__(self, prompt: str) -> str:
        if "You are the VERIFIER" in prompt:
            return next(self.verdicts)
        if "You are the CORRECTOR" in prompt:
            report = re.search(r"Verifier's report on it:\n(.*?)\n\nWrite an", prompt, re.S)
            assert report is not None
            self.reports.append(report.group(1))
            return "Fixed.\n\\boxed{5}"
        return "\\boxed{7}"


def _engine(team: Team, **kw) -> RolloutEngine:
    cfg = RolloutConfig(candidates=4, keep="adaptive", keep_n=2, keep_scope="instance", **kw)
    return RolloutEngine(ENV, ScriptedPolicy(team), cfg, env_config={"max_steps": 5})


def _spec(i: int) -> EpisodeSpec:
    problem = {"question": f"What is {i} + 1?", "answer": str(i + 1)}
    return EpisodeSpec(ENV, seed=i, config={"max_steps": 5}, options={"instance": problem})


STAGES = ["solver", "verifier", "corrector", "verifier", "corrector"]  # S, V1, C1, V2, C2


def test_stage_schedule_matches_marsrl_3_3():
    team = Team()
    engine = _engine(team)
    pipe = AgentPipeline(engine)
    batches = [pipe.step([_spec(t)], seed=t) for t in range(3)] + pipe.drain()
    engine.close()
    assert [b.step for b in batches] == list(range(7))  # 3 admissions + 4 stages to drain
    assert pipe.in_flight == 0
    by_instance: dict[int, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for b in batches:
        for s, age, lag in zip(b.samples, b.ages, b.lags):
            by_instance[s.instance][b.step].append(s)
            assert age == b.step - s.instance and lag == 0  # instance t was admitted at step t
    for inst in range(3):
        steps = by_instance[inst]
        # S, V1, C1, V2, C2 of the trajectory admitted at step t land in steps t .. t + 4
        assert sorted(steps) == [inst + j for j in range(5)]
        for j, role in enumerate(STAGES):
            samples = steps[inst + j]
            assert {s.role for s in samples} == {role} and {s.step for s in samples} == {j}
            # one group of K for the Solver, then two selected outputs of the preceding agent
            assert len({s.group for s in samples}) == (1 if j == 0 else 2)
            assert len(samples) == (4 if j == 0 else 8)
    # a full step mixes stages: at step 2, S of problem 2, V1 of problem 1, C1 of problem 0
    assert {(s.instance, s.role) for s in batches[2].samples} == {
        (2, "solver"),
        (1, "verifier"),
        (0, "corrector"),
    }
    # the corrector only ever sees the verifier's rejections (C1 and C2, two branches, K each)
    assert len(team.reports) == 3 * 2 * 2 * 4
    assert all(r == REJECT for r in team.reports)
    episodes = [e for b in batches for e in b.result.episodes]
    assert sorted(e.instance for e in episodes) == [0, 1, 2]  # one leaf per problem, at C2


def test_pipeline_trains_the_samples_a_synchronous_rollout_makes():
    """Same problem, same scripted team: the pipeline spreads the synchronous rollout's samples
    over five steps and changes none of them."""
    sync_engine = _engine(Team())
    sync = sync_engine.run([_spec(0)], seed=0)
    sync_engine.close()
    engine = _engine(Team())
    pipe = AgentPipeline(engine)
    staged = [s for b in [pipe.step([_spec(0)]), *pipe.drain()] for s in b.samples]
    engine.close()

    def key(s):
        return (s.role, s.step, s.group, s.candidate, s.completion, s.reward, s.kept)

    assert sorted(map(key, staged)) == sorted(map(key, sync.samples))
    assert len(staged) == 4 + 4 * 8


def test_segmented_stages_wait_for_every_completion_of_their_instance():
    """With segments a stage enters the env only once all K completions of its instance are
    done; a completion that needed s segments was written by policies up to s - 1 steps old."""
    pytest.importorskip("transformers")
    from adapters.policies import TransformersPolicy

    from .conftest import make_char_model

    model, tok = make_char_model(seed=1, eos_bias=2.5)
    policy = TransformersPolicy(model, tok, device="cpu", batch_size=8, name="char")
    cfg = RolloutConfig(
        candidates=2, keep="adaptive", keep_n=2, keep_scope="instance", max_new_tokens=12
    )
    engine = RolloutEngine(ENV, policy, cfg, env_config={"max_steps": 5})
    pipe = AgentPipeline(engine, segments=SegmentConfig(4, 3))
    batches = [pipe.step([_spec(0), _spec(1)], seed=0), *pipe.drain()]
    engine.close()
    trained = [(b.step, s, lag) for b in batches for s, lag in zip(b.samples, b.lags)]
    solver = [(step, s, lag) for step, s, lag in trained if s.role == "solver"]
    assert len(solver) == 4  # 2 problems x K
    for inst in (0, 1):
        mine = [(step, s, lag) for step, s, lag in solver if s.instance == inst]
        longest = max(len(s.completion_ids) for _, s, _ in mine)
        segments_needed = (longest - 1) // 4 + 1
        # trained in the step in which the instance's longest completion finished
        assert {step for step, _, _ in mine} == {segments_needed - 1}
        assert {lag for *_, lag in mine} == {segments_needed - 1}
    assert any(lag > 0 for *_, lag in trained)  # the test exercises multi-segment completions


def test_instance_numbers_are_global_and_never_reused_while_in_flight():
    engine = _engine(Team())
    pipe = AgentPipeline(engine)
    first = pipe.step([_spec(0), _spec(1)], instance_offset=10)  # e.g. rank 1's block
    assert {s.instance for s in first.samples} == {10, 11}
    with pytest.raises(ValueError, match="instance 11 is already in the pipeline"):
        pipe.step([_spec(2)], instance_offset=11)
    after = pipe.step([_spec(2)])  # numbered after the previous admission
    assert {s.instance for s in after.samples if s.role == "solver"} == {12}
    engine.close()
