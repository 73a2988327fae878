"""Tag-based output formats: find ``<tag>...</tag>`` blocks, check required tags, score format.

Role prompts in MAE and SAGE ask for answers inside tags (``<question>``, ``<answer>``,
``<plan>``, ``<score>``, ``<think>``...). These functions locate tags in linear time (a completion
full of unclosed tags costs no more than one), never raise on odd text, and report why a format
check failed in words that can go into ``infos``.

Tag names match case-insensitively and tolerate spaces before ``>`` (``<Answer >``); attributes
are not allowed. A block is an opening tag paired with the next closing tag after it; an opening
tag with no closing tag after it is *unclosed* and does not count as present.

The soft format score (SAGE's r_f in [0, 1]; MAE's format reward is the special case of one
required tag) is the mean over required tags of a per-tag credit: 1 when the tag occurs exactly
once with non-empty content, ``duplicate_credit`` when it occurs more than once (non-empty), and 0
when it is missing, empty or unclosed. An empty completion scores ``empty_output_score`` when that
is given (SAGE suggests a neutral 0.5), else 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from verifiers.extract import Extraction, _prepare

__all__ = [
    "FormatReport",
    "find_tags",
    "extract_tag",
    "has_unique_tag",
    "check_format",
    "format_score",
]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def _check_name(tag: object) -> str:
    if not isinstance(tag, str) or not _NAME.fullmatch(tag):
        raise ValueError(f"invalid tag name {tag!r} (expected e.g. 'answer', without brackets)")
    return tag


def _blocks(src: str, tag: str) -> tuple[list[str], int]:
    """Contents of every closed block of ``tag`` and the number of unclosed opening tags."""
    name = re.escape(tag)
    opens = [m.end() for m in re.finditer(r"<\s*" + name + r"\s*>", src, re.IGNORECASE)]
    closes = [(m.start(), m.end()) for m in re.finditer(r"<\s*/\s*" + name + r"\s*>", src, re.I)]
    contents: list[str] = []
    unclosed = 0
    j = 0
    k = 0
    while k < len(opens):
        start = opens[k]
        while j < len(closes) and closes[j][0] < start:
            j += 1
        if j == len(closes):
            unclosed += len(opens) - k
            break
        end_start, end_end = closes[j]
        contents.append(src[start:end_start])
        j += 1
        while k < len(opens) and opens[k] <= end_end:  # opens inside this block are swallowed
            k += 1
    return contents, unclosed


def find_tags(text: object, tag: str) -> list[str]:
    """Contents (stripped) of every ``<tag>...</tag>`` block, in order.

    >>> find_tags("<a>1</a> x <A> 2 </A> <a>3", "a")
    ['1', '2']
    >>> find_tags(None, "a")
    []
    """
    _check_name(tag)
    src = _prepare(text)
    if src is None:
        return []
    return [c.strip() for c in _blocks(src, tag)[0]]


def extract_tag(text: object, tag: str, *, unique: bool = True) -> Extraction:
    """Content of the ``tag`` block; with ``unique=True`` exactly one block must exist.

    With ``unique=False`` the last block wins.

    >>> extract_tag("<think>..</think><answer> 42 </answer>", "answer").value
    '42'
    >>> extract_tag("<answer>1</answer><answer>2</answer>", "answer").reason
    'expected exactly one <answer> block, found 2'
    >>> extract_tag("<answer>1</answer><answer>2</answer>", "answer", unique=False).value
    '2'
    >>> extract_tag("<answer>   </answer>", "answer").reason
    '<answer> block is empty'
    >>> extract_tag("<answer>unfinished", "answer").reason
    '<answer> is never closed'
    """
    _check_name(tag)
    src = _prepare(text)
    if src is None:
        return Extraction(None, "completion is not a string")
    blocks, unclosed = _blocks(src, tag)
    if not blocks:
        if unclosed:
            return Extraction(None, f"<{tag}> is never closed")
        return Extraction(None, f"no <{tag}> block found")
    if unique and len(blocks) > 1:
        return Extraction(None, f"expected exactly one <{tag}> block, found {len(blocks)}")
    body = blocks[-1].strip()
    if not body:
        return Extraction(None, f"<{tag}> block is empty")
    return Extraction(body)


def has_unique_tag(text: object, tag: str) -> bool:
    """MAE's format check: exactly one non-empty ``<tag>`` block.

    >>> has_unique_tag("<question>What is 2+2?</question>", "question")
    True
    >>> has_unique_tag("<question>a</question><question>b</question>", "question")
    False
    """
    return extract_tag(text, tag, unique=True).ok


@dataclass(frozen=True)
class FormatReport:
    """Result of :func:`check_format`. ``contents`` maps each present tag to its last block."""

    score: float
    ok: bool
    reason: str
    missing: tuple[str, ...] = ()
    duplicated: tuple[str, ...] = ()
    empty: tuple[str, ...] = ()
    unclosed: tuple[str, ...] = ()
    contents: dict[str, str] = field(default_factory=dict)


def check_format(
    text: object,
    required: Iterable[str],
    *,
    duplicate_credit: float = 0.0,
    empty_output_score: float | None = None,
) -> FormatReport:
    """Check that every required tag occurs exactly once with non-empty content.

    >>> r = check_format("<plan>step 1</plan><answer>4</answer>", ["plan", "answer"])
    >>> r.ok, r.score, r.contents["answer"]
    (True, 1.0, '4')
    >>> r = check_format("<plan>a</plan><plan>b</plan>", ["plan", "answer"], duplicate_credit=0.5)
    >>> r.ok, r.score, r.missing, r.duplicated
    (False, 0.25, ('answer',), ('plan',))
    >>> check_format("", ["answer"], empty_output_score=0.5).score
    0.5
    >>> check_format("<answer></answer>", ["answer"]).reason
    'empty: <answer>'
    """
    tags = [_check_name(t) for t in required]
    if not tags:
        raise ValueError("check_format needs at least one required tag")
    if not 0.0 <= duplicate_credit <= 1.0:
        raise ValueError("duplicate_credit must lie in [0, 1]")
    src = _prepare(text)
    if src is None or not src.strip():
        score = empty_output_score if empty_output_score is not None else 0.0
        return FormatReport(score, False, "empty output", missing=tuple(tags))
    missing: list[str] = []
    duplicated: list[str] = []
    empty: list[str] = []
    unclosed: list[str] = []
    contents: dict[str, str] = {}
    credit = 0.0
    for tag in tags:
        blocks, n_unclosed = _blocks(src, tag)
        stripped = [b.strip() for b in blocks]
        if blocks:
            contents[tag] = stripped[-1]
        if not blocks:
            (unclosed if n_unclosed else missing).append(tag)
        elif not all(stripped):
            empty.append(tag)
        elif len(blocks) > 1:
            duplicated.append(tag)
            credit += duplicate_credit
        else:
            credit += 1.0
    problems = [
        (name, items)
        for name, items in (
            ("missing", missing),
            ("duplicated", duplicated),
            ("empty", empty),
            ("unclosed", unclosed),
        )
        if items
    ]
    reason = "; ".join(f"{name}: " + ", ".join(f"<{t}>" for t in items) for name, items in problems)
    return FormatReport(
        score=credit / len(tags),
        ok=not problems,
        reason=reason or "ok",
        missing=tuple(missing),
        duplicated=tuple(duplicated),
        empty=tuple(empty),
        unclosed=tuple(unclosed),
        contents=contents,
    )


def format_score(
    text: object,
    required: Iterable[str],
    *,
    duplicate_credit: float = 0.0,
    empty_output_score: float | None = None,
) -> float:
    """The soft format score of :func:`check_format`, in [0, 1].

    >>> format_score("<question>q</question>", ["question", "answer"])
    0.5
    """
    return check_format(
        text, required, duplicate_credit=duplicate_credit, empty_output_score=empty_output_score
    ).score
