"""Advantage estimators as pure torch functions (one module: every way a reward becomes a signal).

* :func:`group_advantages` - GRPO and AT-GRPO (AT-GRPO, Eq. 1):
  ``A_i = (r_i - mean_g) / (std_g + eps)`` over the samples sharing a group key. AT-GRPO's key is
  ``(env, agent, turn)`` (agent- and turn-wise grouping, Alg. 1 line 11); plain GRPO's is the
  prompt. ``std_g`` is the **sample** standard deviation (divisor K-1) by default because Eq. 1
  says "F_norm is the sample standard deviation" (verl's GRPO also uses ``torch.std``);
  ``unbiased=False`` gives the population one. ``normalize_std=False`` keeps only the mean
  baseline (Dr. GRPO). A group of size 1 has no baseline and gets advantage 0 (verl would give it
  the raw reward), and a group whose rewards are all equal gets 0.
* :func:`reinforce_pp_advantages` - REINFORCE++ as used by CoMAS (Eqs. 9-10) and OpenRLHF:
  per-token rewards ``r_t = -beta * KL_t`` with the scalar reward added at the last valid token,
  returns-to-go with ``gamma`` (1 in the papers), then whitening over **all valid tokens of the
  batch**: ``(A - mean) / (std + eps)``. The whitening std is the population one (divisor =
  number of valid tokens), as in OpenRLHF; with thousands of tokens the choice does not matter,
  and it keeps a batch of identical returns at exactly 0.
* :func:`task_relative_reinforce_pp_advantages` - Task-Relative REINFORCE++ (MAE §3 and SAGE
  Eq. 1, following Absolute Zero): one advantage per sample, normalised within each role (or
  task-role pair): ``A = (r - mu_role) / (sigma_role + eps)`` over the role's samples. Both papers
  train without a KL reward. :func:`task_relative_token_whitened_advantages` is the token-level
  variant (returns whitened over each role's tokens, ``tr-reinforce++-token``).

Shapes: ``B`` sequences, ``T`` completion positions; ``mask`` (B, T) is 1 on valid completion
tokens (see :mod:`adapters.training.masking`).

The estimator table
-------------------
:data:`ESTIMATORS` maps each ``--algorithm`` name to an :class:`Estimator`: the function that
turns a step's train items into per-token advantages, plus what the rest of the trainer must know
about it without special cases: its ``scope`` (``"group"``: statistics within groups that never
span ranks, so each rank computes its own; ``"batch"``: statistics over the whole batch, gathered
from every rank first), whether a KL reward (``kl_reward_coef``) makes it read reference
log-probs (``needs_ref``), and the rollout ``sampling`` it implies when a user picks it. The
config's choices, the update, the distributed scope and the recipes all read this table, so a new
algorithm is one entry::

    ESTIMATORS["my-algo"] = Estimator(my_fn, scope="batch", needs_ref=False, sampling="parallel",
                                      summary="...")

Torch is imported inside the functions, so the configuration and the command line can read the
table without loading it.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from adapters.training.batch import TrainItem
    from adapters.training.losses import KLKind

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "EstimatorOptions",
    "group_advantages",
    "reinforce_pp_advantages",
    "reinforce_pp_returns",
    "task_relative_reinforce_pp_advantages",
    "task_relative_token_whitened_advantages",
]


def _as_float_tensor(x: Any, name: str) -> torch.Tensor:
    import torch

    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.float32)
    if not t.is_floating_point():
        t = t.float()
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D (one value per sample), got shape {tuple(t.shape)}")
    return t


def _group_index(group_ids: Sequence[Hashable], n: int, device: torch.device) -> torch.Tensor:
    import torch

    if isinstance(group_ids, torch.Tensor):
        group_ids = group_ids.tolist()
    if len(group_ids) != n:
        raise ValueError(f"got {n} values but {len(group_ids)} group ids")
    index: dict[Hashable, int] = {}
    return torch.tensor([index.setdefault(g, len(index)) for g in group_ids], device=device)


def group_advantages(
    rewards: Sequence[float] | torch.Tensor,
    group_ids: Sequence[Hashable],
    *,
    normalize_std: bool = True,
    unbiased: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO / AT-GRPO advantages: reward minus its group mean, divided by the group std.

    Args:
        rewards: one scalar reward per sample.
        group_ids: one hashable key per sample (e.g. ``(env_index, agent, turn)`` for AT-GRPO).
        normalize_std: divide by ``std + eps``; False keeps only the mean baseline (Dr. GRPO).
        unbiased: sample std (divisor K-1, paper 002 Eq. 1) or population std (divisor K).
        eps: added to the std.

    Returns a float tensor of advantages; samples in groups of size 1, and groups whose rewards
    are equal up to float rounding (:func:`~adapters.training.masking.equal_up_to_rounding`), get 0.

    >>> group_advantages([1.0, 0.0, 1.0, 0.0], ["g"] * 4, unbiased=False, eps=0.0).tolist()
    [1.0, -1.0, 1.0, -1.0]
    """
    import torch

    from adapters.training.masking import equal_up_to_rounding

    r = _as_float_tensor(rewards, "rewards")
    idx = _group_index(group_ids, r.numel(), r.device)
    n_groups = int(idx.max()) + 1 if r.numel() else 0
    counts = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(
        0, idx, torch.ones_like(r)
    )
    sums = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, r)
    mean = sums / counts
    centered = r - mean[idx]
    lo = torch.full((n_groups,), math.inf, dtype=r.dtype, device=r.device)
    hi = torch.full((n_groups,), -math.inf, dtype=r.dtype, device=r.device)
    lo = lo.scatter_reduce(0, idx, r, reduce="amin")
    hi = hi.scatter_reduce(0, idx, r, reduce="amax")
    single = (counts < 2)[idx] | equal_up_to_rounding(lo, hi)[idx]
    if normalize_std:
        sq = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, centered**2)
        denom = (counts - 1).clamp(min=1) if unbiased else counts
        std = (sq / denom).sqrt()[idx]
        # equal rewards (single is set for them): no 0/0 even with eps = 0
        adv = torch.where(std > 0, centered / (std + eps), torch.zeros_like(centered))
    else:
        adv = centered
    return torch.where(single, torch.zeros_like(adv), adv)


def reinforce_pp_returns(
    rewards: Sequence[float] | torch.Tensor,
    mask: torch.Tensor,
    logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    *,
    beta: float = 0.0,
    gamma: float = 1.0,
    kl_kind: KLKind = "k1",
) -> torch.Tensor:
    """Token returns before normalisation (CoMAS Eq. 9).

    ``r_t = -beta * KL_t`` on valid tokens, plus the sequence reward at its last valid token;
    ``G_t = r_t + gamma * G_{t+1}`` (over valid tokens; padding contributes nothing). With
    ``gamma = 1`` this is ``r(o) - beta * sum_{l >= t} KL_l``. A sequence with no valid token
    gets zeros.
    """
    import torch

    from adapters.training.losses import token_kl
    from adapters.training.masking import check_token_shapes

    mask_f = mask.float()
    r = _as_float_tensor(rewards, "rewards").to(mask_f.device)
    check_token_shapes(mask, logprobs, ref_logprobs)
    if r.numel() != mask.shape[0]:
        raise ValueError(f"{r.numel()} rewards for {mask.shape[0]} sequences")
    token_rewards = torch.zeros_like(mask_f)
    if beta:
        if logprobs is None or ref_logprobs is None:
            raise ValueError("beta > 0 needs logprobs and ref_logprobs")
        token_rewards = -beta * token_kl(logprobs.float(), ref_logprobs.float(), kl_kind) * mask_f
    positions = torch.arange(mask.shape[1], device=mask_f.device).expand_as(mask_f)
    last = torch.where(mask_f > 0, positions, torch.full_like(positions, -1)).max(dim=1).values
    has_tokens = last >= 0
    rows = torch.nonzero(has_tokens).squeeze(-1)
    token_rewards = token_rewards.index_put(
        (rows, last[rows]), token_rewards[rows, last[rows]] + r[rows].to(token_rewards.dtype)
    )
    if gamma == 1.0:  # reverse cumulative sum; padding carries zero reward
        returns = token_rewards.flip(-1).cumsum(-1).flip(-1)
    else:  # discount only across valid tokens, so gaps in the mask cost nothing
        returns = torch.zeros_like(token_rewards)
        running = torch.zeros(mask.shape[0], dtype=token_rewards.dtype, device=token_rewards.device)
        valid = mask_f > 0
        for t in range(mask.shape[1] - 1, -1, -1):
            running = torch.where(valid[:, t], token_rewards[:, t] + gamma * running, running)
            returns[:, t] = running
    return returns * mask_f


def reinforce_pp_advantages(
    rewards: Sequence[float] | torch.Tensor,
    mask: torch.Tensor,
    logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    *,
    beta: float = 0.0,
    gamma: float = 1.0,
    kl_kind: KLKind = "k1",
    group_ids: Sequence[Hashable] | None = None,
    eps: float = 1e-8,
) -> torch.Tensor:
    """REINFORCE++ advantages: :func:`reinforce_pp_returns` whitened over valid tokens.

    ``group_ids=None`` whitens over the whole batch (REINFORCE++, CoMAS Eq. 10); with one key per
    sequence the mean/std are computed separately within each group (Task-Relative REINFORCE++).
    """
    import torch

    from adapters.training.masking import masked_whiten

    returns = reinforce_pp_returns(
        rewards, mask, logprobs, ref_logprobs, beta=beta, gamma=gamma, kl_kind=kl_kind
    )
    mask_f = mask.float()
    if group_ids is None:
        return masked_whiten(returns, mask_f, eps)
    idx = _group_index(group_ids, mask.shape[0], returns.device)
    adv = torch.zeros_like(returns)
    for g in range(int(idx.max()) + 1 if idx.numel() else 0):
        rows = idx == g
        adv[rows] = masked_whiten(returns[rows], mask_f[rows], eps)
    return adv


def task_relative_reinforce_pp_advantages(
    rewards: Sequence[float] | torch.Tensor,
    roles: Sequence[Hashable],
    *,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Task-Relative REINFORCE++ (MAE Eq. in §3, SAGE Eq. 1): one advantage per sample,
    ``A = (r - mu_role) / (sigma_role + eps)`` over the samples of the same role.

    ``roles`` holds one key per sample (the agent role, or a ``(task, role)`` pair). The std is
    the population one over the role's samples; a role whose rewards are all equal up to float
    rounding (or a single sample) gets 0. The advantage is broadcast over the sample's tokens by the
    caller, so a long and a short completion with the same reward get the same per-token advantage.

    >>> adv = task_relative_reinforce_pp_advantages([1.0, 0.0, 0.2, 0.6], ["p", "p", "s", "s"])
    >>> [round(a, 4) for a in adv.tolist()]
    [1.0, -1.0, -1.0, 1.0]
    """
    import torch

    from adapters.training.masking import equal_up_to_rounding

    r = _as_float_tensor(rewards, "rewards")
    idx = _group_index(roles, r.numel(), r.device)
    out = torch.zeros_like(r)
    for g in range(int(idx.max()) + 1 if idx.numel() else 0):
        rows = idx == g
        x = r[rows]
        if x.numel() > 1 and not bool(equal_up_to_rounding(x.min(), x.max())):
            out[rows] = (x - x.mean()) / (x.std(unbiased=False) + eps)
    return out


def task_relative_token_whitened_advantages(
    rewards: Sequence[float] | torch.Tensor,
    mask: torch.Tensor,
    roles: Sequence[Hashable],
    logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """REINFORCE++ returns whitened over the *tokens* of each role (``tr-reinforce++-token``).

    The variant verl-style implementations compute: it weights a sample by its length (rewards
    1 and 0 on completions of 1 and 3 tokens give +1.73 and -0.58), and it allows a token-level
    KL reward. The papers' Eq. 1 is :func:`task_relative_reinforce_pp_advantages`.
    """
    return reinforce_pp_advantages(rewards, mask, logprobs, ref_logprobs, group_ids=roles, **kwargs)


# ---------------------------------------------------------------------------------------------
# the estimator table: train items -> per-token advantages


class EstimatorOptions(Protocol):
    """The update settings an estimator may read (:class:`~adapters.training.update.UpdateConfig`
    has them)."""

    @property
    def normalize_std(self) -> bool: ...
    @property
    def kl_reward_coef(self) -> float: ...
    @property
    def gamma(self) -> float: ...


EstimatorFn = Callable[[Sequence["TrainItem"], EstimatorOptions], "list[torch.Tensor]"]


@dataclass(frozen=True)
class Estimator:
    """One advantage estimator and what the trainer must know about it (module docstring).

    fn: ``fn(items, options)`` -> one tensor of per-token advantages per item (each as long as
        the item's completion).
    scope: ``"group"`` (statistics within rollout groups, which never span ranks) or ``"batch"``
        (statistics over the whole step's batch: every rank's items are gathered first).
    needs_ref: a token-level KL reward (``kl_reward_coef > 0``) makes it read the reference
        model's log-probs.
    sampling: the rollout sampling it implies when a user picks it without ``--sampling``.
    summary: one line for ``--help``.
    kl_reward_error: when set, ``kl_reward_coef > 0`` is a configuration error with this reason.
    """

    fn: EstimatorFn
    scope: Literal["group", "batch"]
    needs_ref: bool
    sampling: Literal["tree", "parallel"]
    summary: str
    kl_reward_error: str = ""


def _broadcast(items: Sequence[TrainItem], per_sample: torch.Tensor) -> list[torch.Tensor]:
    """One advantage per sample, repeated over the sample's completion tokens."""
    import torch

    return [
        torch.full((len(it.completion_ids),), float(a)) for it, a in zip(items, per_sample.tolist())
    ]


def grouped_estimator(items: Sequence[TrainItem], opts: EstimatorOptions) -> list[torch.Tensor]:
    """GRPO / AT-GRPO: :func:`group_advantages` over ``Sample.group`` (AT-GRPO Eq. 1)."""
    rewards = [it.sample.reward for it in items]
    groups = [it.sample.group for it in items]
    return _broadcast(items, group_advantages(rewards, groups, normalize_std=opts.normalize_std))


def task_relative_estimator(
    items: Sequence[TrainItem], opts: EstimatorOptions
) -> list[torch.Tensor]:
    """Task-Relative REINFORCE++ (MAE §3, SAGE Eq. 1): whitening per role, one value a sample."""
    rewards = [it.sample.reward for it in items]
    roles = [it.sample.role for it in items]
    return _broadcast(items, task_relative_reinforce_pp_advantages(rewards, roles))


def reinforce_pp_estimator(
    items: Sequence[TrainItem], opts: EstimatorOptions, *, per_role: bool = False
) -> list[torch.Tensor]:
    """REINFORCE++ (CoMAS Eqs. 9-10) over each policy's items: token returns with the KL reward
    ``kl_reward_coef``, whitened over the policy's batch (``per_role``: over each role's tokens,
    ``tr-reinforce++-token``)."""
    from adapters.training.masking import length_mask, pad_rows

    by_pid: dict[str, list[int]] = defaultdict(list)
    for i, it in enumerate(items):
        by_pid[it.sample.policy_id].append(i)
    out: list[Any] = [None] * len(items)
    beta = opts.kl_reward_coef
    for idxs in by_pid.values():
        batch = [items[i] for i in idxs]
        width = max(len(it.completion_ids) for it in batch)
        mask = length_mask([len(it.completion_ids) for it in batch], width)
        lp = pad_rows([it.old_logprobs for it in batch], width) if beta else None
        ref = pad_rows([_reference(it) for it in batch], width) if beta else None
        adv = reinforce_pp_advantages(
            [it.sample.reward for it in batch],
            mask,
            lp,
            ref,
            beta=beta,
            gamma=opts.gamma,
            kl_kind="k1",
            group_ids=[it.sample.role for it in batch] if per_role else None,
        )
        for i, row, it in zip(idxs, adv, batch):
            out[i] = row[: len(it.completion_ids)].clone()
    return out


def _reference(it: TrainItem) -> torch.Tensor:
    if it.ref_logprobs is None:
        raise RuntimeError("reference log-probs are missing (a KL coefficient is set)")
    return it.ref_logprobs


ESTIMATORS: dict[str, Estimator] = {
    "at-grpo": Estimator(
        grouped_estimator,
        scope="group",
        needs_ref=False,
        sampling="tree",
        summary="tree sampling, agent- and turn-wise GRPO groups (AT-GRPO Alg. 1, Eq. 1)",
    ),
    "grpo": Estimator(
        grouped_estimator,
        scope="group",
        needs_ref=False,
        sampling="parallel",
        summary="parallel sampling, K episodes per instance, GRPO groups",
    ),
    "reinforce++": Estimator(
        reinforce_pp_estimator,
        scope="batch",
        needs_ref=True,
        sampling="parallel",
        summary="global whitening, optional token-level KL reward (CoMAS Eqs. 9-10)",
    ),
    "tr-reinforce++": Estimator(
        task_relative_estimator,
        scope="batch",
        needs_ref=False,
        sampling="parallel",
        summary="whitening per role, one advantage per sample (MAE §3, SAGE Eq. 1)",
        kl_reward_error=(
            "tr-reinforce++ gives one advantage per sample (Eq. 1 of MAE/SAGE), which has no "
            "room for a token-level KL reward; use algorithm tr-reinforce++-token with "
            "kl_reward_coef, or kl_loss_coef"
        ),
    ),
    "tr-reinforce++-token": Estimator(
        functools.partial(reinforce_pp_estimator, per_role=True),
        scope="batch",
        needs_ref=True,
        sampling="parallel",
        summary="REINFORCE++ returns whitened over each role's tokens (allows a KL reward)",
    ),
}
