"""Per-token tensors of ragged completions: padding, length masks and masked statistics.

Completions in a batch have different lengths. Every per-token tensor of the training code
(log-probs, advantages, KL terms) is right-padded to ``(B, T)`` and paired with a ``mask`` that is
1 on real completion tokens and 0 on padding; these helpers build and reduce such tensors.

:func:`mastered_positive_mask` is MarsRL's dynamic masking of well-mastered positive tokens
(MarsRL §2.3, which defers to UloRL, Du et al. 2025, arXiv 2507.19766, §3.2.2 Eq. 9-10): a token
of a positive sample whose probability is at least ``tau`` is dropped from the policy-gradient
sum, but only while the *model's* entropy is below the target ``sigma`` (the gate is one switch
for the whole update, read from the model, not from each sample). UloRL's values: ``tau =
0.99``, ``sigma = 0.2`` (its "Hyperparameter Settings").

The model-level entropy (:func:`adapters.training.logprobs.batch_entropy`): the token-mean
entropy of the policy over the step's whole training batch of that policy (every rank's
tokens), taken with the weights as they are before the update's first optimizer step, at each
sample's sampling temperature. UloRL names the model's current entropy without saying how it is
estimated, and its authors' repository (``liushulinle/ULORL``) holds the paper, not code, so
this is a choice; a running average over steps would be the other one (one more option, not
built). Other choices where UloRL is terse: "positive" is a sample with advantage > 0 (UloRL's
rewards are 0/1, where this is the same set wherever the gradient is non-zero); the token
probabilities are the current policy's, detached (UloRL makes one optimizer step per rollout,
where they equal the behaviour policy's); masked tokens leave the numerator only, the
token-mean denominator still counts them (Eq. 10's ``1 / sum |o_i|``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "SPREAD_TOL",
    "check_token_shapes",
    "equal_up_to_rounding",
    "length_mask",
    "masked_mean",
    "masked_whiten",
    "mastered_positive_mask",
    "pad_rows",
    "without_mastered_positives",
]


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over entries where ``mask`` is 1 (0 when there are none)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


SPREAD_TOL = 1e-6
"""Values whose spread (max - min) is at most this fraction of ``max(1, |x|)`` are equal: their
differences are float rounding (a mean of n equal float32 values need not equal them), which a
division by their std would blow up to advantages of order 1 with random signs."""


def equal_up_to_rounding(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Elementwise: whether a set with minimum ``lo`` and maximum ``hi`` holds one value up to
    float rounding (:data:`SPREAD_TOL`).

    >>> x = torch.full((7,), 0.1)
    >>> bool((x - x.mean()).abs().max() > 0), bool(equal_up_to_rounding(x.min(), x.max()))
    (True, True)
    >>> bool(equal_up_to_rounding(torch.tensor(0.0), torch.tensor(0.001)))
    False
    """
    scale = torch.maximum(lo.abs(), hi.abs()).clamp(min=1.0)
    return (hi - lo) <= SPREAD_TOL * scale


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` over valid entries (population std); 0 where invalid, and
    0 everywhere when the valid entries are equal up to float rounding (nothing to whiten)."""
    m = mask.to(x.dtype)
    valid = x[m > 0]
    if valid.numel() == 0 or bool(equal_up_to_rounding(valid.min(), valid.max())):
        return torch.zeros_like(x)
    mean = masked_mean(x, m)
    std = masked_mean((x - mean) ** 2, m).sqrt()
    return (x - mean) / (std + eps) * m


def check_token_shapes(mask: torch.Tensor, *tensors: torch.Tensor | None) -> None:
    """Raise ValueError unless ``mask`` is 2-D and every tensor has its shape."""
    if mask.dim() != 2:
        raise ValueError(f"mask must be (batch, tokens), got shape {tuple(mask.shape)}")
    for t in tensors:
        if t is not None and t.shape != mask.shape:
            raise ValueError(f"shape {tuple(t.shape)} does not match mask {tuple(mask.shape)}")


def pad_rows(rows: Sequence[torch.Tensor], width: int | None = None) -> torch.Tensor:
    """Right-pad 1-D tensors with zeros into a (N, width) tensor."""
    width = max((len(r) for r in rows), default=0) if width is None else width
    out = torch.zeros(len(rows), width, dtype=torch.float32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def length_mask(lengths: Sequence[int], width: int) -> torch.Tensor:
    """A (N, width) float mask with ``lengths[i]`` leading ones in row ``i``.

    >>> length_mask([1, 3], 3).tolist()
    [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    """
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).float()


def mastered_positive_mask(
    logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    model_entropy: float,
    tau: float = 0.99,
    target_entropy: float = 0.2,
) -> torch.Tensor:
    """The (B, T) 0/1 tensor that is 1 on the well-mastered positive tokens to drop (UloRL Eq. 10).

    ``I[i, t] = 1`` iff the model's entropy ``model_entropy`` is below ``target_entropy``,
    sample ``i`` is positive (advantage > 0) and ``exp(logprobs[i, t]) >= tau``; 0 on padding.
    ``advantages`` is (B,) or (B, T) (its first valid token is the sample's sign). The loss keeps
    ``mask * (1 - I)`` in its numerator.

    >>> lp = torch.log(torch.tensor([[0.995, 0.5], [0.999, 0.999]]))
    >>> adv, m = torch.tensor([1.0, -1.0]), torch.ones(2, 2)
    >>> mastered_positive_mask(lp, adv, m, model_entropy=0.1).tolist()
    [[1.0, 0.0], [0.0, 0.0]]
    >>> mastered_positive_mask(lp, adv, m, model_entropy=0.3).tolist()  # the gate is shut
    [[0.0, 0.0], [0.0, 0.0]]
    """
    check_token_shapes(mask, logprobs)
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    if not math.isfinite(model_entropy) or model_entropy < 0:
        raise ValueError(f"model_entropy must be a finite value >= 0, got {model_entropy}")
    m = mask.to(logprobs.dtype)
    if model_entropy >= target_entropy:
        return torch.zeros_like(m)
    adv = advantages if advantages.dim() == 1 else advantages[:, 0]
    with torch.no_grad():
        positive = (adv > 0).to(m.dtype)[:, None]
        mastered = logprobs.detach().double() >= math.log(tau)
        return mastered.to(m.dtype) * positive * m


def without_mastered_positives(
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    model_entropy: float,
    tau: float,
    target_entropy: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages with the mastered positive tokens zeroed, the dropped-token mask)``.

    A zero advantage removes a token's policy-gradient term (and its gradient) from the
    numerator of the loss while the loss mask, hence the token-mean denominator, is unchanged;
    that is Eq. 10's ``I`` applied as :mod:`adapters.training.update` uses it.

    >>> adv = torch.tensor([[1.0, 1.0]])
    >>> lp = torch.log(torch.tensor([[0.999, 0.5]]))
    >>> out, dropped = without_mastered_positives(
    ...     adv, lp, torch.ones(1, 2), model_entropy=0.1, tau=0.99, target_entropy=0.2
    ... )
    >>> out.tolist(), dropped.tolist()
    ([[0.0, 1.0]], [[1.0, 0.0]])
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    dropped = mastered_positive_mask(
        logprobs,
        advantages,
        mask,
        model_entropy=model_entropy,
        tau=tau,
        target_entropy=target_entropy,
    )
    return advantages * (1 - dropped.to(advantages.dtype)), dropped
