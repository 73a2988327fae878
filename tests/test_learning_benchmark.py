"""``benchmarks/learning.py``'s verdicts on the paper's ordering, on synthetic reports (its rows
and records run in ``tests/test_benchmarks.py``'s quick mode)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "learning.py"


@pytest.fixture(scope="module")
def learning():
    spec = importlib.util.spec_from_file_location("learning_benchmark", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report(solved: int, n: int = 64) -> dict:
    eps = [
        {"instance_id": f"i{i}", "success": float(i < solved), "progress": 0.0, "team": 0.0}
        for i in range(n)
    ]
    return {"success_rate": solved / n, "per_episode": eps}


def test_ordering_holds_only_where_the_interval_says_so(learning):
    reps = {
        "cold-start": _report(20),
        "single-grpo": _report(10),
        "open-loop": _report(2),
        "at-grpo": _report(40),
        "per-role": _report(22),  # below at-grpo: at-grpo is the one compared
        "swapped": _report(21),  # within one level of per-role: not significantly below
    }
    lines = learning.ordering(reps)
    assert lines[0].startswith("- at-grpo above single-grpo") and lines[0].endswith(": holds")
    assert lines[1].startswith("- at-grpo above cold-start") and lines[1].endswith(": holds")
    assert lines[3].startswith("- swapped below per-role") and "does not hold" in lines[3]
    reps["swapped"] = _report(2)
    reps["at-grpo"] = _report(21)  # one level more than the cold start: not significant
    lines = learning.ordering(reps)
    assert "per-role above cold-start" in lines[1] and "does not hold" in lines[1]
    assert lines[3].endswith(": holds")


def test_every_method_brings_known_rows(learning):
    for rows in learning.METHODS.values():
        assert set(rows) <= set(learning.LABELS)
    assert set(learning.BASELINES) <= set(learning.LABELS)
