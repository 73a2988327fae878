"""Stable instance hashing and the train/val/test split rule.

An instance's split is a pure function of its content: ``split_of(stable_hash(key))``. The same
instance therefore lands in the same split on every machine and in every process, and the three
splits are disjoint by construction. Roughly 80 % of instances are train, 10 % val, 10 % test.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["SPLITS", "stable_hash", "split_of", "split_for", "check_split"]

SPLITS = ("train", "val", "test")


def stable_hash(obj: Any) -> str:
    """SHA-256 hex digest of ``obj``'s canonical JSON form (sorted keys, no spaces).

    >>> stable_hash({"b": 1, "a": [1, 2]}) == stable_hash({"a": [1, 2], "b": 1})
    True
    >>> stable_hash([1, 2])[:12]
    '49a64717d5d4'
    """
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_of(digest: str) -> str:
    """Map a hex digest to ``"train"`` (80 %), ``"val"`` (10 %) or ``"test"`` (10 %).

    >>> split_of("0" * 64), split_of("f" * 64)
    ('test', 'train')
    """
    bucket = int(digest[:8], 16) % 10
    if bucket == 0:
        return "test"
    if bucket == 1:
        return "val"
    return "train"


def check_split(split: object) -> str:
    """Validate a split name, raising a ``ValueError`` that lists the valid ones."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    return str(split)


def split_for(obj: Any) -> str:
    """Split of any JSON-able object, or of a record with a ``key`` (problem records).

    >>> split_for("some problem text") in SPLITS
    True
    >>> split_for({"a": 1}) == split_for({"a": 1})
    True
    """
    key = getattr(obj, "key", None)
    digest = key if isinstance(key, str) else stable_hash(obj)
    return split_of(digest)
