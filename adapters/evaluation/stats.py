"""Statistics for evaluations: confidence intervals, and paired before/after differences.

A trainer evaluates the *same* validation instances (same seeds) before and after training, so
the right test is a paired one: per instance ``d_i = after_i - before_i``, then a Student-t
interval for the mean of ``d`` (``n - 1`` degrees of freedom). It is much tighter than comparing
two independent means, because the instance-to-instance spread (some puzzles are just harder)
cancels out.

>>> d = paired_difference([0.0, 0.5, 0.2, 0.1], [0.5, 0.9, 0.4, 0.6])
>>> round(d.mean_diff, 3), d.excludes_zero
(0.4, True)
>>> round(d.low, 3), round(d.high, 3)  # mean .4, sd .1414, t(0.975, 3) = 3.182
(0.175, 0.625)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Interval", "PairedDifference", "mean_interval", "paired_difference"]


@dataclass(frozen=True)
class Interval:
    """A mean with its two-sided confidence interval."""

    n: int
    mean: float
    low: float
    high: float
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


@dataclass(frozen=True)
class PairedDifference:
    """``after - before`` over paired observations, with a t-interval and a p-value."""

    n: int
    mean_before: float
    mean_after: float
    mean_diff: float
    low: float
    high: float
    confidence: float
    p_value: float

    @property
    def excludes_zero(self) -> bool:
        """The interval lies strictly on one side of zero (a significant change)."""
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "excludes_zero": self.excludes_zero}


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The mean of ``values`` with a Student-t interval (zero width for fewer than 2 values).

    >>> str(mean_interval([1.0, 2.0, 3.0]))
    '2.000 [-0.484, 4.484]'
    """
    from scipy import stats

    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("mean_interval needs at least one value")
    mean = math.fsum(xs) / len(xs)
    if len(xs) < 2 or max(xs) == min(xs):
        return Interval(len(xs), mean, mean, mean, confidence)
    ci = stats.ttest_1samp(xs, 0.0).confidence_interval(confidence)
    return Interval(len(xs), mean, float(ci.low), float(ci.high), confidence)


def paired_difference(
    before: Sequence[float], after: Sequence[float], confidence: float = 0.95
) -> PairedDifference:
    """Paired t-test of ``after - before``: the mean difference, its interval and p-value."""
    from scipy import stats

    if len(before) != len(after):
        raise ValueError(f"paired samples differ in length: {len(before)} vs {len(after)}")
    if not before:
        raise ValueError("paired_difference needs at least one pair")
    b = [float(x) for x in before]
    a = [float(x) for x in after]
    diffs = [y - x for x, y in zip(b, a)]
    n = len(diffs)
    mean_diff = math.fsum(diffs) / n
    if n < 2 or max(diffs) == min(diffs):  # no spread: the interval is the point itself
        low = high = mean_diff
        p = 1.0 if mean_diff == 0 else 0.0
    else:
        res = stats.ttest_rel(a, b)
        ci = res.confidence_interval(confidence)
        low, high, p = float(ci.low), float(ci.high), float(res.pvalue)
    return PairedDifference(
        n=n,
        mean_before=math.fsum(b) / n,
        mean_after=math.fsum(a) / n,
        mean_diff=mean_diff,
        low=low,
        high=high,
        confidence=confidence,
        p_value=p,
    )
