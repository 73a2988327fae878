"""Stable instance hashing and the train/val/test split rule.

An instance's split is a pure function of its content: ``split_of(stable_hash(key))``. The same
instance therefore lands in the same split on every machine and in every process, and the three
splits are disjoint by construction. Roughly 80 % of instances are train, 10 % val, 10 % test.

Twins share a split. A generated level's rotation or reflection, or a Sudoku with its digits
relabelled, is the same problem to a policy that has memorised one of them; a setting whose
instances have such twins hashes a *canonical form* instead of the instance itself
(``TurnBasedEnv._split_key``): :func:`canonical_form` picks one representative of the class
(the image with the smallest canonical JSON), and :func:`dihedral_images` lists the eight images
of a grid under rotations and reflections. A validation level can then have no twin among the
training or cold-start levels, whatever the generator draws.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "SPLITS",
    "stable_hash",
    "canonical_json",
    "canonical_form",
    "dihedral_images",
    "split_of",
    "split_for",
    "check_split",
]

SPLITS = ("train", "val", "test")


def canonical_json(obj: Any) -> str:
    """``obj`` as JSON with sorted keys and no spaces (what :func:`stable_hash` hashes)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def stable_hash(obj: Any) -> str:
    """SHA-256 hex digest of ``obj``'s canonical JSON form (sorted keys, no spaces).

    >>> stable_hash({"b": 1, "a": [1, 2]}) == stable_hash({"a": [1, 2], "b": 1})
    True
    >>> stable_hash([1, 2])[:12]
    '49a64717d5d4'
    """
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def canonical_form(variants: Iterable[Any]) -> Any:
    """The representative of a symmetry class: the variant with the smallest canonical JSON.

    Every member of a class lists the same variants, so every member gets the same
    representative (and hence the same hash and split).

    >>> canonical_form([{"map": ["b", "a"]}, {"map": ["a", "b"]}])
    {'map': ['a', 'b']}
    """
    return min(variants, key=canonical_json)


Cell = tuple[int, int]


def dihedral_images(
    rows: Sequence[Sequence[Any]], cells: Sequence[Cell] = (), *, transpose: bool = True
) -> list[tuple[tuple[tuple[Any, ...], ...], tuple[Cell, ...]]]:
    """The images of a rectangular grid, and of ``cells`` in it, under the rotations and
    reflections of the plane: 8 (transposed ones included), or the 4 that keep its orientation
    with ``transpose=False`` (for grids whose structure a transpose breaks, such as 2 x 3 Sudoku
    boxes). The first image is the grid itself; images may repeat for a symmetric grid.

    >>> [("".join(g[0]), c) for g, c in dihedral_images(["ab", "cd"], [(0, 1)])][:4]
    [('ab', ((0, 1),)), ('ac', ((1, 0),)), ('cd', ((1, 1),)), ('bd', ((0, 0),))]
    """
    grid = tuple(tuple(row) for row in rows)
    out = []
    for t in range(8):
        if t & 1 and not transpose:
            continue
        g, pts = grid, tuple((int(r), int(c)) for r, c in cells)
        if t & 1:
            g = tuple(zip(*g)) if g else g
            pts = tuple((c, r) for r, c in pts)
        if t & 2:
            g = g[::-1]
            pts = tuple((len(g) - 1 - r, c) for r, c in pts)
        if t & 4:
            width = len(g[0]) if g else 0
            g = tuple(row[::-1] for row in g)
            pts = tuple((r, width - 1 - c) for r, c in pts)
        out.append((g, pts))
    return out


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
