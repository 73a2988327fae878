"""The policy update: advantages for a step's samples, then PPO epochs per policy.

Where each part of the paper's update is:

* **Advantages** (AT-GRPO Eq. 1, and the other estimators): :func:`compute_advantages` calls the
  estimator that :data:`~adapters.training.advantages.ESTIMATORS` names for
  ``update.algorithm`` (``at-grpo`` / ``grpo``: group advantages over the rollout group key;
  ``reinforce++``: token returns with the KL reward ``kl_reward_coef``, whitened over each
  policy's batch, CoMAS Eqs. 9-10; ``tr-reinforce++``: whitening per role, one value per sample,
  MAE/SAGE Eq. 1; ``tr-reinforce++-token``: REINFORCE++ returns whitened over each role's
  tokens).
* **One policy per agent** (AT-GRPO Eq. 2): the trainer hands :func:`update_policy` one
  policy's own samples (``Sample.policy_id``), and it steps only that policy's optimizer.
* **The loss** (AT-GRPO Eq. 3 and the terms around it): every term is a function of
  :mod:`adapters.training.losses` (its page lists them with their equations), put together per
  micro-batch by :func:`~adapters.training.losses.micro_batch_loss`. This module only feeds it:
  :func:`_forward` runs the training forward of a micro-batch and pads the tensors the terms read
  (:class:`~adapters.training.losses.MicroBatch`), and what a term needs of the whole batch is
  read once before the first step: Eq. 3's ``1/K_g`` weights
  (:func:`~adapters.training.losses.group_weights`) and ``n/G`` scale (:func:`_group_scale`), and
  the model's entropy that opens UloRL's mask (:func:`_model_entropy`: the token mean over the
  policy's whole batch on every rank, one forward pass more, logged as ``model_entropy``).
* **The loop** (:func:`update_policy`): ``ppo_epochs`` epochs of ``ppo_minibatches`` optimizer
  steps (or steps of ``minibatch_size`` samples); each step accumulates the gradients of its
  micro-batches, each weighted by its share of the mini-batch (of its tokens under the token
  mean, else of its sequences), then clips the gradient norm and steps. Mini-batches and
  micro-batches come from :mod:`adapters.training.batch`, log-probs from
  :mod:`adapters.training.logprobs`, and ``dp`` (:mod:`adapters.training.distributed`) makes it
  one rank of a data-parallel update. The update reads the update section
  (:class:`~adapters.training.sections.UpdateConfig`), the run seed and whether the samples may
  be off-policy.

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
gradient; with ``skip_zero_advantage`` (default) and neither a KL loss nor an entropy bonus they
are left out of the update (:func:`trained_items`), so the token mean runs over the informative
samples only (like DAPO's filtering of zero-variance groups); Eq. 3's group mean is unchanged by
the skip (its weights and counts are taken first).

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
    MicroBatch,
    group_mean_scale,
    group_weights,
    micro_batch_loss,
    token_kl,
)
from adapters.training.masking import length_mask, pad_rows
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


# statistics summed over a policy's optimizer steps (each step's share-weighted micro-batch
# values), logged as their mean per step
_PER_STEP_MEANS = (
    "pg_loss",
    "kl_loss",
    "entropy",
    "loss",
    "clip_frac",
    "approx_kl",
    "grad_norm",
    "mpt_masked_frac",
    "is_weight_mean",
)


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
    """Mini-batches, gradient accumulation over their micro-batches, one optimizer step each;
    the loss of a micro-batch is :func:`~adapters.training.losses.micro_batch_loss`."""
    if any(it.advantages is None for it in items):
        raise ValueError("update_policy needs the items' advantages (compute_advantages)")
    # read over the whole batch before zero-advantage samples are skipped: UloRL's gate, and
    # Eq. 3's 1/K_g weights and 1/G scale (a group of equal rewards still counts)
    model_entropy = _model_entropy(cfg, pm, items, pad_id, dp) if cfg.mpt_mask_tau > 0 else 0.0
    weights = dict(zip(map(id, items), group_weights([it.sample.group for it in items])))
    group_scale = _group_scale(cfg, items, dp) if cfg.loss_agg == "group-mean" else 1.0
    items = trained_items(cfg, items)
    stats: dict[str, float] = defaultdict(float)
    stats["samples_trained"] = float(len(items))
    if cfg.mpt_mask_tau > 0:
        stats["model_entropy"] = model_entropy
    global_items = int(dp.total(len(items)))  # minibatches are cut from the global batch
    if not global_items:
        return dict(stats)
    size = cfg.minibatch_size or math.ceil(global_items / cfg.ppo_minibatches)
    pm.activate()
    pm.model.train(pm.dropout)
    n_steps = 0
    dp.begin_update(pm)
    try:
        for epoch in range(cfg.ppo_epochs):
            rng = random.Random(derive_seed(seed, "minibatch", step, pm.pid, epoch))
            for mb in dp.minibatches(items, size, rng):  # one optimizer step each
                denom = dp.total(_size(cfg, mb))
                pm.optimizer.zero_grad(set_to_none=True)
                for micro in dp.micro_batches(mb, cfg.micro_batch_size, cfg.micro_batch_tokens):
                    batch = _forward(cfg, pm, micro, pad_id, dp, weights, off_policy)
                    share = _size(cfg, micro) / denom  # of the mini-batch
                    loss, st = micro_batch_loss(
                        batch,
                        cfg,
                        share=share,
                        group_scale=group_scale,
                        model_entropy=model_entropy,
                    )
                    (loss * (share * dp.grad_scale)).backward()  # accumulated over the mini-batch
                    for key, value in st.items():
                        if key == "ratio_max":
                            stats[key] = max(stats[key], value)
                        else:
                            stats[key] += value * share
                dp.finish_micro_batches(pm)
                stats["grad_norm"] += dp.clip_grad_norm(pm.params, cfg.max_grad_norm)
                pm.optimizer.step()
                pm.optimizer.zero_grad(set_to_none=True)
                n_steps += 1
    finally:
        pm.model.eval()
        dp.end_update(pm)
    for key in _PER_STEP_MEANS:
        if key in stats:
            stats[key] /= max(n_steps, 1)
    stats["optimizer_steps"] = float(n_steps)
    stats["tokens_trained"] = float(sum(len(it.completion_ids) for it in items))
    return dict(stats)


def _size(cfg: UpdateConfig, items: Sequence[TrainItem]) -> int:
    """What a micro-batch's share of its mini-batch counts: its tokens under the token mean, else
    its sequences."""
    if cfg.loss_agg == "token-mean":
        return sum(len(it.completion_ids) for it in items)
    return len(items)


def _model_entropy(
    cfg: UpdateConfig, pm: Any, items: Sequence[TrainItem], pad_id: int, dp: DataParallel
) -> float:
    """The model's entropy that opens UloRL's mask (:mod:`adapters.training.masking`): the token
    mean over the policy's whole batch on every rank, before the first optimizer step."""
    pm.activate()
    pm.model.eval()
    ent_sum, ent_count = batch_entropy(pm.model, items, cfg, pad_id)
    return dp.total(ent_sum) / max(1.0, dp.total(ent_count))


def _group_scale(cfg: UpdateConfig, items: Sequence[TrainItem], dp: DataParallel) -> float:
    """Eq. 3's ``n / G`` (:func:`~adapters.training.losses.group_mean_scale`): the nominal
    optimizer steps of an epoch and the batch's groups, counted before the skip; G counts each
    rank's groups, exact when ranks hold whole groups."""
    if cfg.minibatch_size:
        n_steps: float = math.ceil(dp.total(len(items)) / cfg.minibatch_size)
    else:
        n_steps = cfg.ppo_minibatches
    return group_mean_scale(n_steps, dp.total(len({it.sample.group for it in items})))


def _forward(
    cfg: UpdateConfig,
    pm: Any,
    micro: Sequence[TrainItem],
    pad_id: int,
    dp: DataParallel,
    weights: dict[int, float],
    off_policy: bool,
) -> MicroBatch:
    """The training forward of one micro-batch and the tensors its loss reads. With
    ``old_logprobs: forward`` (one optimizer step) ``pi_old`` is this forward's, detached, and
    is kept on the items."""
    lengths = [len(it.completion_ids) for it in micro]
    width = max(lengths)
    dev = next(pm.model.parameters()).device
    args = ([it.prompt_ids for it in micro], [it.completion_ids for it in micro])
    temperature = micro[0].temperature  # one per micro-batch (batch.py)
    entropy = None
    if cfg.entropy_coef > 0:
        lp, entropy = dp.forward(
            pm, completion_logprobs_and_entropy, *args, pad_id=pad_id, temperature=temperature
        )
    else:
        lp = dp.forward(
            pm,
            completion_logprobs,
            *args,
            pad_id=pad_id,
            temperature=temperature,
            share_prompt=cfg.share_prompt_forward,
        )
    if cfg.old_logprobs == "forward":
        old = lp.detach()
        for row, it in enumerate(micro):
            it.old_logprobs = old[row, : lengths[row]].float().cpu()
    else:
        old = pad_rows([it.old_logprobs for it in micro], width).to(dev)

    def padded(rows: Sequence[torch.Tensor]) -> torch.Tensor:
        return pad_rows(rows, width).to(dev)

    return MicroBatch(
        logprobs=lp,
        old_logprobs=old,
        advantages=padded([_advantages(it) for it in micro]),
        mask=length_mask(lengths, width).to(dev),
        group_weights=torch.tensor([weights[id(it)] for it in micro], device=dev)
        if cfg.loss_agg == "group-mean"
        else None,
        behav_logprobs=padded([_behaviour(it) for it in micro]) if off_policy else None,
        ref_logprobs=padded([_reference(it) for it in micro]) if cfg.kl_loss_coef > 0 else None,
        entropy=entropy,
    )


def _advantages(it: TrainItem) -> torch.Tensor:
    if it.advantages is None:
        raise ValueError("update_policy needs the items' advantages (compute_advantages)")
    return it.advantages


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
