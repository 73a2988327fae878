"""CPU decoding (adapters/policies/decoding.py): the same numbers as transformers' attention and
cache, in float32, whatever the rows' padding; the cache keeps its contents through growth,
reordering and cropping."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import DynamicCache  # noqa: E402
from transformers.cache_utils import DynamicLayer  # noqa: E402

from adapters.policies import SamplingParams, TransformersPolicy  # noqa: E402
from adapters.policies.decoding import (  # noqa: E402
    ATTENTION,
    decode_cache,
    use_decode_attention,
)
from adapters.policies.models import tiny_model  # noqa: E402


def _steps(model, cache, ids, attn, steps=6):
    """Prefill ``ids`` then ``steps`` greedy decode steps; the logits of every step."""
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    out = []
    with torch.inference_mode():
        logits = model(
            input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=cache
        ).logits[:, -1]
        nxt, last = logits.argmax(-1), pos[:, -1]
        for _ in range(steps):
            attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=1)
            last = last + 1
            logits = model(
                input_ids=nxt[:, None],
                attention_mask=attn,
                position_ids=last[:, None],
                past_key_values=cache,
            ).logits[:, -1]
            out.append(logits.float())
            nxt = logits.argmax(-1)
    return torch.stack(out, 1)


@pytest.mark.parametrize("padded", [False, True], ids=["equal rows", "left-padded rows"])
def test_decode_steps_match_transformers_sdpa(padded):
    model, _ = tiny_model(device="cpu")
    model = model.float().eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 200, (4, 24), generator=gen)
    attn = torch.ones_like(ids)
    if padded:
        attn[:2, :9] = 0
    assert use_decode_attention(model, False) is False
    assert model.config._attn_implementation == "sdpa"
    want = _steps(model, DynamicCache(config=model.config), ids, attn)
    assert use_decode_attention(model) is True and model.config._attn_implementation == ATTENTION
    got = _steps(model, decode_cache(model.config), ids, attn)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
    assert use_decode_attention(model, False) is False  # and back
    assert model.config._attn_implementation == "sdpa"


def test_growing_cache_keeps_what_dynamic_cache_keeps():
    from adapters.policies import decoding

    gen = torch.Generator().manual_seed(1)
    grow, plain = DynamicCache(), DynamicCache()
    grow.layers, plain.layers = [decoding.growing_layer()()], [DynamicLayer()]
    rows = 3
    for step in range(40):  # several growths of the buffer
        n = 7 if step == 0 else 1
        k = torch.randn((rows, 2, n, 4), generator=gen)
        v = torch.randn((rows, 2, n, 4), generator=gen)
        a, b = grow.update(k, v, 0), plain.update(k, v, 0)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        if step == 10:  # rows copied (prefix expanded to samples)
            for c in (grow, plain):
                c.reorder_cache(torch.tensor([2, 0, 0]))
        if step == 20:
            for c in (grow, plain):
                c.crop(-3)
        if step == 30:  # rows leave the batch
            for c in (grow, plain):
                c.reorder_cache(torch.tensor([1, 2]))
            rows = 2
    assert grow.get_seq_length() == plain.get_seq_length() == 7 + 39 - 3
    assert torch.equal(grow.layers[0].keys, plain.layers[0].keys)
    assert torch.equal(grow.layers[0].values, plain.layers[0].values)


def test_policy_tokens_are_those_of_transformers_decoding():
    """Greedy completions of the CPU decoding path equal transformers' (float32, padded and
    equal rows in one call: several distinct prompts and a prompt sampled several times)."""
    model, tok = tiny_model(device="cpu")
    prompts = [[{"role": "user", "content": t}] for t in ("a b c", "a much longer prompt here")]
    out = {}
    for ours in (False, True):
        pol = TransformersPolicy(model, tok, device="cpu", batch_size=8, cpu_decoding=ours)
        assert pol._cpu_decoding is ours
        res = pol.generate(prompts, SamplingParams(temperature=1.0, n=3, seed=5, max_new_tokens=12))
        out[ours] = [[c.token_ids for c in cs] for cs in res]
        lps = [lp for cs in res for c in cs for lp in c.logprobs]
        out[(ours, "lp")] = torch.tensor(lps)
    assert out[True] == out[False]
    assert torch.allclose(out[(True, "lp")], out[(False, "lp")], atol=1e-4)
