"""The evaluation layer: greedy episodes on held-out instances, summarised per setting; the
whole-suite benchmark and its report.

See :mod:`adapters.evaluation.runner` (one setting), :mod:`adapters.evaluation.suite` (every
setting, several policies, resumable) and :mod:`adapters.evaluation.report` (the table and
charts). ``python -m adapters.evaluate`` is the command line.
"""

from __future__ import annotations

from adapters.evaluation.runner import (
    EvalReport,
    compare_reports,
    evaluate,
    generation_kind,
    role_token_limits,
    with_prompt_prefixes,
)
from adapters.evaluation.suite import (
    SUITES,
    ArgumentMismatch,
    Suite,
    SuiteArgs,
    SuiteEntry,
    resolve_suite,
    run_suite,
)

__all__ = [
    "SUITES",
    "ArgumentMismatch",
    "EvalReport",
    "Suite",
    "SuiteArgs",
    "SuiteEntry",
    "compare_reports",
    "evaluate",
    "resolve_suite",
    "generation_kind",
    "role_token_limits",
    "run_suite",
    "with_prompt_prefixes",
]
