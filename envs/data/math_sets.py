"""Math datasets as :class:`~envs.data.records.MathProblem` lists.

Offline (no hub): :func:`load_reasoning_gym` generates problems with exact answers from the
``reasoning-gym`` package (``gsm_symbolic`` for GSM8K-style word problems, ``basic_arithmetic``,
and any other of its generators), deterministically in ``seed``.

Hub datasets (see :mod:`envs.data.hub` for ``rows=`` / ``path=`` and offline use):

=============  ==========================================  ======================================
loader         hub name (config)                           fields used
=============  ==========================================  ======================================
gsm8k          ``openai/gsm8k`` (main)                      question; answer after ``####``
math           ``hendrycks/competition_math`` or            problem; answer = last ``\\boxed{}``
               ``EleutherAI/hendrycks_math`` (subject),     of solution (or ``answer`` when the
               ``HuggingFaceH4/MATH-500``                   set has one); level, type/subject
polaris        ``POLARIS-Project/Polaris-Dataset-53K``      problem, answer, difficulty
aime24         ``HuggingFaceH4/aime_2024`` or               problem/Problem, answer/Answer,
               ``Maxwell-Jia/AIME_2024``                    id/ID, solution/Solution
aime25         ``math-ai/aime25`` (also                     problem or question, answer, id
               ``yentinglin/aime_2025``,
               ``opencompass/AIME2025``)
olympiadbench  ``Hothan/OlympiadBench``                     question, final_answer (list), id,
               (``OE_TO_maths_en_COMP``)                    context, unit, solution (list)
amc            ``AI-MO/aimo-validation-amc`` (83, train)    id, problem, answer (a float), url
amc23          ``math-ai/amc23`` (40, test)                 id, question, answer
minerva        ``math-ai/minervamath`` (272, test)          question, answer
beyond_aime    ``ByteDance-Seed/BeyondAIME`` (100, test)    problem, answer
=============  ==========================================  ======================================

``load_math(levels=(4, 5))`` keeps MATH's level-4 and level-5 problems (CoMAS 4.1's training
set).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from envs.data.hub import iter_rows
from envs.data.records import MathProblem

__all__ = [
    "load_reasoning_gym",
    "load_gsm8k",
    "load_math",
    "load_polaris",
    "load_aime24",
    "load_aime25",
    "load_olympiadbench",
    "load_amc",
    "load_amc23",
    "load_minerva",
    "load_beyond_aime",
    "gsm8k_answer",
]

Rows = Iterable[dict[str, Any]] | None
PathLike = str | os.PathLike[str] | None


def _first(row: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if n in row and row[n] is not None:
            return row[n]
    return default


def _limit(items: list[MathProblem], limit: int | None) -> list[MathProblem]:
    return items if limit is None else items[:limit]


def load_reasoning_gym(
    name: str = "gsm_symbolic", size: int = 100, seed: int = 0, **config: Any
) -> list[MathProblem]:
    """``size`` problems from a reasoning-gym generator (offline, deterministic in ``seed``).

    >>> ps = load_reasoning_gym("basic_arithmetic", size=2, seed=1)
    >>> ps[0].id, ps[0].source, (
    ...     ps[0].answer == load_reasoning_gym("basic_arithmetic", 2, 1)[0].answer
    ... )
    ('reasoning_gym/basic_arithmetic/1/0', 'reasoning_gym/basic_arithmetic', True)
    """
    import reasoning_gym

    if size < 1:
        raise ValueError("size must be >= 1")
    ds = reasoning_gym.create_dataset(name, size=size, seed=seed, **config)
    out = []
    for i, item in enumerate(ds):
        meta = item.get("metadata") or {}
        out.append(
            MathProblem(
                id=f"reasoning_gym/{name}/{seed}/{i}",
                question=str(item["question"]),
                answer=str(item["answer"]),
                source=f"reasoning_gym/{name}",
                solution=str(meta.get("answer_cot", "") or ""),
                metadata={"difficulty": str(meta.get("difficulty", ""))},
            )
        )
    return out


def gsm8k_answer(answer_field: str) -> str:
    """The final answer of a GSM8K ``answer`` field (text after ``####``, commas removed).

    >>> gsm8k_answer("3 + 4 = <<3+4=7>>7 cookies\\n#### 7")
    '7'
    >>> gsm8k_answer("#### 1,200")
    '1200'
    """
    tail = answer_field.rsplit("####", 1)[-1].strip()
    return tail.replace(",", "")


def load_gsm8k(
    split: str = "test", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """GSM8K (``openai/gsm8k``, config ``main``)."""
    out = []
    for i, row in enumerate(
        iter_rows("openai/gsm8k", config="main", split=split, path=path, rows=rows)
    ):
        out.append(
            MathProblem(
                id=f"gsm8k/{split}/{i}",
                question=row["question"],
                answer=gsm8k_answer(row["answer"]),
                source="gsm8k",
                solution=row["answer"],
            )
        )
    return _limit(out, limit)


def load_math(
    split: str = "test",
    *,
    hub_name: str = "hendrycks/competition_math",
    config: str | None = None,
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
    levels: Iterable[int] | None = None,
) -> list[MathProblem]:
    """MATH (Hendrycks et al.); the answer is the last ``\\boxed{}`` of the solution.
    ``levels`` keeps only those difficulty levels (``"Level 4"`` or ``4`` in the release)."""
    from verifiers.math_answer import extract_boxed

    wanted = {int(x) for x in levels} if levels is not None else None
    out = []
    for i, row in enumerate(iter_rows(hub_name, config=config, split=split, path=path, rows=rows)):
        if wanted is not None and _level(row.get("level")) not in wanted:
            continue
        solution = str(_first(row, "solution", default=""))
        answer = _first(row, "answer")
        if answer is None:
            box = extract_boxed(solution)
            if not box.ok:
                continue  # a handful of MATH solutions have no boxed answer
            answer = box.value
        pid = _first(row, "unique_id", "id", default=f"{split}/{i}")
        out.append(
            MathProblem(
                id=f"math/{pid}",
                question=row["problem"],
                answer=str(answer),
                source="math",
                solution=solution,
                metadata={
                    "level": str(_first(row, "level", default="")),
                    "subject": str(_first(row, "type", "subject", default="")),
                },
            )
        )
    return _limit(out, limit)


def _level(value: Any) -> int | None:
    """MATH's level as an int: ``"Level 4"`` and ``4`` -> 4; ``"Level ?"`` -> None.

    >>> _level("Level 4"), _level(5), _level("Level ?")
    (4, 5, None)
    """
    digits = "".join(ch for ch in str(value) if ch.isdigit())
    return int(digits) if digits else None


def load_polaris(
    split: str = "train", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """Polaris-53K (``POLARIS-Project/Polaris-Dataset-53K``); difficulty is a pass rate."""
    out = []
    rows_it = iter_rows("POLARIS-Project/Polaris-Dataset-53K", split=split, path=path, rows=rows)
    for i, row in enumerate(rows_it):
        out.append(
            MathProblem(
                id=f"polaris/{i}",
                question=row["problem"],
                answer=str(row["answer"]),
                source="polaris",
                metadata={"difficulty": str(_first(row, "difficulty", default=""))},
            )
        )
    return _limit(out, limit)


def _aime(rows_it: Iterable[dict[str, Any]], source: str) -> list[MathProblem]:
    out = []
    for i, row in enumerate(rows_it):
        pid = _first(row, "id", "ID", default=i)
        out.append(
            MathProblem(
                id=f"{source}/{pid}",
                question=str(_first(row, "problem", "Problem", "question", "Question")),
                answer=str(_first(row, "answer", "Answer")).strip(),
                source=source,
                solution=str(_first(row, "solution", "Solution", default="")),
                metadata={"url": str(_first(row, "url", default=""))},
            )
        )
    return out


def load_aime24(
    split: str = "train",
    *,
    hub_name: str = "HuggingFaceH4/aime_2024",
    path: PathLike = None,
    rows: Rows = None,
) -> list[MathProblem]:
    """AIME 2024 (30 problems; ``HuggingFaceH4/aime_2024`` or ``Maxwell-Jia/AIME_2024``)."""
    return _aime(iter_rows(hub_name, split=split, path=path, rows=rows), "aime24")


def load_aime25(
    split: str = "test",
    *,
    hub_name: str = "math-ai/aime25",
    config: str | None = None,
    path: PathLike = None,
    rows: Rows = None,
) -> list[MathProblem]:
    """AIME 2025 (30 problems; ``math-ai/aime25`` and similar re-uploads)."""
    return _aime(iter_rows(hub_name, config=config, split=split, path=path, rows=rows), "aime25")


def load_olympiadbench(
    split: str = "train",
    *,
    config: str = "OE_TO_maths_en_COMP",
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[MathProblem]:
    """OlympiadBench open-ended text-only English math (``Hothan/OlympiadBench``).

    ``final_answer`` is a list; several answers are joined with ``", "``. Surrounding ``$`` are
    removed; the unit (if any) goes into metadata.
    """
    out = []
    rows_it = iter_rows("Hothan/OlympiadBench", config=config, split=split, path=path, rows=rows)
    for i, row in enumerate(rows_it):
        finals = row.get("final_answer") or []
        if isinstance(finals, str):
            finals = [finals]
        answers = [str(a).strip().strip("$").strip() for a in finals if str(a).strip()]
        if not answers:
            continue
        context = str(row.get("context") or "").strip()
        question = str(row["question"])
        sols = row.get("solution") or []
        out.append(
            MathProblem(
                id=f"olympiadbench/{_first(row, 'id', default=i)}",
                question=(context + "\n\n" + question) if context else question,
                answer=", ".join(answers),
                source="olympiadbench",
                solution="\n\n".join(sols) if isinstance(sols, list) else str(sols),
                metadata={
                    "unit": str(row.get("unit") or ""),
                    "answer_type": str(row.get("answer_type") or ""),
                    "subfield": str(row.get("subfield") or ""),
                },
            )
        )
    return _limit(out, limit)


def _number_text(x: Any) -> str:
    """A released answer as text; integral floats lose their ``.0`` (AMC ships floats).

    >>> _number_text(142.0), _number_text(" 7 "), _number_text(2.5)
    ('142', '7', '2.5')
    """
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x).strip()


def _plain(
    rows_it: Iterable[dict[str, Any]], source: str, question_keys: tuple[str, ...]
) -> list[MathProblem]:
    out = []
    for i, row in enumerate(rows_it):
        out.append(
            MathProblem(
                id=f"{source}/{_first(row, 'id', 'unique_id', default=i)}",
                question=str(_first(row, *question_keys)).strip(),
                answer=_number_text(_first(row, "answer", "Answer")),
                source=source,
                solution=str(_first(row, "solution", default="")),
                metadata={"url": str(_first(row, "url", default=""))},
            )
        )
    return out


def load_amc(
    split: str = "train", *, path: PathLike = None, rows: Rows = None
) -> list[MathProblem]:
    """AMC 2022-2023 (83 problems, ``AI-MO/aimo-validation-amc``; MAE's AMC)."""
    rows_it = iter_rows("AI-MO/aimo-validation-amc", split=split, path=path, rows=rows)
    return _plain(rows_it, "amc", ("problem", "question"))


def load_amc23(
    split: str = "test", *, path: PathLike = None, rows: Rows = None
) -> list[MathProblem]:
    """AMC 2023 (40 problems, ``math-ai/amc23``; SAGE's AMC'23)."""
    rows_it = iter_rows("math-ai/amc23", split=split, path=path, rows=rows)
    return _plain(rows_it, "amc23", ("question", "problem"))


def load_minerva(
    split: str = "test", *, path: PathLike = None, rows: Rows = None
) -> list[MathProblem]:
    """Minerva math (272 problems, ``math-ai/minervamath``)."""
    rows_it = iter_rows("math-ai/minervamath", split=split, path=path, rows=rows)
    return _plain(rows_it, "minerva", ("question", "problem"))


def load_beyond_aime(
    split: str = "test", *, path: PathLike = None, rows: Rows = None
) -> list[MathProblem]:
    """BeyondAIME (100 problems, ``ByteDance-Seed/BeyondAIME``; MarsRL's second benchmark)."""
    rows_it = iter_rows("ByteDance-Seed/BeyondAIME", split=split, path=path, rows=rows)
    return _plain(rows_it, "beyond_aime", ("problem", "question"))
