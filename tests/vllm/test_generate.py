"""VLLMPolicy generation on the embedded SmolLM2 checkpoint: n samples, stop strings, lengths,
seeds, chat template, EOS handling, left truncation, sleep/wake."""

from __future__ import annotations

import logging

import pytest

from adapters.policies.base import SamplingParams

QUESTION = "What is the capital of France? Answer in one sentence."


def test_engine_start_and_chat_template(engine, hf):
    _, tok = hf
    text = tok.apply_chat_template(
        [{"role": "user", "content": QUESTION}], tokenize=False, add_generation_prompt=True
    )
    expected_ids = tok(text, add_special_tokens=False)["input_ids"]
    (c,) = engine.generate([QUESTION], SamplingParams(temperature=0, max_new_tokens=40))[0]
    assert c.prompt_ids == list(expected_ids)
    assert "Paris" in c.text
    # greedy answer ends with the EOS token: in token_ids, not in the text
    assert c.finish_reason == "stop"
    assert c.token_ids[-1] == tok.eos_token_id
    assert tok.eos_token not in c.text
    assert c.trainable and len(c.logprobs) == len(c.token_ids)
    assert tok.decode(c.token_ids[:-1]) == c.text
    print(f"engine start-up: {engine.start_seconds:.1f} s")


def test_n_samples_and_order(engine):
    prompts = [QUESTION, "Name a colour.", [{"role": "user", "content": "Say hi."}]]
    out = engine.generate(prompts, SamplingParams(n=3, max_new_tokens=8, seed=1))
    assert [len(cs) for cs in out] == [3, 3, 3]
    assert len({tuple(c.prompt_ids) for c in out[0] + out[1] + out[2]}) == 3
    for cs in out:
        for c in cs:
            assert 1 <= len(c.token_ids) <= 8 and len(c.logprobs) == len(c.token_ids)
            assert all(lp <= 0.0 for lp in c.logprobs)
    # the samples of one prompt are drawn independently
    assert len({tuple(c.token_ids) for c in out[0]}) > 1


def test_identical_prompts_get_different_samples(engine):
    out = engine.generate([QUESTION, QUESTION], SamplingParams(n=2, max_new_tokens=12, seed=3))
    streams = {tuple(c.token_ids) for cs in out for c in cs}
    assert len(streams) > 1


def test_seeds_reproducible(engine):
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=16, seed=1234)
    a = engine.generate([QUESTION, "Tell me a joke."], params)
    b = engine.generate([QUESTION, "Tell me a joke."], params)
    assert [[c.token_ids for c in cs] for cs in a] == [[c.token_ids for c in cs] for cs in b]
    assert [[c.logprobs for c in cs] for cs in a] == [[c.logprobs for c in cs] for cs in b]
    # a prompt's samples do not depend on the other prompts in the call
    alone = engine.generate([QUESTION], params)
    assert [c.token_ids for c in alone[0]] == [c.token_ids for c in a[0]]
    other = engine.generate(
        [QUESTION, "Tell me a joke."], SamplingParams(n=4, max_new_tokens=16, seed=99)
    )
    assert [c.token_ids for c in other[0]] != [c.token_ids for c in a[0]]


def test_max_new_tokens(engine):
    params = SamplingParams(n=2, max_new_tokens=5, seed=0)
    for c in engine.generate(["Write a long story about a dragon."], params)[0]:
        assert len(c.token_ids) == 5 and len(c.logprobs) == 5
        assert c.finish_reason == "length"


def test_stop_strings(engine, hf):
    _, tok = hf
    params = SamplingParams(temperature=0, max_new_tokens=60, stop=("Paris",))
    (c,) = engine.generate([QUESTION], params)[0]
    full = tok.decode(c.token_ids)
    assert c.finish_reason == "stop"
    assert "Paris" not in c.text and full.startswith(c.text)
    # the tokens that spell the stop string were generated, nothing after them
    assert "Paris" in full and "Paris" not in tok.decode(c.token_ids[:-1])
    (ref,) = engine.generate([QUESTION], SamplingParams(temperature=0, max_new_tokens=60))[0]
    assert ref.token_ids[: len(c.token_ids)] == c.token_ids
    assert ref.logprobs[: len(c.logprobs)] == pytest.approx(c.logprobs, abs=1e-6)
    # several stop strings: the earliest match wins
    (d,) = engine.generate(
        [QUESTION], SamplingParams(temperature=0, max_new_tokens=60, stop=("Paris", "capital"))
    )[0]
    assert "capital" not in d.text and len(d.token_ids) <= len(c.token_ids)


def test_left_truncation(engine, caplog):
    long_prompt = "Repeat after me. " + " ".join(f"word{i}" for i in range(200))
    full = engine.encode_prompt(long_prompt)
    engine.max_prompt_tokens = 32
    try:
        with caplog.at_level(logging.WARNING, logger="adapters.policies.base"):
            (c,) = engine.generate([long_prompt], SamplingParams(temperature=0, max_new_tokens=4))[
                0
            ]
    finally:
        engine.max_prompt_tokens = None
    assert c.prompt_ids == full[-32:]
    assert any("dropping the first" in r.getMessage() for r in caplog.records)
    # a prompt longer than the context never raises: it keeps max_model_len - max_new_tokens
    huge = " ".join(f"w{i}" for i in range(3000))
    (h,) = engine.generate([huge], SamplingParams(temperature=0, max_new_tokens=4))[0]
    assert h.prompt_ids == engine.encode_prompt(huge, 4) and len(h.prompt_ids) == 1020
    # and the completion is clamped to what the context has left
    engine.max_prompt_tokens = 1023
    try:
        (k,) = engine.generate([huge], SamplingParams(temperature=0, max_new_tokens=50))[0]
    finally:
        engine.max_prompt_tokens = None
    assert len(k.prompt_ids) == 1023 and len(k.token_ids) == 1 and k.finish_reason == "length"


def test_sleep_wake(engine, caplog):
    engine.sleep()
    try:
        with pytest.raises(RuntimeError, match="asleep"):
            engine.generate([QUESTION], SamplingParams(max_new_tokens=2))
    finally:
        engine.wake_up()
    (c,) = engine.generate([QUESTION], SamplingParams(temperature=0, max_new_tokens=40))[0]
    assert "Paris" in c.text


def test_api_misuse(engine):
    with pytest.raises(TypeError):
        engine.generate(QUESTION, SamplingParams())  # a bare string, not a list of prompts
    with pytest.raises(ValueError, match="fused"):
        engine.update_weights({"model.layers.0.self_attn.q_proj.weight": _zeros(576, 576)})
    with pytest.raises(ValueError, match="LoRA"):
        engine.update_weights(
            {"model.layers.0.self_attn.q_proj.lora_A.default.weight": _zeros(8, 576)}
        )
    with pytest.raises(KeyError, match="update_adapter"):
        engine.for_adapter("nope").generate([QUESTION])


def _zeros(*shape):
    import torch

    return torch.zeros(*shape)
