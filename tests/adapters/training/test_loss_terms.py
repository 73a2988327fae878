"""Each term of the update's loss (adapters.training.losses) on a case worked out by hand.

The numbers in the comments are computed by hand from the paper's equation named in each test's
docstring; the test checks the function against them, and the last tests check the composed
micro-batch loss against the sum of its terms."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from adapters.training.losses import (  # noqa: E402
    MicroBatch,
    aggregate_loss,
    entropy_bonus,
    group_mean_scale,
    group_weights,
    kl_loss,
    micro_batch_loss,
    ppo_clip_loss,
    token_kl,
    truncated_is_weights,
)
from adapters.training.masking import without_mastered_positives  # noqa: E402
from adapters.training.sections import UpdateConfig  # noqa: E402

LN2 = math.log(2.0)


def _cfg(**kw):
    return UpdateConfig(**kw).filled()


def test_ppo_clip_surrogate_with_clip_higher():
    """PPO (Schulman et al. 2017) Eq. 7, ``min(r A, clip(r, 1 - eps, 1 + eps) A)`` per token,
    as a loss to minimise, with DAPO's clip-higher (section 3.1: ``eps_high`` above
    ``eps_low``)."""
    old = torch.log(torch.tensor([[0.4, 0.4]]))
    ratio = torch.tensor([[1.25, 0.75]])
    logp = (old + ratio.log()).requires_grad_(True)
    adv = torch.tensor([[2.0, -2.0]])
    mask = torch.ones(1, 2)
    # eps_low 0.2, eps_high 0.28; per token max(-A r, -A clip(r, 0.8, 1.28)):
    #   r 1.25, A +2: max(-2.5, -2.5) = -2.5 (inside the range: not clipped)
    #   r 0.75, A -2: max(1.5, 1.6) = 1.6   (clipped at 0.8)
    #   token mean (-2.5 + 1.6) / 2 = -0.45, clip fraction 1/2
    loss, st = ppo_clip_loss(logp, old, adv, mask, clip_eps=0.2, clip_eps_high=0.28)
    assert loss.item() == pytest.approx(-0.45, abs=1e-6)
    assert st["clip_frac"].item() == pytest.approx(0.5)
    loss.backward()
    # only the unclipped token has a gradient: d(-A r)/d log pi = -A r = -2.5, over 2 tokens
    assert logp.grad is not None
    assert logp.grad[0].tolist() == pytest.approx([-1.25, 0.0], abs=1e-6)
    # symmetric eps 0.2: the first token is clipped at 1.2 too: max(-2.5, -2.4) = -2.4
    loss, st = ppo_clip_loss(logp, old, adv, mask, clip_eps=0.2)
    assert loss.item() == pytest.approx((-2.4 + 1.6) / 2, abs=1e-6)
    assert st["clip_frac"].item() == pytest.approx(1.0)


def test_group_weights_and_scale_give_eq3():
    """AT-GRPO Eq. 3, ``L = -E_g[1/K sum_c log pi(a_c) A_c]``: ``1/K_g`` within a group
    (group_weights) and ``1/G`` over the groups (group_mean_scale, per optimizer step)."""
    assert group_weights(["a", "a", "b"]) == [0.5, 0.5, 1.0]
    assert group_weights(["a", "a", "a", "b"]) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0])
    assert group_mean_scale(1, 2) == 0.5  # one step over two groups: the mean of 2
    assert group_mean_scale(2, 8) == 0.25  # two steps over 8 groups: each averages 4
    assert group_mean_scale(1, 0) == 1.0  # no group: nothing to divide
    # group a: K = 2 samples with A = +1 (2 tokens) and A = -1 (1 token); group b: K = 1, A = 0.5
    # at ratio 1 the per-token surrogate is -A, so each sample's token mean is -A:
    #   Eq. 3 = -((1/2)(1 - 1) + (1/1)(0.5)) / 2 = -0.25
    per_token = torch.tensor([[-1.0, -1.0], [1.0, 0.0], [-0.5, -0.5]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    weights = torch.tensor(group_weights(["a", "a", "b"]))
    summed = aggregate_loss(per_token, mask, "group-mean", weights)
    assert summed.item() == pytest.approx(-0.5)  # (1/2)(-1) + (1/2)(1) + 1(-0.5)
    assert (summed * group_mean_scale(1, 2)).item() == pytest.approx(-0.25)


def test_eq3_is_a_sum_over_the_mini_batch_whatever_its_micro_batches():
    """AT-GRPO Eq. 3 through micro_batch_loss: the update accumulates each micro-batch's loss
    weighted by its share of the mini-batch, and Eq. 3 is a sum, so the loss divides its
    surrogate by that share: one micro-batch or two give the same -0.25 as the test above."""
    cfg = _cfg(loss_agg="group-mean")
    lp = torch.zeros(3, 2)  # ratio 1 (old = new)
    adv = torch.tensor([[1.0, 1.0], [-1.0, 0.0], [0.5, 0.5]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    w = torch.tensor([0.5, 0.5, 1.0])
    whole, _ = micro_batch_loss(
        MicroBatch(lp, lp, adv, mask, group_weights=w), cfg, share=1.0, group_scale=0.5
    )
    assert whole.item() == pytest.approx(-0.25)
    # micro-batch 1 = the group a samples (share 2/3 of 3 sequences): (1/2)(-1) + (1/2)(1) = 0
    # micro-batch 2 = group b's sample (share 1/3): 1 * (-0.5) * 0.5 / (1/3) = -0.75
    # accumulated: 0 * 2/3 + (-0.75) * 1/3 = -0.25
    parts = [
        micro_batch_loss(
            MicroBatch(lp[rows], lp[rows], adv[rows], mask[rows], group_weights=w[rows]),
            cfg,
            share=len(rows) / 3,
            group_scale=0.5,
        )[0].item()
        * len(rows)
        / 3
        for rows in ([0, 1], [2])
    ]
    assert parts == pytest.approx([0.0, -0.25])


def test_truncated_importance_weights():
    """verl's decoupled token-level rollout correction (``rollout_is="token"``, the truncated
    importance sampling of Yao et al. 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"): ``w_t = min(pi_old / pi_behav, C)``, detached, 0 off the mask."""
    old = torch.log(torch.tensor([[0.3, 0.3, 0.6, 0.5]]))
    behav = torch.log(torch.tensor([[0.3, 0.2, 0.2, 0.5]]))
    mask = torch.tensor([[1, 1, 1, 0]])
    # ratios 0.3/0.3 = 1, 0.3/0.2 = 1.5, 0.6/0.2 = 3 -> capped at 2, padding -> 0
    w = truncated_is_weights(old.requires_grad_(True), behav, mask, cap=2.0)
    assert w[0].tolist() == pytest.approx([1.0, 1.5, 2.0, 0.0], abs=1e-6)
    assert not w.requires_grad
    # on the surrogate at ratio 1 with A = +1: token mean of -w = -(1 + 1.5 + 2) / 3 = -1.5
    lp = old.detach()
    loss, _ = ppo_clip_loss(lp, lp, torch.ones(1), mask, is_weights=w)
    assert loss.item() == pytest.approx(-1.5, abs=1e-6)


def test_kl_loss_estimators():
    """The KL term of MarsRL's Eq. 2 (GRPO's, DeepSeekMath Eq. 4, whose estimator is k3):
    ``k1 = log pi - log pi_ref``, ``k2 = k1^2 / 2``, ``k3 = pi_ref / pi - log(pi_ref / pi) - 1``
    (Schulman, "Approximating KL divergence", 2020), token mean over the mask."""
    lp = torch.log(torch.tensor([[0.5, 0.3, 0.9]]))
    ref = torch.log(torch.tensor([[0.25, 0.3, 0.1]]))
    mask = torch.tensor([[1, 1, 0]])
    # token 1: pi / pi_ref = 2: k1 = ln 2, k2 = (ln 2)^2 / 2, k3 = 1/2 + ln 2 - 1; token 2: 0
    assert token_kl(lp, ref, "k1")[0, :2].tolist() == pytest.approx([LN2, 0.0], abs=1e-6)
    assert token_kl(lp, ref, "k2")[0, 0].item() == pytest.approx(LN2**2 / 2, abs=1e-6)
    k3 = 0.5 + LN2 - 1  # 0.1931472
    assert token_kl(lp, ref, "k3")[0, 0].item() == pytest.approx(k3, abs=1e-6)
    assert kl_loss(lp, ref, mask, "k3").item() == pytest.approx(k3 / 2, abs=1e-6)  # token 3 off
    assert kl_loss(lp, ref, mask, "k1").item() == pytest.approx(LN2 / 2, abs=1e-6)


def test_entropy_bonus():
    """MAE's entropy bonus (Table 3: entropy coefficient 0.001): the policy's entropy,
    aggregated as the surrogate is; under Eq. 3 each sequence's token mean, then their mean."""
    h = torch.tensor([[1.0, 3.0], [4.0, 7.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert entropy_bonus(h, mask, "token-mean").item() == pytest.approx(8 / 3)  # (1 + 3 + 4) / 3
    assert entropy_bonus(h, mask, "group-mean").item() == pytest.approx(3.0)  # (2 + 4) / 2
    assert entropy_bonus(h, mask, "seq-mean-token-sum").item() == pytest.approx(4.0)  # (4 + 4) / 2


def test_mastered_positive_mask():
    """UloRL Eq. 10 (MarsRL section 2.3): while the model's entropy is below sigma, a token of
    a positive sample whose probability is at least tau leaves the policy-gradient sum; the
    token mean's denominator still counts it."""
    lp = torch.log(torch.tensor([[0.995, 0.5], [0.999, 0.999]]))
    mask = torch.ones(2, 2)
    adv = torch.tensor([1.0, -1.0])  # sample 0 positive, sample 1 negative
    out, dropped = without_mastered_positives(
        adv, lp, mask, model_entropy=0.1, tau=0.99, target_entropy=0.2
    )
    assert dropped.tolist() == [[1.0, 0.0], [0.0, 0.0]]  # 0.995 >= 0.99 in the positive sample
    assert out.tolist() == [[0.0, 1.0], [-1.0, -1.0]]
    _, shut = without_mastered_positives(
        adv, lp, mask, model_entropy=0.3, tau=0.99, target_entropy=0.2
    )
    assert shut.sum().item() == 0.0  # the model's entropy 0.3 >= 0.2: the gate is shut
    # through the loss at ratio 1: token mean of -A = (0 - 1 + 1 + 1) / 4 = 0.25
    cfg = _cfg(mpt_mask_tau=0.99, mpt_target_entropy=0.2)
    loss, st = micro_batch_loss(MicroBatch(lp, lp, adv, mask), cfg, share=1.0, model_entropy=0.1)
    assert loss.item() == pytest.approx(0.25, abs=1e-6)
    assert st["mpt_masked_frac"] == pytest.approx(0.25)


def test_micro_batch_loss_is_the_sum_of_its_terms():
    """All the terms together on one 2-token sample at ratio 1 (``pi_old = pi``), A = +1:

    * UloRL (tau 0.4, sigma 0.5, model entropy 0.1): token 1 (p = 0.5) is mastered, token 2
      (p = 0.25) is not: advantages [0, 1];
    * truncated IS (C 1.5): pi_old / pi_behav = [0.5 / 0.5, 0.25 / 0.125] = [1, 2] -> [1, 1.5];
    * surrogate: token mean of -A w r = (0 - 1.5) / 2 = -0.75;
    * KL (k3, beta 0.1) against pi_ref = [0.25, 0.25]: (0.1931472 + 0) / 2 = 0.0965736;
    * entropy bonus (alpha 0.01) of [0.8, 1.2]: 1.0;
    * L = -0.75 + 0.1 * 0.0965736 - 0.01 * 1.0 = -0.75034264.
    """
    cfg = _cfg(
        mpt_mask_tau=0.4,
        mpt_target_entropy=0.5,
        rollout_is_cap=1.5,
        kl_loss_coef=0.1,
        kl_loss_type="k3",
        entropy_coef=0.01,
    )
    lp = torch.log(torch.tensor([[0.5, 0.25]])).requires_grad_(True)
    mb = MicroBatch(
        logprobs=lp,
        old_logprobs=lp.detach(),
        advantages=torch.tensor([1.0]),
        mask=torch.ones(1, 2),
        behav_logprobs=torch.log(torch.tensor([[0.5, 0.125]])),
        ref_logprobs=torch.log(torch.tensor([[0.25, 0.25]])),
        entropy=torch.tensor([[0.8, 1.2]]),
    )
    loss, st = micro_batch_loss(mb, cfg, share=1.0, model_entropy=0.1)
    kl = (0.5 + LN2 - 1) / 2
    assert loss.item() == pytest.approx(-0.75 + 0.1 * kl - 0.01, abs=1e-6)
    want = {
        "pg_loss": -0.75,
        "kl_loss": kl,
        "entropy": 1.0,
        "is_weight_mean": 1.25,
        "mpt_masked_frac": 0.5,
        "clip_frac": 0.0,
        "approx_kl": 0.0,
        "ratio_max": 1.0,
        "loss": -0.75 + 0.1 * kl - 0.01,
    }
    assert st == pytest.approx(want, abs=1e-6)
    loss.backward()
    # d/dlog pi: surrogate -A w r / 2 = [0, -0.75]; k3' = 1 - pi_ref / pi = [0.5, 0] times
    # beta / 2 = [0.025, 0]; the entropy here is a given tensor (no gradient through it)
    assert lp.grad is not None
    assert lp.grad[0].tolist() == pytest.approx([0.025, -0.75], abs=1e-6)


def test_micro_batch_loss_terms_switch_off():
    """With every coefficient 0 and no behaviour log-probs the loss is the plain surrogate and
    reports only its statistics; a KL loss without reference log-probs is an error."""
    lp = torch.log(torch.tensor([[0.5, 0.25]]))
    mb = MicroBatch(lp, lp, torch.tensor([2.0]), torch.ones(1, 2))
    loss, st = micro_batch_loss(mb, _cfg(), share=0.5)
    assert loss.item() == pytest.approx(-2.0)  # the token mean, whatever the share
    assert set(st) == {"pg_loss", "loss", "clip_frac", "approx_kl", "ratio_max"}
    with pytest.raises(ValueError, match="reference"):
        micro_batch_loss(mb, _cfg(kl_loss_coef=0.1), share=1.0)
