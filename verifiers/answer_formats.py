"""Answer checkers for the benchmark formats that are not math: multiple choice, short-answer
QA, BIG-Bench Hard exact match and yes/no.

Every checker is pure, never raises on odd completions (non-strings, megabytes, unclosed
boxes) and scans only the last :data:`TAIL_CHARS` characters of a completion, so a hostile
input costs linear time. Each returns an :class:`AnswerCheck`: whether the completion is right,
the answer it was read as, a score (token F1 for QA, else 0/1) and, when wrong or unreadable,
the reason in words that can go into an env's ``infos``.

Where the final answer is read from (:func:`final_answer_text`), first match wins: the last
``\\boxed{...}``; the last ``<answer>...</answer>`` block (MAE asks its solver to answer inside
tags); the text after the last "answer is" / "Answer:" on its line (the phrase the MMLU-Pro and
BBH chain-of-thought harnesses read); else the last non-empty line.

Formats (:data:`FORMATS`):

* ``choice`` (ARC, MMLU, GPQA, CommonsenseQA, OpenBookQA, HellaSwag, TruthfulQA, Winogrande,
  MMLU-Pro): the reference is a letter ``A``, ``B``, ...; the answer is read as a letter
  (``B``, ``(B)``, ``B.``, ``B) text``), or as an option's text (matched after normalisation)
  mapped to its letter. A completion with no final-answer phrase falls back to the last
  standalone capital letter of the valid range, as the MMLU-Pro harness does.
* ``qa`` (Natural Questions, TriviaQA, SQuAD): SQuAD's normalisation (lower case, punctuation
  and the articles a/an/the removed, whitespace collapsed); correct when it equals any alias
  (exact match); ``score`` is the best token F1 over the aliases.
* ``bbh``: exact match of the text after "the answer is" (trailing period dropped, case and
  surrounding spaces ignored; ``(A)`` also matches ``A``).
* ``yesno`` (BoolQ): the first ``yes``/``no``/``true``/``false`` word of the final answer.

:func:`parse_judgement` reads an LLM judge's TRUE/FALSE verdict (MAE 5.1 grades its general-QA
benchmarks this way).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass

from verifiers.extract import _prepare
from verifiers.math_answer import extract_boxed

__all__ = [
    "FORMATS",
    "TAIL_CHARS",
    "AnswerCheck",
    "check_answer",
    "check_bbh",
    "check_choice",
    "check_qa",
    "check_yes_no",
    "choice_letter",
    "exact_match",
    "final_answer_text",
    "normalize_answer",
    "parse_judgement",
    "token_f1",
]

FORMATS = ("choice", "qa", "bbh", "yesno")
TAIL_CHARS = 20_000
"""Only the last this-many characters of a completion are read (the answer comes last)."""
LETTERS = string.ascii_uppercase


@dataclass(frozen=True)
class AnswerCheck:
    """The verdict on one completion: correct, the answer read, a score, and why not."""

    correct: bool
    extracted: str | None
    score: float
    reason: str = ""


def _tail(text: object) -> str | None:
    src = _prepare(text)
    return None if src is None else src[-TAIL_CHARS:]


_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_ANSWER_IS = re.compile(r"(?:answer\s+is|answer\s*:)[ \t:]*([^\n]*)", re.I)


def final_answer_text(text: object) -> str | None:
    r"""The final answer of a completion (see the module docstring), or ``None``.

    >>> final_answer_text(r"so \boxed{B}.")
    'B'
    >>> final_answer_text("<answer> Paris </answer>")
    'Paris'
    >>> final_answer_text("Thinking...\nSo the answer is (C).")
    '(C).'
    >>> final_answer_text("first line\n  last line \n\n")
    'last line'
    >>> final_answer_text(None) is None, final_answer_text("   ") is None
    (True, True)
    """
    src = _tail(text)
    if src is None:
        return None
    box = extract_boxed(src)
    if box.ok:
        return str(box.value)
    tags = [m.group(1).strip() for m in _ANSWER_TAG.finditer(src)]
    if tags and tags[-1]:
        return tags[-1]
    said = [m.group(1).strip() for m in _ANSWER_IS.finditer(src)]
    if said and said[-1]:
        return said[-1]
    for line in reversed(src.splitlines()):
        if line.strip():
            return line.strip()
    return None


# ------------------------------------------------------------------------- QA normalisation


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces.

    >>> normalize_answer("The  Eiffel Tower!")
    'eiffel tower'
    >>> normalize_answer("An apple, a day")
    'apple day'
    """
    s = "".join(ch for ch in str(s).lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact_match(prediction: str, references: Sequence[str]) -> bool:
    """Whether the normalised prediction equals any normalised reference.

    >>> exact_match("the Beatles", ["Beatles", "The Fab Four"])
    True
    >>> exact_match("Beatles band", ["Beatles"])
    False
    """
    p = normalize_answer(prediction)
    return any(p == normalize_answer(r) for r in references)


def token_f1(prediction: str, references: Sequence[str]) -> float:
    """The best SQuAD token F1 of the prediction over the references (0 when none).

    Hand-computed: prediction "eiffel tower paris", reference "Eiffel Tower": 2 tokens in
    common, precision 2/3, recall 1, F1 = 2 * (2/3) / (2/3 + 1) = 0.8.

    >>> token_f1("Eiffel tower Paris", ["The Eiffel Tower"])
    0.8
    >>> token_f1("", ["x"]), token_f1("a", [])
    (0.0, 0.0)
    """
    pred = normalize_answer(prediction).split()
    best = 0.0
    for ref in references:
        gold = normalize_answer(ref).split()
        if not pred or not gold:
            best = max(best, float(pred == gold and bool(pred)))
            continue
        common = sum((collections.Counter(pred) & collections.Counter(gold)).values())
        if common:
            precision, recall = common / len(pred), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def check_qa(completion: object, references: Sequence[str]) -> AnswerCheck:
    """Short-answer QA: exact match against any alias; score is the best token F1.

    >>> check_qa("It is \\\\boxed{the Beatles}", ["Beatles"]).correct
    True
    >>> c = check_qa("Answer: Eiffel tower Paris", ["Eiffel Tower"])
    >>> c.correct, c.score
    (False, 0.8)
    """
    refs = [str(r) for r in references if str(r).strip()]
    if not refs:
        return AnswerCheck(False, None, 0.0, "the problem has no reference answer")
    ans = final_answer_text(completion)
    if ans is None:
        return AnswerCheck(False, None, 0.0, _no_answer(completion))
    ok = exact_match(ans, refs)
    why = "" if ok else f"{_show(ans)} matches none of the {len(refs)} reference answer(s)"
    return AnswerCheck(ok, ans, 1.0 if ok else token_f1(ans, refs), why)


# ------------------------------------------------------------------------- multiple choice


def _letter_of(text: str, n: int) -> str | None:
    """A letter answer among the first ``n`` letters: ``B``, ``(B)``, ``B.``, ``B) text``."""
    m = re.match(r"^\s*[\(\[]?\s*([A-Za-z])\s*(?:[\)\]\.:]|$)", text)
    if not m:
        m = re.match(r"^\s*(?:option|choice)\s+\(?([A-Za-z])\)?\b", text, re.I)
    if m:
        letter = m.group(1).upper()
        if letter in LETTERS[:n] and (m.group(1).isupper() or len(text.strip()) <= 3):
            return letter
    return None


_LAST_LETTER = re.compile(r"\b([A-Z])\b")


def choice_letter(completion: object, choices: Sequence[str]) -> str | None:
    """The option letter a completion picks (see the module docstring), or ``None``.

    >>> opts = ["red", "green", "blue"]
    >>> choice_letter("The answer is (B).", opts), choice_letter(r"\\boxed{c}", opts)
    ('B', 'C')
    >>> choice_letter("Answer: blue", opts), choice_letter("I pick green", opts)
    ('C', None)
    >>> choice_letter("...so it must be A", opts), choice_letter("Answer: D", opts) is None
    ('A', True)
    """
    n = len(choices) or 26
    ans = final_answer_text(completion)
    if ans is None:
        return None
    letter = _letter_of(ans, n)
    if letter:
        return letter
    norm = normalize_answer(ans.rstrip("."))
    if norm:
        for i, opt in enumerate(choices[:26]):
            if normalize_answer(str(opt)) == norm:
                return LETTERS[i]
    src = _tail(completion) or ""
    if _ANSWER_IS.search(src) or "<answer>" in src.lower() or extract_boxed(src).ok:
        return None  # an explicit answer that is no option: no guessing from other text
    found = [m.group(1) for m in _LAST_LETTER.finditer(src) if m.group(1) in LETTERS[:n]]
    return found[-1] if found else None


def check_choice(completion: object, answer: str, choices: Sequence[str] = ()) -> AnswerCheck:
    """Multiple choice: the picked letter equals the reference letter.

    >>> check_choice("Answer: (b)", "B", ["x", "y"]).correct
    True
    >>> check_choice("The answer is A", "B", ["x", "y"]).reason
    "picked A, the reference is 'B'"
    """
    ref = str(answer).strip().strip("()").upper()
    letter = choice_letter(completion, choices)
    if letter is None:
        return AnswerCheck(False, None, 0.0, _no_answer(completion, "no option letter found"))
    ok = letter == ref
    return AnswerCheck(
        ok, letter, float(ok), "" if ok else f"picked {letter}, the reference is {ref!r}"
    )


# ------------------------------------------------------------------------- BBH, yes/no


def _bbh_norm(s: str) -> str:
    s = " ".join(str(s).strip().split()).rstrip(".").strip().lower()
    m = re.fullmatch(r"\(([a-z])\)", s)
    return m.group(1) if m else s


def check_bbh(completion: object, target: str) -> AnswerCheck:
    """BIG-Bench Hard: exact match of the final answer with the target (see module docstring).

    >>> check_bbh("Let's think. So the answer is (A).", "(A)").correct
    True
    >>> check_bbh("So the answer is False.", "True").correct
    False
    """
    ans = final_answer_text(completion)
    if ans is None:
        return AnswerCheck(False, None, 0.0, _no_answer(completion))
    ok = _bbh_norm(ans) == _bbh_norm(target)
    return AnswerCheck(ok, ans, float(ok), "" if ok else f"{_show(ans)} is not {target!r}")


_YES_NO = re.compile(r"\b(yes|no|true|false)\b", re.I)


def check_yes_no(completion: object, answer: bool | str) -> AnswerCheck:
    """Yes/no: the first yes/no/true/false word of the final answer.

    >>> check_yes_no("Answer: Yes, it is.", True).correct, check_yes_no("false", "no").correct
    (True, True)
    >>> check_yes_no("maybe", True).reason
    "no yes/no in 'maybe'"
    """
    ref = answer if isinstance(answer, bool) else str(answer).strip().lower() in ("yes", "true")
    ans = final_answer_text(completion)
    if ans is None:
        return AnswerCheck(False, None, 0.0, _no_answer(completion))
    m = _YES_NO.search(ans)
    if not m:
        return AnswerCheck(False, None, 0.0, f"no yes/no in {_show(ans)}")
    said = m.group(1).lower() in ("yes", "true")
    word = "yes" if said else "no"
    ok = said == ref
    return AnswerCheck(ok, word, float(ok), "" if ok else f"said {word}")


def check_answer(
    completion: object,
    reference: str,
    *,
    answer_format: str,
    choices: Sequence[str] = (),
    aliases: Sequence[str] = (),
) -> AnswerCheck:
    """Dispatch on ``answer_format`` (one of :data:`FORMATS`).

    >>> check_answer("Answer: B", "B", answer_format="choice", choices=["p", "q"]).correct
    True
    >>> check_answer("Paris", "paris", answer_format="qa").correct
    True
    """
    if answer_format == "choice":
        return check_choice(completion, reference, choices)
    if answer_format == "qa":
        return check_qa(completion, [reference, *aliases])
    if answer_format == "bbh":
        return check_bbh(completion, reference)
    if answer_format == "yesno":
        return check_yes_no(completion, reference)
    raise ValueError(f"answer_format must be one of {FORMATS}, got {answer_format!r}")


_VERDICT = re.compile(r"\b(true|false|correct|incorrect)\b", re.I)


def parse_judgement(text: object) -> bool | None:
    """A judge's verdict: the last TRUE / FALSE (or correct / incorrect) word; ``None`` when
    there is none (an unusable judgement, not a wrong answer).

    >>> parse_judgement("The answer matches. TRUE"), parse_judgement("**False**")
    (True, False)
    >>> parse_judgement("It is not correct, so: incorrect"), parse_judgement("no idea") is None
    (False, True)
    """
    src = _tail(text)
    if src is None:
        return None
    words = [m.group(1).lower() for m in _VERDICT.finditer(src[-2000:])]
    if not words:
        return None
    return words[-1] in ("true", "correct")


def _show(s: str) -> str:
    return repr(s if len(s) <= 80 else s[:77] + "...")


def _no_answer(completion: object, what: str = "no answer found") -> str:
    return "completion is not a string" if not isinstance(completion, str) else what
