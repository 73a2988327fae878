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
