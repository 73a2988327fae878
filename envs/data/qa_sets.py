"""General-knowledge, reasoning and science benchmarks as :class:`~envs.data.records.MathProblem`
lists with a non-math ``answer_format`` (MAE Table 2, CoMAS 4.1, SAGE 5.1).

Each loader reads rows in the schema its publishers release (``path=``: their JSONL / JSON /
parquet / CSV file or a saved directory; ``rows=``: dicts; nothing: the hub cache, see
:mod:`envs.data.hub`). Multiple-choice questions get their options listed under the question as
``A. text`` lines and the reference letter as ``answer``; options that the release does not
order (GPQA's correct/incorrect columns, TruthfulQA's mc1 targets whose first entry is always
right) are shuffled by a hash of the question, so the same question always gets the same order.

==================  =============================================  ============================
loader              release (hub name, config; split)              format, fields used
==================  =============================================  ============================
arc_challenge       ``allenai/ai2_arc`` ``ARC-Challenge``; test    choice: question, choices
                                                                   {text, label}, answerKey
mmlu                ``cais/mmlu`` ``all``; test                    choice: question, choices,
                                                                   answer (0-3), subject
mmlu_pro            ``TIGER-Lab/MMLU-Pro``; test                   choice (up to 10): question,
                                                                   options, answer, category
gpqa                ``Idavidrein/gpqa`` ``gpqa_diamond``; train    choice: Question, Correct
                    (``gpqa_diamond.csv``)                         Answer, Incorrect Answer 1-3
commonsense_qa      ``tau/commonsense_qa``; validation             choice: question, choices,
                                                                   answerKey
openbookqa          ``allenai/openbookqa`` ``main``; test          choice: question_stem,
                                                                   choices, answerKey
hellaswag           ``Rowan/hellaswag``; validation                choice: ctx, endings, label
winogrande          ``allenai/winogrande`` ``winogrande_xl``;      choice: sentence, option1,
                    validation                                     option2, answer ("1"/"2")
truthfulqa          ``truthfulqa/truthful_qa``                     choice: question,
                    ``multiple_choice``; validation                mc1_targets {choices, labels}
natural_questions   ``google-research-datasets/nq_open``;          qa: question, answer (list)
                    validation
triviaqa            ``mandarjoshi/trivia_qa`` ``rc.nocontext``;    qa: question, answer
                    validation                                     {value, aliases}
squad               ``rajpurkar/squad``; validation                qa: context, question,
                                                                   answers {text}
boolq               ``google/boolq``; validation                   yesno: passage, question,
                                                                   answer (bool)
bbh                 ``lukaemon/bbh`` (one config per task);        bbh: input, target
                    test
livebench_reasoning ``livebench/reasoning``; test                  qa: turns, ground_truth,
                                                                   task
scibench            ``xw27/scibench``; train                       math: problem_text,
                                                                   answer_number, unit
webinstruct         ``TIGER-Lab/WebInstruct-verified``; train      math, or qa for String /
                                                                   Boolean / Multiple Choice
==================  =============================================  ============================

The math competition sets (AMC, AMC'23, Minerva, BeyondAIME) are in :mod:`envs.data.math_sets`.
"""

from __future__ import annotations

import os
import random
import string
from collections.abc import Iterable, Sequence
from typing import Any

from envs.data.dataset_splits import text_key
from envs.data.hub import iter_rows
from envs.data.math_sets import _number_text
from envs.data.records import MathProblem

__all__ = [
    "format_choices",
    "load_arc_challenge",
    "load_bbh",
    "load_boolq",
    "load_commonsense_qa",
    "load_gpqa",
    "load_hellaswag",
    "load_livebench_reasoning",
    "load_mmlu",
    "load_mmlu_pro",
    "load_natural_questions",
    "load_openbookqa",
    "load_scibench",
    "load_squad",
    "load_triviaqa",
    "load_truthfulqa",
    "load_webinstruct",
    "load_winogrande",
]

Rows = Iterable[dict[str, Any]] | None
PathLike = str | os.PathLike[str] | None
LETTERS = string.ascii_uppercase


def format_choices(question: str, choices: Sequence[str]) -> str:
    """The question followed by its options as ``A. text`` lines.

    >>> print(format_choices("Pick one.", ["red", "blue"]))
    Pick one.
    <BLANKLINE>
    A. red
    B. blue
    """
    lines = [f"{LETTERS[i]}. {str(c).strip()}" for i, c in enumerate(choices)]
    return str(question).strip() + "\n\n" + "\n".join(lines)


def _choice(
    source: str,
    pid: Any,
    question: str,
    choices: Sequence[str],
    correct: int,
    **metadata: Any,
) -> MathProblem:
    if not 0 <= correct < len(choices) <= 26:
        raise ValueError(f"{source}/{pid}: answer index {correct} outside {len(choices)} options")
    return MathProblem(
        id=f"{source}/{pid}",
        question=format_choices(question, choices),
        answer=LETTERS[correct],
        source=source,
        answer_format="choice",
        choices=tuple(str(c) for c in choices),
        metadata={k: str(v) for k, v in metadata.items()},
    )


def _shuffled(question: str, correct: str, wrong: Sequence[str]) -> tuple[list[str], int]:
    """The options in an order fixed by the question's hash, and the correct one's index."""
    options = [correct, *wrong]
    order = list(range(len(options)))
    random.Random(text_key(question)).shuffle(order)
    return [options[i] for i in order], order.index(0)


def _labelled(choices: dict[str, Any], key: Any) -> tuple[list[str], int]:
    """``{"text": [...], "label": [...]}`` and an answer key (a label) -> texts, index."""
    texts = [str(t) for t in choices["text"]]
    labels = [str(lab).strip() for lab in choices["label"]]
    return texts, labels.index(str(key).strip())


def _limit(items: list[MathProblem], limit: int | None) -> list[MathProblem]:
    return items if limit is None else items[:limit]


def _rows(hub: str, config: str | None, split: str, path: PathLike, rows: Rows):
    return iter_rows(hub, config=config, split=split, path=path, rows=rows)


# ------------------------------------------------------------------------- multiple choice


def load_arc_challenge(
    split: str = "test", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """ARC-Challenge (labels are letters, or digits in a few rows)."""
    out = []
    for i, row in enumerate(_rows("allenai/ai2_arc", "ARC-Challenge", split, path, rows)):
        texts, idx = _labelled(row["choices"], row["answerKey"])
        out.append(_choice("arc_challenge", row.get("id", i), row["question"], texts, idx))
    return _limit(out, limit)


def load_mmlu(
    split: str = "test",
    *,
    config: str = "all",
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[MathProblem]:
    """MMLU (``answer`` is the index 0-3 of the right choice)."""
    out = []
    for i, row in enumerate(_rows("cais/mmlu", config, split, path, rows)):
        out.append(
            _choice(
                "mmlu",
                i,
                row["question"],
                list(row["choices"]),
                int(row["answer"]),
                subject=row.get("subject", ""),
            )
        )
    return _limit(out, limit)


def load_mmlu_pro(
    split: str = "test", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """MMLU-Pro (up to ten options; ``answer`` is the letter, ``answer_index`` its index)."""
    out = []
    for row in _rows("TIGER-Lab/MMLU-Pro", None, split, path, rows):
        options = list(row["options"])
        idx = int(row["answer_index"]) if row.get("answer_index") is not None else None
        if idx is None:
            idx = LETTERS.index(str(row["answer"]).strip())
        out.append(
            _choice(
                "mmlu_pro",
                row["question_id"],
                row["question"],
                options,
                idx,
                category=row.get("category", ""),
            )
        )
    return _limit(out, limit)


def load_gpqa(
    split: str = "train",
    *,
    config: str = "gpqa_diamond",
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[MathProblem]:
    """GPQA (Diamond by default; the release has one correct and three incorrect columns)."""
    out = []
    for i, row in enumerate(_rows("Idavidrein/gpqa", config, split, path, rows)):
        question = str(row["Question"]).strip()
        wrong = [str(row[f"Incorrect Answer {k}"]).strip() for k in (1, 2, 3)]
        options, idx = _shuffled(question, str(row["Correct Answer"]).strip(), wrong)
        pid = row.get("Record ID") or i
        domain = row.get("High-level domain") or ""
        out.append(_choice("gpqa", pid, question, options, idx, domain=domain))
    return _limit(out, limit)


def load_commonsense_qa(
    split: str = "validation", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """CommonsenseQA (the test split has no answers: use validation)."""
    out = []
    for i, row in enumerate(_rows("tau/commonsense_qa", None, split, path, rows)):
        if not str(row.get("answerKey") or "").strip():
            continue
        texts, idx = _labelled(row["choices"], row["answerKey"])
        out.append(_choice("commonsense_qa", row.get("id", i), row["question"], texts, idx))
    return _limit(out, limit)


def load_openbookqa(
    split: str = "test",
    *,
    config: str = "main",
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[MathProblem]:
    """OpenBookQA (``question_stem``)."""
    out = []
    for i, row in enumerate(_rows("allenai/openbookqa", config, split, path, rows)):
        texts, idx = _labelled(row["choices"], row["answerKey"])
        out.append(_choice("openbookqa", row.get("id", i), row["question_stem"], texts, idx))
    return _limit(out, limit)


def load_hellaswag(
    split: str = "validation", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """HellaSwag: pick the ending of ``ctx`` (``label`` is the index, a string in the release)."""
    out = []
    for i, row in enumerate(_rows("Rowan/hellaswag", None, split, path, rows)):
        if str(row.get("label", "")).strip() == "":
            continue  # the test split has no labels
        stem = f"Which ending completes the text best?\n\n{str(row['ctx']).strip()} ..."
        pid = row.get("ind", i)
        out.append(_choice("hellaswag", pid, stem, list(row["endings"]), int(row["label"])))
    return _limit(out, limit)


def load_winogrande(
    split: str = "validation",
    *,
    config: str = "winogrande_xl",
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[MathProblem]:
    """Winogrande: which option fills the ``_`` (``answer`` is ``"1"`` or ``"2"``)."""
    out = []
    for i, row in enumerate(_rows("allenai/winogrande", config, split, path, rows)):
        if str(row.get("answer", "")).strip() not in ("1", "2"):
            continue
        stem = f"Which option fills the blank (_) best?\n\n{str(row['sentence']).strip()}"
        opts = [row["option1"], row["option2"]]
        out.append(_choice("winogrande", i, stem, opts, int(row["answer"]) - 1))
    return _limit(out, limit)


def load_truthfulqa(
    split: str = "validation", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """TruthfulQA MC1 (exactly one label is 1; options are shuffled by the question's hash)."""
    out = []
    for i, row in enumerate(_rows("truthfulqa/truthful_qa", "multiple_choice", split, path, rows)):
        targets = row["mc1_targets"]
        texts, labels = list(targets["choices"]), [int(x) for x in targets["labels"]]
        if labels.count(1) != 1:
            continue
        right = texts[labels.index(1)]
        wrong = [t for t, lab in zip(texts, labels) if not lab]
        options, idx = _shuffled(row["question"], right, wrong)
        out.append(_choice("truthfulqa", i, row["question"], options, idx))
    return _limit(out, limit)


# ------------------------------------------------------------------------- short answers


def _qa(source: str, pid: Any, question: str, answers: Sequence[str], **meta: Any) -> MathProblem:
    answers = [str(a).strip() for a in answers if str(a).strip()]
    return MathProblem(
        id=f"{source}/{pid}",
        question=str(question).strip(),
        answer=answers[0],
        source=source,
        answer_format="qa",
        aliases=tuple(a for a in dict.fromkeys(answers) if a != answers[0]),
        metadata={k: str(v) for k, v in meta.items()},
    )


def load_natural_questions(
    split: str = "validation", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """Natural Questions, open-domain version (``answer`` is a list of accepted strings)."""
    out = []
    for i, row in enumerate(_rows("google-research-datasets/nq_open", None, split, path, rows)):
        answers = row["answer"] if isinstance(row["answer"], list) else [row["answer"]]
        if any(str(a).strip() for a in answers):
            out.append(_qa("natural_questions", i, row["question"], answers))
    return _limit(out, limit)


def load_triviaqa(
    split: str = "validation",
    *,
    config: str = "rc.nocontext",
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[MathProblem]:
    """TriviaQA (``answer.value`` first, then its ``aliases``)."""
    out = []
    for i, row in enumerate(_rows("mandarjoshi/trivia_qa", config, split, path, rows)):
        ans = row["answer"]
        answers = [ans.get("value", ""), *list(ans.get("aliases") or [])]
        if any(str(a).strip() for a in answers):
            out.append(_qa("triviaqa", row.get("question_id", i), row["question"], answers))
    return _limit(out, limit)


def load_squad(
    split: str = "validation", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """SQuAD v1.1: the passage, then the question; every ``answers.text`` is accepted."""
    out = []
    for i, row in enumerate(_rows("rajpurkar/squad", None, split, path, rows)):
        question = f"{str(row['context']).strip()}\n\nQuestion: {str(row['question']).strip()}"
        answers = list(row["answers"]["text"])
        if any(str(a).strip() for a in answers):
            out.append(_qa("squad", row.get("id", i), question, answers))
    return _limit(out, limit)


def load_boolq(
    split: str = "validation", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """BoolQ: a passage and a yes/no question (``answer`` is a bool)."""
    out = []
    for i, row in enumerate(_rows("google/boolq", None, split, path, rows)):
        q = str(row["question"]).strip()
        q = q[0].upper() + q[1:] + ("" if q.endswith("?") else "?") if q else q
        question = f"{str(row['passage']).strip()}\n\nQuestion (answer yes or no): {q}"
        answer = row["answer"]
        yes = answer if isinstance(answer, bool) else str(answer).strip().lower() == "true"
        out.append(
            MathProblem(
                id=f"boolq/{i}",
                question=question,
                answer="yes" if yes else "no",
                source="boolq",
                answer_format="yesno",
            )
        )
    return _limit(out, limit)


def load_bbh(
    split: str = "test",
    *,
    config: str = "boolean_expressions",
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[MathProblem]:
    """BIG-Bench Hard, one task (``config``; a file of that task with ``path``)."""
    out = []
    for i, row in enumerate(_rows("lukaemon/bbh", config, split, path, rows)):
        out.append(
            MathProblem(
                id=f"bbh/{config}/{i}",
                question=str(row["input"]).strip(),
                answer=str(row["target"]).strip(),
                source="bbh",
                answer_format="bbh",
                metadata={"task": config},
            )
        )
    return _limit(out, limit)


def load_livebench_reasoning(
    split: str = "test", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """LiveBench reasoning (web of lies, zebra puzzles, spatial): the first turn is the prompt,
    ``ground_truth`` the answer (checked as a normalised exact match)."""
    out = []
    for row in _rows("livebench/reasoning", None, split, path, rows):
        turns = row["turns"]
        prompt = turns[0] if isinstance(turns, list) and turns else str(turns)
        out.append(
            _qa(
                "livebench_reasoning",
                row["question_id"],
                prompt,
                [row["ground_truth"]],
                task=row.get("task", ""),
            )
        )
    return _limit(out, limit)


# ------------------------------------------------------------------------- science


def load_scibench(
    split: str = "train", *, path: PathLike = None, rows: Rows = None, limit: int | None = None
) -> list[MathProblem]:
    """SciBench (numeric answers; the unit goes into the question, as its harness asks)."""
    out = []
    for i, row in enumerate(_rows("xw27/scibench", None, split, path, rows)):
        unit = str(row.get("unit") or "").strip()
        q = str(row["problem_text"]).strip()
        if unit:
            q += f"\n\nGive the answer in units of {unit}."
        out.append(
            MathProblem(
                id=f"scibench/{row.get('source', '')}/{row.get('problemid', i)}".replace(" ", ""),
                question=q,
                answer=_number_text(row["answer_number"]),
                source="scibench",
                solution=str(row.get("solution") or ""),
                metadata={"unit": unit, "book": str(row.get("source") or "")},
            )
        )
    return _limit(out, limit)


_WEBINSTRUCT_QA = {"String", "Boolean", "Multiple Choice"}


def load_webinstruct(
    split: str = "train",
    *,
    categories: Sequence[str] | None = None,
    path: PathLike = None,
    rows: Rows = None,
    limit: int | None = None,
) -> list[MathProblem]:
    """WebInstruct-verified; ``categories`` keeps those (CoMAS 4.1 trains on Physics, Chemistry
    and Biology). Numeric and expression answers are graded as math; strings as short answers."""
    keep = {c.lower() for c in categories} if categories else None
    out = []
    for i, row in enumerate(_rows("TIGER-Lab/WebInstruct-verified", None, split, path, rows)):
        category = str(row.get("category") or "")
        if keep is not None and category.lower() not in keep:
            continue
        kind = str(row.get("answer_type") or "")
        out.append(
            MathProblem(
                id=f"webinstruct/{row.get('id', i)}",
                question=str(row["question"]).strip(),
                answer=str(row["answer"]).strip(),
                source="webinstruct",
                answer_format="qa" if kind in _WEBINSTRUCT_QA else "math",
                metadata={
                    "category": category,
                    "answer_type": kind,
                    "difficulty": str(row.get("difficulty") or ""),
                },
            )
        )
    return _limit(out, limit)
