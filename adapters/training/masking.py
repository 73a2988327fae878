"""Per-token tensors of ragged completions: padding, length masks and masked statistics.

Completions in a batch have different lengths. Every per-token tensor of the training code
(log-probs, advantages, KL terms) is right-padded to ``(B, T)`` and paired with a ``mask`` that is
1 on real completion tokens and 0 on padding; these helpers build and reduce such tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["check_token_shapes", "length_mask", "masked_mean", "masked_whiten", "pad_rows"]


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
