"""MarsRL §2.3 / UloRL §3.2.2 Eq. 9-10: dynamic masking of well-mastered positive tokens."""

from __future__ import annotations

import math

import pytest
import torch

from adapters.training.masking import mastered_positive_mask


def test_ulorl_eq10_gate_reads_the_model_entropy_not_each_sample() -> None:
    # Three samples, three positions; sample 0 has two valid tokens (position 2 is padding).
    probs = torch.tensor(
        [
            [0.995, 0.40, 0.999],  # positive: token 0 is mastered (position 2 is padding)
            [0.995, 0.999, 0.50],  # positive: tokens 0 and 1 are mastered
            [0.999, 0.999, 0.999],  # negative advantage: nothing masked
        ]
    )
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    advantages = torch.tensor([0.7, 1.2, -0.5])
    lp = torch.log(probs)
    # model entropy 0.15 < 0.2: every positive sample's mastered tokens go, whatever the
    # sample's own entropy (the gate is the model's, UloRL 3.2.2)
    got = mastered_positive_mask(lp, advantages, mask, model_entropy=0.15)
    assert got.tolist() == [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    # at or above the target nothing is masked
    assert mastered_positive_mask(lp, advantages, mask, model_entropy=0.2).sum() == 0
    assert (
        mastered_positive_mask(lp, advantages, mask, model_entropy=0.3, target_entropy=0.31).sum()
        == 3
    )


def test_threshold_and_per_token_advantages_use_the_sample_sign() -> None:
    lp = torch.tensor([[math.log(0.9901), math.log(0.9899)]])
    adv = torch.tensor([[0.3, 0.3]])
    got = mastered_positive_mask(lp, adv, torch.ones(1, 2), model_entropy=0.0)
    assert got.tolist() == [[1.0, 0.0]]
    assert mastered_positive_mask(lp, -adv, torch.ones(1, 2), model_entropy=0.0).sum() == 0


def test_bad_threshold_and_shapes_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="tau"):
        mastered_positive_mask(
            torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1), model_entropy=0.0, tau=0.0
        )
    with pytest.raises(ValueError, match="shape"):
        mastered_positive_mask(torch.zeros(1, 2), torch.ones(1), torch.ones(1, 1), model_entropy=0)
    with pytest.raises(ValueError, match="model_entropy"):
        mastered_positive_mask(
            torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1), model_entropy=float("nan")
        )


def test_masked_tokens_contribute_no_gradient() -> None:
    """Hand case (ratio 1, token mean over 4 tokens): the model's entropy is low and sample 0 is
    positive, so its 0.995-probability token is dropped; sample 1 is negative and keeps all."""
    from adapters.training.losses import ppo_clip_loss
    from adapters.training.masking import without_mastered_positives

    lp = torch.log(torch.tensor([[0.995, 0.5], [0.999, 0.999]])).requires_grad_()
    mask = torch.ones(2, 2)
    adv, dropped = without_mastered_positives(
        torch.tensor([1.0, -1.0]),
        lp,
        mask,
        model_entropy=0.1,
        tau=0.99,
        target_entropy=0.2,
    )
    assert dropped.tolist() == [[1.0, 0.0], [0.0, 0.0]]
    loss, _ = ppo_clip_loss(lp, lp.detach(), adv, mask)
    # per token -A * ratio: (0 - 1 + 1 + 1) / 4; the dropped token still counts in the mean
    assert loss.item() == pytest.approx(0.25)
    loss.backward()
    assert lp.grad is not None
    assert lp.grad.tolist() == [[0.0, -0.25], [0.25, 0.25]]


def test_update_masks_exactly_the_positive_tokens_when_every_token_qualifies(tmp_path) -> None:
    """With tau tiny and the target entropy huge, Eq. 10 drops every token of every positive
    sample: the reported masked share is the positive samples' share of the trained tokens."""
    pytest.importorskip("transformers")
    from adapters.training.config import TrainConfig
    from adapters.training.trainer import Trainer

    from ..conftest import char_models, tiny_train_config

    assert TrainConfig(env="marsrl").resolved(cuda=False).update.mpt_mask_tau == 0.99
    assert TrainConfig(env="marsrl").resolved(cuda=True).update.mpt_target_entropy == 0.2
    assert TrainConfig(env="sokoban").resolved(cuda=False).update.mpt_mask_tau == 0.0
    cfg = tiny_train_config(
        tmp_path, steps=1, candidates=4, mpt_mask_tau=1e-12, mpt_target_entropy=1e9
    )
    tr = Trainer(cfg, models=char_models(), log=lambda s: None)
    samples = tr.rollout(1).samples
    for s in samples:  # the random model earns nothing: two positives and two negatives per group
        s.reward = float(s.candidate % 2)
    stats = tr.update(samples, 1)
    tr.close()
    trained = [s for s in samples if s.advantage]
    positive = sum(len(s.completion_ids) for s in trained if s.advantage > 0)
    total = sum(len(s.completion_ids) for s in trained)
    assert 0 < positive < total
    assert stats["mpt_masked_frac"] == pytest.approx(positive / total, abs=1e-6)


def test_update_gate_is_the_batch_token_mean_entropy_of_the_model(tmp_path) -> None:
    """The gate reads H = mean over every trained token of the policy's entropy (computed here
    from full logits at the sampling temperature): with the target just above H the positive
    samples' tokens go (tau tiny), just below it nothing does, on the same samples."""
    import copy

    import torch.nn.functional as F

    from adapters.training.trainer import Trainer

    from ..conftest import char_models, tiny_train_config

    def run(target, samples=None):
        cfg = tiny_train_config(
            tmp_path, f"t{target}", steps=1, candidates=4, mpt_mask_tau=1e-12,
            mpt_target_entropy=target, temperature=1.0,
        )  # fmt: skip
        tr = Trainer(cfg, models=char_models(), log=lambda s: None)
        if samples is None:
            samples = tr.rollout(1).samples
            for s in samples:
                s.reward = float(s.candidate % 2)
        fresh = copy.deepcopy(samples)
        stats = tr.update(copy.deepcopy(samples), 1)
        tr.close()
        return stats, fresh

    stats, samples = run(1e9)
    h = stats["model_entropy"]
    # by hand: the entropy of softmax(logits) at every completion token of the fresh model
    model, _tok = char_models()
    total = count = 0.0
    with torch.no_grad():
        for s in samples:
            ids = torch.tensor([s.prompt_ids + s.completion_ids])
            logits = model(ids).logits[0, len(s.prompt_ids) - 1 : -1].float()
            logp = F.log_softmax(logits, dim=-1)
            total += float(-(logp.exp() * logp).sum())
            count += len(s.completion_ids)
    assert h == pytest.approx(total / count, rel=1e-4)
    above, _ = run(h * 1.001, samples)
    below, _ = run(h * 0.999, samples)
    assert above["mpt_masked_frac"] > 0 and below["mpt_masked_frac"] == 0.0
