"""Generation from a merged copy of a LoRA policy (adapters.training.backends.GenerationCopy)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from adapters.policies import SamplingParams, TransformersPolicy  # noqa: E402
from adapters.training.backends import GenerationCopy  # noqa: E402
from adapters.training.config import TrainConfig  # noqa: E402
from adapters.training.logprobs import completion_logprobs  # noqa: E402
from adapters.training.policy_models import build_policy_models  # noqa: E402

from ..conftest import char_models  # noqa: E402

PROMPTS = ["go left and then up", "a longer prompt with more words in it", "x"]


def _policies(per_role: bool = False):
    model, tok = char_models(seed=3)
    cfg = TrainConfig(env="plan_path", lora_rank=4, per_role=per_role, device="cpu").resolved()
    pms = build_policy_models(cfg, ["tool", "planner"], model)
    gen = torch.Generator().manual_seed(0)
    for pm in pms.values():  # a non-zero adapter: as after some updates
        for p in pm.params:
            p.data.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return pms, tok


def _generate(module, tok, params):
    pol = TransformersPolicy(module, tok, device="cpu", batch_size=8)
    return [c for cs in pol.generate(PROMPTS, params) for c in cs]


def test_merged_copy_generates_what_the_adapter_model_generates():
    pms, tok = _policies()
    pm = pms["shared"]
    copy = GenerationCopy(pm, torch.float32)
    greedy = SamplingParams(temperature=0, max_new_tokens=24)
    ref, got = _generate(pm.model, tok, greedy), _generate(copy.model, tok, greedy)
    assert [c.token_ids for c in got] == [c.token_ids for c in ref]
    sampled = SamplingParams(temperature=1.0, n=2, seed=5, max_new_tokens=24)
    ref, got = _generate(pm.model, tok, sampled), _generate(copy.model, tok, sampled)
    assert [c.token_ids for c in got] == [c.token_ids for c in ref]
    for a, b in zip(ref, got):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    # the training model scores the copy's samples as its own
    lp = completion_logprobs(pm.model, [got[0].prompt_ids], [got[0].token_ids], pad_id=0)
    assert torch.allclose(lp[0], torch.tensor(got[0].logprobs), atol=1e-4)


def test_refresh_follows_the_updated_adapter_and_only_its_own():
    pms, tok = _policies(per_role=True)
    tool, planner = (
        GenerationCopy(pms["tool"], torch.float32),
        GenerationCopy(pms["planner"], torch.float32),
    )
    greedy = SamplingParams(temperature=0, max_new_tokens=24)
    before = [c.token_ids for c in _generate(tool.model, tok, greedy)]
    planner_before = [c.token_ids for c in _generate(planner.model, tok, greedy)]
    with torch.no_grad():  # an "update" of the tool's adapter only
        for p in pms["tool"].params:
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.5)
    assert [c.token_ids for c in _generate(tool.model, tok, greedy)] == before  # stale
    tool.refresh()
    planner.refresh()
    pms["tool"].activate()
    want = [c.token_ids for c in _generate(pms["tool"].model, tok, greedy)]
    assert [c.token_ids for c in _generate(tool.model, tok, greedy)] == want != before
    assert [c.token_ids for c in _generate(planner.model, tok, greedy)] == planner_before


def test_bfloat16_copy_log_probs_stay_close():
    """bfloat16 rounding (relative 2**-9 per weight) moves this deliberately rough random
    model's log-probs by a few hundredths of a nat on average (the update recomputes them)."""
    pms, tok = _policies()
    pm = pms["shared"]
    copy = GenerationCopy(pm, torch.bfloat16)
    assert next(copy.model.parameters()).dtype == torch.bfloat16
    assert next(pm.model.parameters()).dtype == torch.float32  # the training model is untouched
    got = _generate(copy.model, tok, SamplingParams(temperature=1.0, seed=2, max_new_tokens=24))
    diffs = []
    for c in got:
        lp = completion_logprobs(pm.model, [c.prompt_ids], [c.token_ids], pad_id=0)
        diffs.append((lp[0] - torch.tensor(c.logprobs)).abs().detach())
    diffs = torch.cat(diffs)
    assert diffs.mean() < 0.1 and diffs.max() < 1.5, (diffs.mean(), diffs.max())


@pytest.mark.parametrize("old", ["forward", "recompute"])
def test_a_training_step_with_the_merged_copy_and_a_bfloat16_update(tmp_path, old):
    """The CPU defaults: rollouts sampled by the merged bfloat16 copy, old log-probs the training
    model's (from the one-step update's own forward, or a pass before it), the update under
    bfloat16 autocast; the step changes the adapter and the next rollout samples from the
    refreshed copy."""
    from adapters.training.trainer import Trainer

    from ..conftest import tiny_train_config

    cfg = tiny_train_config(
        tmp_path,
        generation_model="merged",
        update_precision="bfloat16",
        candidates=4,
        lr=5e-2,
        **({} if old == "forward" else {"old_logprobs": old}),  # forward: auto's choice
    )
    tr = Trainer(cfg, models=char_models(seed=3), log=lambda s: None)
    assert tr.cfg.update.old_logprobs == old and tr.run.backend.copies
    copy = tr.run.backend.copies["shared"]
    before = {k: v.clone() for k, v in copy.model.state_dict().items()}
    result = tr.rollout(1)
    for s in result.samples:  # varied rewards: every group has signal
        s.reward = (sum(map(ord, s.completion)) % 5) / 5
    stats = tr.update(result.samples, 1)
    assert stats["optimizer_steps"] >= 1 and stats["samples_trained"] > 0
    tr.rollout(2)  # refreshes the stale copy before generating
    after = copy.model.state_dict()
    from adapters.training.backends import generation_dtype

    # bfloat16 where the CPU has it natively; float32 (and float16-weight decode steps) where
    # it is emulated (MAS_CPU_BF16=emulated)
    assert next(copy.model.parameters()).dtype == generation_dtype(tr.cfg, tr.run.device)
    assert any(not torch.equal(after[k], v) for k, v in before.items())
    tr.close()
