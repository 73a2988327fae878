"""What one training step reduces across ranks: advantages over the global batch when the
estimator needs it (:func:`advantages`), the update's statistics (:func:`reduce_update_stats`,
:func:`step_stats`), and every rank's samples gathered on rank 0 (:func:`gather_rollout`). Each
is the identity for a single process. See :mod:`adapters.training.distributed`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from adapters.rollout import RolloutResult
from adapters.training.batch import TrainItem
from adapters.training.distributed.ranks import DistContext

__all__ = [
    "advantages",
    "canonical_order",
    "gather_rollout",
    "reduce_batch_stats",
    "reduce_update_stats",
    "step_stats",
]

# how the step's statistics combine the policies' (update_policy's) ones
AVERAGED = ("loss", "pg_loss", "clip_frac", "approx_kl", "grad_norm")  # over trained policies
AVERAGED_IF_PRESENT = (  # with a KL loss, an entropy bonus, the masking of well-mastered
    "kl_loss",  # positive tokens (and the model entropy that gates it), or stale rollouts
    "entropy",
    "mpt_masked_frac",
    "model_entropy",
    "is_weight_mean",
)
COUNTED = ("samples_trained", "tokens_trained", "optimizer_steps")  # summed over policies
PER_POLICY = ("loss", "grad_norm")  # also logged as KEY/POLICY when there are several

_SUMMED = (  # weighted by the global denominators, so the ranks' parts add up
    "pg_loss",
    "kl_loss",
    "entropy",
    "loss",
    "clip_frac",
    "approx_kl",
    "is_weight_mean",
    "samples_trained",
    "tokens_trained",
)


def advantages(
    ctx: DistContext, cfg: Any, items: list[TrainItem], compute: Callable[[Any, Any], None]
) -> None:
    """``compute(cfg, items)`` with the statistics of the global batch: local for an estimator
    of ``scope="group"`` (its groups never span ranks), over every rank's items (gathered) for
    one of ``scope="batch"`` (REINFORCE++ whitening)."""
    from adapters.training.advantages import ESTIMATORS

    if not ctx.enabled or ESTIMATORS[cfg.algorithm].scope == "group":
        compute(cfg, items)
        return
    parts = ctx.all_gather_objects(items)
    compute(cfg, [it for part in parts for it in part])
    for it, done in zip(items, parts[ctx.rank]):
        it.advantages = done.advantages
        it.sample.advantage = done.sample.advantage


def reduce_update_stats(ctx: DistContext, st: dict[str, float]) -> dict[str, float]:
    """One policy's :func:`~adapters.training.update.update_policy` statistics for the whole
    batch: weighted losses and counts summed, ``ratio_max`` the largest; the gradient norm and
    optimizer steps are the same on every rank."""
    if not ctx.enabled:
        return st
    keys = (*_SUMMED, "ratio_max")
    present = ctx.all_sum([1.0 if k in st else 0.0 for k in keys])
    sums = ctx.all_sum([st.get(k, 0.0) for k in _SUMMED])
    out = dict(st)
    out.update({k: v for k, v, p in zip(_SUMMED, sums, present) if p})
    if present[-1]:
        out["ratio_max"] = ctx.all_max([st.get("ratio_max", 0.0)])[0]
    return out


def step_stats(
    ctx: DistContext,
    per_policy: Mapping[str, Mapping[str, float]],
    items: Sequence[TrainItem],
    *,
    untrainable: int,
    reward_only: int,
    frozen: int,
    kl: float | None,
    per_policy_keys: bool,
    over_prompt_limit: int = 0,
) -> dict[str, float]:
    """The step's update statistics from each policy's (already reduced across ranks, see
    :func:`reduce_update_stats`): losses averaged over the policies that made an optimizer step
    (0 when none did), counts summed; ``kl`` (this rank's token-mean KL to the reference),
    ``zero_adv_frac`` and the sample counts of the whole batch.

    >>> st = {"a": {"loss": 1.0, "optimizer_steps": 1.0, "samples_trained": 3.0},
    ...       "b": {"loss": 3.0, "optimizer_steps": 1.0, "samples_trained": 1.0}}
    >>> out = step_stats(DistContext(), st, [], untrainable=0, reward_only=2, frozen=0, kl=None,
    ...                  per_policy_keys=True)
    >>> out["loss"], out["loss/b"], out["samples_trained"], out["samples_reward_only"]
    (2.0, 3.0, 4.0, 2.0)
    """
    out: dict[str, float] = {
        "samples_untrainable": float(untrainable),  # no token ids / log-probs
        "samples_reward_only": float(reward_only),  # the env marked them (trainable)
        "samples_frozen_roles": float(frozen),  # roles outside train_roles
        "samples_prompt_over_limit": float(over_prompt_limit),  # prompt > max_prompt_tokens
    }
    totals: dict[str, float] = defaultdict(float)
    trained = 0
    for pid, st in per_policy.items():
        if per_policy_keys:
            out.update({f"{k}/{pid}": v for k, v in st.items() if k in PER_POLICY})
        if st.get("optimizer_steps"):
            trained += 1
            for k in (*AVERAGED, *AVERAGED_IF_PRESENT):
                if k in st:
                    totals[k] += st[k]
        for k in COUNTED:
            out[k] = out.get(k, 0.0) + st.get(k, 0.0)
    for k in AVERAGED:
        out[k] = totals.get(k, 0.0) / max(trained, 1)
    for k in AVERAGED_IF_PRESENT:
        if k in totals:
            out[k] = totals[k] / max(trained, 1)
    if kl is not None:
        out["kl"] = kl
    nonzero = sum(1 for it in items if it.advantages is not None and bool(it.advantages.any()))
    out["zero_adv_frac"] = 1.0 - nonzero / len(items) if items else 1.0
    if ctx.enabled:
        out.update(reduce_batch_stats(ctx, items, untrainable, nonzero, kl))
        keys = ("samples_reward_only", "samples_frozen_roles", "samples_prompt_over_limit")
        for key, value in zip(keys, ctx.all_sum([out[k] for k in keys])):
            out[key] = value
    return out


def reduce_batch_stats(
    ctx: DistContext, items: Sequence[TrainItem], dropped: int, nonzero: int, kl: float | None
) -> dict[str, float]:
    """``samples_untrainable``, ``zero_adv_frac`` and ``kl`` of the global batch."""
    kl_tokens = sum(len(it.old_logprobs) for it in items if it.ref_logprobs is not None)
    d, nz, n, num, den = ctx.all_sum(
        [dropped, nonzero, len(items), (kl or 0.0) * kl_tokens, kl_tokens]
    )
    out = {"samples_untrainable": d, "zero_adv_frac": 1.0 - nz / n if n else 1.0}
    if den:
        out["kl"] = num / den
    return out


def gather_rollout(ctx: DistContext, result: RolloutResult) -> RolloutResult:
    """On rank 0 every rank's samples (:func:`canonical_order`) and episodes; elsewhere
    ``result`` itself."""
    if not ctx.enabled:
        return result
    parts = ctx.gather_objects((result.samples, result.episodes))
    if parts is None:
        return result
    samples = canonical_order([s for p in parts for s in p[0]])
    return RolloutResult(samples=samples, episodes=[e for p in parts for e in p[1]])


def canonical_order(samples: Sequence[Any]) -> list[Any]:
    """Samples gathered from the ranks in the order one process records them: by agent step,
    then instance (stable: branches and candidates keep their order)."""
    return sorted(samples, key=lambda s: (s.step, s.instance))
