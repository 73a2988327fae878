"""Final-answer extraction and grading for math problems (AT-GRPO Appendix A.1.1).

Grading follows the paper: math-verify is the parsing/normalisation front end and numbers are
compared with ``NumEq`` (delta = 1e-6), which AT-GRPO Appendix A.1.1 defines as::

    NumEq(a, b) = 1{ |a - b| <= delta  or  |a - b| / max(1, |b|) <= delta }

with ``b`` the reference answer. Read literally, that tolerance grades near misses correct: the
relative branch accepts ``1234568`` for ``1234567`` and the absolute one ``0.000001`` for
``0.000002``. This module departs from the literal reading in two places (see :func:`num_eq`):

* an **integer** reference needs the integer itself (up to ``INT_ROUNDOFF``, float print noise,
  far below the distance 1 between two integers);
* a **non-integer** reference gets the relative tolerance only, ``|a - b| <= delta * |b|``, so it
  shrinks with ``|b|`` below 1 instead of becoming an absolute ``delta``.

Percentages: an answer ending in ``%`` is graded by its value (``42%`` is 0.42) when the
reference has no ``%``; when the reference ends in ``%`` too, the numbers in front of the signs
are compared. So one answer never matches both ``42`` and ``0.42`` (math-verify alone accepts
``42%`` for both). Answers that are not plain numbers (expressions, sets, intervals, equations)
are compared symbolically by math-verify.

Arithmetic left undone: when the reference is a number, an answer that is arithmetic over number
literals (``72 - 85``, ``2^{10}``, ``3 \\times 4``; :func:`unevaluated_arithmetic`) is graded
wrong, with that reason, although math-verify evaluates it to the same value. Otherwise a policy
can copy the question's expression into the box: a 12-step CPU run on "Calculate 72 - 85."
problems learned exactly that (``\\boxed{72 - 85}``): 36 of its 39 successes on 64 validation
problems restated the question. Answers with symbols or functions (``\\sqrt{2}``, ``\\pi/4``) are
still compared symbolically.

Where answers come from (``source``):

* ``"boxed"``  the last complete ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces allowed);
* ``"marker"`` the first line after the last line starting with ``####`` (GSM8K style);
* ``"stdout"`` a program's printed output: its last non-empty line;
* ``"answer"`` the text is the answer itself;
* ``"auto"``   boxed, else marker, else the whole text when it is a single short line.

Speed and safety. Plain integers, decimals, scientific notation, thousands separators and simple
fractions (``3/4``, ``\\frac{3}{4}``) are graded in-process by exact rational arithmetic, with no
sympy and no subprocess (tens of thousands of gradings per second). Everything else goes to a small
persistent pool of worker processes (:mod:`verifiers._math_pool`), because math-verify's own
timeouts use ``signal.alarm`` (main thread only) and some sympy work cannot be interrupted at all:
each grading has a deadline (``timeout_s``), after which the worker is killed and replaced and the
grading is ``False`` with reason ``"grading timed out ..."`` (and ``transient``: not cached, a
later grading tries again). So grading is bounded in time from any thread. The workers are
isolated like the sandbox's servers (model-written LaTeX goes through sympy there). Inputs are
capped first: answers longer than ``MAX_ANSWER_CHARS`` or nested deeper than ``MAX_NESTING`` are not
graded (``False`` with the reason), and nothing echoes a huge input. Bad model output never raises;
a wrong argument type for ``gold`` raises ``TypeError``.

References written by a policy (a SAGE challenger's ``<answer>``) are checked with
:func:`reference_form` before they may verify anything: a reference that parses is not enough,
since math-verify falls back to the raw string for text it cannot read (``221,``), reads numbers
written apart as one value (``2 21`` is 23) and so on; the solver's correct ``221`` would be
graded wrong against each. A usable reference is in canonical form (a plain number, or an
expression whose value is not a rational number, read as a mathematical object; no numbers side
by side, no bare list of values, no arithmetic left undone, no ``\\boxed`` around it) and its own
canonical value grades as correct against it with ``source="auto"``, the grading a solver's
answer gets.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Literal

from verifiers.extract import (
    MAX_COMPLETION_CHARS,
    Extraction,
    _prepare,
    clip_text,
    extract_after_marker,
)

if TYPE_CHECKING:
    from verifiers._math_pool import MathPool

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_NESTING",
    "NUMEQ_DELTA",
    "INT_ROUNDOFF",
    "DEFAULT_TIMEOUT_S",
    "MathGrade",
    "extract_boxed",
    "extract_marker_answer",
    "extract_program_answer",
    "extract_math_answer",
    "parse_number",
    "unevaluated_arithmetic",
    "num_eq",
    "grade",
    "grade_many",
    "is_correct",
    "ReferenceForm",
    "reference_form",
]

MAX_ANSWER_CHARS = 2000
"""Extracted answers (and gold answers) longer than this are not graded."""
MAX_NESTING = 40
"""Answers with brackets nested deeper than this are not graded."""
NUMEQ_DELTA = 1e-6
INT_ROUNDOFF = 1e-9
"""How far from an integer reference an answer may be (float print noise, ``0.1 * 30``)."""
DEFAULT_TIMEOUT_S = 3.0
"""Deadline for one slow-path grading, in seconds."""
_SHORT_LINE = 200
_SHOWN = 120

Source = Literal["auto", "boxed", "marker", "stdout", "answer"]
_SOURCES = ("auto", "boxed", "marker", "stdout", "answer")


@dataclass(frozen=True)
class MathGrade:
    """The outcome of grading one answer.

    ``extracted`` is the prediction's answer text as found (clipped for display), ``normalized``
    and ``gold_normalized`` the parsed forms that were compared, and ``method`` says which path
    decided: ``"fast"`` (exact rationals), ``"math_verify"`` (worker process) or ``"none"``
    (nothing was compared, e.g. no answer found). ``transient``: the grader failed (timed out,
    crashed) rather than the answer; such a grade is not cached.
    """

    correct: bool
    reason: str
    extracted: str | None = None
    normalized: str | None = None
    gold_normalized: str | None = None
    method: str = "none"
    transient: bool = False


# ---------------------------------------------------------------- extraction

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")


def extract_boxed(text: object) -> Extraction:
    r"""Return the contents of the last complete ``\boxed{...}`` (or ``\fbox{...}``).

    Braces nest; escaped braces (``\{``, ``\}``) do not count. The scan is a single linear pass,
    so thousands of ``\boxed{`` cost no more than one.

    >>> extract_boxed(r"so $\boxed{\frac{1}{2}}$").value
    '\\frac{1}{2}'
    >>> extract_boxed(r"\boxed{1} then \fbox{2}").value
    '2'
    >>> extract_boxed(r"\boxed{\{1, 2\}}").value
    '\\{1, 2\\}'
    >>> extract_boxed(r"\boxed{3} and \boxed{4").value
    '3'
    >>> extract_boxed("no box").reason
    'no \\boxed{} found'
    >>> extract_boxed(r"\boxed{ }").reason
    'empty \\boxed{}'
    """
    src = _prepare(text)
    if src is None:
        return Extraction(None, "completion is not a string")
    stack: list[int] = []  # start offset of a box's content, or -1 for a plain brace
    best: tuple[int, int] | None = None
    i, n = 0, len(src)
    opens = {m.end() - 1: m.end() for m in _BOX_OPEN.finditer(src)}
    while i < n:
        ch = src[i]
        if ch == "\\" and i + 1 < n and src[i + 1] in "{}" and i not in opens:
            i += 2
            continue
        if ch == "{":
            stack.append(opens.get(i, -1))
        elif ch == "}" and stack:
            start = stack.pop()
            if start >= 0 and (best is None or i > best[1] or (i == best[1] and start < best[0])):
                best = (start, i)
        i += 1
    if best is None:
        if opens and isinstance(text, str) and len(text) > MAX_COMPLETION_CHARS:
            why = f"unclosed \\boxed{{ (completion cut at {MAX_COMPLETION_CHARS} characters)"
            return Extraction(None, why)
        if opens:
            return Extraction(None, "unclosed \\boxed{")
        return Extraction(None, "no \\boxed{} found")
    body = src[best[0] : best[1]].strip()
    if not body:
        return Extraction(None, "empty \\boxed{}")
    return Extraction(body)


def extract_marker_answer(text: object) -> Extraction:
    """Return the first non-empty line after the last ``####`` line (GSM8K convention).

    >>> extract_marker_answer("so 3 + 4 = 7\\n#### 7\\nDone.").value
    '7'
    >>> extract_marker_answer("####\\n 12 ").value
    '12'
    >>> extract_marker_answer("nothing").reason
    "no line beginning with '####'"
    """
    ext = extract_after_marker(text)
    if not ext.ok:
        return ext
    for line in str(ext.value).splitlines():
        if line.strip():
            return Extraction(line.strip())
    return Extraction(None, "nothing after '####'")


def extract_program_answer(stdout: object) -> Extraction:
    """Return the last non-empty line a program printed.

    >>> extract_program_answer("step 1\\n42\\n\\n").value
    '42'
    >>> extract_program_answer("  \\n").reason
    'the program printed nothing'
    """
    src = _prepare(stdout)
    if src is None:
        return Extraction(None, "output is not a string")
    for line in reversed(src.splitlines()):
        if line.strip():
            return Extraction(line.strip())
    return Extraction(None, "the program printed nothing")


def extract_math_answer(text: object, source: Source = "auto") -> Extraction:
    r"""Extract a final answer according to ``source`` (see the module docstring).

    >>> extract_math_answer(r"... hence \boxed{5}").value
    '5'
    >>> extract_math_answer("work\n#### 17").value
    '17'
    >>> extract_math_answer("  -3.5 ").value
    '-3.5'
    >>> extract_math_answer("a long derivation\nwith no final answer").reason
    "no \\boxed{} or '####' answer found"
    >>> extract_math_answer("1\n2\n", source="stdout").value
    '2'
    """
    if source not in _SOURCES:
        raise ValueError(f"unknown answer source {source!r}; expected one of {_SOURCES}")
    if source == "boxed":
        return extract_boxed(text)
    if source == "marker":
        return extract_marker_answer(text)
    if source == "stdout":
        return extract_program_answer(text)
    src = _prepare(text)
    if src is None:
        return Extraction(None, "completion is not a string")
    if source == "answer":
        return Extraction(src.strip()) if src.strip() else Extraction(None, "empty answer")
    box = extract_boxed(text)
    if box.ok or box.reason == "empty \\boxed{}":
        return box
    mark = extract_marker_answer(src)
    if mark.ok:
        return mark
    if box.reason.startswith("unclosed"):
        return box
    stripped = src.strip()
    if stripped and "\n" not in stripped and len(stripped) <= _SHORT_LINE:
        return Extraction(stripped)
    return Extraction(None, "no \\boxed{} or '####' answer found")


# ---------------------------------------------------------------- fast numeric path

_DELIMS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_SPACING = re.compile(r"\\[,!;: ]|\\quad|\\qquad|~")
_PLAIN = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE]([+-]?\d+))?")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_SLASH = re.compile(r"([+-]?\d+)\s*/\s*([+-]?\d+)")
_FRAC = re.compile(r"([+-]?)\\[dt]?frac\{\s*([+-]?\d+)\s*\}\{\s*([+-]?\d+)\s*\}")


def _strip_wrappers(s: str) -> str:
    s = s.strip().replace("\u2212", "-")
    for _ in range(3):
        changed = False
        for left, right in _DELIMS:
            if len(s) > len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s, changed = s[len(left) : -len(right)].strip(), True
                break
        if s.startswith("\\$"):
            s, changed = s[2:].strip(), True
        elif s.startswith("$") and "$" not in s[1:]:
            s, changed = s[1:].strip(), True
        if s.endswith(".") and not s.endswith(".."):
            s, changed = s[:-1].strip(), True
        if not changed:
            break
    return _SPACING.sub("", s).replace("{,}", "").strip()


# an arithmetic expression over number literals only: digits, decimal points, signs, operators,
# brackets, \frac and spacing (after _strip_wrappers)
_ARITH_TOKEN = re.compile(
    r"[\d.\s+\-*/^(){}\[\]\u00d7\u00f7\u00b7]|\\(?:[dt]?frac|times|cdot|div|left|right)"
)
# a number in scientific notation, 2.5 \times 10^{-6}: a number, not arithmetic left undone
_SCIENTIFIC = re.compile(
    r"[+-]?\d+(?:\.\d+)?\s*(?:\\times|\\cdot|[*\u00d7\u00b7])\s*10\s*\^\s*(?:\{\s*[+-]?\d+\s*\}|[+-]?\d)"
)
# a binary operator: one that follows an operand (a digit or a closing bracket)
_BINARY_OP = re.compile(r"[\d)}\]]\s*(?:[+\-*/^\u00d7\u00f7\u00b7]|\\(?:times|cdot|div)\b)")


def unevaluated_arithmetic(answer: str) -> bool:
    r"""Whether ``answer`` is arithmetic over number literals left undone (``72 - 85``,
    ``2^{10}``, ``3 \times 4 + 1``): numbers joined by at least one binary operator, nothing
    else. Plain numbers, fractions and negative numbers are not; neither is anything with a
    symbol, a function or a word in it.

    >>> [unevaluated_arithmetic(a) for a in ("72 - 85", r"2^{10}", r"(3 \times 4) + 1")]
    [True, True, True]
    >>> [unevaluated_arithmetic(a) for a in ("-13", r"\frac{3}{4}", "(-2)", r"\sqrt{2}", "x-1")]
    [False, False, False, False, False]
    >>> unevaluated_arithmetic(r"2.5 \times 10^{-6}")  # scientific notation is a number
    False
    """
    s = _strip_wrappers(answer)
    if not s or _ARITH_TOKEN.sub("", s) or _SCIENTIFIC.fullmatch(s):
        return False
    return parse_number(s) is None and _BINARY_OP.search(s) is not None


def parse_number(text: object) -> Fraction | None:
    r"""Exact value of a plain number, or ``None`` when the text is anything else.

    Accepts integers, decimals, scientific notation (exponent within +-1000), thousands
    separators, ``a/b`` and ``\frac{a}{b}``, optionally inside ``$...$`` and with a leading
    currency sign or a trailing period.

    >>> parse_number("1,234.5")
    Fraction(2469, 2)
    >>> parse_number(r"$-\frac{3}{4}$")
    Fraction(-3, 4)
    >>> parse_number("\\$18.")
    Fraction(18, 1)
    >>> parse_number("2.5e-3")
    Fraction(1, 400)
    >>> parse_number("x + 1") is None, parse_number("1/0") is None, parse_number("1e99999") is None
    (True, True, True)
    """
    if not isinstance(text, str) or len(text) > MAX_ANSWER_CHARS:
        return None
    s = _strip_wrappers(text)
    try:
        m = _PLAIN.fullmatch(s)
        if m:
            if m.group(1) is not None and abs(int(m.group(1))) > 1000:
                return None
            return Fraction(Decimal(s))
        if _THOUSANDS.fullmatch(s):
            return Fraction(Decimal(s.replace(",", "")))
        m = _SLASH.fullmatch(s) or None
        if m:
            num, den = int(m.group(1)), int(m.group(2))
            return Fraction(num, den) if den else None
        m = _FRAC.fullmatch(s)
        if m:
            num, den = int(m.group(2)), int(m.group(3))
            if not den:
                return None
            value = Fraction(num, den)
            return -value if m.group(1) == "-" else value
    except (ValueError, ArithmeticError):
        return None
    return None


def num_eq(
    a: float | Fraction | Decimal | str,
    b: float | Fraction | Decimal | str,
    delta: float = NUMEQ_DELTA,
) -> bool:
    """``NumEq`` with the reference ``b`` (AT-GRPO Appendix A.1.1, read as the module says):
    an integer ``b`` needs ``|a - b| <= INT_ROUNDOFF``; any other ``b`` needs
    ``|a - b| <= delta * |b|`` (exact rational arithmetic).

    Strings are read with :func:`parse_number` (``False`` if unreadable); floats are taken at
    their exact binary value; NaN equals nothing, infinities only themselves.

    >>> num_eq(1234568, 1234567), num_eq(1234567.0, 1234567), num_eq(0.1 * 30, 3)
    (False, True, True)
    >>> num_eq(1_000_000.5, 1_000_000), num_eq(1.0000005, 1)   # the literal reading: True, True
    (False, False)
    >>> num_eq("0.000001", "0.000002"), num_eq("0.0000020000001", "0.000002")
    (False, True)
    >>> num_eq("1/3", "0.3333333"), num_eq("1/3", "0.33333"), num_eq(2.5000024, 2.5)
    (True, False, True)
    """
    vals = []
    x: float | Fraction | Decimal | str | None
    for x in (a, b):
        if isinstance(x, str):
            x = parse_number(x)
            if x is None:
                return False
        if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
            return a == b
        if isinstance(x, bool) or not isinstance(x, int | float | Fraction | Decimal):
            raise TypeError(f"num_eq expects numbers or strings, got {type(x).__name__}")
        vals.append(Fraction(x))
    return _num_eq(vals[0], vals[1], Fraction(repr(float(delta))))


_ROUNDOFF = Fraction(repr(INT_ROUNDOFF))


def _num_eq(a: Fraction, b: Fraction, delta: Fraction) -> bool:
    # (verifiers/_math_worker.py has the same rule; it cannot import this module)
    if b.denominator == 1:
        return abs(a - b) <= _ROUNDOFF
    return abs(a - b) <= delta * abs(b)


# ---------------------------------------------------------------- grading

_CACHE: OrderedDict[tuple[str, str, float], dict] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 8192


def _nesting(s: str) -> int:
    depth = best = 0
    for ch in s:
        if ch in "([{":
            depth += 1
            best = max(best, depth)
        elif ch in ")]}":
            depth = max(0, depth - 1)
    return best


def _gold_text(gold: object) -> str:
    if isinstance(gold, bool) or not isinstance(gold, str | int | float | Fraction | Decimal):
        raise TypeError(f"gold answer must be a string or a number, got {type(gold).__name__}")
    if not isinstance(gold, str):
        return str(gold)
    if "\\boxed" in gold or "\\fbox" in gold:
        box = extract_boxed(gold)
        if box.ok:
            return str(box.value)
    if "####" in gold:
        mark = extract_marker_answer(gold)
        if mark.ok:
            return str(mark.value)
    return gold.strip()


def _prescreen(
    prediction: object, gold: object, source: Source, delta: float
) -> tuple[MathGrade | None, str, str]:
    """Extract and check sizes; return (final grade or None, pred answer, gold answer)."""
    gold_ans = _gold_text(gold)
    ext = extract_math_answer(prediction, source)
    if not ext.ok:
        return MathGrade(False, ext.reason), "", gold_ans
    pred_ans = str(ext.value)
    shown = clip_text(pred_ans, _SHOWN)
    if not gold_ans:
        return MathGrade(False, "the reference answer is empty", shown), pred_ans, gold_ans
    for who, ans in (("answer", pred_ans), ("reference answer", gold_ans)):
        if len(ans) > MAX_ANSWER_CHARS:
            why = f"{who} longer than {MAX_ANSWER_CHARS} characters; not graded"
            return MathGrade(False, why, shown), pred_ans, gold_ans
        if _nesting(ans) > MAX_NESTING:
            why = f"{who} nested deeper than {MAX_NESTING} levels; not graded"
            return MathGrade(False, why, shown), pred_ans, gold_ans
    pred_ans, gold_ans, p = _resolve_percent(pred_ans, gold_ans)
    g = parse_number(gold_ans)
    if p is None and g is not None and unevaluated_arithmetic(pred_ans):
        why = "an arithmetic expression left unevaluated; the reference is a number: give its value"
        return MathGrade(False, why, shown), pred_ans, gold_ans
    if p is not None and g is not None:
        ok = num_eq(p, g, delta)
        return (
            MathGrade(
                ok,
                "numeric match (NumEq)" if ok else "numeric mismatch (NumEq)",
                shown,
                _fmt(p),
                _fmt(g),
                "fast",
            ),
            pred_ans,
            gold_ans,
        )
    return None, pred_ans, gold_ans


_PERCENT = re.compile(r"(.*?)\s*(?:\\?%|\\text\{\s*\\?%\s*\}|\\percent)", re.S)


def _split_percent(ans: str) -> tuple[str, bool]:
    """The answer without a trailing percent sign, and whether it had one."""
    m = _PERCENT.fullmatch(_strip_wrappers(ans))
    return (m.group(1), True) if m and m.group(1) else (ans, False)


def _resolve_percent(pred: str, gold: str) -> tuple[str, str, Fraction | None]:
    r"""Percent signs read once, here (the module docstring's rule): the answers to compare
    and the prediction's value when it is a plain number.

    >>> _resolve_percent("42%", "0.42")[2], _resolve_percent(r"42\%", r"42\%")[:2]
    (Fraction(21, 50), ('42', '42'))
    >>> print(_resolve_percent(r"\sqrt{2}\%", "0.01414")[0])
    \frac{\sqrt{2}}{100}
    """
    pcore, ppct = _split_percent(pred)
    gcore, gpct = _split_percent(gold)
    if gpct:  # both sides in percent: compare the numbers in front of the signs
        return pcore, gcore, parse_number(pcore)
    if not ppct:
        return pred, gold, parse_number(pred)
    value = parse_number(pcore)
    if value is not None:
        return pred, gold, value / 100
    return f"\\frac{{{pcore}}}{{100}}", gold, None


def _fmt(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def _from_worker(msg: dict, shown: str) -> MathGrade:
    return MathGrade(
        bool(msg.get("c")),
        str(msg.get("r", "")),
        shown,
        msg.get("pn"),
        msg.get("gn"),
        str(msg.get("m", "math_verify")),
        bool(msg.get("transient")),
    )


def grade_many(
    pairs: Iterable[tuple[object, object]],
    *,
    source: Source = "auto",
    delta: float = NUMEQ_DELTA,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    pool: MathPool | None = None,
) -> list[MathGrade]:
    r"""Grade ``(prediction, gold)`` pairs; results come back in input order.

    Plain numbers are graded in-process; the rest go to the worker pool in one batch (spread
    over its workers, duplicates graded once, results cached), each with deadline ``timeout_s``.

    >>> [g.correct for g in grade_many([("#### 72", "72"), (r"\boxed{0.5}", "1/2"), ("7", "8")])]
    [True, True, False]
    """
    from verifiers._math_pool import Task, default_pool

    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    results: list[MathGrade | None] = []
    slow: dict[tuple[str, str, float], list[tuple[int, str]]] = {}
    for idx, pair in enumerate(pairs):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError("grade_many expects (prediction, gold) pairs")
        done, pred_ans, gold_ans = _prescreen(pair[0], pair[1], source, delta)
        results.append(done)
        if done is None:
            key = (pred_ans, gold_ans, float(delta))
            slow.setdefault(key, []).append((idx, clip_text(pred_ans, _SHOWN)))
    if slow:
        todo: list[tuple[str, str, float]] = []
        with _CACHE_LOCK:
            for key, where in slow.items():
                hit = _CACHE.get(key)
                if hit is None:
                    todo.append(key)
                else:
                    _CACHE.move_to_end(key)
                    for idx, shown in where:
                        results[idx] = _from_worker(hit, shown)
        if todo:
            the_pool = pool if pool is not None else default_pool()
            answers = the_pool.grade([Task(p, g, d) for p, g, d in todo], timeout_s=timeout_s)
            with _CACHE_LOCK:
                for key, msg in zip(todo, answers):
                    if not msg.get("transient"):  # a timeout is not a wrong answer
                        _CACHE[key] = msg
                        if len(_CACHE) > _CACHE_SIZE:
                            _CACHE.popitem(last=False)
            for key, msg in zip(todo, answers):
                for idx, shown in slow[key]:
                    results[idx] = _from_worker(msg, shown)
    return [r if r is not None else MathGrade(False, "not graded") for r in results]


def grade(
    prediction: object,
    gold: object,
    *,
    source: Source = "auto",
    delta: float = NUMEQ_DELTA,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    pool: MathPool | None = None,
) -> MathGrade:
    r"""Grade one prediction (a completion, an answer or program output) against ``gold``.

    >>> g = grade(r"The total is \boxed{1{,}000}.", "1000")
    >>> g.correct, g.reason, g.method
    (True, 'numeric match (NumEq)', 'fast')
    >>> grade(r"\boxed{\frac{\sqrt{2}}{2}}", r"\sin(\pi/4)").correct
    True
    >>> grade(r"\boxed{x^2 + 2x + 1}", "(x+1)^2").reason
    'symbolic match'
    >>> grade("I think\nit is large", "5").reason
    "no \\boxed{} or '####' answer found"
    >>> grade("done\n3.0000000000000004\n", 3, source="stdout").correct  # float noise
    True
    >>> grade(r"\boxed{1234568}", "1234567").correct, grade(r"\boxed{42\%}", "42").correct
    (False, False)
    """
    return grade_many(
        [(prediction, gold)], source=source, delta=delta, timeout_s=timeout_s, pool=pool
    )[0]


def is_correct(
    prediction: object,
    gold: object,
    *,
    source: Source = "auto",
    delta: float = NUMEQ_DELTA,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> bool:
    r"""``grade(...).correct``.

    >>> is_correct(r"so \boxed{\dfrac{6}{4}}", "1.5"), is_correct("#### 10", "11")
    (True, False)
    """
    return grade(prediction, gold, source=source, delta=delta, timeout_s=timeout_s).correct


# ---------------------------------------------------------------- policy-written references

_JUXTAPOSED = re.compile(r"\d[\d.]*\s+\.?\d[\d.]*")
_WRAPPED = ("\\boxed", "\\fbox", "####")


@dataclass(frozen=True)
class ReferenceForm:
    """A reference answer checked by :func:`reference_form`: ``canonical`` is the value a correct
    answer states (None: the reference cannot serve), ``reason`` why not; ``transient``: the
    grader itself failed (a timeout), not the reference."""

    canonical: str | None
    reason: str
    transient: bool = False

    @property
    def ok(self) -> bool:
        return self.canonical is not None


def _top_level_comma(s: str) -> bool:
    depth = 0
    for ch in s.replace("{,}", ""):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            return True
    return False


def reference_form(
    reference: object,
    *,
    delta: float = NUMEQ_DELTA,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    pool: MathPool | None = None,
) -> ReferenceForm:
    r"""Can a correct answer match ``reference`` (a reference answer a policy wrote)? It must be
    in canonical form, and its canonical value must grade as correct against it under
    :func:`grade` with ``source="auto"`` (the grading a solver's answer gets).

    Canonical form: one value, written alone (no ``\boxed``, no ``####``); a plain number
    (integer, decimal, fraction, optionally a percent) or, read by math-verify as a mathematical
    object, an expression whose value is not a rational number (a rational value is written as
    a number: ``\sqrt{4}`` is ``2``), a set, an interval or an equation; no two numbers side by
    side (``2 21``), no values listed without brackets (``2,21``), no arithmetic left undone
    (``2 \cdot 21``). The canonical value is the number in lowest terms, or the LaTeX of what
    math-verify read.

    >>> reference_form("221").canonical, reference_form("0.50").canonical
    ('221', '1/2')
    >>> [reference_form(r).ok for r in ("221,", "2 21", "221 +", "221;", "2,21", r"2 \cdot 21")]
    [False, False, False, False, False, False]
    >>> reference_form("2 21").reason
    'not in canonical form: numbers written side by side (2 21)'
    >>> reference_form(r"\frac{\sqrt{2}}{2}").canonical
    '\\frac{\\sqrt{2}}{2}'
    """
    if not isinstance(reference, str):
        raise TypeError(f"reference must be a string, got {type(reference).__name__}")
    ref = reference.strip()
    if not ref:
        return ReferenceForm(None, "the reference answer is empty")
    if len(ref) > MAX_ANSWER_CHARS or _nesting(ref) > MAX_NESTING:
        return ReferenceForm(None, "the reference answer is too long or nested too deeply")
    plain = _strip_wrappers(ref)
    why = ""
    if any(w in ref for w in _WRAPPED):
        why = "the value is wrapped in \\boxed or follows ####; write it alone"
    elif (m := _JUXTAPOSED.search(plain)) is not None:
        why = f"numbers written side by side ({clip_text(m.group(0), 20)})"
    core, pct = _split_percent(ref)
    value = parse_number(core)
    if not why and value is None:
        if _top_level_comma(plain):
            why = "several values without brackets; write a set or a tuple"
        elif unevaluated_arithmetic(core):
            why = "arithmetic left unevaluated; write its value"
    if why:
        return ReferenceForm(None, f"not in canonical form: {why}")
    if value is not None:
        canonical = _fmt(value) + ("\\%" if pct else "")
    else:
        from verifiers._math_pool import Task, default_pool

        the_pool = pool if pool is not None else default_pool()
        msg = the_pool.grade([Task("", ref, float(delta), op="form")], timeout_s=timeout_s)[0]
        if msg.get("transient"):
            return ReferenceForm(None, str(msg.get("r", "grader failed")), transient=True)
        if msg.get("f") == "rational":
            why = f"a rational value is written as a number (it reads as {msg.get('l')})"
            return ReferenceForm(None, f"not in canonical form: {why}")
        if msg.get("f") != "other" or not isinstance(msg.get("l"), str):
            return ReferenceForm(None, f"not in canonical form: {msg.get('r')}")
        canonical = msg["l"]
    g = grade(canonical, ref, source="auto", delta=delta, timeout_s=timeout_s, pool=pool)
    if g.transient:
        return ReferenceForm(None, g.reason, transient=True)
    if not g.correct:
        why = f"its own value {clip_text(canonical, 60)} grades wrong against it ({g.reason})"
        return ReferenceForm(None, why)
    return ReferenceForm(canonical, "ok")
