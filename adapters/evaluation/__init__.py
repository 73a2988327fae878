"""The evaluation layer: greedy episodes on held-out instances, summarised per setting.

See :mod:`adapters.evaluation.runner`. ``python -m adapters.evaluate`` is the command line.
"""

from __future__ import annotations

from adapters.evaluation.runner import EvalReport, compare_reports, evaluate, with_prompt_prefixes

__all__ = ["EvalReport", "compare_reports", "evaluate", "with_prompt_prefixes"]
