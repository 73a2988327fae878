"""vLLM's log-probs against the transformers forward pass on the same tokens (both float32).

vLLM runs with ``logprobs_mode="processed_logprobs"``: the log-prob of each sampled token under
``softmax(logits / T)`` (``T = 1`` when greedy), which is what
:func:`adapters.training.logprobs.sequence_logprobs` recomputes. The engine's CPU kernels
(attention, fused QKV / gate-up matmuls) sum in a different order than transformers', so the numbers
agree to float32 rounding, not bit for bit: measured max |difference| about 1e-5; the test
allows 1e-3.
"""

from __future__ import annotations

import pytest

from adapters.policies.base import SamplingParams

TOL = 1e-3
PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "List three prime numbers."},
    ],
]


def hf_logprobs(model, prompt_ids, token_ids, temperature):
    import torch

    from adapters.training.logprobs import sequence_logprobs

    ids = torch.tensor([list(prompt_ids) + list(token_ids)])
    mask = torch.zeros_like(ids)
    mask[0, len(prompt_ids) :] = 1
    with torch.no_grad():
        lp = sequence_logprobs(model, ids, torch.ones_like(ids), mask, temperature=temperature)
    return lp[0, len(prompt_ids) :].tolist()


def max_diff(model, completions, temperature):
    worst = 0.0
    for c in completions:
        ref = hf_logprobs(model, c.prompt_ids, c.token_ids, temperature)
        assert len(ref) == len(c.logprobs) == len(c.token_ids) > 0
        worst = max(worst, max(abs(a - b) for a, b in zip(ref, c.logprobs)))
    return worst


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_logprobs_match_transformers(engine, hf, temperature):
    model, _ = hf
    params = SamplingParams(n=2, temperature=temperature, max_new_tokens=24, seed=7)
    out = engine.generate(PROMPTS, params)
    completions = [c for cs in out for c in cs]
    worst = max_diff(model, completions, temperature if temperature > 0 else 1.0)
    print(f"T={temperature}: max |vLLM - transformers| log-prob = {worst:.2e}")
    assert worst < TOL
    if temperature == 0.0:
        # greedy decoding picks the same tokens as the transformers backend
        from adapters.policies.transformers_policy import TransformersPolicy

        tp = TransformersPolicy(model, hf[1], device="cpu")
        ref = tp.generate(PROMPTS[:1], SamplingParams(temperature=0, max_new_tokens=24))[0][0]
        assert ref.token_ids == out[0][0].token_ids
        assert ref.logprobs == pytest.approx(out[0][0].logprobs, abs=TOL)


def test_temperature_changes_logprobs(engine, hf):
    """The returned numbers really are tempered: at T=0.5 they differ from the T=1 values."""
    model, _ = hf
    (c,) = engine.generate(PROMPTS[:1], SamplingParams(temperature=0.5, max_new_tokens=12, seed=1))[
        0
    ]
    at_one = hf_logprobs(model, c.prompt_ids, c.token_ids, 1.0)
    assert max(abs(a - b) for a, b in zip(at_one, c.logprobs)) > 10 * TOL
