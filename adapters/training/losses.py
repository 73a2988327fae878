"""Losses as pure torch functions: the PPO clipped surrogate, KL estimators and the KL loss.

* :func:`ppo_clip_loss` - PPO clipped surrogate with optional asymmetric clipping
  (``clip_eps`` low, ``clip_eps_high`` high, "clip-higher"), aggregated by token mean over the
  valid tokens of the batch by default (:func:`aggregate_loss`); returns the loss and detached
  statistics (clip fraction, approximate KL between old and new policy). With
  ``old_logprobs = logprobs.detach()`` (one on-policy step) its gradient equals AT-GRPO's Eq. 3
  policy gradient.
* :func:`group_mean_weights` and the ``"group-mean"`` aggregation: AT-GRPO's Eq. 3,
  ``L = -E_g[1/K sum_c log pi(a_c) A_c]``: each sample weighs ``1/K_g`` within its group and the
  groups are averaged, so a sample's weight is ``1 / (G * K_g)`` whatever the other groups'
  advantages are (a group whose K rewards are equal still counts in G). A sample's
  ``log pi(a_c)`` enters as the token mean of its per-token surrogate (verl's
  ``seq-mean-token-mean`` per sample), so the step does not grow with the completion length;
  at ratio 1 (one on-policy step) the gradient is Eq. 3's with length-normalised log-probs.
  Hand case: group A rewards [1, 0, 0, 0], group B all equal, 10-token completions: Eq. 3 weights
  each A sample's token-mean log-prob by ``A/8``; the token mean over the informative samples
  (``"token-mean"`` with ``skip_zero_advantage``, the earlier default) by ``A/4``. The authors'
  code trains with verl's token mean (PettingLLMs ``pettingllms/config/ppo_trainer/base.yaml``,
  ``actor.loss_agg_mode: token-mean``); ``loss_agg="token-mean"`` reproduces that.
* :func:`truncated_is_weights`: the off-policy correction of asynchronous rollouts
  (``--max-staleness``). A token sampled by a behaviour policy several versions old gets the
  weight ``min(pi_old / pi_behav, C)`` on its clipped surrogate, where ``pi_old`` is the policy at
  the start of this update (the PPO ratio's denominator, recomputed) and ``pi_behav`` the sampler's
  log-probs recorded at generation. This is verl's decoupled token-level rollout correction
  (``verl/trainer/ppo/core_algos.py``, ``compute_policy_loss_vanilla``: ``pg_losses *
  rollout_is_weights``; the weights from ``verl/trainer/ppo/rollout_corr_helper.py`` with
  ``rollout_is="token"`` and ``rollout_is_threshold``, default 2.0): the PPO ratio keeps its trust
  region around the current policy, the detached weight carries the sample back from the
  behaviour policy, truncated so that a stale token cannot dominate the batch.
* :func:`token_kl` (k1, k2, k3 estimators) and :func:`kl_loss` (masked token mean), the KL term
  of MarsRL's Eq. 2 and of verl's ``use_kl_loss``.

Shapes: ``B`` sequences, ``T`` completion positions; ``mask`` (B, T) is 1 on valid completion
tokens; per-token tensors are meaningful only where the mask is 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal

import torch

from adapters.training.masking import check_token_shapes, masked_mean

KLKind = Literal["k1", "k2", "k3"]
LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "group-mean"]

__all__ = [
    "KLKind",
    "LossAgg",
    "aggregate_loss",
    "group_mean_weights",
    "kl_loss",
    "ppo_clip_loss",
    "token_kl",
    "truncated_is_weights",
]


def token_kl(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: KLKind = "k1"
) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi.

    k1 = log pi - log pi_ref; k2 = (log pi - log pi_ref)^2 / 2;
    k3 = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1 (non-negative, unbiased).

    >>> token_kl(torch.tensor([0.0]), torch.tensor([-1.0]), "k1").item()
    1.0
    """
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(f"shapes differ: {tuple(logprobs.shape)} vs {tuple(ref_logprobs.shape)}")
    diff = logprobs - ref_logprobs
    if kind == "k1":
        return diff
    if kind == "k2":
        return 0.5 * diff**2
    if kind == "k3":
        return torch.expm1(-diff) + diff
    raise ValueError(f"unknown KL estimator {kind!r}; use 'k1', 'k2' or 'k3'")


def kl_loss(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, kind: KLKind = "k3"
) -> torch.Tensor:
    """KL penalty term for the loss: the token mean of :func:`token_kl` over valid tokens."""
    check_token_shapes(mask, logprobs, ref_logprobs)
    return masked_mean(token_kl(logprobs, ref_logprobs, kind), mask)


def group_mean_weights(groups: Sequence[str]) -> list[float]:
    """AT-GRPO Eq. 3's sample weights ``1 / (G * K_g)``: ``1/K`` within a group, groups averaged.

    >>> group_mean_weights(["a", "a", "a", "a", "b", "b", "b", "b"])[0]  # 1 / (2 * 4)
    0.125
    >>> group_mean_weights(["a", "a", "b"])  # uneven groups: each group weighs 1/2 in all
    [0.25, 0.25, 0.5]
    """
    sizes = Counter(groups)
    return [1.0 / (len(sizes) * sizes[g]) for g in groups]


def aggregate_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAgg = "token-mean",
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a (B, T) per-token loss to a scalar.

    ``token-mean``: sum over valid tokens / number of valid tokens in the batch;
    ``seq-mean-token-mean``: mean over sequences of each sequence's token mean;
    ``seq-mean-token-sum``: mean over sequences of each sequence's token sum;
    ``group-mean``: ``sum_i weights[i] * token mean of sequence i`` with AT-GRPO Eq. 3's
    ``weights`` (:func:`group_mean_weights`; not renormalised, so a caller can pass the weights
    of a larger batch). Sequences without valid tokens are left out of the sequence means.

    >>> per_token = torch.tensor([[2.0, 4.0], [1.0, 0.0]])
    >>> mask = torch.tensor([[1, 1], [1, 0]])
    >>> round(aggregate_loss(per_token, mask).item(), 4)  # (2 + 4 + 1) / 3
    2.3333
    >>> aggregate_loss(per_token, mask, "group-mean", torch.tensor([0.25, 0.5])).item()
    1.25
    """
    m = mask.to(per_token.dtype)
    if mode == "token-mean":
        return masked_mean(per_token, m)
    if mode == "group-mean":
        if weights is None or weights.shape != per_token.shape[:1]:
            raise ValueError("group-mean needs one weight per sequence (group_mean_weights)")
        per_seq = (per_token * m).sum(-1) / m.sum(-1).clamp(min=1)
        return (per_seq * weights.to(per_token.dtype)).sum()
    has = (m.sum(-1) > 0).to(per_token.dtype)
    if mode == "seq-mean-token-mean":
        per_seq = (per_token * m).sum(-1) / m.sum(-1).clamp(min=1)
    elif mode == "seq-mean-token-sum":
        per_seq = (per_token * m).sum(-1)
    else:
        raise ValueError(f"unknown loss aggregation {mode!r}")
    return (per_seq * has).sum() / has.sum().clamp(min=1)


def truncated_is_weights(
    old_logprobs: torch.Tensor, behav_logprobs: torch.Tensor, mask: torch.Tensor, cap: float
) -> torch.Tensor:
    """Per-token ``min(exp(old - behav), cap)`` (detached; 0 off the mask): the importance weight
    from the behaviour policy that sampled a token to the policy being updated (module docstring).

    >>> w = truncated_is_weights(
    ...     torch.tensor([[-1.0, -0.5, -2.0]]), torch.tensor([[-1.0, -2.0, -1.0]]),
    ...     torch.tensor([[1, 1, 0]]), cap=2.0)
    >>> [round(x, 4) for x in w[0].tolist()]  # 1, min(e^1.5, 2), off the mask
    [1.0, 2.0, 0.0]
    """
    check_token_shapes(mask, old_logprobs, behav_logprobs)
    w = torch.exp(old_logprobs.detach() - behav_logprobs.detach()).clamp(max=cap)
    return w * mask.to(w.dtype)


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    loss_agg: LossAgg = "token-mean",
    weights: torch.Tensor | None = None,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate loss (to minimise).

    ``is_weights`` (B, T), optional: per-token importance weights of stale samples
    (:func:`truncated_is_weights`) multiplying each token's clipped surrogate before the
    aggregation.

    ``ratio = exp(logprobs - old_logprobs)``; per token
    ``max(-A * ratio, -A * clip(ratio, 1 - clip_eps, 1 + clip_eps_high))``, reduced with
    :func:`aggregate_loss` (token mean over the batch's valid tokens by default; ``weights``
    are the per-sequence weights of ``"group-mean"``).
    ``advantages`` may be (B, T) or (B,) (one value per sequence, broadcast over its tokens).

    Returns ``(loss, stats)``; stats are detached scalars: ``clip_frac`` (share of valid tokens
    where the clipped branch is taken), ``approx_kl`` (k3 estimate of KL(old || new)),
    ``ratio_mean``, ``ratio_max``.
    """
    check_token_shapes(mask, logprobs, old_logprobs)
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    check_token_shapes(mask, advantages)
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + eps_high)
    per_token = torch.maximum(unclipped, clipped)
    if is_weights is not None:
        check_token_shapes(mask, is_weights)
        per_token = per_token * is_weights.detach()
    loss = aggregate_loss(per_token, mask, loss_agg, weights)
    with torch.no_grad():
        m = mask.to(ratio.dtype)
        stats = {
            "clip_frac": masked_mean((clipped > unclipped).to(ratio.dtype), m),
            "approx_kl": masked_mean(torch.expm1(log_ratio) - log_ratio, m),
            "ratio_mean": masked_mean(ratio, m),
            "ratio_max": (ratio * m).max() if m.any() else ratio.new_zeros(()),
        }
    return loss, {k: v.detach() for k, v in stats.items()}
