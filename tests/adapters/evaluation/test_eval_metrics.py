"""Task measures lead the evaluation tables (issue 22, item 1): each setting's progress measure
(``env.progress()``), and scripted reference policies on the same instances."""

from __future__ import annotations

import pytest

import envs
from adapters.evaluation import compare_reports, evaluate
from adapters.evaluation.references import evaluate_references
from adapters.policies.specs import parse_policy_spec

CORRIDOR = {"grid": ["..."], "start": [0, 0], "goal": [0, 2]}
TWO_BOXES = {"map": ["#######", "#@$.  #", "# $.  #", "#######"]}
SINGLE = {"mode": "single", "max_turns": 1}
# solution rows 1234 / 3412 / 2143 / 4321 with (1,1) and (2,2) blank (1-based)
TWO_BLANKS = {"puzzle": [[0, 2, 3, 4], [3, 0, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]}


def _progress(env_id: str, instance: dict, answer: str) -> float:
    raw = envs.make(env_id, **SINGLE).unwrapped
    raw.reset(seed=0, options={"instance": instance})
    raw.step(answer)
    return raw.progress()


def test_progress_is_each_settings_own_measure():
    """Plan-Path: distance closed, 1 - d / d0 with d0 = 2 on the corridor (one step R: 0.5).
    Sokoban: boxes on goals / B (pushing the upper box right puts 1 of 2 on its goal)."""
    assert envs.make("plan_path").unwrapped.PROGRESS == "distance closed"
    assert _progress("plan_path", CORRIDOR, "#### [R]") == pytest.approx(0.5)
    assert _progress("plan_path", CORRIDOR, "#### [R,R]") == 1.0
    assert _progress("plan_path", CORRIDOR, "#### [L]") == 0.0
    assert envs.make("sokoban").unwrapped.PROGRESS == "boxes on goals"
    assert _progress("sokoban", TWO_BOXES, "#### [R]") == pytest.approx(0.5)
    assert _progress("sokoban", TWO_BOXES, "#### [U]") == 0.0
    # Sudoku: cells solved, the share of blanks holding the solution's digit (1 of 2 filled)
    assert envs.make("sudoku").unwrapped.PROGRESS == "cells solved"
    assert _progress("sudoku", TWO_BLANKS, "#### [[1,1,1]]") == pytest.approx(0.5)
    assert _progress("sudoku", TWO_BLANKS, "#### [[1,1,2]]") == 0.0
    assert _progress("sudoku", TWO_BLANKS, "#### [[1,1,1],[2,2,4]]") == 1.0


def test_compare_table_leads_with_task_measures_and_pairs_references():
    """Before: ``[R]`` on the corridor (progress 0.5, never solved); after: ``[R,R]`` (solved).
    The no-op reference closes no distance, so ``after - no-op`` is +1 on every measure of the
    task, while the oracle equals the after team (difference 0)."""
    kw = {"episodes": 3, "env_config": SINGLE, "instance": CORRIDOR}
    before = evaluate("plan_path", parse_policy_spec("constant:#### [R]"), **kw)
    after = evaluate("plan_path", parse_policy_spec("constant:#### [R,R]"), **kw)
    assert before.progress == pytest.approx(0.5) and before.success_rate == 0.0
    assert after.progress == 1.0 and after.progress_label == "distance closed"
    refs = evaluate_references("plan_path", ["planner"], None, **kw)
    assert list(refs) == ["no-op", "oracle"]  # no demonstrations: no demo-answer row
    table = compare_reports(before, after, references=refs).splitlines()
    assert [x.split()[0] for x in table[2:6]] == ["success", "distance", "team", "mean"]
    assert table[3].split()[2:5] == ["0.500", "1.000", "+0.500"]
    noop = next(x for x in table if x.split()[:1] == ["no-op"])
    assert noop.split()[1:3] == ["0.000", "(+1.000"]
    oracle = next(x for x in table if x.split()[:1] == ["oracle"])
    assert oracle.split()[1:3] == ["1.000", "(+0.000"]
    with pytest.raises(ValueError, match="same instances"):
        other = evaluate("plan_path", parse_policy_spec("constant:"), episodes=3, env_config=SINGLE)
        compare_reports(before, after, references={"x": other})
