"""Parsing LLM-judge scores and the papers' normalisations (SAGE, MAE, CoMAS).

Judges write a score inside ``<score>...</score>``. :func:`parse_score` reads the *last* score
block and understands ``7``, ``7.5``, ``7/10``, ``8 out of 10``, ``**8**`` and ``Score: 8``; a
fraction or "out of" with a denominator other than the scale's maximum is rescaled to the scale
(``3/5`` on a 10-point scale reads as 6). When no block exists (and ``fallback=True``) the last
number in the text is used, marked ``source="fallback"``. It never raises on odd text.

Normalisations, as in the papers:

* SAGE ``Norm(s)``: ``s`` if ``0 <= s <= 1``; ``(s - 1) / 9`` if ``1 < s <= 10``; else 0.5
  (also 0.5 when nothing parsed). Note ``Norm(1) = 1`` by the first case, exactly as written.
* MAE: ``(s - 1) / 9`` clipped to [0, 1]; 0.5 when the score does not parse.
* CoMAS: an integer score in {1, 2, 3} read from the ``<score>`` block (no fallback by default:
  CoMAS penalises unparsable scores), else ``None`` so the caller can give the scorer -1. Its
  rewards: solution ``(tau - 1) / 2``, evaluation ``1 - that``, scorer 0 (or -1 when unparsable).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from verifiers.extract import _prepare
from verifiers.formats import _blocks

__all__ = [
    "ScoreParse",
    "parse_score",
    "sage_norm",
    "mae_norm",
    "sage_score",
    "mae_score",
    "comas_score",
    "comas_rewards",
]

_NUM = r"[+-]?(?:\d+(?:\.\d+)?|\.\d+)"
_RATIO = re.compile(r"(" + _NUM + r")\s*(?:/|\bout\s+of\b|\bof\b)\s*(" + _NUM + r")", re.I)
_NUMBER = re.compile(r"(?<![\w.])" + _NUM)
_MAX_NUMBER_CHARS = 30


@dataclass(frozen=True)
class ScoreParse:
    """A parsed judge score: ``value`` (``None`` if nothing parsed), where it came from
    (``"tag"``, ``"fallback"`` or ``"none"``), the number of ``<score>`` blocks, and a reason."""

    value: float | None
    source: str
    reason: str
    n_tags: int = 0

    @property
    def ok(self) -> bool:
        return self.value is not None


def _to_float(s: str) -> float | None:
    if len(s) > _MAX_NUMBER_CHARS:
        return None
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _read_number(text: str, scale_max: float, *, last: bool) -> float | None:
    """The (last or first) ratio or plain number in ``text``, rescaled to ``scale_max``."""
    ratios = list(_RATIO.finditer(text))
    numbers = list(_NUMBER.finditer(text))
    if not numbers:
        return None
    pick_num = numbers[-1] if last else numbers[0]
    ratio = None
    if ratios:
        r = ratios[-1] if last else ratios[0]
        # use the ratio when it contains the chosen number (e.g. "7/10": the 10 or the 7)
        if r.start() <= pick_num.start() < r.end():
            ratio = r
    if ratio is not None:
        num, den = _to_float(ratio.group(1)), _to_float(ratio.group(2))
        if num is None or den is None or den <= 0:
            return None
        return num if den == scale_max else num / den * scale_max
    return _to_float(pick_num.group(0))


def parse_score(text: object, *, scale_max: float = 10, fallback: bool = True) -> ScoreParse:
    """Read a judge's score (see the module docstring).

    >>> parse_score("Clear and solvable. <score>8</score>").value
    8.0
    >>> parse_score("<score>7/10</score>").value, parse_score("<score>8 out of 10</score>").value
    (7.0, 8.0)
    >>> parse_score("<score>**6.5**</score>").value, parse_score("<score>3/5</score>").value
    (6.5, 6.0)
    >>> parse_score("<score>2</score> then <score>9</score>").value
    9.0
    >>> p = parse_score("I would rate this 7 overall, maybe 9")
    >>> p.value, p.source
    (9.0, 'fallback')
    >>> parse_score("<score>high</score>").reason
    'no number inside <score>'
    >>> parse_score("no digits at all").value is None
    True
    """
    src = _prepare(text)
    if src is None:
        return ScoreParse(None, "none", "judge output is not a string")
    blocks, unclosed = _blocks(src, "score")
    if blocks:
        value = _read_number(blocks[-1], scale_max, last=False)
        if value is None:
            return ScoreParse(None, "none", "no number inside <score>", len(blocks))
        return ScoreParse(value, "tag", "ok", len(blocks))
    if unclosed:
        tail = src[src.lower().rfind("<score") :]
        after = tail[tail.find(">") + 1 :][:200] if ">" in tail else ""
        value = _read_number(after, scale_max, last=False)
        if value is not None:
            return ScoreParse(value, "fallback", "<score> is never closed")
    if not fallback:
        return ScoreParse(None, "none", "no <score> block")
    value = _read_number(src[-5000:], scale_max, last=True)
    if value is None:
        return ScoreParse(None, "none", "no <score> block and no number")
    return ScoreParse(value, "fallback", "no <score> block; used the last number")


def sage_norm(s: float | None, *, one_is_low: bool = False) -> float:
    """SAGE's Norm (Eq. 2): ``s`` on [0, 1], ``(s-1)/9`` on (1, 10], else 0.5. As written,
    Norm(1) = 1; ``one_is_low=True`` reads a score of exactly 1 as the bottom of the 1-10 scale
    (0), i.e. ``s`` on [0, 1), ``(s-1)/9`` on [1, 10].

    >>> sage_norm(0.3), sage_norm(1), sage_norm(10), sage_norm(5.5), sage_norm(11), sage_norm(None)
    (0.3, 1.0, 1.0, 0.5, 0.5, 0.5)
    >>> sage_norm(1, one_is_low=True), sage_norm(0.3, one_is_low=True)
    (0.0, 0.3)
    """
    if s is None or not math.isfinite(s):
        return 0.5
    if one_is_low and s == 1.0:
        return 0.0
    if 0.0 <= s <= 1.0:
        return float(s)
    if 1.0 < s <= 10.0:
        return (s - 1.0) / 9.0
    return 0.5


def mae_norm(s: float | None) -> float:
    """MAE's normalisation: ``(s-1)/9`` clipped to [0, 1]; 0.5 when unparsable.

    >>> mae_norm(1), mae_norm(10), mae_norm(7.3), mae_norm(0), mae_norm(12), mae_norm(None)
    (0.0, 1.0, 0.7, 0.0, 1.0, 0.5)
    """
    if s is None or not math.isfinite(s):
        return 0.5
    return min(1.0, max(0.0, (s - 1.0) / 9.0))


def sage_score(text: object, *, fallback: bool = True) -> float:
    """``sage_norm(parse_score(text).value)``.

    >>> sage_score("<score>7</score>")
    0.6666666666666666
    """
    return sage_norm(parse_score(text, fallback=fallback).value)


def mae_score(text: object, *, fallback: bool = True) -> float:
    """``mae_norm(parse_score(text).value)``.

    >>> mae_score("<score>10</score>"), mae_score("garbage")
    (1.0, 0.5)
    """
    return mae_norm(parse_score(text, fallback=fallback).value)


def comas_score(text: object, *, fallback: bool = False) -> int | None:
    """CoMAS's score tau in {1, 2, 3}, or ``None`` when it does not parse to one of them.

    >>> comas_score("The mistake is fatal. <score>1</score>"), comas_score("<score>3</score>")
    (1, 3)
    >>> comas_score("<score>2.5</score>"), comas_score("<score>5</score>"), comas_score("2")
    (None, None, None)
    """
    p = parse_score(text, scale_max=3, fallback=fallback)
    if p.value is None or p.value not in (1.0, 2.0, 3.0):
        return None
    return int(p.value)


def comas_rewards(tau: int | None) -> tuple[float | None, float | None, float]:
    """CoMAS rewards ``(solution, evaluation, scorer)`` for score ``tau``.

    Solution ``(tau-1)/2``, evaluation ``1 - that``, scorer 0; an unparsable score (``None``)
    gives ``(None, None, -1.0)`` and the caller decides what the other two get.

    >>> comas_rewards(3), comas_rewards(2), comas_rewards(1), comas_rewards(None)
    ((1.0, 0.0, 0.0), (0.5, 0.5, 0.0), (0.0, 1.0, 0.0), (None, None, -1.0))
    """
    if tau is None:
        return None, None, -1.0
    if tau not in (1, 2, 3):
        raise ValueError(f"CoMAS scores are 1, 2 or 3, got {tau!r}")
    sol = (tau - 1) / 2
    return sol, 1.0 - sol, 0.0
