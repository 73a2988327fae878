"""Log-probabilities of given completion tokens under a model (old, reference and training passes).

* :func:`completion_logprobs` - per-token log-probs of each completion given its prompt, as a
  right-padded (N, C) tensor; differentiable. **Shared-prompt forward**: the K candidates of a
  tree-sampling group share their prompt token for token, and multi-turn prompts are long. With
  ``share_prompt=True`` (``update.share_prompt_forward``, default) each distinct prompt of a
  micro-batch runs through the model once, its KV cache is expanded to its completions, and only
  the completion tokens run per sample. Gradients flow through the shared cache, so the result
  equals a full forward of every sequence (tested against :func:`sequence_logprobs`); the cost
  drops from ``K (P + C)`` to ``P + K C`` tokens per group.
* :func:`batch_logprobs` - the same without gradients, in micro-batches (old and reference
  log-probs).
* :func:`sequence_logprobs` - per-token log-probs of a padded batch of whole sequences.
* For Llama/Qwen/Mistral-style models (:data:`PLAIN_HEAD_TYPES`) the (tokens x vocabulary) logits
  tensor is never built at once: :class:`ChunkedLogprob` computes
  ``logit[token] - logsumexp(logits)`` chunk by chunk, with a custom backward that recomputes
  each chunk (memory O(chunk x vocab) also under autograd).

Log-probs are those of ``softmax(logits / T)`` at the sampling temperature ``T``, the quantities
a PPO ratio against the sampler's log-probs needs (see :mod:`adapters.policies.base`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from adapters.policies.models import cache_keyword
from adapters.policies.transformers_policy import prompt_batch
from adapters.training.batch import TrainItem, micro_batches
from adapters.training.config import UpdateConfig
from adapters.training.masking import length_mask

__all__ = [
    "PLAIN_HEAD_TYPES",
    "ChunkedLogprob",
    "batch_entropy",
    "batch_logprobs",
    "chunked_entropy",
    "completion_logprobs",
    "completion_logprobs_and_entropy",
    "plain_head",
    "sequence_logprobs",
]


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


def completion_logprobs(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    share_prompt: bool = True,
    share_prefix: bool = True,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """Log-probs of each completion's tokens given its prompt, as a right-padded (N, C) tensor.

    Differentiable. With ``share_prompt`` (and a Llama/Qwen-style model) every distinct prompt
    is run once and its KV cache is shared by its completions (see the module docstring);
    ``share_prefix`` also runs the prompts' common prefix once (off under FSDP2: a forward whose
    outputs carry no gradient, only its cache, is never re-gathered for backward there).
    """
    dev = next(model.parameters()).device
    parts = plain_head(model) if share_prompt else None
    if parts is None:
        return _full_logprobs(model, prompts, completions, pad_id, temperature, chunk_size, dev)
    h, head, targets, sel = _completion_hidden(
        model, parts[0], prompts, completions, pad_id, dev, share_prefix
    )
    lp = ChunkedLogprob.apply(h, head.weight, head.bias, targets, 1.0 / temperature, chunk_size)
    return lp.new_zeros(sel.shape).masked_scatter(sel, lp)


def completion_logprobs_and_entropy(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    share_prefix: bool = True,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`completion_logprobs` and the entropy of ``softmax(logits / T)`` at every completion
    position (both right-padded (N, C); differentiable), from one shared-prompt forward.

    The entropy is computed chunk by chunk under activation checkpointing, so the (tokens x
    vocabulary) logits are never held at once. Needs a :data:`PLAIN_HEAD_TYPES` model.
    """
    parts = plain_head(model)
    if parts is None:
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        raise ValueError(
            f"the entropy bonus (entropy_coef > 0) needs a model whose logits are a Linear head "
            f"over the decoder ({sorted(PLAIN_HEAD_TYPES)}); got model_type {model_type!r}"
        )
    dev = next(model.parameters()).device
    h, head, targets, sel = _completion_hidden(
        model, parts[0], prompts, completions, pad_id, dev, share_prefix
    )
    inv_t = 1.0 / temperature
    lp = ChunkedLogprob.apply(h, head.weight, head.bias, targets, inv_t, chunk_size)
    ent = chunked_entropy(h, head.weight, head.bias, inv_t, chunk_size)
    return (
        lp.new_zeros(sel.shape).masked_scatter(sel, lp),
        ent.new_zeros(sel.shape).masked_scatter(sel, ent),
    )


def _entropy_chunk(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, inv_temp: float
) -> torch.Tensor:
    logits = torch.nn.functional.linear(h, weight, bias).float() * inv_temp
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def chunked_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    inv_temp: float = 1.0,
    chunk: int = 1024,
) -> torch.Tensor:
    """Entropy of ``softmax((h W^T + b) * inv_temp)`` per row, recomputed per chunk in backward.

    >>> h, w = torch.zeros(2, 3), torch.zeros(4, 3)
    >>> [round(v, 4) for v in chunked_entropy(h, w, None).tolist()]  # uniform over 4 tokens
    [1.3863, 1.3863]
    """
    from torch.utils.checkpoint import checkpoint

    parts = [
        checkpoint(_entropy_chunk, h[s : s + chunk], weight, bias, inv_temp, use_reentrant=False)
        for s in range(0, h.shape[0], chunk)
    ]
    return torch.cat(parts) if parts else h.new_zeros(0, dtype=torch.float32)


def _completion_hidden(
    model: Any,
    decoder: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    dev: Any,
    share_prefix: bool = True,
) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
    """The hidden states that predict each completion token (shared-prompt forward).

    Returns ``(h, head, targets, sel)``: ``h`` (valid tokens, hidden) in row-major order of the
    (N, C) mask ``sel``, the output head, and the target token ids."""
    from transformers import DynamicCache

    head = model.get_output_embeddings()
    lengths = [len(c) for c in completions]
    width = max(lengths)
    batch = prompt_batch(prompts, pad_id, dev, **({} if share_prefix else {"min_shared": None}))
    index, attn = batch.index, batch.attn
    cache = DynamicCache(config=model.config)

    cache_kw = cache_keyword(decoder)

    def forward(input_ids: Any, attention_mask: Any, position_ids: Any, past: Any) -> Any:
        return decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{cache_kw: past},
        ).last_hidden_state

    h_prompt = batch.prefill(forward, cache)[:, -1]
    idx = torch.tensor(index, device=dev)
    if index != list(range(batch.ids.shape[0])):
        cache.reorder_cache(idx)  # type: ignore[arg-type]
    cids = torch.full((len(completions), width), pad_id, dtype=torch.long)
    for i, c in enumerate(completions):
        cids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
    cmask = length_mask(lengths, width).to(dev)
    cids = cids.to(dev)
    full_attn = torch.cat([attn.index_select(0, idx), cmask.long()], dim=1)
    cpos = attn.sum(-1).index_select(0, idx)[:, None] + torch.arange(width, device=dev)[None, :]
    hidden = decoder(
        input_ids=cids,
        attention_mask=full_attn,
        position_ids=cpos,
        use_cache=True,
        **{cache_kw: cache},
    ).last_hidden_state
    h_pred = torch.cat([h_prompt.index_select(0, idx)[:, None], hidden[:, :-1]], dim=1)
    sel = cmask.bool()
    return h_pred[sel], head, cids[sel], sel


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


def batch_entropy(
    model: Any, items: Sequence[TrainItem], cfg: UpdateConfig, pad_id: int
) -> tuple[float, int]:
    """``(sum of the per-token entropies, number of tokens)`` of ``model`` over the items'
    completions (no grad, in micro-batches, each item at its sampling temperature): the
    model-level entropy of a batch is the ratio of the sums over every rank
    (:mod:`adapters.training.masking`)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for mb in micro_batches(items, cfg.micro_batch_size, cfg.micro_batch_tokens):
            lengths = [len(it.completion_ids) for it in mb]
            _lp, ent = completion_logprobs_and_entropy(
                model,
                [it.prompt_ids for it in mb],
                [it.completion_ids for it in mb],
                pad_id=pad_id,
                temperature=mb[0].temperature,
            )
            mask = length_mask(lengths, ent.shape[1]).to(ent.device)
            total += float((ent.float() * mask).sum())
            count += sum(lengths)
    return total, count


def batch_logprobs(
    model: Any, items: Sequence[TrainItem], cfg: UpdateConfig, pad_id: int
) -> list[torch.Tensor]:
    """Per-item log-prob tensors under ``model`` (no grad), in micro-batches, each item at its
    own sampling temperature (``TrainItem.temperature``)."""
    out: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for mb in micro_batches(items, cfg.micro_batch_size, cfg.micro_batch_tokens):
            lp = completion_logprobs(
                model,
                [it.prompt_ids for it in mb],
                [it.completion_ids for it in mb],
                pad_id=pad_id,
                temperature=mb[0].temperature,
                share_prompt=cfg.share_prompt_forward,
            ).float()
            for row, it in zip(lp, mb):
                out[id(it)] = row[: len(it.completion_ids)].cpu()
    return [out[id(it)] for it in items]
