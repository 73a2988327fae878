"""Training batches: rollout samples become token tensors, grouped into mini- and micro-batches.

* :class:`TrainItem` - one trainable sample (prompt and completion token ids, the sampling
  log-probs, later the reference log-probs and advantages); :func:`make_items` drops samples that
  cannot be trained on (no token ids or log-probs, e.g. from an HTTP policy).
* :func:`minibatches` - one optimizer step each: whole prompt groups shuffled with a seeded RNG
  (a resumed run draws the same order), cut into minibatches of at least ``minibatch_size``.
* :func:`micro_batches` - one forward/backward each (gradient accumulation): at most
  ``micro_batch_size`` sequences and ``micro_batch_tokens`` padded tokens, counted the way the
  shared-prompt forward of :mod:`adapters.training.logprobs` processes them; items of one prompt
  stay together, prompts are packed longest first so that similar lengths share a chunk, and a
  micro-batch holds one sampling temperature (roles may sample at different ones: SAGE).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from adapters.rollout import Sample

__all__ = ["TrainItem", "make_items", "micro_batches", "minibatches", "padded_cost"]


@dataclass
class TrainItem:
    """One trainable sample: its tokens and per-token tensors (length = completion length)."""

    sample: Sample
    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    temperature: float = 1.0  # the sampling temperature its log-probs are scored at
    behav_logprobs: torch.Tensor | None = None  # the sampler's, when old_logprobs are not

    @property
    def prompt_key(self) -> tuple[int, ...]:
        return tuple(self.prompt_ids)


def make_items(
    samples: Sequence[Sample], temperature_of: Callable[[Sample], float] | None = None
) -> tuple[list[TrainItem], int]:
    """Trainable items (token ids and one log-prob per token) and the number left out.

    Samples the env marked as not for training (``Sample.trainable``) are skipped without being
    counted; ``temperature_of`` gives the temperature each sample was drawn at (default 1)."""
    items, dropped = [], 0
    for s in samples:
        if not s.trainable:
            continue
        if s.completion_ids and s.prompt_ids and len(s.logprobs) == len(s.completion_ids):
            items.append(
                TrainItem(
                    s,
                    list(s.prompt_ids),
                    list(s.completion_ids),
                    torch.tensor(s.logprobs, dtype=torch.float32),
                    temperature=temperature_of(s) if temperature_of is not None else 1.0,
                )
            )
        else:
            dropped += 1
    return items, dropped


def padded_cost(items: Sequence[TrainItem]) -> int:
    """Tokens one shared-prompt forward of ``items`` processes (padding included)."""
    prompts = {it.prompt_key for it in items}
    plen = max(len(p) for p in prompts)
    clen = max(len(it.completion_ids) for it in items)
    return len(prompts) * plen + len(items) * clen


def micro_batches(
    items: Sequence[TrainItem], size: int, max_tokens: int = 0
) -> list[list[TrainItem]]:
    """Chunks of at most ``size`` items and (when ``max_tokens``) at most that many padded tokens.

    Items of one prompt stay together where possible, and prompts are packed longest first so
    that prompts of similar length share a chunk (less padding).
    """
    by_prompt: dict[tuple[float, tuple[int, ...]], list[TrainItem]] = defaultdict(list)
    for it in items:
        by_prompt[(it.temperature, it.prompt_key)].append(it)
    groups = sorted(by_prompt.values(), key=lambda g: (g[0].temperature, -len(g[0].prompt_ids)))
    out: list[list[TrainItem]] = []
    cur: list[TrainItem] = []
    for group in groups:
        for it in group:
            full = len(cur) >= size or (max_tokens and padded_cost([*cur, it]) > max_tokens)
            if cur and (full or cur[0].temperature != it.temperature):
                out.append(cur)
                cur = []
            cur.append(it)
    if cur:
        out.append(cur)
    return out


def minibatches(items: Sequence[TrainItem], size: int, rng: random.Random) -> list[list[TrainItem]]:
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
