"""The loss of one micro-batch, term by term, as pure torch functions.

One optimizer step's objective for a policy is the sum over the step's micro-batches of
:func:`micro_batch_loss` (each weighted by its share of the mini-batch,
:mod:`adapters.training.update`)::

    L = c * agg_{i,t}[ w_t * max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high)) ]
        + beta * KL(pi || pi_ref) - alpha * H(pi)

Each term is one function here (the update around it runs the forward, cuts mini-batches,
accumulates gradients and steps the optimizer, and adds no term of its own):

* ``r_t = pi(a_t) / pi_old(a_t)`` and the clipped surrogate, :func:`ppo_clip_loss` (PPO, Schulman
  et al. 2017, Eq. 7), with optional asymmetric clipping (``clip_eps`` low, ``clip_eps_high``
  high: DAPO's "clip-higher"); it returns the loss and detached statistics (clip fraction,
  approximate KL between the old and the new policy). With ``old_logprobs = logprobs.detach()``
  (one on-policy step) its gradient is the policy gradient of AT-GRPO's Eq. 3.
* ``agg`` and ``c``: :func:`aggregate_loss`, the token mean over the batch's valid tokens by
  default, or AT-GRPO's Eq. 3, ``L = -E_g[1/K sum_c log pi(a_c) A_c]`` (``loss_agg="group-mean"``):
  each sample weighs ``1/K_g`` within its group (:func:`group_weights`) and the groups are
  averaged. A policy's groups are spread over its mini-batches, so the average is taken per
  optimizer step: each of the ``n`` steps divides its sum by ``G / n``, ``c = n / G``
  (:func:`group_mean_scale`), with ``n`` and ``G`` counted before zero-advantage samples are
  skipped, so a group whose K rewards are equal still counts in G. A sample's
  ``log pi(a_c)`` enters as the token mean of its per-token surrogate (verl's
  ``seq-mean-token-mean`` per sample), so the step does not grow with the completion length; at
  ratio 1 the gradient is Eq. 3's with length-normalised log-probs. Hand case: group A rewards
  [1, 0, 0, 0], group B all equal, 10-token completions: Eq. 3 weights each A sample's token-mean
  log-prob by ``A/8``; the token mean over the informative samples (``"token-mean"`` with
  ``skip_zero_advantage``) by ``A/4``. The authors' code trains with verl's token mean
  (PettingLLMs ``pettingllms/config/ppo_trainer/base.yaml``, ``actor.loss_agg_mode:
  token-mean``); ``loss_agg="token-mean"`` reproduces that. :func:`group_mean_weights` is a
  sample's weight in the whole batch, ``1 / (G K_g)``, as one number.
* ``A_t`` with UloRL's mask (Eq. 10, MarsRL section 2.3): the well-mastered tokens of positive
  samples get advantage 0 while the model's entropy is low
  (:func:`~adapters.training.masking.without_mastered_positives`, with the other masks), so they
  leave the surrogate's numerator and keep their place in its denominator.
* ``w_t = min(pi_old / pi_behav, C)``, :func:`truncated_is_weights`: the off-policy correction of
  asynchronous rollouts (``--max-staleness``) and segments. A token sampled by a behaviour policy
  several versions old is weighted by it on its clipped surrogate, where ``pi_old`` is the policy
  at the start of this update (the PPO ratio's denominator) and ``pi_behav`` the sampler's
  log-probs recorded at generation. This is verl's decoupled token-level rollout correction
  (``verl/trainer/ppo/core_algos.py``, ``compute_policy_loss_vanilla``: ``pg_losses *
  rollout_is_weights``; the weights from ``verl/trainer/ppo/rollout_corr_helper.py`` with
  ``rollout_is="token"`` and ``rollout_is_threshold``, default 2.0): the PPO ratio keeps its trust
  region around the current policy, the detached weight carries the sample back from the
  behaviour policy, truncated so that a stale token cannot dominate the batch.
* ``beta * KL(pi || pi_ref)``: :func:`kl_loss`, the masked token mean of :func:`token_kl` (k1, k2
  or k3 estimators), the KL term of MarsRL's Eq. 2 and of verl's ``use_kl_loss``.
* ``alpha * H(pi)``: :func:`entropy_bonus`, the policy's entropy aggregated as the surrogate is
  (per sequence under Eq. 3, whose group weights belong to the surrogate alone); MAE's entropy
  bonus (Table 3, ``entropy_coef``).

Shapes: ``B`` sequences, ``T`` completion positions; ``mask`` (B, T) is 1 on valid completion
tokens; per-token tensors are meaningful only where the mask is 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch

from adapters.training.masking import check_token_shapes, masked_mean, without_mastered_positives

KLKind = Literal["k1", "k2", "k3"]
LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "group-mean"]


class LossSettings(Protocol):
    """The coefficients :func:`micro_batch_loss` reads (the update section,
    :class:`~adapters.training.sections.UpdateConfig`, has them all)."""

    @property
    def clip_eps(self) -> float: ...

    @property
    def clip_eps_high(self) -> float | None: ...

    @property
    def loss_agg(self) -> LossAgg: ...

    @property
    def kl_loss_coef(self) -> float: ...

    @property
    def kl_loss_type(self) -> KLKind: ...

    @property
    def entropy_coef(self) -> float: ...

    @property
    def mpt_mask_tau(self) -> float: ...

    @property
    def mpt_target_entropy(self) -> float: ...

    @property
    def rollout_is_cap(self) -> float: ...


__all__ = [
    "KLKind",
    "LossAgg",
    "MicroBatch",
    "aggregate_loss",
    "entropy_bonus",
    "group_mean_scale",
    "group_mean_weights",
    "group_weights",
    "kl_loss",
    "micro_batch_loss",
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


def group_weights(groups: Sequence[str]) -> list[float]:
    """AT-GRPO Eq. 3's weight of a sample within its group, ``1 / K_g`` (the ``1/G`` over groups
    is :func:`group_mean_scale`, taken per optimizer step).

    >>> group_weights(["a", "a", "a", "b"])
    [0.3333333333333333, 0.3333333333333333, 0.3333333333333333, 1.0]
    """
    sizes = Counter(groups)
    return [1.0 / sizes[g] for g in groups]


def group_mean_scale(optimizer_steps: float, groups: float) -> float:
    """AT-GRPO Eq. 3's ``1/G`` for one of ``optimizer_steps`` steps over a batch of ``groups``
    groups: each step's sum of ``1/K_g``-weighted terms is divided by ``G / n``, so the ``n``
    steps together average the G groups (``groups`` at least 1).

    >>> group_mean_scale(2, 8)  # two steps over 8 groups: each divides its sum by 4
    0.25
    """
    return optimizer_steps / max(1.0, groups)


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


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, loss_agg: LossAgg) -> torch.Tensor:
    """The policy's entropy that the loss rewards (MAE's entropy bonus, Table 3): the per-token
    ``entropy`` aggregated as the surrogate is, except that Eq. 3's ``"group-mean"`` takes the
    mean over sequences of their token means (the group weights are the surrogate's alone). The
    loss subtracts ``entropy_coef`` times it.

    >>> h, m = torch.tensor([[1.0, 3.0], [5.0, 0.0]]), torch.tensor([[1, 1], [1, 0]])
    >>> entropy_bonus(h, m, "token-mean").item(), entropy_bonus(h, m, "group-mean").item()
    (3.0, 3.5)
    """
    agg: LossAgg = "seq-mean-token-mean" if loss_agg == "group-mean" else loss_agg
    return aggregate_loss(entropy, mask, agg)


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch's per-token tensors, ``(B, T)`` each, right-padded, and what each
    optional term of :func:`micro_batch_loss` reads (None: the term is off)."""

    logprobs: torch.Tensor  # log pi(a_t) of the policy being updated (with its gradient)
    old_logprobs: torch.Tensor  # log pi_old(a_t): the PPO ratio's denominator
    advantages: torch.Tensor  # (B, T), or (B,): one value per sequence
    mask: torch.Tensor  # 1 on completion tokens
    group_weights: torch.Tensor | None = None  # (B,) Eq. 3's 1/K_g (loss_agg "group-mean")
    behav_logprobs: torch.Tensor | None = None  # the sampler's, when it was an older policy
    ref_logprobs: torch.Tensor | None = None  # the reference policy's (the KL loss)
    entropy: torch.Tensor | None = None  # the policy's per-token entropy (the entropy bonus)


def micro_batch_loss(
    mb: MicroBatch,
    cfg: LossSettings,
    *,
    share: float,
    group_scale: float = 1.0,
    model_entropy: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of one micro-batch (the module docstring's ``L``) and its statistics.

    ``cfg`` gives the coefficients (``clip_eps``, ``clip_eps_high``, ``loss_agg``,
    ``kl_loss_coef`` and ``kl_loss_type``, ``entropy_coef``, ``mpt_mask_tau`` and
    ``mpt_target_entropy``, ``rollout_is_cap``). ``share`` is the micro-batch's share of its
    mini-batch (its tokens, or its sequences, over the mini-batch's), the weight with which the
    update accumulates the returned loss; Eq. 3 is a sum over the mini-batch, so under
    ``"group-mean"`` the surrogate is divided by it and multiplied by ``group_scale``
    (:func:`group_mean_scale`). ``model_entropy``: the model's entropy that opens UloRL's mask
    (read when ``mpt_mask_tau > 0``).

    The statistics are plain floats: ``pg_loss``, ``loss``, ``clip_frac``, ``approx_kl``,
    ``ratio_max``, and where their term is on ``kl_loss``, ``entropy``, ``is_weight_mean``,
    ``mpt_masked_frac``.
    """
    stats: dict[str, float] = {}
    advantages = mb.advantages
    if cfg.mpt_mask_tau > 0:  # UloRL Eq. 10: well-mastered positive tokens leave the sum
        advantages, dropped = without_mastered_positives(
            advantages,
            mb.logprobs,
            mb.mask,
            model_entropy=model_entropy,
            tau=cfg.mpt_mask_tau,
            target_entropy=cfg.mpt_target_entropy,
        )
        stats["mpt_masked_frac"] = float(dropped.sum() / mb.mask.sum())
    is_weights = None
    if mb.behav_logprobs is not None:  # sampled by an older policy: back to pi_old, truncated
        is_weights = truncated_is_weights(
            mb.old_logprobs, mb.behav_logprobs, mb.mask, cfg.rollout_is_cap
        )
        stats["is_weight_mean"] = float(masked_mean(is_weights, mb.mask))
    loss, st = ppo_clip_loss(
        mb.logprobs,
        mb.old_logprobs,
        advantages,
        mb.mask,
        clip_eps=cfg.clip_eps,
        clip_eps_high=cfg.clip_eps_high,
        loss_agg=cfg.loss_agg,
        weights=mb.group_weights,
        is_weights=is_weights,
    )
    if cfg.loss_agg == "group-mean":  # Eq. 3's sum, not a mean: the other terms keep the share
        loss = loss * (group_scale / share)
    stats["pg_loss"] = float(loss.detach())
    if cfg.kl_loss_coef > 0:
        if mb.ref_logprobs is None:
            raise ValueError("a KL loss needs the reference log-probs (prepare_logprobs)")
        kl = kl_loss(mb.logprobs, mb.ref_logprobs, mb.mask, cfg.kl_loss_type)
        loss = loss + cfg.kl_loss_coef * kl
        stats["kl_loss"] = float(kl.detach())
    if cfg.entropy_coef > 0 and mb.entropy is not None:
        entropy = entropy_bonus(mb.entropy, mb.mask, cfg.loss_agg)
        loss = loss - cfg.entropy_coef * entropy
        stats["entropy"] = float(entropy.detach())
    stats["loss"] = float(loss.detach())
    stats.update({k: float(st[k]) for k in ("clip_frac", "approx_kl", "ratio_max")})
    return loss, stats
