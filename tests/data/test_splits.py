"""Content-hash split assignment: disjoint, stable across processes, about 80/10/10."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from envs.data import load_humaneval
from envs.data.dataset_splits import (
    SPLITS,
    assign_splits,
    canonical_text,
    select_split,
    split_for,
    split_of,
    stable_hash,
    text_key,
)


def test_stable_hash_canonical_json():
    assert stable_hash({"b": [1, 2], "a": "x"}) == stable_hash({"a": "x", "b": [1, 2]})
    assert stable_hash("abc") != stable_hash("abd")
    assert len(stable_hash(None)) == 64


def test_text_key_ignores_whitespace_only():
    assert text_key("What is\n2+2?") == text_key("  What is 2+2? ")
    assert text_key("What is 2+2?") != text_key("What is 2+3?")
    assert canonical_text("a\t\tb") == "a b"


def test_proportions_and_disjointness():
    items = [f"problem number {i}" for i in range(5000)]
    parts = assign_splits(items)
    sizes = {s: len(parts[s]) for s in SPLITS}
    assert sum(sizes.values()) == 5000
    assert 3800 < sizes["train"] < 4200 and 380 < sizes["val"] < 620 and 380 < sizes["test"] < 620
    sets = [set(parts[s]) for s in SPLITS]
    assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])
    assert select_split(items, "val") == parts["val"]


def test_records_use_their_key():
    ps = load_humaneval()
    parts = assign_splits(ps)
    assert sum(len(v) for v in parts.values()) == 164
    for p in ps[:20]:
        assert p.key == text_key(p.prompt.replace("\n", " \n "))  # whitespace-insensitive
        assert split_for(p) == split_of(p.key)


def test_stable_across_processes():
    keys = [f"q{i}" for i in range(50)]
    here = [split_for(k) for k in keys]
    code = (
        "import json,sys; from envs.data.dataset_splits import split_for; "
        f"print(json.dumps([split_for(k) for k in {keys!r}]))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"},
    )
    import json

    assert json.loads(out.stdout) == here
