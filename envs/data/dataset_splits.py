"""Deterministic train/val/test assignment of dataset problems by content hash.

This builds on :mod:`envs.core.splits` (``stable_hash``: canonical JSON + SHA-256;
``split_of(digest)``: about 80 % train, 10 % val, 10 % test), so a problem's split is the same in
every process, on every machine, and for envs and loaders alike. A problem's key is the hash of
its whitespace-normalised text, not of the dataset it came from, so a problem shared by two
datasets (MATH and MATH-500, say) cannot be train in one and test in the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from envs.core.splits import SPLITS, check_split, split_for, split_of, stable_hash

__all__ = [
    "SPLITS",
    "stable_hash",
    "split_of",
    "canonical_text",
    "text_key",
    "split_for",
    "select_split",
    "assign_splits",
]

T = TypeVar("T")


def canonical_text(text: str) -> str:
    """Collapse runs of whitespace and strip.

    >>> canonical_text("  What is\\n 2 +  2? ")
    'What is 2 + 2?'
    """
    return " ".join(str(text).split())


def text_key(text: str) -> str:
    """The hash that identifies a problem statement (see :func:`canonical_text`).

    >>> text_key("a  b") == text_key("a b\\n")
    True
    """
    return stable_hash(canonical_text(text))


def select_split(items: Iterable[T], split: str) -> list[T]:
    """The items whose :func:`split_for` is ``split`` (order kept).

    >>> items = [f"problem {i}" for i in range(200)]
    >>> parts = [select_split(items, s) for s in SPLITS]
    >>> sum(map(len, parts)) == 200 and not set(parts[0]) & set(parts[2])
    True
    """
    check_split(split)
    return [x for x in items if split_for(x) == split]


def assign_splits(items: Iterable[T]) -> dict[str, list[T]]:
    """All items grouped by split: ``{"train": [...], "val": [...], "test": [...]}``."""
    out: dict[str, list[T]] = {s: [] for s in SPLITS}
    for x in items:
        out[split_for(x)].append(x)
    return out
