"""The embedded SmolLM2-135M-Instruct model and the tiny test model (slow: real weights).

The first run converts the GGUF into the cache (about 20 s); later runs load the cached
checkpoint in about 1-2 s. The model is loaded in float32 here so that the log-probs reported by
generation can be compared with a full forward pass at a tolerance of 1e-4 (measured: ~3e-5;
the gap comes from KV-cached incremental attention vs one full pass, in float32).
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from adapters.policies import SamplingParams, TransformersPolicy, models  # noqa: E402
from adapters.training.logprobs import sequence_logprobs  # noqa: E402

pytestmark = pytest.mark.slow

LOGPROB_TOL = 1e-4


@pytest.fixture(scope="module")
def smol():
    try:
        models.embedded_gguf_path()
    except models.EmbeddedModelMissing as e:
        pytest.skip(str(e))
    model, tok = models.load_policy_model(None, device="cpu", dtype=torch.float32)
    return TransformersPolicy(model, tok, device="cpu", batch_size=8)


def test_checkpoint_is_cached_and_loads_fast(smol):
    path = models.ensure_embedded_checkpoint()
    assert (path / "mas_conversion.json").is_file() and (path / "model.safetensors").is_file()
    t0 = time.perf_counter()
    model, tok = models.load_policy_model(str(path), device="cpu")  # as a plain local path
    assert time.perf_counter() - t0 < 15
    assert model.dtype == torch.bfloat16  # stored dtype by default
    assert tok.pad_token_id is not None and tok.padding_side == "left"


def test_answers_a_chat_prompt_coherently(smol):
    (c,) = smol.generate(
        ["What is the capital of France?"], SamplingParams(temperature=0, max_new_tokens=24)
    )[0]
    assert "Paris" in c.text
    assert c.finish_reason == "stop" and c.token_ids[-1] in smol.eos_ids
    assert "<|im_end|>" not in c.text and c.text.strip()
    assert smol.tokenizer.decode(c.prompt_ids).endswith("<|im_start|>assistant\n")


def test_reported_logprobs_match_a_recomputation(smol):
    params = SamplingParams(n=2, temperature=0.8, top_p=0.9, max_new_tokens=20, seed=3)
    prompts = ["Write a haiku about rain.", [{"role": "user", "content": "Name three fruits."}]]
    flat = [c for cs in smol.generate(prompts, params) for c in cs]
    width = max(len(c.prompt_ids) + len(c.token_ids) for c in flat)
    pad = smol.tokenizer.pad_token_id
    ids = torch.full((len(flat), width), pad)
    attn, comp = torch.zeros_like(ids), torch.zeros_like(ids)
    for i, c in enumerate(flat):  # right padding this time (generation used left padding)
        seq = c.prompt_ids + c.token_ids
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        comp[i, len(c.prompt_ids) : len(seq)] = 1
    with torch.no_grad():
        lp = sequence_logprobs(smol.model, ids, attn, comp, temperature=0.8)
    for i, c in enumerate(flat):
        ref = lp[i, len(c.prompt_ids) : len(c.prompt_ids) + len(c.token_ids)]
        assert (ref - torch.tensor(c.logprobs)).abs().max().item() < LOGPROB_TOL


def test_seed_n_and_stop(smol):
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=42)
    a = smol.generate(["Tell me a fun fact."], params)[0]
    b = smol.generate(["Tell me a fun fact."], params)[0]
    assert len(a) == 3 and [c.token_ids for c in a] == [c.token_ids for c in b]
    assert len({tuple(c.token_ids) for c in a}) == 3
    stop = smol.generate(
        ["Count from 1 to 10, separated by commas."],
        SamplingParams(temperature=0, max_new_tokens=40, stop=(", 5",)),
    )[0][0]
    assert (
        stop.text.startswith("1, 2, 3") and stop.text.endswith("4") and stop.finish_reason == "stop"
    )
    assert smol.tokenizer.decode(stop.token_ids).endswith(", 5")


def test_tiny_model_generates():
    model, tok = models.tiny_model(seed=0)
    assert sum(p.numel() for p in model.parameters()) < 4_000_000
    policy = TransformersPolicy(model, tok, device="cpu")
    out = policy.generate(["hi", "there"], SamplingParams(n=2, max_new_tokens=8, seed=0))
    assert all(len(c.token_ids) == len(c.logprobs) for cs in out for c in cs)
    assert all(1 <= len(c.token_ids) <= 8 for cs in out for c in cs)
    again, _ = models.tiny_model(seed=0)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))


def test_model_from_config_uses_the_smollm2_tokenizer_when_none_is_shipped():
    small = dict(
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    model, tok = models.model_from_config("qwen3-1.7b", num_hidden_layers=1, **small)
    assert len(tok) == 49152 and model.config.vocab_size == 151936
    policy = TransformersPolicy(model, tok, device="cpu")
    (c,) = policy.generate(["x"], SamplingParams(max_new_tokens=4, seed=0))[0]
    assert len(c.token_ids) >= 1
