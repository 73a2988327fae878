"""MarsRL's agentic pipeline (section 3.3, Fig. 3a) with a scripted policy: each training step
decodes one agent stage of every in-flight trajectory plus the Solver stage of new problems."""

from __future__ import annotations

import itertools
import re
from collections import defaultdict

import pytest

from adapters.policies import GenerationConfig, ScriptedPolicy
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


def _char_pipeline(seed: int = 2):
    pytest.importorskip("transformers")
    from adapters.policies import TransformersPolicy

    from ..conftest import make_char_model

    model, tok = make_char_model(seed=seed, eos_bias=2.5)
    policy = TransformersPolicy(model, tok, device="cpu", batch_size=8, name="char")
    cfg = RolloutConfig(candidates=2, keep="adaptive", keep_n=2, keep_scope="instance")
    gen = GenerationConfig(max_new_tokens=12)
    engine = RolloutEngine(ENV, policy, cfg, generation=gen, env_config={"max_steps": 5})
    return engine, AgentPipeline(engine, segments=SegmentConfig(4, 3))


def test_segmented_groups_enter_the_batch_when_their_last_member_finishes():
    """UloRL 2.3 with GRPO groups: a group (the K candidates of one input) is trained in the
    step its longest completion finishes, whatever the instance's other group does; the next
    agent starts once every group of the stage is in; a completion that needed s segments was
    written by policies up to s - 1 steps old."""
    engine, pipe = _char_pipeline()
    batches = [pipe.step([_spec(0), _spec(1)], seed=0), *pipe.drain()]
    engine.close()
    released: dict[tuple[int, int], dict[str, tuple[int, list]]] = defaultdict(dict)
    for b in batches:
        for smp, lag in zip(b.samples, b.lags):
            step, members = released[(smp.instance, smp.step)].setdefault(smp.group, (b.step, []))
            assert step == b.step  # a group is released whole, in one step
            members.append((smp, lag))
    early = 0
    for inst in (0, 1):
        start = 0  # the step the stage's branches are submitted (the Solver: admission)
        for stage in range(5):
            groups = released.get((inst, stage))
            if not groups:
                break
            for step, members in groups.values():
                longest = max(len(smp.completion_ids) for smp, _ in members)
                assert step == start + (longest - 1) // 4  # segments of 4 tokens
                assert {lag for _, lag in members} == {step - start}
                assert len(members) == 2  # K
            ends = [step for step, _ in groups.values()]
            early += len(set(ends)) > 1  # one group trained before its sibling
            kept = [smp for _, members in groups.values() for smp, _ in members if smp.kept]
            assert len(kept) <= 2  # keep_n of the instance's pool
            start = max(ends) + 1
    assert early > 0  # the test exercises groups of one stage finishing at different steps
    assert any(lag > 0 for b in batches for lag in b.lags)  # and multi-segment completions


def test_a_checkpoint_with_a_group_waiting_for_its_sibling_resumes_exactly():
    """A stage whose first group is stepped and released while the second is still decoding:
    the state (the waiting group's stepped env clones, the partial completions) is pickled and
    restored into a fresh pipeline, which then trains exactly what the uninterrupted one does."""
    import pickle

    from adapters.training.schedule import PipelineRollout

    def key(b):
        return [(s.instance, s.step, s.group, s.candidate, s.completion, s.kept) for s in b.samples]

    def fresh():
        engine, pipe = _char_pipeline()
        pr = PipelineRollout(engine, segments=pipe.segments)
        return engine, pr

    engine, pr = fresh()
    whole = [key(pr.pipeline.step([_spec(0), _spec(1)], seed=0))]
    waiting_at = None
    while pr.pipeline.in_flight:
        if waiting_at is None and any(d.outcomes for d in pr.pipeline._decoding.values()):
            waiting_at = len(whole)
        whole.append(key(pr.pipeline.step((), seed=0)))
    engine.close()
    assert waiting_at is not None  # some group waited for its sibling at a step boundary
    engine, pr = fresh()
    for _ in range(waiting_at):
        pr.pipeline.step([_spec(0), _spec(1)] if pr.pipeline.steps == 0 else (), seed=0)
    state = pickle.loads(pickle.dumps(pr.state_dict()))
    engine.close()
    engine, resumed = fresh()
    resumed.load_state_dict(state)
    rest = []
    while resumed.pipeline.in_flight:
        rest.append(key(resumed.pipeline.step((), seed=0)))
    engine.close()
    assert rest == whole[waiting_at:]


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
