"""Before/after statistics: paired t-intervals, computed by hand and through the trainer's table."""

from __future__ import annotations

import math

import pytest

from adapters.evaluation.runner import EvalReport, compare_reports
from adapters.evaluation.stats import mean_interval, paired_difference


def test_paired_difference_by_hand():
    # diffs .5 .4 .2 .5: mean .4, sd sqrt(.06 / 3) = .14142, se .070711, t(.975, df 3) = 3.18245
    d = paired_difference([0.0, 0.5, 0.2, 0.1], [0.5, 0.9, 0.4, 0.6])
    half = 3.182446305284263 * math.sqrt(0.02) / 2
    assert d.mean_diff == pytest.approx(0.4)
    assert (d.low, d.high) == (pytest.approx(0.4 - half), pytest.approx(0.4 + half))
    assert d.excludes_zero and d.p_value == pytest.approx(0.010937657, rel=1e-6)
    assert (d.mean_before, d.mean_after, d.n) == (pytest.approx(0.2), pytest.approx(0.6), 4)


def test_pairing_removes_instance_difficulty():
    """Hard and easy instances spread the rewards widely, but every instance improves by about
    .1: the paired interval excludes zero where two independent intervals overlap."""
    before = [0.0, 0.8, 0.1, 0.9, 0.2, 0.7, 0.05, 0.85]
    after = [b + 0.1 + 0.01 * (i % 3) for i, b in enumerate(before)]
    d = paired_difference(before, after)
    assert d.excludes_zero and d.low > 0.09
    assert mean_interval(before).high > mean_interval(after).low  # unpaired: overlapping


def test_no_change_and_degenerate_inputs():
    d = paired_difference([0.3, 0.5], [0.3, 0.5])
    assert (d.mean_diff, d.low, d.high, d.p_value, d.excludes_zero) == (0.0, 0.0, 0.0, 1.0, False)
    assert paired_difference([0.0], [1.0]).excludes_zero  # one pair: the point itself
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least one"):
        mean_interval([])
    ci = mean_interval([1.0, 2.0, 3.0])  # mean 2, sd 1, t(.975, 2) = 4.30265
    assert (ci.low, ci.high) == (
        pytest.approx(2 - 4.302652729911275 / math.sqrt(3)),
        pytest.approx(2 + 4.302652729911275 / math.sqrt(3)),
    )


def _report(rewards, ids=None):
    ids = ids or [f"i{k}" for k in range(len(rewards))]
    eps = [
        {"instance_id": i, "success": r >= 1.0, "team": r, "reward": r, "turns": 1, "steps": 2}
        for i, r in zip(ids, rewards)
    ]
    return EvalReport(
        env="plan_path", split="val", episodes=len(eps), success_rate=0.0, team_reward=0.0,
        mean_turns=1.0, mean_steps=2.0, reward_per_agent={"tool": 0.1}, return_per_agent={},
        policies={}, seconds=0.0, per_episode=eps,
    )  # fmt: skip


def test_compare_reports_prints_the_paired_interval():
    table = compare_reports(_report([0.0, 0.5, 0.2, 0.1]), _report([0.5, 0.9, 0.4, 0.6]))
    line = next(x for x in table.splitlines() if x.strip().startswith("mean reward"))
    assert "+0.400" in line and "[+0.175, +0.625]" in line and line.endswith("*")
    assert "4 val instances never trained on" in table
    assert table.endswith("* the interval excludes zero")
    same = compare_reports(_report([0.0, 0.5]), _report([0.0, 0.5]))
    assert "*" not in same and same.endswith("no interval excludes zero: no significant change")
    with pytest.raises(ValueError, match="same instances"):
        compare_reports(_report([0.1, 0.2]), _report([0.1, 0.2], ids=["x", "y"]))
