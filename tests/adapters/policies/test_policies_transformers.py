"""TransformersPolicy on a tiny char-level model (fast; no download, no GGUF conversion)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from adapters.policies import SamplingParams, TransformersPolicy  # noqa: E402
from adapters.policies.transformers_policy import (  # noqa: E402
    row_seed,
    sample_next,
    token_draws,
    tree_draw,
    tree_shape,
    uniform_draws,
)
from adapters.training.logprobs import sequence_logprobs  # noqa: E402

from ..conftest import make_char_model  # noqa: E402

PROMPTS = [
    "hello",
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a longer question?"}],
]


def recompute(model, completions, pad_id, temperature=1.0):
    """Log-probs of each completion's tokens from one padded forward pass (left padding)."""
    width = max(len(c.prompt_ids) + len(c.token_ids) for c in completions)
    ids = torch.full((len(completions), width), pad_id)
    attn = torch.zeros_like(ids)
    comp = torch.zeros_like(ids)
    for i, c in enumerate(completions):
        seq = c.prompt_ids + c.token_ids
        ids[i, width - len(seq) :] = torch.tensor(seq)
        attn[i, width - len(seq) :] = 1
        comp[i, width - len(c.token_ids) :] = 1
    with torch.no_grad():
        lp = sequence_logprobs(model, ids, attn, comp, temperature=temperature)
    return [lp[i, width - len(c.token_ids) :].tolist() for i, c in enumerate(completions)]


def test_shapes_n_and_lengths(char_policy):
    out = char_policy.generate(PROMPTS, SamplingParams(n=3, max_new_tokens=12, seed=0))
    assert len(out) == 2 and all(len(cs) == 3 for cs in out)
    for cs in out:
        for c in cs:
            assert len(c.token_ids) == len(c.logprobs) <= 12
            assert all(lp <= 0 for lp in c.logprobs)
            assert c.finish_reason in ("stop", "length")
            if c.finish_reason == "length":
                assert len(c.token_ids) == 12
    # the prompt ids are the chat-templated prompt
    tok = char_policy.tokenizer
    assert tok.decode(out[0][0].prompt_ids) == "<|user|>hello\n<|assistant|>"
    assert out[1][0].prompt_ids == out[1][2].prompt_ids


def test_same_seed_same_completions_and_batch_independence(char_policy, char_model):
    params = SamplingParams(n=2, max_new_tokens=16, seed=123)
    a = char_policy.generate(PROMPTS, params)
    b = char_policy.generate(PROMPTS, params)
    assert [[c.token_ids for c in cs] for cs in a] == [[c.token_ids for c in cs] for cs in b]
    # samples of one prompt differ from each other
    assert a[0][0].token_ids != a[0][1].token_ids
    # a different seed gives different samples
    c = char_policy.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=16, seed=124))
    assert c[0][0].token_ids != a[0][0].token_ids
    # neither the batch size nor the other prompts of the call change a completion
    model, tok = char_model
    small = TransformersPolicy(model, tok, device="cpu", batch_size=1)
    alone = small.generate(PROMPTS[:1], params)
    assert [x.token_ids for x in alone[0]] == [x.token_ids for x in a[0]]
    for x, y in zip(alone[0], a[0]):
        assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs)) < 1e-4


def test_unseeded_calls_follow_torch_manual_seed(char_policy):
    params = SamplingParams(max_new_tokens=10)
    torch.manual_seed(7)
    a = char_policy.generate(["x"], params)[0][0].token_ids
    torch.manual_seed(7)
    b = char_policy.generate(["x"], params)[0][0].token_ids
    assert a == b


def test_logprobs_match_a_full_forward_pass(char_model):
    model, tok = char_model
    policy = TransformersPolicy(model, tok, device="cpu", batch_size=3)
    for params in (
        SamplingParams(n=2, max_new_tokens=10, seed=1),
        SamplingParams(n=2, max_new_tokens=10, seed=1, temperature=0.7, top_p=0.8, top_k=20),
        SamplingParams(max_new_tokens=10, temperature=0),
    ):
        flat = [c for cs in policy.generate(PROMPTS, params) for c in cs]
        temp = params.temperature if params.temperature > 0 else 1.0
        for c, ref in zip(flat, recompute(model, flat, tok.pad_token_id, temp)):
            assert max(abs(a - b) for a, b in zip(c.logprobs, ref)) < 1e-4


def test_rows_that_end_early_leave_the_batch_correctly():
    """EOS-biased model: rows end at different steps; every row's bookkeeping must stay aligned."""
    model, tok = make_char_model(seed=1, eos_bias=3.0)
    policy = TransformersPolicy(model, tok, device="cpu", batch_size=8)
    for seed in range(20):  # a seed giving a mix of early and full-length rows
        params = SamplingParams(n=4, max_new_tokens=20, seed=seed)
        flat = [c for cs in policy.generate(PROMPTS, params) for c in cs]
        if {c.finish_reason for c in flat} == {"stop", "length"}:
            break
    else:  # pragma: no cover
        pytest.fail("no seed gave both finish reasons")
    for c in flat:
        if c.finish_reason == "stop":
            assert c.token_ids[-1] == tok.eos_token_id
            assert tok.eos_token_id not in c.token_ids[:-1]
            assert "<eos>" not in c.text
            assert c.text == tok.decode(c.token_ids[:-1])
        else:
            assert len(c.token_ids) == 20 and tok.eos_token_id not in c.token_ids
    for c, ref in zip(flat, recompute(model, flat, tok.pad_token_id)):
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref)) < 1e-4
    # the same rows decoded one at a time give the same tokens
    single = TransformersPolicy(model, tok, device="cpu", batch_size=1)
    again = [c for cs in single.generate(PROMPTS, params) for c in cs]
    assert [c.token_ids for c in again] == [c.token_ids for c in flat]


def test_stop_strings_cut_text_and_generation(char_policy):
    # find a seed whose unconstrained sample runs to the length limit with plain characters
    # (one token each) at the start; the random model's samples depend on the torch version
    for seed in range(100):
        full = char_policy.generate(["tell me"], SamplingParams(max_new_tokens=40, seed=seed))[0][0]
        if full.finish_reason == "length" and "<" not in full.text[:14]:
            break
    else:  # pragma: no cover
        pytest.fail("no suitable seed among 100")
    text = full.text
    stop = text[10:13]  # three characters = three tokens: the match spans several steps
    cut = text.index(stop)
    params = SamplingParams(max_new_tokens=40, seed=seed, stop=(stop,))
    c = char_policy.generate(["tell me"], params)[0][0]
    assert c.text == text[:cut]
    assert c.finish_reason == "stop"
    assert c.token_ids == full.token_ids[: cut + 3]  # the stop string's tokens are kept
    assert c.logprobs == pytest.approx(full.logprobs[: cut + 3], abs=1e-6)


def test_long_prompts_are_left_truncated_with_a_warning(char_model, caplog):
    model, tok = char_model
    policy = TransformersPolicy(model, tok, device="cpu", max_prompt_tokens=16)
    with caplog.at_level(logging.WARNING):
        c = policy.generate(["y" * 100], SamplingParams(max_new_tokens=4, seed=0))[0][0]
    assert len(c.prompt_ids) == 16
    assert tok.decode(c.prompt_ids).endswith("yyy\n<|assistant|>")
    assert "more than the maximum of 16" in caplog.text


def test_default_prompt_limit_leaves_room_for_new_tokens(char_model):
    model, tok = char_model  # max_position_embeddings = 512
    policy = TransformersPolicy(model, tok, device="cpu")
    c = policy.generate(["z" * 600], SamplingParams(max_new_tokens=12, seed=0))[0][0]
    assert len(c.prompt_ids) == 512 - 12 and len(c.token_ids) == 12


def test_bad_calls_raise_clear_errors(char_policy, char_model):
    with pytest.raises(TypeError):
        char_policy.generate("not a list")
    with pytest.raises(ValueError):
        TransformersPolicy(*char_model, device="cpu", batch_size=0)


def test_tokenizer_without_chat_template_gets_a_plain_rendering(char_model):
    model, tok = char_model
    policy = TransformersPolicy(model, tok, device="cpu")
    saved = tok.chat_template
    try:
        tok.chat_template = None
        assert policy.render([{"role": "user", "content": "hi"}]) == "user: hi\nassistant:"
    finally:
        tok.chat_template = saved


# ------------------------------------------------------------------------------------------
# the sampling step


def test_sample_next_greedy_and_logprobs():
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.0, 0.0, 5.0]])
    tokens, lps = sample_next(logits, None, SamplingParams(temperature=0))
    assert tokens.tolist() == [1, 2]
    expected = torch.log_softmax(logits, -1)[[0, 1], [1, 2]]
    assert torch.allclose(lps, expected)


def _counts(logits: torch.Tensor, params: SamplingParams, n: int = 20000) -> list[float]:
    u = torch.from_numpy(uniform_draws([1] * n, range(n)))
    tokens, _ = sample_next(logits.expand(n, -1), u, params)
    return (torch.bincount(tokens, minlength=logits.shape[-1]) / n).tolist()


def test_sample_next_matches_the_distribution():
    logits = torch.tensor([math.log(0.5), math.log(0.3), math.log(0.2)])
    # 20000 draws: a share's standard error is at most 0.0036; 0.015 is over 4 of them
    assert _counts(logits, SamplingParams(temperature=1.0)) == pytest.approx(
        [0.5, 0.3, 0.2], abs=0.015
    )
    # the inverse CDF: u below 0.5 is token 0, in [0.5, 0.8) token 1, above token 2
    u = torch.tensor([0.0, 0.4999, 0.5001, 0.7999, 0.8001, 1 - 2**-53], dtype=torch.float64)
    tokens, lps = sample_next(logits.expand(6, -1), u, SamplingParams(temperature=1.0))
    assert tokens.tolist() == [0, 0, 1, 1, 2, 2]
    assert lps.tolist() == pytest.approx([math.log(p) for p in (0.5, 0.5, 0.3, 0.3, 0.2, 0.2)])


def test_uniform_draws_are_uniform_independent_and_position_indexed():
    u = uniform_draws([3] * 100_000, range(100_000))
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    # consecutive draws of one stream are uncorrelated, and streams of nearby seeds differ
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01
    v = uniform_draws([4] * 100_000, range(100_000))
    assert abs(np.corrcoef(u, v)[0, 1]) < 0.01
    # draw t of a stream does not depend on the rows beside it
    assert uniform_draws([9, 3], [5, 17])[1] == u[17]


def test_sample_next_never_draws_zero_probability_tokens():
    logits = torch.tensor([[0.0, float("-inf"), 0.0, float("-inf")]]).expand(1000, -1)
    u = torch.from_numpy(uniform_draws(range(1000), [0] * 1000))
    u[0], u[1] = 0.0, 1 - 2**-53
    tokens, _ = sample_next(logits, u, SamplingParams(temperature=1.0))
    assert set(tokens.tolist()) == {0, 2}


def test_sample_next_top_k_top_p_and_temperature():
    logits = torch.tensor([math.log(0.5), math.log(0.3), math.log(0.2)])
    # top-k 2 renormalises 0.5 / 0.3 over 0.8 for the draw ...
    assert _counts(logits, SamplingParams(top_k=2)) == pytest.approx([0.625, 0.375, 0], abs=0.015)
    # ... but the reported log-prob is the untruncated one
    tokens, lps = sample_next(logits[None], torch.tensor([0.99]), SamplingParams(top_k=2))
    assert tokens.tolist() == [1] and lps[0].item() == pytest.approx(math.log(0.3), abs=1e-6)
    # top-p 0.6 keeps 0.5 and 0.3 (mass before the 2nd token is 0.5 < 0.6), drops 0.2
    assert _counts(logits, SamplingParams(top_p=0.6)) == pytest.approx([0.625, 0.375, 0], abs=0.015)
    # top-p 0.45 keeps only the first
    assert _counts(logits, SamplingParams(top_p=0.45), n=500) == [1.0, 0.0, 0.0]
    # temperature 0.5 squares the probabilities: 25/38, 9/38, 4/38
    want = [25 / 38, 9 / 38, 4 / 38]
    assert _counts(logits, SamplingParams(temperature=0.5)) == pytest.approx(want, abs=0.015)


def test_sample_next_is_stable_under_float_noise_in_the_logits():
    """Logits that differ by float rounding (another batch layout, a prefix restored from the
    cache) give the same tokens for the same draws, for a flat distribution over a large
    vocabulary (a random model's) and for a confident one (a trained model's)."""
    gen = torch.Generator().manual_seed(0)
    flat = torch.randn(512, 49152, generator=gen) * 0.01
    confident = torch.randn(512, 49152, generator=gen) * 2
    confident[:, 7] += 14  # the top token holds about two thirds of the mass
    u = torch.from_numpy(token_draws(range(512), [0] * 512))
    params = SamplingParams(temperature=1.0)
    for logits in (flat, confident):
        nudged = logits * (1 + (torch.rand(logits.shape, generator=gen) - 0.5) * 2e-6)
        a, b = sample_next(logits, u, params)[0], sample_next(nudged, u, params)[0]
        assert (a != b).sum().item() == 0


@pytest.mark.parametrize("n", [300, 5000])
def test_tree_draw_matches_the_distribution_over_levels(n):
    """Two and three levels: the draw is distributed as the probabilities, padding and
    zero-probability tokens are never drawn, and too few draws per row are refused."""
    levels, _ = tree_shape(n)
    assert levels == (2 if n == 300 else 3)
    probs = torch.rand(n, generator=torch.Generator().manual_seed(n)) ** 4
    probs[::7] = 0
    rows = 40_000
    u = torch.from_numpy(token_draws([n] * rows, range(rows)))
    counts = torch.bincount(tree_draw(probs.expand(rows, -1), u), minlength=n).double()
    assert len(counts) == n and counts[::7].sum() == 0
    expected = rows * probs.double() / probs.sum()
    # Pearson chi-square over the nonzero tokens: mean = dof, sd = sqrt(2 dof); 6 sd is far out
    keep = expected > 0
    chi2 = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum().item()
    dof = int(keep.sum()) - 1
    assert chi2 < dof + 6 * math.sqrt(2 * dof)
    with pytest.raises(ValueError, match="uniform draws per row"):
        tree_draw(probs[None], torch.tensor([0.5]))


def test_row_seeds_are_distinct_and_deterministic():
    seeds = {row_seed(0, p, s) for p in range(20) for s in range(8)}
    assert len(seeds) == 160
    assert row_seed(3, 1, 2) == row_seed(3, 1, 2) != row_seed(4, 1, 2)


def test_evaluation_scope_reuses_prefix_caches_without_changing_completions(char_model):
    """Inside ``evaluation_scope`` the prompts' shared prefix (here a 46-character system
    message) is computed once and copied in on later calls, also when a later call's shared
    prefix is longer, or diverges from the stored one before its end (then the common part is
    reused); completions and log-probs equal those computed afresh, and the batch size is raised
    to the scope's for its duration only."""
    model, tok = char_model
    policy = TransformersPolicy(model, tok, device="cpu", batch_size=2)
    system = [{"role": "system", "content": "you are a careful planner; answer with moves. "}]
    waves = [
        [[*system, {"role": "user", "content": q}] for q in ("go up", "go left now")],
        [[*system, {"role": "user", "content": q}] for q in ("go up twice", "go up and right")],
        [[*system, {"role": "user", "content": q}] for q in ("move left", "move down")],
    ]
    params = SamplingParams(max_new_tokens=8, temperature=0)
    fresh = [policy.generate(w, params) for w in waves]
    with policy.evaluation_scope(batch_size=4):
        assert policy.batch_size == 4
        store = policy._prefix_store
        reused = [policy.generate(w, params) for w in waves]
        # wave 2 extends wave 1's prefix; wave 3 shares only "system ... <|user|>" with them
        assert store is not None and store.hits == 2
    assert policy.batch_size == 2 and policy._prefix_store is None
    for a, b in zip(fresh, reused):
        for x, y in zip(a, b):
            assert x[0].token_ids == y[0].token_ids
            assert max(abs(p - q) for p, q in zip(x[0].logprobs, y[0].logprobs)) < 1e-4


def test_generation_stats_count_the_phases_when_profiling(char_model):
    """With ``stats`` set, each call adds its prefill and decode times and tokens: the tokens
    drawn are the completions' (plus the EOS a completion drops), the prefill counts each
    distinct prompt once and their shared prefix once, the padding apart, and the phases fit
    inside the calls' time; without it nothing is counted and the completions are the same."""
    from adapters.policies.transformers_policy import GenerationStats

    model, tok = char_model
    policy = TransformersPolicy(model, tok, device="cpu", batch_size=8)
    system = [{"role": "system", "content": "you are a careful planner; answer with moves. "}]
    prompts = [[*system, {"role": "user", "content": q}] for q in ("go up", "go left now")]
    params = SamplingParams(n=2, max_new_tokens=6, seed=3)
    plain = policy.generate(prompts, params)
    policy.stats = stats = GenerationStats()
    out = policy.generate(prompts, params)
    policy.stats = None
    assert [[c.token_ids for c in cs] for cs in out] == [[c.token_ids for c in cs] for cs in plain]
    drawn = sum(len(c.token_ids) + (c.finish_reason == "stop") for cs in out for c in cs)
    assert stats.generated == drawn
    assert stats.decode_rows == drawn - 4  # each row's last token is drawn, never fed back
    assert 0 < stats.decode_steps <= 6
    ids = [cs[0].prompt_ids for cs in out]
    shared = next(i for i, (a, b) in enumerate(zip(*ids)) if a != b)
    assert shared >= 32  # split off and prefilled once
    rests = [len(p) - shared for p in ids]
    assert stats.prefill_tokens == shared + sum(rests)
    assert stats.padding == len(rests) * max(rests) - sum(rests)
    assert 0 < stats.prefill_s + stats.decode_s <= stats.generate_s
    policy.generate(prompts, params)
    assert stats.generated == drawn  # no longer counting
