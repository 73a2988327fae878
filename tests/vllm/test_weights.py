"""Weight sync into the running engine (update_weights) and LoRA adapters (update_adapter)."""

from __future__ import annotations

import time

import pytest

from adapters.policies.base import SamplingParams

from .conftest import MAX_LORA_RANK
from .test_logprobs import TOL, hf_logprobs

QUESTION = "What is the capital of France? Answer in one sentence."
GREEDY = SamplingParams(temperature=0, max_new_tokens=16)
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _greedy(policy):
    return policy.generate([QUESTION], GREEDY)[0][0]


def test_partial_update_changes_outputs_then_restores(engine, hf):
    import torch

    model, _ = hf
    base = _greedy(engine)
    down = {n: p for n, p in model.named_parameters() if n.endswith("mlp.down_proj.weight")}
    saved = {n: p.detach().clone() for n, p in down.items()}
    try:
        engine.update_weights({n: torch.zeros_like(p) for n, p in down.items()})
        changed = _greedy(engine)
        assert changed.token_ids != base.token_ids
        # the engine now computes what transformers computes with the same weights zeroed
        with torch.no_grad():
            for p in down.values():
                p.zero_()
        ref = hf_logprobs(model, changed.prompt_ids, changed.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(ref, changed.logprobs)) < TOL
        shifted = hf_logprobs(model, base.prompt_ids, base.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(shifted, base.logprobs)) > 0.1
    finally:
        with torch.no_grad():
            for n, p in down.items():
                p.copy_(saved[n])
        engine.update_weights(saved)
    restored = _greedy(engine)
    assert restored.token_ids == base.token_ids
    assert restored.logprobs == pytest.approx(base.logprobs, abs=1e-6)


def test_full_state_dict_sync_is_identity(engine, hf):
    model, _ = hf
    base = _greedy(engine)
    t0 = time.perf_counter()
    sent = engine.update_weights(model.state_dict())
    print(f"full sync of {sent} tensors: {time.perf_counter() - t0:.2f} s")
    assert sent == len(model.state_dict())
    again = _greedy(engine)
    assert again.token_ids == base.token_ids
    assert again.logprobs == pytest.approx(base.logprobs, abs=1e-6)


def _peft_model(seed):
    import torch
    from peft import LoraConfig, get_peft_model

    from adapters.policies.models import load_policy_model

    model, _ = load_policy_model(None, device="cpu", dtype=torch.float32)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        cfg = LoraConfig(
            r=MAX_LORA_RANK, lora_alpha=16, target_modules=LORA_TARGETS, init_lora_weights=False
        )
        return get_peft_model(model, cfg)


def test_lora_adapter_changes_outputs_and_reloads(engine, tmp_path):
    import torch

    peft_model = _peft_model(seed=0)
    path = tmp_path / "role_a"
    peft_model.save_pretrained(str(path))
    base = _greedy(engine)
    first = engine.update_adapter("role_a", path)
    view = engine.for_adapter("role_a")
    a1 = _greedy(view)
    assert a1.token_ids != base.token_ids
    ref = hf_logprobs(peft_model, a1.prompt_ids, a1.token_ids, 1.0)
    assert max(abs(x - y) for x, y in zip(ref, a1.logprobs)) < TOL
    # an "optimizer step" on the adapter, saved over the same directory and reloaded
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_B" in n:
                p.mul_(-1.0)
    peft_model.save_pretrained(str(path))
    second = engine.update_adapter("role_a", path)
    assert second.lora_int_id != first.lora_int_id
    a2 = _greedy(view)  # the same view now uses the new version
    assert a2.token_ids != a1.token_ids
    ref2 = hf_logprobs(peft_model, a2.prompt_ids, a2.token_ids, 1.0)
    assert max(abs(x - y) for x, y in zip(ref2, a2.logprobs)) < TOL
    # the base model is untouched by adapters
    assert _greedy(engine).token_ids == base.token_ids
    assert "role_a" in engine.adapters
    engine.remove_adapter("role_a")
    with pytest.raises(KeyError):
        view.generate([QUESTION], GREEDY)
