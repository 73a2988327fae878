"""MarsRL §2.3 / UloRL §3.2.2 Eq. 9-10: dynamic masking of well-mastered positive tokens."""

from __future__ import annotations

import math

import pytest
import torch

from adapters.training.masking import mastered_positive_mask


def test_ulorl_eq10_masks_only_positive_mastered_tokens_below_target_entropy() -> None:
    # Three samples, three positions; sample 0 has two valid tokens (position 2 is padding).
    probs = torch.tensor(
        [
            [0.995, 0.40, 0.999],  # positive, mean entropy 0.15 < 0.2: token 0 masked only
            [0.995, 0.999, 0.50],  # positive, mean entropy 0.30 >= 0.2: nothing masked
            [0.999, 0.999, 0.999],  # negative advantage: nothing masked
        ]
    )
    entropy = torch.tensor([[0.1, 0.2, 5.0], [0.3, 0.3, 0.3], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    advantages = torch.tensor([0.7, 1.2, -0.5])
    got = mastered_positive_mask(torch.log(probs), entropy, advantages, mask)
    assert got.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    # Padding's entropy (5.0) does not count: without the mask sample 0's mean would be 1.77.
    # Raising the target above 0.3 (entropy of sample 1) masks sample 1's two mastered tokens.
    got = mastered_positive_mask(torch.log(probs), entropy, advantages, mask, target_entropy=0.31)
    assert got.tolist() == [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]


def test_threshold_and_per_token_advantages_use_the_sample_sign() -> None:
    lp = torch.tensor([[math.log(0.9901), math.log(0.9899)]])
    adv = torch.tensor([[0.3, 0.3]])
    got = mastered_positive_mask(lp, torch.zeros(1, 2), adv, torch.ones(1, 2))
    assert got.tolist() == [[1.0, 0.0]]
    assert mastered_positive_mask(lp, torch.zeros(1, 2), -adv, torch.ones(1, 2)).sum() == 0


def test_bad_threshold_and_shapes_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="tau"):
        mastered_positive_mask(
            torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1), tau=0.0
        )
    with pytest.raises(ValueError, match="shape"):
        mastered_positive_mask(
            torch.zeros(1, 2), torch.zeros(1, 1), torch.ones(1), torch.ones(1, 2)
        )


def test_masked_tokens_contribute_no_gradient() -> None:
    """Hand case (ratio 1, token mean over 4 tokens): sample 0 is positive with low entropy, so
    its 0.995-probability token is dropped; sample 1 is negative and keeps all its tokens."""
    from adapters.training.losses import ppo_clip_loss
    from adapters.training.masking import without_mastered_positives

    lp = torch.log(torch.tensor([[0.995, 0.5], [0.999, 0.999]])).requires_grad_()
    mask = torch.ones(2, 2)
    adv, dropped = without_mastered_positives(
        torch.tensor([1.0, -1.0]),
        lp,
        torch.full((2, 2), 0.1),
        mask,
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

    from .conftest import char_models, tiny_train_config

    assert TrainConfig(env="marsrl").resolved(cuda=False).mpt_mask_tau == 0.99
    assert TrainConfig(env="marsrl").resolved(cuda=True).mpt_target_entropy == 0.2
    assert TrainConfig(env="sokoban").resolved(cuda=False).mpt_mask_tau == 0.0
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
