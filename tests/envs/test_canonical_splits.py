"""Twins share a split: a level's rotations and reflections (Sokoban, Plan-Path) and a puzzle's
relabelled or turned copies (Sudoku) are one class, and a class lies in one split. Small sizes
make twins frequent, so the checks have something to catch: under a split on the exact instance,
each of these samples would put twins of one class in different splits."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import envs
from envs.core.splits import dihedral_images, stable_hash

# (setting, config, instances per split): sizes where the generator repeats classes often
CASES = [
    ("sokoban", {"height": 5, "width": 5, "min_optimal_moves": 1}, 150),
    ("sokoban", {"height": 6, "width": 6}, 150),
    ("plan_path", {"height": 4, "width": 4, "min_distance": 1}, 150),
    ("sudoku", {"size": 4}, 150),
]


def _twins(env_id: str, inst: Any) -> list[dict[str, Any]]:
    """Explicit-instance dicts of ``inst``'s images under the setting's symmetries."""
    if env_id == "sokoban":
        return [{"map": ["".join(r) for r in g]} for g, _ in dihedral_images(inst.map)]
    if env_id == "plan_path":
        out = []
        for g, (a, b) in dihedral_images(inst.grid, (inst.start, inst.goal)):
            rows = ["".join(r) for r in g]
            out.append({"grid": rows, "start": a, "goal": b})
        return out
    n = len(inst.puzzle)
    perm = list(range(n, 0, -1))  # digit d -> n + 1 - d
    relabelled = [[perm[d - 1] if d else 0 for d in row] for row in inst.puzzle]
    square_boxes = n in (4, 9)
    return [
        {"puzzle": [list(r) for r in g]}
        for grid in (inst.puzzle, relabelled)
        for g, _ in dihedral_images(grid, transpose=square_boxes)
    ]


@pytest.mark.parametrize(("env_id", "config", "n"), CASES, ids=lambda c: str(c))
def test_every_twin_of_a_sampled_instance_is_in_its_split(env_id, config, n):
    raw = envs.make(env_id, **config).unwrapped
    classes: dict[str, Counter[str]] = {}
    exact_splits_per_class: dict[str, set[str]] = {}
    for split in ("train", "val", "test"):
        counts: Counter[str] = Counter()
        for seed in range(n if split == "train" else n // 3):
            inst = raw.sample_instance(split, seed)
            cls = stable_hash(raw._split_key(inst))
            counts[cls] += 1
            for twin in _twins(env_id, inst):
                twin_inst = raw._instance_from_dict(twin)
                assert raw.split_of_instance(twin_inst) == split, (twin, split)
                assert stable_hash(raw._split_key(twin_inst)) == cls
                exact = stable_hash(raw._instance_key(twin_inst))
                exact_splits_per_class.setdefault(cls, set()).add(exact)
        classes[split] = counts
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        assert not set(classes[a]) & set(classes[b]), (a, b)
    # the samples hold twins: classes drawn more than once, and classes with distinct members
    assert any(c > 1 for counts in classes.values() for c in counts.values())
    assert any(len(members) > 1 for members in exact_splits_per_class.values())


def test_twins_of_an_explicit_level_share_one_split():
    raw = envs.make("sokoban").unwrapped
    level = {"map": ["#####", "#@$.#", "#  ##", "#####"]}
    splits = {
        raw.split_of_instance(raw._instance_from_dict(t))
        for t in _twins("sokoban", raw._instance_from_dict(level))
    }
    assert len(splits) == 1
