"""The policy update: advantages for a step's samples, then PPO-clip epochs per policy.

Advantages (``update.algorithm``): :func:`compute_advantages` calls the estimator that
:data:`~adapters.training.advantages.ESTIMATORS` names (``at-grpo`` / ``grpo``: group advantages
over the rollout group key, AT-GRPO Eq. 1; ``reinforce++``: token returns with the KL reward
``kl_reward_coef``, whitened over each policy's batch, CoMAS Eqs. 9-10; ``tr-reinforce++``:
whitening per role, one value per sample, MAE/SAGE Eq. 1; ``tr-reinforce++-token``: REINFORCE++
returns whitened over each role's tokens). The update reads the update section
(:class:`~adapters.training.sections.UpdateConfig`), the run seed and whether the samples may be
off-policy.

Loss (:func:`update_policy`): :func:`~adapters.training.losses.ppo_clip_loss` aggregated by
``loss_agg`` (token mean by default; the AT-GRPO recipe uses ``"group-mean"``, Eq. 3: each sample
weighs ``1/K`` in its group and the groups of the policy's batch are averaged, weights taken
before zero-advantage samples are skipped, so equal-reward groups still count in the mean; with
``n`` mini-batches each optimizer step divides its sum by ``G / n``, an estimate of the whole
batch's Eq. 3 per step; G counts each rank's groups, exact when ranks hold whole groups) plus
an optional ``kl_loss_coef`` x :func:`~adapters.training.losses.kl_loss` against the reference,
minus an optional ``entropy_coef`` x the token-mean entropy of the policy (MAE's entropy
bonus). With ``mpt_mask_tau > 0`` the well-mastered tokens of positive samples leave the
policy-gradient term while the model's entropy is below ``mpt_target_entropy`` (MarsRL 2.3,
UloRL Eq. 10; :func:`~adapters.training.masking.without_mastered_positives`): the model's
entropy is measured once per update, the token mean over the policy's whole batch on every rank
before the first optimizer step (one forward pass more; logged as ``model_entropy``). Each
epoch makes ``ppo_minibatches`` optimizer steps (or steps of
``minibatch_size`` samples). Each policy gets only its own samples (``Sample.policy_id``, AT-GRPO Eq. 2) and steps
only its own optimizer; minibatches and micro-batches come from :mod:`adapters.training.batch`,
log-probs from :mod:`adapters.training.logprobs`.

Asynchronous rollouts (``max_staleness > 0``) and segment rollouts (``segment_tokens > 0``,
:mod:`adapters.training.schedule`): the samples' tokens may come from policies several versions
old (``off_policy``, :attr:`~adapters.training.sections.ScheduleConfig.off_policy`).
:func:`prepare_logprobs` then keeps the sampler's log-probs as the behaviour log-probs, and the
old log-probs are the policy's as it is before this update (a pass before it, or its own
forward: below); the PPO ratio is taken against those, and each token's clipped surrogate is
weighted by ``min(pi_old / pi_behav, rollout_is_cap)``
(:func:`~adapters.training.losses.truncated_is_weights`, verl's decoupled rollout correction).
Without either nothing of this runs.

Samples whose advantages are all zero (e.g. a group whose K rewards are equal) carry no policy
gradient; with ``skip_zero_advantage`` (default) and no KL loss they are left out of the update,
so the token mean runs over the informative samples only (like DAPO's filtering of
zero-variance groups); Eq. 3's group mean is unchanged by the skip (its weights and counts are
taken first).

The PPO ratio's denominator (``old_logprobs``): the sampler's log-probs where they are the
training model's (``rollout``), else the training model's: from a pass before the update
(``recompute``; the trainer computes the advantages first unless a KL reward reads the
log-probs, so only the samples the update trains on are scored), or, when the update is one
optimizer step (one epoch of one mini-batch, the CPU recipes), from the training forward itself,
detached (``forward``, verl's ``on_policy`` case of ``dp_actor.update_policy``): the ratio is
then exactly 1 and the gradient the policy gradient, what a separate pass would give up to
rounding, at no cost. On the 8 x 8 Sokoban CPU default the pass over every sample was about
half of each update's time (``benchmarks/update_step.py``).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch

from adapters.rollout import derive_seed
from adapters.training.advantages import ESTIMATORS, _reference
from adapters.training.batch import TrainItem
from adapters.training.distributed import SINGLE, DataParallel
from adapters.training.logprobs import (
    batch_entropy,
    batch_logprobs,
    completion_logprobs,
    completion_logprobs_and_entropy,
)
from adapters.training.losses import (
    LossAgg,
    aggregate_loss,
    group_mean_weights,
    kl_loss,
    ppo_clip_loss,
    token_kl,
    truncated_is_weights,
)
from adapters.training.masking import length_mask, masked_mean, pad_rows, without_mastered_positives
from adapters.training.sections import UpdateConfig

__all__ = [
    "compute_advantages",
    "mean_kl_to_ref",
    "prepare_logprobs",
    "trained_items",
    "update_policy",
]


def precision(cfg: UpdateConfig, model: Any) -> Any:
    """The update's autocast context: bfloat16 over the model's weights when
    ``update_precision`` is ``bfloat16`` (the old, reference and training passes all run in it,
    so the PPO ratio compares like with like), else nothing."""
    import contextlib

    if cfg.update_precision != "bfloat16":
        return contextlib.nullcontext()
    dev = next(model.parameters()).device
    return torch.autocast(dev.type, dtype=torch.bfloat16)


def prepare_logprobs(
    cfg: UpdateConfig,
    pm: Any,
    items: Sequence[TrainItem],
    pad_id: int,
    *,
    off_policy: bool = False,
) -> None:
    """Before one policy's update: recompute its items' old log-probs (``old_logprobs:
    recompute``, or ``off_policy`` samples: their sampler's log-probs become the behaviour
    log-probs) and score them under the reference model when the update needs it
    (:attr:`UpdateConfig.needs_ref`).

    Items whose advantages are already computed are scored only if the update trains on them
    (:func:`trained_items`); with ``old_logprobs: forward`` the old log-probs are left to the
    update's own forward."""
    cfg = cfg.filled()
    with precision(cfg, pm.model):
        _prepare_logprobs(cfg, pm, items, pad_id, off_policy)


def trained_items(cfg: UpdateConfig, items: Sequence[TrainItem]) -> list[TrainItem]:
    """The items :func:`update_policy` trains on: with ``skip_zero_advantage`` (and neither a KL
    loss nor an entropy bonus) those whose advantages are not all zero; every item whose
    advantages are not computed yet."""
    if cfg.skip_zero_advantage and not cfg.kl_loss_coef and not cfg.entropy_coef:
        return [it for it in items if it.advantages is None or bool(it.advantages.any())]
    return list(items)


def _prepare_logprobs(
    cfg: UpdateConfig, pm: Any, items: Sequence[TrainItem], pad_id: int, stale: bool
) -> None:
    pm.activate()
    items = trained_items(cfg, items)  # advantages already known: only the trained ones
    if stale:
        for it in items:
            it.behav_logprobs = torch.tensor(it.sample.logprobs, dtype=torch.float32)
    if cfg.old_logprobs == "recompute" or (stale and cfg.old_logprobs == "rollout"):
        for it, lp in zip(items, batch_logprobs(pm.model, items, cfg, pad_id)):
            it.old_logprobs = lp
    if cfg.needs_ref:
        with pm.reference():
            refs = batch_logprobs(pm.ref_forward_model, items, cfg, pad_id)
        for it, lp in zip(items, refs):
            it.ref_logprobs = lp


def compute_advantages(cfg: UpdateConfig, items: Sequence[TrainItem]) -> None:
    """Fill ``item.advantages`` (per token) and ``item.sample.advantage`` (their mean) with the
    estimator :data:`~adapters.training.advantages.ESTIMATORS` names for ``cfg.algorithm``."""
    if not items:
        return
    ucfg = cfg.filled()
    for it, adv in zip(items, ESTIMATORS[ucfg.algorithm].fn(items, ucfg)):
        it.advantages = adv
        it.sample.advantage = float(adv.mean()) if len(adv) else 0.0


def update_policy(
    cfg: UpdateConfig,
    pm: Any,
    items: Sequence[TrainItem],
    step: int,
    pad_id: int,
    dp: DataParallel | None = None,
    *,
    seed: int = 0,
    off_policy: bool = False,
) -> dict[str, float]:
    """PPO-clip epochs over one policy's items; returns statistics (loss, clip frac, ...).

    ``dp`` (:mod:`adapters.training.distributed`) makes this one rank of a data-parallel update:
    ``items`` are this rank's share, and the statistics are this rank's parts of the sums.
    ``seed`` (the run's) orders the minibatches; ``off_policy``: the samples may come from older
    policies (weights from the behaviour log-probs, module docstring)."""
    ucfg = cfg.filled()
    with precision(ucfg, pm.model):
        return _update_policy(ucfg, pm, items, step, pad_id, dp or SINGLE, seed, off_policy)


def _update_policy(
    cfg: UpdateConfig,
    pm: Any,
    items: Sequence[TrainItem],
    step: int,
    pad_id: int,
    dp: DataParallel,
    seed: int,
    off_policy: bool,
) -> dict[str, float]:
    kl_coef = cfg.kl_loss_coef
    ent_coef = cfg.entropy_coef
    mpt_tau = cfg.mpt_mask_tau  # 0: no masking of well-mastered positive tokens
    use_kl = kl_coef > 0
    loss_agg: LossAgg = cfg.loss_agg
    group_mean = loss_agg == "group-mean"
    # Eq. 3: weights 1/K_g over the whole batch, before zero-advantage samples are skipped
    groups = [it.sample.group for it in items]
    n_groups = len(set(groups))
    eq3 = {id(it): w * n_groups for it, w in zip(items, group_mean_weights(groups))}
    all_items = len(items)
    model_entropy = 0.0
    if mpt_tau > 0:  # UloRL's gate reads the model's entropy over the whole batch (masking.py)
        pm.activate()
        pm.model.eval()
        ent_sum, ent_count = batch_entropy(pm.model, items, cfg, pad_id)
        model_entropy = dp.total(ent_sum) / max(1.0, dp.total(ent_count))
    if any(it.advantages is None for it in items):
        raise ValueError("update_policy needs the items' advantages (compute_advantages)")
    items = trained_items(cfg, items)
    from_forward = cfg.old_logprobs == "forward"  # one step: the forward's own, detached
    stats: dict[str, float] = defaultdict(float)
    stats["samples_trained"] = float(len(items))
    if mpt_tau > 0:
        stats["model_entropy"] = model_entropy
    if not dp.total(len(items)):
        return dict(stats)
    pm.activate()
    pm.model.train(pm.dropout)
    dev = next(pm.model.parameters()).device
    n_updates = 0
    weight_sum = 0.0
    dp.begin_update(pm)
    try:
        global_items = int(dp.total(len(items)))  # minibatches are cut from the global batch
        size = cfg.minibatch_size or math.ceil(global_items / cfg.ppo_minibatches)
        # group-mean: each of the n mini-batch steps divides its sum of A/K_g terms by G / n,
        # n and G counted before skipping, so skipped equal-reward groups still count
        gm_scale = 1.0
        if group_mean:
            n_nominal = (
                math.ceil(dp.total(all_items) / cfg.minibatch_size)
                if cfg.minibatch_size
                else cfg.ppo_minibatches
            )
            gm_scale = n_nominal / max(1.0, dp.total(n_groups))
        for epoch in range(cfg.ppo_epochs):
            rng = random.Random(derive_seed(seed, "minibatch", step, pm.pid, epoch))
            for mb in dp.minibatches(items, size, rng):
                token_mean = loss_agg == "token-mean"
                denom = dp.total(
                    sum(len(it.completion_ids) for it in mb) if token_mean else len(mb)
                )
                pm.optimizer.zero_grad(set_to_none=True)
                for micro in dp.micro_batches(mb, cfg.micro_batch_size, cfg.micro_batch_tokens):
                    lengths = [len(it.completion_ids) for it in micro]
                    width = max(lengths)
                    mask = length_mask(lengths, width).to(dev)
                    prompts = [it.prompt_ids for it in micro]
                    completions = [it.completion_ids for it in micro]
                    temperature = micro[0].temperature  # one per micro-batch (batch.py)
                    entropy = None
                    if ent_coef > 0:
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
                    if from_forward:  # one step: pi_old is the policy this forward runs
                        old = lp.detach()
                        for row, it in enumerate(micro):
                            it.old_logprobs = old[row, : lengths[row]].float().cpu()
                    else:
                        old = pad_rows([it.old_logprobs for it in micro], width).to(dev)
                    adv = pad_rows([it.advantages for it in micro], width).to(dev)  # type: ignore[misc]
                    masked_frac = None
                    if mpt_tau > 0:  # UloRL Eq. 10 (MarsRL 2.3)
                        adv, dropped = without_mastered_positives(
                            adv,
                            lp,
                            mask,
                            model_entropy=model_entropy,
                            tau=mpt_tau,
                            target_entropy=cfg.mpt_target_entropy,
                        )
                        masked_frac = float(dropped.sum() / mask.sum())
                    wts = torch.tensor([eq3[id(it)] for it in micro], device=dev)
                    is_w = None
                    if off_policy:  # the off-policy correction (module docstring)
                        behav = [_behaviour(it) for it in micro]
                        is_w = truncated_is_weights(
                            old, pad_rows(behav, width).to(dev), mask, cfg.rollout_is_cap
                        )
                    loss, st = ppo_clip_loss(
                        lp,
                        old,
                        adv,
                        mask,
                        clip_eps=cfg.clip_eps,
                        clip_eps_high=cfg.clip_eps_high,
                        loss_agg=loss_agg,
                        weights=wts,
                        is_weights=is_w,
                    )
                    w = (float(mask.sum()) if token_mean else len(micro)) / denom
                    if group_mean:  # Eq. 3's sum, not a mean: the KL and entropy keep shares w
                        loss = loss * (gm_scale / w)
                    stats["pg_loss"] += float(loss.detach()) * w
                    if is_w is not None:
                        stats["is_weight_mean"] += float(masked_mean(is_w, mask)) * w
                    if masked_frac is not None:
                        stats["mpt_masked_frac"] += masked_frac * w
                    if use_kl:
                        ref = pad_rows([_reference(it) for it in micro], width).to(dev)
                        kl = kl_loss(lp, ref, mask, cfg.kl_loss_type)
                        loss = loss + kl_coef * kl
                        stats["kl_loss"] += float(kl.detach()) * w
                    if ent_coef > 0 and entropy is not None:  # entropy bonus (MAE Table 3)
                        agg: LossAgg = "seq-mean-token-mean" if group_mean else loss_agg
                        ent = aggregate_loss(entropy, mask, agg)
                        loss = loss - ent_coef * ent
                        stats["entropy"] += float(ent.detach()) * w
                    (loss * (w * dp.grad_scale)).backward()
                    stats["loss"] += float(loss.detach()) * w
                    stats["clip_frac"] += float(st["clip_frac"]) * w
                    stats["approx_kl"] += float(st["approx_kl"]) * w
                    stats["ratio_max"] = max(stats["ratio_max"], float(st["ratio_max"]))
                dp.finish_micro_batches(pm)
                stats["grad_norm"] += dp.clip_grad_norm(pm.params, cfg.max_grad_norm)
                pm.optimizer.step()
                pm.optimizer.zero_grad(set_to_none=True)
                n_updates += 1
                weight_sum += 1.0
    finally:
        pm.model.eval()
        dp.end_update(pm)
    for key in (
        "pg_loss",
        "kl_loss",
        "entropy",
        "loss",
        "clip_frac",
        "approx_kl",
        "grad_norm",
        "mpt_masked_frac",
        "is_weight_mean",
    ):
        if key in stats:
            stats[key] /= max(weight_sum, 1.0)
    stats["optimizer_steps"] = float(n_updates)
    stats["tokens_trained"] = float(sum(len(it.completion_ids) for it in items))
    return dict(stats)


def _behaviour(it: TrainItem) -> torch.Tensor:
    if it.behav_logprobs is None:
        raise ValueError("off-policy samples need their behaviour log-probs (prepare_logprobs)")
    return it.behav_logprobs


def mean_kl_to_ref(items: Sequence[TrainItem]) -> float | None:
    """Token-mean k3 KL(pi_old || pi_ref) over items that have reference log-probs."""
    rows = [(it.old_logprobs, it.ref_logprobs) for it in items if it.ref_logprobs is not None]
    if not rows:
        return None
    total = sum(float(token_kl(a, b, "k3").sum()) for a, b in rows)
    return total / max(1, sum(len(a) for a, _ in rows))
