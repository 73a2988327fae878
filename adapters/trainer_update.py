"""The policy update of :mod:`adapters.trainer`: batches, log-probs, advantages, PPO steps.

Advantages (``TrainConfig.algorithm``):

* ``at-grpo`` / ``grpo``: :func:`~adapters.algorithms.group_advantages` over the samples sharing
  a rollout group key (AT-GRPO: ``(instance, branch, agent, turn, step)`` from tree sampling;
  GRPO: ``(instance, agent, turn, step)`` across the K parallel episodes), one value per sample
  broadcast over its tokens (Eq. 1).
* ``reinforce++``: :func:`~adapters.algorithms.reinforce_pp_advantages` over each policy's batch
  (token-level KL penalty ``kl_reward_coef`` against the reference, global whitening; CoMAS
  Eqs. 9-10).
* ``tr-reinforce++``: the same returns whitened separately per role (MAE).

Loss: :func:`~adapters.algorithms.ppo_clip_loss` (token mean by default) plus an optional
``kl_loss_coef`` x :func:`~adapters.algorithms.kl_loss` against the reference. Each policy gets
only its own samples (``Sample.policy_id``, Eq. 2) and steps only its own optimizer.

Shared-prompt forward. The K candidates of a tree-sampling group share their prompt token for
token, and multi-turn prompts are long. With ``share_prompt_forward`` (default) each distinct
prompt of a micro-batch runs through the model once, its KV cache is expanded to its
completions, and only the completion tokens run per sample. Gradients flow through the shared
cache, so the result equals a full forward of every sequence (tested against
:func:`~adapters.algorithms.sequence_logprobs`); the cost drops from ``K (P + C)`` to
``P + K C`` tokens per group.

Samples whose advantages are all zero (e.g. a group whose K rewards are equal) carry no policy
gradient; with ``skip_zero_advantage`` (default) and no KL loss they are left out of the
update, so the token mean runs over the informative samples only (like DAPO's filtering of
zero-variance groups).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from adapters.algorithms import (
    ChunkedLogprob,
    group_advantages,
    kl_loss,
    plain_head,
    ppo_clip_loss,
    reinforce_pp_advantages,
    sequence_logprobs,
    token_kl,
)
from adapters.config import TrainConfig, derive_seed
from adapters.policies.transformers_policy import distinct_prompt_batch
from adapters.rollout import Sample

__all__ = [
    "TrainItem",
    "derive_seed",
    "completion_logprobs",
    "make_items",
    "compute_advantages",
    "update_policy",
    "pad_rows",
]


@dataclass
class TrainItem:
    """One trainable sample: its tokens and per-token tensors (length = completion length)."""

    sample: Sample
    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor | None = None
    advantages: torch.Tensor | None = None

    @property
    def prompt_key(self) -> tuple[int, ...]:
        return tuple(self.prompt_ids)


def make_items(samples: Sequence[Sample]) -> tuple[list[TrainItem], int]:
    """Trainable items (token ids and one log-prob per token) and the number left out."""
    items, dropped = [], 0
    for s in samples:
        if s.completion_ids and s.prompt_ids and len(s.logprobs) == len(s.completion_ids):
            items.append(
                TrainItem(
                    s,
                    list(s.prompt_ids),
                    list(s.completion_ids),
                    torch.tensor(s.logprobs, dtype=torch.float32),
                )
            )
        else:
            dropped += 1
    return items, dropped


def pad_rows(rows: Sequence[torch.Tensor], width: int | None = None) -> torch.Tensor:
    """Right-pad 1-D tensors with zeros into a (N, width) tensor."""
    width = max((len(r) for r in rows), default=0) if width is None else width
    out = torch.zeros(len(rows), width, dtype=torch.float32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _mask(lengths: Sequence[int], width: int) -> torch.Tensor:
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).float()


# ---------------------------------------------------------------------------------------------
# log-probs


def completion_logprobs(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    share_prompt: bool = True,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """Log-probs of each completion's tokens given its prompt, as a right-padded (N, C) tensor.

    Differentiable. With ``share_prompt`` (and a Llama/Qwen-style model) every distinct prompt
    is run once and its KV cache is shared by its completions (see the module docstring).
    """
    dev = next(model.parameters()).device
    lengths = [len(c) for c in completions]
    width = max(lengths)
    parts = plain_head(model) if share_prompt else None
    if parts is None:
        return _full_logprobs(model, prompts, completions, pad_id, temperature, chunk_size, dev)
    from transformers import DynamicCache

    decoder, head = parts
    index, ids, attn, positions = distinct_prompt_batch(prompts, pad_id, dev)
    cache = DynamicCache(config=model.config)
    h_prompt = decoder(
        input_ids=ids,
        attention_mask=attn,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state[:, -1]
    idx = torch.tensor(index, device=dev)
    if index != list(range(ids.shape[0])):
        cache.reorder_cache(idx)  # type: ignore[arg-type]
    cids = torch.full((len(completions), width), pad_id, dtype=torch.long)
    for i, c in enumerate(completions):
        cids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
    cmask = _mask(lengths, width).to(dev)
    cids = cids.to(dev)
    full_attn = torch.cat([attn.index_select(0, idx), cmask.long()], dim=1)
    cpos = attn.sum(-1).index_select(0, idx)[:, None] + torch.arange(width, device=dev)[None, :]
    hidden = decoder(
        input_ids=cids,
        attention_mask=full_attn,
        position_ids=cpos,
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state
    h_pred = torch.cat([h_prompt.index_select(0, idx)[:, None], hidden[:, :-1]], dim=1)
    sel = cmask.bool()
    lp = ChunkedLogprob.apply(
        h_pred[sel], head.weight, head.bias, cids[sel], 1.0 / temperature, chunk_size
    )
    return lp.new_zeros(len(completions), width).masked_scatter(sel, lp)


def _full_logprobs(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float,
    chunk_size: int,
    dev: Any,
) -> torch.Tensor:
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions)]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    comp = torch.zeros_like(ids)
    for i, (s, c) in enumerate(zip(seqs, completions)):
        ids[i, width - len(s) :] = torch.tensor(s)
        attn[i, width - len(s) :] = 1
        comp[i, width - len(c) :] = 1
    lp = sequence_logprobs(
        model,
        ids.to(dev),
        attn.to(dev),
        comp.to(dev),
        temperature=temperature,
        chunk_size=chunk_size,
    )
    cw = max(len(c) for c in completions)
    rows = [lp[i, width - len(c) :] for i, c in enumerate(completions)]
    return torch.stack([torch.nn.functional.pad(r, (0, cw - len(r))) for r in rows])


def _padded_cost(items: Sequence[TrainItem]) -> int:
    """Tokens one shared-prompt forward of ``items`` processes (padding included)."""
    prompts = {it.prompt_key for it in items}
    plen = max(len(p) for p in prompts)
    clen = max(len(it.completion_ids) for it in items)
    return len(prompts) * plen + len(items) * clen


def _micro_batches(
    items: Sequence[TrainItem], size: int, max_tokens: int = 0
) -> list[list[TrainItem]]:
    """Chunks of at most ``size`` items and (when ``max_tokens``) at most that many padded tokens.

    Items of one prompt stay together where possible, and prompts are packed longest first so
    that prompts of similar length share a chunk (less padding).
    """
    by_prompt: dict[tuple[int, ...], list[TrainItem]] = defaultdict(list)
    for it in items:
        by_prompt[it.prompt_key].append(it)
    groups = sorted(by_prompt.values(), key=lambda g: -len(g[0].prompt_ids))
    out: list[list[TrainItem]] = []
    cur: list[TrainItem] = []
    for group in groups:
        for it in group:
            if cur and (len(cur) >= size or (max_tokens and _padded_cost([*cur, it]) > max_tokens)):
                out.append(cur)
                cur = []
            cur.append(it)
    if cur:
        out.append(cur)
    return out


def batch_logprobs(
    model: Any,
    items: Sequence[TrainItem],
    cfg: TrainConfig,
    pad_id: int,
    temperature: float,
) -> list[torch.Tensor]:
    """Per-item log-prob tensors under ``model`` (no grad), in micro-batches."""
    out: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for mb in _micro_batches(items, cfg.micro_batch_size or 8, cfg.micro_batch_tokens or 0):
            lp = completion_logprobs(
                model,
                [it.prompt_ids for it in mb],
                [it.completion_ids for it in mb],
                pad_id=pad_id,
                temperature=temperature,
                share_prompt=cfg.share_prompt_forward,
            ).float()
            for row, it in zip(lp, mb):
                out[id(it)] = row[: len(it.completion_ids)].cpu()
    return [out[id(it)] for it in items]


# ---------------------------------------------------------------------------------------------
# advantages


def compute_advantages(cfg: TrainConfig, items: Sequence[TrainItem]) -> None:
    """Fill ``item.advantages`` (per token) and ``item.sample.advantage`` (their mean)."""
    if not items:
        return
    if cfg.algorithm in ("at-grpo", "grpo"):
        adv = group_advantages(
            [it.sample.reward for it in items],
            [it.sample.group for it in items],
            normalize_std=cfg.normalize_std,
        )
        for it, a in zip(items, adv.tolist()):
            it.advantages = torch.full((len(it.completion_ids),), float(a))
    else:
        by_pid: dict[str, list[TrainItem]] = defaultdict(list)
        for it in items:
            by_pid[it.sample.policy_id].append(it)
        for batch in by_pid.values():
            width = max(len(it.completion_ids) for it in batch)
            mask = _mask([len(it.completion_ids) for it in batch], width)
            beta = cfg.kl_reward_coef
            lp = pad_rows([it.old_logprobs for it in batch], width) if beta else None
            ref = pad_rows([_need_ref(it) for it in batch], width) if beta else None
            groups = [it.sample.role for it in batch] if cfg.algorithm == "tr-reinforce++" else None
            adv = reinforce_pp_advantages(
                [it.sample.reward for it in batch],
                mask,
                lp,
                ref,
                beta=beta,
                gamma=cfg.gamma,
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


# ---------------------------------------------------------------------------------------------
# the update


def _minibatches(
    items: Sequence[TrainItem], size: int, rng: random.Random
) -> list[list[TrainItem]]:
    """Shuffle whole prompt groups, then cut into minibatches of at least ``size`` samples."""
    by_prompt: dict[tuple[int, ...], list[TrainItem]] = defaultdict(list)
    for it in items:
        by_prompt[it.prompt_key].append(it)
    groups = list(by_prompt.values())
    rng.shuffle(groups)
    if size <= 0:
        return [[it for g in groups for it in g]]
    out: list[list[TrainItem]] = []
    cur: list[TrainItem] = []
    for g in groups:
        cur.extend(g)
        if len(cur) >= size:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def update_policy(
    cfg: TrainConfig, pm: Any, items: Sequence[TrainItem], step: int, pad_id: int
) -> dict[str, float]:
    """PPO-clip epochs over one policy's items; returns statistics (loss, clip frac, ...)."""
    use_kl = cfg.kl_loss_coef > 0
    if cfg.skip_zero_advantage and not use_kl:
        items = [it for it in items if it.advantages is not None and bool(it.advantages.any())]
    stats: dict[str, float] = defaultdict(float)
    stats["samples_trained"] = float(len(items))
    if not items:
        return dict(stats)
    temperature = cfg.temperature if cfg.temperature else 1.0
    pm.activate()
    pm.model.train(cfg.lora_dropout > 0)
    dev = next(pm.model.parameters()).device
    n_updates = 0
    weight_sum = 0.0
    try:
        for epoch in range(cfg.ppo_epochs):
            rng = random.Random(derive_seed(cfg.seed, "minibatch", step, pm.pid, epoch))
            for mb in _minibatches(items, cfg.minibatch_size, rng):
                token_mean = cfg.loss_agg == "token-mean"
                denom = float(sum(len(it.completion_ids) for it in mb) if token_mean else len(mb))
                pm.optimizer.zero_grad(set_to_none=True)
                for micro in _micro_batches(
                    mb, cfg.micro_batch_size or 8, cfg.micro_batch_tokens or 0
                ):
                    lengths = [len(it.completion_ids) for it in micro]
                    width = max(lengths)
                    mask = _mask(lengths, width).to(dev)
                    lp = completion_logprobs(
                        pm.model,
                        [it.prompt_ids for it in micro],
                        [it.completion_ids for it in micro],
                        pad_id=pad_id,
                        temperature=temperature,
                        share_prompt=cfg.share_prompt_forward,
                    )
                    old = pad_rows([it.old_logprobs for it in micro], width).to(dev)
                    adv = pad_rows([it.advantages for it in micro], width).to(dev)  # type: ignore[misc]
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
                    if use_kl:
                        ref = pad_rows([_need_ref(it) for it in micro], width).to(dev)
                        kl = kl_loss(lp, ref, mask, cfg.kl_loss_type)
                        loss = loss + cfg.kl_loss_coef * kl
                        stats["kl_loss"] += float(kl.detach()) * w
                    (loss * w).backward()
                    stats["loss"] += float(loss.detach()) * w
                    stats["clip_frac"] += float(st["clip_frac"]) * w
                    stats["approx_kl"] += float(st["approx_kl"]) * w
                    stats["ratio_max"] = max(stats["ratio_max"], float(st["ratio_max"]))
                grad_norm = torch.nn.utils.clip_grad_norm_(pm.params, cfg.max_grad_norm)
                stats["grad_norm"] += float(grad_norm)
                pm.optimizer.step()
                pm.optimizer.zero_grad(set_to_none=True)
                n_updates += 1
                weight_sum += 1.0
    finally:
        pm.model.eval()
    for key in ("pg_loss", "kl_loss", "loss", "clip_frac", "approx_kl", "grad_norm"):
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
