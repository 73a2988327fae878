"""The trainer's ``vllm`` rollout backend (VLLMBackend) on the shared engine: lazy first sync,
per-role LoRA adapters re-saved and reloaded after an update, full-weight sync."""

from __future__ import annotations

import pytest

from adapters.policies.base import SamplingParams

from .test_logprobs import TOL, hf_logprobs

QUESTION = "What is the capital of France? Answer in one sentence."
GREEDY = SamplingParams(temperature=0, max_new_tokens=16)


def _models(cfg, roles):
    import torch

    from adapters.policies.models import load_policy_model
    from adapters.training.policy_models import build_policy_models

    base = load_policy_model(None, device="cpu", dtype=torch.float32)
    model, tok = base
    return build_policy_models(cfg, roles, model), tok


def _step(params, seed, scale=0.05):
    """Stand-in for an optimizer step: add seeded noise to the given parameters."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn(p.shape, generator=gen) * scale)


def test_per_role_lora_backend(engine):
    from adapters.training.backends import VLLMBackend
    from adapters.training.config import TrainConfig

    cfg = TrainConfig(model="smollm2", dtype="float32", lora_rank=8, per_role=True)
    cfg = cfg.resolved(cuda=False)
    models, tok = _models(cfg, ["alpha", "beta"])
    backend = VLLMBackend(cfg, models, tok, "cpu", ["alpha", "beta"], engine=engine)
    try:
        pols = backend.policies()
        assert set(pols) == {"alpha", "beta"} and backend.role_policy == {
            "alpha": "alpha",
            "beta": "beta",
        }
        base = engine.generate([QUESTION], GREEDY)[0][0]
        # first use pushes each adapter; peft starts LoRA at zero, so both equal the base
        for pid in ("alpha", "beta"):
            c = pols[pid].generate([QUESTION], GREEDY)[0][0]
            assert c.token_ids == base.token_ids and _shift(c, base) < TOL
        _step([p for p in models["alpha"].params if "lora_B" in _name(models["alpha"], p)], 0)
        backend.sync(["alpha"])
        a = pols["alpha"].generate([QUESTION], GREEDY)[0][0]
        assert a.token_ids != base.token_ids or _shift(a, base) > 0.05
        models["alpha"].activate()
        ref = hf_logprobs(models["alpha"].model, a.prompt_ids, a.token_ids, 1.0)
        assert max(abs(x - y) for x, y in zip(ref, a.logprobs)) < TOL
        b = pols["beta"].generate([QUESTION], GREEDY)[0][0]
        assert b.token_ids == base.token_ids and _shift(b, base) < TOL
    finally:
        backend.close()
    assert "alpha" not in engine.adapters and "beta" not in engine.adapters


def test_full_finetuning_backend_with_role_prefixes(engine):
    from adapters.training.backends import VLLMBackend
    from adapters.training.config import TrainConfig

    cfg = TrainConfig(model="smollm2", dtype="float32", lora_rank=0).resolved(cuda=False)
    models, tok = _models(cfg, ["alpha", "beta"])
    (pm,) = models.values()
    original = {n: t.detach().clone() for n, t in pm.model.state_dict().items()}
    demo = [{"role": "user", "content": "Say OK."}, {"role": "assistant", "content": "OK."}]
    backend = VLLMBackend(
        cfg, models, tok, "cpu", ["alpha", "beta"], {"alpha": demo}, engine=engine
    )
    pols = backend.policies()
    assert set(pols) == {"shared/alpha", "shared/beta"}
    assert backend.train_pid == {"shared/alpha": "shared", "shared/beta": "shared"}
    try:
        base = pols["shared/beta"].generate([QUESTION], GREEDY)[0][0]  # lazy full-weight sync
        with_demo = pols["shared/alpha"].generate([QUESTION], GREEDY)[0][0]
        assert len(with_demo.prompt_ids) > len(base.prompt_ids)
        assert "Say OK." in tok.decode(with_demo.prompt_ids)
        _step([p for n, p in pm.model.named_parameters() if ".mlp." in n], 1, scale=0.02)
        backend.sync([pm.pid])
        changed = pols["shared/beta"].generate([QUESTION], GREEDY)[0][0]
        assert changed.token_ids != base.token_ids or _shift(changed, base) > 0.05
        ref = hf_logprobs(pm.model, changed.prompt_ids, changed.token_ids, 1.0)
        assert max(abs(x - y) for x, y in zip(ref, changed.logprobs)) < TOL
    finally:
        engine.update_weights(original)
        backend.close()
    restored = engine.generate([QUESTION], GREEDY)[0][0]
    assert restored.token_ids == base.token_ids and _shift(restored, base) < 1e-6


def _shift(c, base):
    """Largest log-prob difference on the tokens both completions share."""
    n = min(len(c.token_ids), len(base.token_ids))
    return max(abs(x - y) for x, y in zip(c.logprobs[:n], base.logprobs[:n]))


def _name(pm, param):
    for n, p in pm.peft.named_parameters():
        if p is param:
            return n
    pytest.fail("parameter not found in the peft model")
