"""RL algorithm pieces as pure torch functions: advantages, losses, KL terms, log-probs.

Shapes: ``B`` sequences, ``T`` completion positions. ``mask`` (B, T) is 1 on valid completion
tokens and 0 on padding; per-token tensors (log-probs, advantages) are (B, T) and are
meaningful only where the mask is 1 (functions return 0 elsewhere).

Advantage estimators
--------------------
* :func:`group_advantages` - GRPO and AT-GRPO (paper 002, Eq. 1):
  ``A_i = (r_i - mean_g) / (std_g + eps)`` over the samples sharing a group key. AT-GRPO's key is
  ``(env, agent, turn)`` (agent- and turn-wise grouping, Alg. 1 line 11); plain GRPO's is the
  prompt. ``std_g`` is the **sample** standard deviation (divisor K-1) by default because Eq. 1
  says "F_norm is the sample standard deviation" (verl's GRPO also uses ``torch.std``);
  ``unbiased=False`` gives the population one. ``normalize_std=False`` keeps only the mean
  baseline (Dr. GRPO). A group of size 1 has no baseline and gets advantage 0 (verl would give it
  the raw reward), and a group whose rewards are all equal gets 0.
* :func:`reinforce_pp_advantages` - REINFORCE++ as used by CoMAS (paper 003, Eqs. 9-10) and
  OpenRLHF: per-token rewards ``r_t = -beta * KL_t`` with the scalar reward added at the last
  valid token, returns-to-go with ``gamma`` (1 in the papers), then whitening over **all valid
  tokens of the batch**: ``(A - mean) / (std + eps)``. The whitening std is the population one
  (divisor = number of valid tokens), as in OpenRLHF; with thousands of tokens the choice does
  not matter, and it keeps a batch of identical returns at exactly 0.
* :func:`task_relative_reinforce_pp_advantages` - Task-Relative REINFORCE++ (MAE, paper 001, and
  SAGE, following Absolute Zero): the same returns, whitened separately within each role (or
  task-role pair): ``A = (r - mu_role) / (sigma_role + eps)``. MAE trains without KL reward
  (beta = 0), where each sequence's return is its scalar reward at every token.

Losses
------
* :func:`ppo_clip_loss` - PPO clipped surrogate with optional asymmetric clipping
  (``clip_eps`` low, ``clip_eps_high`` high, "clip-higher"), aggregated by token mean over the
  valid tokens of the batch by default; returns the loss and detached statistics (clip fraction,
  approximate KL between old and new policy). With ``old_logprobs = logprobs.detach()`` (one
  on-policy step) its gradient equals AT-GRPO's Eq. 3 policy gradient.
* :func:`token_kl` (k1, k2, k3 estimators) and :func:`kl_loss` (masked token mean).

Log-probs
---------
* :func:`sequence_logprobs` - per-token log-probs of given tokens under a model, for old/ref
  log-probs and the training forward pass. For Llama/Qwen/Mistral-style models it never builds
  the (tokens x vocabulary) logits tensor at once: it runs the decoder, then computes
  ``logit[token] - logsumexp(logits)`` chunk by chunk, with a custom backward that recomputes each
  chunk (memory O(chunk x vocab) also under autograd).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Literal

import torch

KLKind = Literal["k1", "k2", "k3"]
LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]

__all__ = [
    "PLAIN_HEAD_TYPES",
    "ChunkedLogprob",
    "aggregate_loss",
    "group_advantages",
    "grpo_advantages",
    "kl_loss",
    "masked_mean",
    "masked_whiten",
    "plain_head",
    "ppo_clip_loss",
    "reinforce_pp_advantages",
    "reinforce_pp_returns",
    "sequence_logprobs",
    "task_relative_reinforce_pp_advantages",
    "token_kl",
]


# --------------------------------------------------------------------------------------------
# helpers


def _as_float_tensor(x: Any, name: str) -> torch.Tensor:
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.float32)
    if not t.is_floating_point():
        t = t.float()
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D (one value per sample), got shape {tuple(t.shape)}")
    return t


def _group_index(group_ids: Sequence[Hashable], n: int, device: torch.device) -> torch.Tensor:
    if isinstance(group_ids, torch.Tensor):
        group_ids = group_ids.tolist()
    if len(group_ids) != n:
        raise ValueError(f"got {n} values but {len(group_ids)} group ids")
    index: dict[Hashable, int] = {}
    return torch.tensor([index.setdefault(g, len(index)) for g in group_ids], device=device)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over entries where ``mask`` is 1 (0 when there are none)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` over valid entries (population std); 0 where invalid."""
    m = mask.to(x.dtype)
    mean = masked_mean(x, m)
    std = masked_mean((x - mean) ** 2, m).sqrt()
    if std == 0:  # constant values: nothing to whiten (and no 0/0 when eps = 0)
        return torch.zeros_like(x)
    return (x - mean) / (std + eps) * m


def _check_tokens(mask: torch.Tensor, *tensors: torch.Tensor | None) -> None:
    if mask.dim() != 2:
        raise ValueError(f"mask must be (batch, tokens), got shape {tuple(mask.shape)}")
    for t in tensors:
        if t is not None and t.shape != mask.shape:
            raise ValueError(f"shape {tuple(t.shape)} does not match mask {tuple(mask.shape)}")


# --------------------------------------------------------------------------------------------
# group-relative advantages (GRPO / AT-GRPO)


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

    Returns a float tensor of advantages; samples in groups of size 1 get 0.

    >>> group_advantages([1.0, 0.0, 1.0, 0.0], ["g"] * 4, unbiased=False, eps=0.0).tolist()
    [1.0, -1.0, 1.0, -1.0]
    """
    r = _as_float_tensor(rewards, "rewards")
    idx = _group_index(group_ids, r.numel(), r.device)
    n_groups = int(idx.max()) + 1 if r.numel() else 0
    counts = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(
        0, idx, torch.ones_like(r)
    )
    sums = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, r)
    mean = sums / counts
    centered = r - mean[idx]
    single = counts[idx] < 2
    if normalize_std:
        sq = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, centered**2)
        denom = (counts - 1).clamp(min=1) if unbiased else counts
        std = (sq / denom).sqrt()[idx]
        # equal rewards: centered is exactly 0; keep it 0 even with eps = 0
        adv = torch.where(std > 0, centered / (std + eps), torch.zeros_like(centered))
    else:
        adv = centered
    return torch.where(single, torch.zeros_like(adv), adv)


grpo_advantages = group_advantages


# --------------------------------------------------------------------------------------------
# KL estimators


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
    _check_tokens(mask, logprobs, ref_logprobs)
    return masked_mean(token_kl(logprobs, ref_logprobs, kind), mask)


# --------------------------------------------------------------------------------------------
# REINFORCE++ and Task-Relative REINFORCE++


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
    mask_f = mask.float()
    r = _as_float_tensor(rewards, "rewards").to(mask_f.device)
    _check_tokens(mask, logprobs, ref_logprobs)
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
    mask: torch.Tensor,
    roles: Sequence[Hashable],
    logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """Task-Relative REINFORCE++ (MAE / SAGE): REINFORCE++ whitened separately per role.

    ``roles`` holds one key per sequence: the agent role, or a ``(task, role)`` pair.
    """
    return reinforce_pp_advantages(rewards, mask, logprobs, ref_logprobs, group_ids=roles, **kwargs)


# --------------------------------------------------------------------------------------------
# PPO


def aggregate_loss(
    per_token: torch.Tensor, mask: torch.Tensor, mode: LossAgg = "token-mean"
) -> torch.Tensor:
    """Reduce a (B, T) per-token loss to a scalar.

    ``token-mean``: sum over valid tokens / number of valid tokens in the batch;
    ``seq-mean-token-mean``: mean over sequences of each sequence's token mean;
    ``seq-mean-token-sum``: mean over sequences of each sequence's token sum.
    Sequences without valid tokens are left out of the sequence means.
    """
    m = mask.to(per_token.dtype)
    if mode == "token-mean":
        return masked_mean(per_token, m)
    has = (m.sum(-1) > 0).to(per_token.dtype)
    if mode == "seq-mean-token-mean":
        per_seq = (per_token * m).sum(-1) / m.sum(-1).clamp(min=1)
    elif mode == "seq-mean-token-sum":
        per_seq = (per_token * m).sum(-1)
    else:
        raise ValueError(f"unknown loss aggregation {mode!r}")
    return (per_seq * has).sum() / has.sum().clamp(min=1)


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    loss_agg: LossAgg = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate loss (to minimise).

    ``ratio = exp(logprobs - old_logprobs)``; per token
    ``max(-A * ratio, -A * clip(ratio, 1 - clip_eps, 1 + clip_eps_high))``, reduced with
    :func:`aggregate_loss` (token mean over the batch's valid tokens by default).
    ``advantages`` may be (B, T) or (B,) (one value per sequence, broadcast over its tokens).

    Returns ``(loss, stats)``; stats are detached scalars: ``clip_frac`` (share of valid tokens
    where the clipped branch is taken), ``approx_kl`` (k3 estimate of KL(old || new)),
    ``ratio_mean``, ``ratio_max``.
    """
    _check_tokens(mask, logprobs, old_logprobs)
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    _check_tokens(mask, advantages)
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + eps_high)
    per_token = torch.maximum(unclipped, clipped)
    loss = aggregate_loss(per_token, mask, loss_agg)
    with torch.no_grad():
        m = mask.to(ratio.dtype)
        stats = {
            "clip_frac": masked_mean((clipped > unclipped).to(ratio.dtype), m),
            "approx_kl": masked_mean(torch.expm1(log_ratio) - log_ratio, m),
            "ratio_mean": masked_mean(ratio, m),
            "ratio_max": (ratio * m).max() if m.any() else ratio.new_zeros(()),
        }
    return loss, {k: v.detach() for k, v in stats.items()}


# --------------------------------------------------------------------------------------------
# log-probs of given tokens


class ChunkedLogprob(torch.autograd.Function):
    """log softmax(h W^T + b)[target] / T computed per chunk of rows, recomputed in backward."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, inv_temp, chunk):  # type: ignore[override]
        out_dtype = torch.promote_types(h.dtype, torch.float32)
        out = torch.empty(h.shape[0], dtype=out_dtype, device=h.device)
        lse = torch.empty_like(out)
        for s in range(0, h.shape[0], chunk):
            logits = torch.nn.functional.linear(h[s : s + chunk], weight, bias).to(out_dtype)
            logits = logits * inv_temp
            lse[s : s + chunk] = torch.logsumexp(logits, dim=-1)
            tgt = logits.gather(-1, targets[s : s + chunk, None]).squeeze(-1)
            out[s : s + chunk] = tgt - lse[s : s + chunk]
        ctx.save_for_backward(h, weight, bias, targets, lse)
        ctx.inv_temp, ctx.chunk = inv_temp, chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        h, weight, bias, targets, lse = ctx.saved_tensors
        inv_temp, chunk = ctx.inv_temp, ctx.chunk
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(h) if need_h else None
        acc = lse.dtype
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        grad_b = (
            torch.zeros(bias.shape, dtype=acc, device=bias.device)
            if (need_b and bias is not None)
            else None
        )
        for s in range(0, h.shape[0], chunk):
            hs = h[s : s + chunk]
            logits = torch.nn.functional.linear(hs, weight, bias).to(acc) * inv_temp
            g = -torch.exp(logits - lse[s : s + chunk, None]) * grad_out[s : s + chunk, None]
            g.scatter_add_(-1, targets[s : s + chunk, None], grad_out[s : s + chunk, None].to(acc))
            g = g * inv_temp
            if grad_h is not None:
                grad_h[s : s + chunk] = (g.to(weight.dtype) @ weight).to(h.dtype)
            if grad_w is not None:
                grad_w += g.t() @ hs.to(acc)
            if grad_b is not None:
                grad_b += g.sum(0)
        return (
            grad_h,
            grad_w.to(weight.dtype) if grad_w is not None else None,
            grad_b.to(bias.dtype) if grad_b is not None else None,
            None,
            None,
            None,
        )


PLAIN_HEAD_TYPES = {
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "qwen2_moe",
    "qwen3_moe",
    "phi3",
    "smollm3",
    "olmo2",
}
"""``config.model_type`` values whose logits are ``Linear(decoder hidden state)`` with nothing
after it, so :class:`ChunkedLogprob` can take the place of the model's own head."""


def plain_head(model: Any) -> tuple[Any, torch.nn.Linear] | None:
    """``(decoder, head)`` when ``model``'s logits are ``head(decoder(...).last_hidden_state)``
    (a :data:`PLAIN_HEAD_TYPES` model with a ``Linear`` output embedding), else None."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if model_type in PLAIN_HEAD_TYPES and isinstance(head, torch.nn.Linear) and decoder is not None:
        return decoder, head
    return None


def sequence_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """Per-token log-probs of ``input_ids`` under ``model``, at the positions to score.

    Args:
        input_ids: (B, L) prompt + completion tokens (any padding, e.g. left-padded prompts and
            right-padded completions).
        attention_mask: (B, L) 1 on real tokens; position ids are its cumulative sum, matching
            :class:`~adapters.policies.TransformersPolicy`.
        completion_mask: (B, L) 1 on the tokens whose log-prob is wanted (column 0 cannot be
            scored: nothing precedes it).
        temperature: scores ``log_softmax(logits / temperature)``, to match sampling at that
            temperature.
        chunk_size: rows of the (tokens x vocabulary) logits materialised at once.

    Returns a float32 (float64 for float64 models) tensor (B, L) with
    ``log p(input_ids[b, t] | input_ids[b, :t])`` where ``completion_mask`` is 1 and 0 elsewhere.
    Differentiable (gradients flow into the model). Runs in the model's current mode.
    """
    if input_ids.shape != attention_mask.shape or input_ids.shape != completion_mask.shape:
        raise ValueError("input_ids, attention_mask and completion_mask must have the same shape")
    if input_ids.dim() != 2:
        raise ValueError(f"expected (batch, length) tensors, got shape {tuple(input_ids.shape)}")
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (use 1.0 for greedy samples)")
    if completion_mask[:, 0].any():
        raise ValueError("completion_mask[:, 0] must be 0: the first token has no prediction")
    bsz, length = input_ids.shape
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    target_mask = completion_mask[:, 1:].bool()
    targets = input_ids[:, 1:][target_mask]
    plain = plain_head(model)
    if plain is not None:
        decoder, head = plain
        hidden = decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            use_cache=False,
        ).last_hidden_state
        h = hidden[:, :-1][target_mask]
        lp = ChunkedLogprob.apply(h, head.weight, head.bias, targets, 1.0 / temperature, chunk_size)
    else:  # generic path: full logits from the model's own forward
        logits = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            use_cache=False,
        ).logits[:, :-1][target_mask]
        parts = []
        for s in range(0, logits.shape[0], chunk_size):
            chunk = logits[s : s + chunk_size].to(torch.promote_types(logits.dtype, torch.float32))
            chunk = chunk / temperature
            tgt = chunk.gather(-1, targets[s : s + chunk_size, None]).squeeze(-1)
            parts.append(tgt - torch.logsumexp(chunk, dim=-1))
        lp = torch.cat(parts) if parts else logits.new_zeros(0, dtype=torch.float32)
    full = lp.new_zeros(bsz, length - 1).masked_scatter(target_mask, lp)
    return torch.cat([lp.new_zeros(bsz, 1), full], dim=1)
