"""Segment rollouts (UloRL 2.3, MarsRL 2.3): a completion decoded in stages of L tokens resumes
exactly where it stopped, with the same tokens and behaviour log-probs as one unsegmented decode."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from adapters.policies import SamplingParams, TransformersPolicy
from adapters.rollout.segments import SegmentedGenerator, generate_in_segments

from ..conftest import make_char_model

PROMPTS = ["hello", "a longer question about segments?"]


@pytest.fixture(scope="module")
def early_eos_policy():
    # an EOS bias makes some rows end after a few tokens and others run to the cap
    model, tok = make_char_model(seed=1, eos_bias=2.5)
    return TransformersPolicy(model, tok, device="cpu", batch_size=3, name="char")


def _assert_same(whole, staged, tol=1e-4):
    for a_row, b_row in zip(whole, staged):
        for a, b in zip(a_row, b_row):
            assert b.token_ids == a.token_ids
            assert b.text == a.text and b.finish_reason == a.finish_reason
            assert b.prompt_ids == a.prompt_ids
            assert len(b.logprobs) == len(a.logprobs)
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < tol


def test_greedy_completion_resumes_exactly_where_it_stopped(char_policy):
    params = SamplingParams(temperature=0.0, max_new_tokens=23)
    whole = char_policy.generate(PROMPTS, params)
    assert all(len(c.token_ids) == 23 for cs in whole for c in cs)  # longer than 4 segments
    staged = generate_in_segments(char_policy, PROMPTS, params, segment_tokens=5, max_segments=5)
    _assert_same(whole, staged)


def test_sampled_completions_resume_their_random_stream(early_eos_policy):
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=20, seed=11)
    whole = early_eos_policy.generate(PROMPTS, params)
    lengths = sorted(len(c.token_ids) for cs in whole for c in cs)
    assert lengths[0] <= 8 and lengths[-1] > 12, lengths  # they end in different stages
    staged = generate_in_segments(
        early_eos_policy, PROMPTS, params, segment_tokens=4, max_segments=5
    )
    _assert_same(whole, staged)


def test_finished_completions_leave_at_once_and_unfinished_carry_their_prefix(early_eos_policy):
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=100, seed=11)
    whole = early_eos_policy.generate(PROMPTS, params)
    gen = SegmentedGenerator(early_eos_policy, params, segment_tokens=4, max_segments=3)
    assert gen.params.max_new_tokens == 12  # L * M caps the length
    gen.submit(PROMPTS, ["p0", "p1"])
    seen = {}
    for stage in range(3):
        before = gen.in_flight
        done = gen.stage(version=stage)
        assert before - gen.in_flight == len(done)
        for f in done:
            # a completion leaves in the stage in which it ended: ceil(len / L) - 1
            assert f.finished_stage == stage == (len(f.completion.token_ids) - 1) // 4
            # one version per stage it was decoded in, starting at 0, 4, 8, ...
            assert f.partial.versions == [(4 * s, s) for s in range(stage + 1)]
            seen[(f.key, f.sample)] = f.completion
    assert gen.in_flight == 0 and len(seen) == 6
    for p, key in enumerate(["p0", "p1"]):
        for s in range(3):
            ref = whole[p][s]
            got = seen[(key, s)]
            n = len(got.token_ids)
            assert got.token_ids == ref.token_ids[:n]  # the capped completion is a prefix
            assert got.finish_reason == ("length" if n == 12 else "stop")


def test_extend_leaves_finished_partials_alone(char_policy):
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    [[p]] = char_policy.start_partials(["x"], params)
    [p1] = char_policy.extend([p], params, 6)
    assert p1.finish_reason == "length" and len(p1.token_ids) == 6 and p.token_ids == []
    [p2] = char_policy.extend([p1], params, 6)
    assert p2.token_ids == p1.token_ids and p2.logprobs == p1.logprobs
    with pytest.raises(ValueError):
        char_policy.extend([p], params, 0)


def test_state_dict_continues_the_completions_in_flight(early_eos_policy, tmp_path):
    """A generator stopped after one stage, saved with ``torch.save`` (as a checkpoint does) and
    restored into a new generator under new keys, finishes every completion as the one that was
    never stopped: same tokens, log-probs, policy versions and stages, none lost or repeated."""
    import torch

    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=20, seed=11)

    def fresh():
        gen = SegmentedGenerator(early_eos_policy, params, segment_tokens=4, max_segments=5)
        gen.submit(PROMPTS, ["p0", "p1"])
        return gen

    def drain(gen, first, rename=lambda k: k):
        out = {}
        stage = first
        while gen.in_flight:
            for f in gen.stage(version=stage):
                c = f.completion
                key = (rename(f.key), f.sample)
                assert key not in out  # nothing finishes twice
                out[key] = (c.token_ids, c.logprobs, f.partial.versions, f.finished_stage)
            stage += 1
        return out

    ref = drain(fresh(), 0)
    stopped = fresh()
    early = {(f.key, f.sample): f for f in stopped.stage(version=0)}
    assert stopped.in_flight and any(p.token_ids for *_, p in stopped._pending)
    torch.save(stopped.state_dict(), tmp_path / "gen.pt")
    resumed = SegmentedGenerator(early_eos_policy, params, segment_tokens=4, max_segments=5)
    state = torch.load(tmp_path / "gen.pt", weights_only=False)
    resumed.load_state_dict(state, keys={"p0": "q0", "p1": "q1"})
    got = drain(resumed, 1, rename=lambda k: {"q0": "p0", "q1": "p1"}[k])
    assert len(early) + len(got) == len(ref) == 6
    assert got == {k: v for k, v in ref.items() if k not in early}
