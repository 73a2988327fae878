"""The policy update: advantages for a step's samples, then PPO-clip epochs per policy.

Advantages (``TrainConfig.algorithm``), computed by :func:`compute_advantages` with the pure
estimators of :mod:`adapters.training.advantages`:

* ``at-grpo`` / ``grpo``: :func:`~adapters.training.advantages.group_advantages` over the samples
  sharing a rollout group key (AT-GRPO: ``(instance, branch, agent, turn, step)`` from tree
  sampling; GRPO: ``(instance, agent, turn, step)`` across the K parallel episodes), one value
  per sample broadcast over its tokens (AT-GRPO, Eq. 1).
* ``reinforce++``: :func:`~adapters.training.advantages.reinforce_pp_advantages` over each
  policy's batch (token-level KL penalty ``kl_reward_coef`` against the reference, global
  whitening; CoMAS Eqs. 9-10).
* ``tr-reinforce++``: Task-Relative REINFORCE++ as the MAE and SAGE papers define it (Eq. 1):
  one advantage per sample, ``(r - mean_role) / (std_role + eps)`` over the step's samples of
  the same role, broadcast over its tokens.
* ``tr-reinforce++-token``: REINFORCE++ returns whitened over each role's tokens (the variant
  that weights samples by length and allows a token-level KL reward).

Loss (:func:`update_policy`): :func:`~adapters.training.losses.ppo_clip_loss` (token mean by
default) plus an optional ``kl_loss_coef`` x :func:`~adapters.training.losses.kl_loss` against the
reference, minus an optional ``entropy_coef`` x the token-mean entropy of the policy (MAE's
entropy bonus). With ``mpt_mask_tau > 0`` the well-mastered tokens of positive samples leave the
policy-gradient term while the entropy is below ``mpt_target_entropy`` (MarsRL 2.3, UloRL
Eq. 10; :func:`~adapters.training.masking.without_mastered_positives`). Each epoch makes ``ppo_minibatches`` optimizer steps (or steps of
``minibatch_size`` samples). Each policy gets only its own samples (``Sample.policy_id``, AT-GRPO Eq. 2) and steps
only its own optimizer; minibatches and micro-batches come from :mod:`adapters.training.batch`,
log-probs from :mod:`adapters.training.logprobs`.

Samples whose advantages are all zero (e.g. a group whose K rewards are equal) carry no policy
gradient; with ``skip_zero_advantage`` (default) and no KL loss they are left out of the update,
so the token mean runs over the informative samples only (like DAPO's filtering of
zero-variance groups).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch

from adapters.rollout import derive_seed
from adapters.training.advantages import (
    group_advantages,
    reinforce_pp_advantages,
    task_relative_reinforce_pp_advantages,
)
from adapters.training.batch import TrainItem
from adapters.training.config import TrainConfig
from adapters.training.distributed import SINGLE, DataParallel
from adapters.training.logprobs import completion_logprobs, completion_logprobs_and_entropy
from adapters.training.losses import aggregate_loss, kl_loss, ppo_clip_loss, token_kl
from adapters.training.masking import length_mask, pad_rows, without_mastered_positives

__all__ = ["compute_advantages", "mean_kl_to_ref", "update_policy"]


def compute_advantages(cfg: TrainConfig, items: Sequence[TrainItem]) -> None:
    """Fill ``item.advantages`` (per token) and ``item.sample.advantage`` (their mean)."""
    if not items:
        return
    per_sample = None
    if cfg.algorithm in ("at-grpo", "grpo"):
        per_sample = group_advantages(
            [it.sample.reward for it in items],
            [it.sample.group for it in items],
            normalize_std=cfg.normalize_std,
        )
    elif cfg.algorithm == "tr-reinforce++":
        per_sample = task_relative_reinforce_pp_advantages(
            [it.sample.reward for it in items], [it.sample.role for it in items]
        )
    if per_sample is not None:
        for it, a in zip(items, per_sample.tolist()):
            it.advantages = torch.full((len(it.completion_ids),), float(a))
    else:
        by_pid: dict[str, list[TrainItem]] = defaultdict(list)
        for it in items:
            by_pid[it.sample.policy_id].append(it)
        for batch in by_pid.values():
            width = max(len(it.completion_ids) for it in batch)
            mask = length_mask([len(it.completion_ids) for it in batch], width)
            beta = cfg.kl_reward_coef or 0.0
            lp = pad_rows([it.old_logprobs for it in batch], width) if beta else None
            ref = pad_rows([_need_ref(it) for it in batch], width) if beta else None
            token_tr = cfg.algorithm == "tr-reinforce++-token"
            groups = [it.sample.role for it in batch] if token_tr else None
            adv = reinforce_pp_advantages(
                [it.sample.reward for it in batch],
                mask,
                lp,
                ref,
                beta=beta,
                gamma=1.0 if cfg.gamma is None else cfg.gamma,
                kl_kind="k1",
                group_ids=groups,
            )
            for row, it in zip(adv, batch):
                it.advantages = row[: len(it.completion_ids)].clone()
    for it in items:
        assert it.advantages is not None
        it.sample.advantage = float(it.advantages.mean()) if len(it.advantages) else 0.0


def _need_ref(it: TrainItem) -> torch.Tensor:
    if it.ref_logprobs is None:
        raise RuntimeError("reference log-probs are missing (a KL coefficient is set)")
    return it.ref_logprobs


def update_policy(
    cfg: TrainConfig,
    pm: Any,
    items: Sequence[TrainItem],
    step: int,
    pad_id: int,
    dp: DataParallel | None = None,
) -> dict[str, float]:
    """PPO-clip epochs over one policy's items; returns statistics (loss, clip frac, ...).

    ``dp`` (:mod:`adapters.training.distributed`) makes this one rank of a data-parallel update:
    ``items`` are this rank's share, and the statistics are this rank's parts of the sums."""
    dp = dp or SINGLE
    kl_coef = cfg.kl_loss_coef or 0.0
    ent_coef = cfg.entropy_coef or 0.0
    mpt_tau = cfg.mpt_mask_tau or 0.0  # 0: no masking of well-mastered positive tokens
    mpt_target = 0.2 if cfg.mpt_target_entropy is None else cfg.mpt_target_entropy
    use_kl = kl_coef > 0
    if cfg.skip_zero_advantage and not use_kl and ent_coef == 0:
        items = [it for it in items if it.advantages is not None and bool(it.advantages.any())]
    stats: dict[str, float] = defaultdict(float)
    stats["samples_trained"] = float(len(items))
    if not dp.total(len(items)):
        return dict(stats)
    pm.activate()
    pm.model.train((cfg.lora_dropout or 0.0) > 0)
    dev = next(pm.model.parameters()).device
    n_updates = 0
    weight_sum = 0.0
    dp.begin_update(pm)
    try:
        global_items = int(dp.total(len(items)))  # minibatches are cut from the global batch
        size = cfg.minibatch_size or math.ceil(global_items / (cfg.ppo_minibatches or 1))
        for epoch in range(cfg.ppo_epochs or 1):
            rng = random.Random(derive_seed(cfg.seed, "minibatch", step, pm.pid, epoch))
            for mb in dp.minibatches(items, size, rng):
                token_mean = cfg.loss_agg == "token-mean"
                denom = dp.total(
                    sum(len(it.completion_ids) for it in mb) if token_mean else len(mb)
                )
                pm.optimizer.zero_grad(set_to_none=True)
                for micro in dp.micro_batches(
                    mb, cfg.micro_batch_size or 8, cfg.micro_batch_tokens or 0
                ):
                    lengths = [len(it.completion_ids) for it in micro]
                    width = max(lengths)
                    mask = length_mask(lengths, width).to(dev)
                    prompts = [it.prompt_ids for it in micro]
                    completions = [it.completion_ids for it in micro]
                    temperature = micro[0].temperature  # one per micro-batch (batch.py)
                    entropy = None
                    if ent_coef > 0 or mpt_tau > 0:
                        lp, entropy = dp.forward(
                            pm,
                            completion_logprobs_and_entropy,
                            prompts,
                            completions,
                            pad_id=pad_id,
                            temperature=temperature,
                        )
                    else:
                        lp = dp.forward(
                            pm,
                            completion_logprobs,
                            prompts,
                            completions,
                            pad_id=pad_id,
                            temperature=temperature,
                            share_prompt=cfg.share_prompt_forward,
                        )
                    old = pad_rows([it.old_logprobs for it in micro], width).to(dev)
                    adv = pad_rows([it.advantages for it in micro], width).to(dev)  # type: ignore[misc]
                    masked_frac = None
                    if mpt_tau > 0 and entropy is not None:  # UloRL Eq. 10 (MarsRL 2.3)
                        adv, dropped = without_mastered_positives(
                            adv, lp, entropy, mask, tau=mpt_tau, target_entropy=mpt_target
                        )
                        masked_frac = float(dropped.sum() / mask.sum())
                    loss, st = ppo_clip_loss(
                        lp,
                        old,
                        adv,
                        mask,
                        clip_eps=cfg.clip_eps,
                        clip_eps_high=cfg.clip_eps_high,
                        loss_agg=cfg.loss_agg,
                    )
                    w = (float(mask.sum()) if token_mean else len(micro)) / denom
                    stats["pg_loss"] += float(loss.detach()) * w
                    if masked_frac is not None:
                        stats["mpt_masked_frac"] += masked_frac * w
                    if use_kl:
                        ref = pad_rows([_need_ref(it) for it in micro], width).to(dev)
                        kl = kl_loss(lp, ref, mask, cfg.kl_loss_type or "k3")
                        loss = loss + kl_coef * kl
                        stats["kl_loss"] += float(kl.detach()) * w
                    if ent_coef > 0 and entropy is not None:  # entropy bonus (MAE Table 3)
                        ent = aggregate_loss(entropy, mask, cfg.loss_agg)
                        loss = loss - ent_coef * ent
                        stats["entropy"] += float(ent.detach()) * w
                    (loss * (w * dp.grad_scale)).backward()
                    stats["loss"] += float(loss.detach()) * w
                    stats["clip_frac"] += float(st["clip_frac"]) * w
                    stats["approx_kl"] += float(st["approx_kl"]) * w
                    stats["ratio_max"] = max(stats["ratio_max"], float(st["ratio_max"]))
                dp.finish_micro_batches(pm)
                max_norm = 1.0 if cfg.max_grad_norm is None else cfg.max_grad_norm
                stats["grad_norm"] += dp.clip_grad_norm(pm.params, max_norm)
                pm.optimizer.step()
                pm.optimizer.zero_grad(set_to_none=True)
                n_updates += 1
                weight_sum += 1.0
    finally:
        pm.model.eval()
        dp.end_update(pm)
    for key in (
        "pg_loss", "kl_loss", "entropy", "loss", "clip_frac", "approx_kl", "grad_norm",
        "mpt_masked_frac",
    ):  # fmt: skip
        if key in stats:
            stats[key] /= max(weight_sum, 1.0)
    stats["optimizer_steps"] = float(n_updates)
    stats["tokens_trained"] = float(sum(len(it.completion_ids) for it in items))
    return dict(stats)


def mean_kl_to_ref(items: Sequence[TrainItem]) -> float | None:
    """Token-mean k3 KL(pi_old || pi_ref) over items that have reference log-probs."""
    rows = [(it.old_logprobs, it.ref_logprobs) for it in items if it.ref_logprobs is not None]
    if not rows:
        return None
    total = sum(float(token_kl(a, b, "k3").sum()) for a, b in rows)
    return total / max(1, sum(len(a) for a, _ in rows))
