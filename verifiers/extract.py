"""Pulling structured pieces out of free-form model completions.

Every function here is pure, never raises on odd text (empty, huge, binary-looking, unclosed
fences) and caps the work it does: completions are truncated to ``MAX_COMPLETION_CHARS`` before
any scanning, so a hostile megabyte string costs linear time at worst.

Results are returned as ``Extraction`` values: ``value`` is ``None`` when nothing usable was found
and ``reason`` then says why, in words that can go straight into an env's ``infos``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_COMPLETION_CHARS",
    "Extraction",
    "extract_after_marker",
    "extract_code_block",
    "code_from_answer",
    "parse_json_value",
    "parse_move_list",
    "clip_text",
]

MAX_COMPLETION_CHARS = 200_000
"""Completions longer than this are cut before parsing (the tail is dropped)."""


@dataclass(frozen=True)
class Extraction:
    """The outcome of an extraction: a value, or ``None`` with the reason it failed."""

    value: Any = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.value is not None


def clip_text(text: str, limit: int = 2000, marker: str = "…[truncated]") -> str:
    """Shorten ``text`` to at most ``limit`` characters, keeping head and tail.

    >>> clip_text("abcdef", 100)
    'abcdef'
    >>> clip_text("a" * 50 + "b" * 50, 30, marker="..")
    'aaaaaaaaaaaaaa..bbbbbbbbbbbbbb'
    """
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(marker))
    head = keep // 2
    tail = keep - head
    return text[:head] + marker + (text[-tail:] if tail else "")


def _prepare(text: object) -> str | None:
    if not isinstance(text, str):
        return None
    return text[:MAX_COMPLETION_CHARS].replace("\r\n", "\n").replace("\x00", "")


_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+.-]*)[^\n]*$", re.MULTILINE)
_PY_TAGS = {"python", "py", "python3", "py3"}


def extract_code_block(
    text: object, *, languages: frozenset[str] | set[str] = frozenset(_PY_TAGS), single: bool = True
) -> Extraction:
    """Return the body of the Python code block in ``text``.

    A block opens with a fence of three or more backticks (or tildes), optionally tagged with a
    language, and closes with a matching fence. Blocks tagged with another language are ignored;
    untagged blocks count. With ``single=True`` (the AT-GRPO tool-agent contract: exactly one code
    block per answer) more than one candidate block is a failure. An unclosed final block is
    rejected rather than guessed at.

    >>> extract_code_block("Here:\\n```python\\nprint(1)\\n```\\n").value
    'print(1)'
    >>> extract_code_block("no code").reason
    'no code block found'
    >>> extract_code_block("```python\\nprint(1)\\n").reason
    'unclosed code block'
    >>> extract_code_block("```py\\na=1\\n```\\n```python\\nb=2\\n```").reason
    'expected exactly one code block, found 2'
    >>> extract_code_block("```bash\\nls\\n```\\n```\\nx = 3\\n```").value
    'x = 3'
    """
    src = _prepare(text)
    if src is None:
        return Extraction(None, "completion is not a string")
    blocks: list[str] = []
    pos = 0
    while True:
        m = _FENCE.search(src, pos)
        if m is None:
            break
        fence, lang = m.group(1), m.group(2).lower()
        close = re.compile(
            r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$", re.MULTILINE
        )
        c = close.search(src, m.end())
        if c is None:
            if lang in languages or not lang:
                return Extraction(None, "unclosed code block")
            break
        body = src[m.end() + 1 : c.start()] if m.end() < len(src) else ""
        if not lang or lang in languages:
            blocks.append(body.rstrip("\n"))
        pos = c.end()
    if not blocks:
        return Extraction(None, "no code block found")
    if single and len(blocks) > 1:
        return Extraction(None, f"expected exactly one code block, found {len(blocks)}")
    code = blocks[-1]
    if not code.strip():
        return Extraction(None, "code block is empty")
    return Extraction(code)


def code_from_answer(text: str) -> str:
    """The program in an answer: the last fenced Python block if any, else the text itself.

    >>> code_from_answer("Use this:\\n```python\\nx = 1\\n```\\nand this:\\n```\\ny = 2\\n```")
    'y = 2'
    >>> code_from_answer("  print(3)\\n")
    'print(3)'
    """
    block = extract_code_block(text, single=False)
    return block.value if block.ok else text.strip()


_MARKER_LINE = re.compile(r"^[ \t]*####(.*)$", re.MULTILINE)


def extract_after_marker(text: object, marker_regex: re.Pattern[str] = _MARKER_LINE) -> Extraction:
    """Return the final answer written after the last line that begins with ``####``.

    The answer is the rest of that line plus any following lines (stripped), so both
    ``#### [U,R]`` and a ``####`` line followed by a JSON grid on the next lines work.

    >>> extract_after_marker("reasoning...\\n#### [U, R, D]").value
    '[U, R, D]'
    >>> extract_after_marker("####\\n[[1,2],[2,1]]\\n").value
    '[[1,2],[2,1]]'
    >>> extract_after_marker("no marker here").reason
    "no line beginning with '####'"
    >>> extract_after_marker("#### \\n").reason
    "nothing after '####'"
    """
    src = _prepare(text)
    if src is None:
        return Extraction(None, "completion is not a string")
    last = None
    for m in marker_regex.finditer(src):
        last = m
    if last is None:
        return Extraction(None, "no line beginning with '####'")
    answer = (last.group(1) + src[last.end() :]).strip()
    answer = answer.strip("`").strip()
    if not answer:
        return Extraction(None, "nothing after '####'")
    return Extraction(answer)


def parse_json_value(text: object, max_chars: int = 20_000) -> Extraction:
    """Parse the first JSON array/object in ``text`` (tolerating surrounding prose).

    >>> parse_json_value("[[1, 2], [3, 4]]").value
    [[1, 2], [3, 4]]
    >>> parse_json_value("the grid is [[1,2],[2,1]] done").value
    [[1, 2], [2, 1]]
    >>> parse_json_value("nothing").reason
    'no JSON array or object found'
    """
    src = _prepare(text)
    if src is None:
        return Extraction(None, "not a string")
    src = src.strip()
    if len(src) > max_chars:
        return Extraction(None, f"answer longer than {max_chars} characters")
    start = min((i for i in (src.find("["), src.find("{")) if i >= 0), default=-1)
    if start < 0:
        return Extraction(None, "no JSON array or object found")
    decoder = json.JSONDecoder()
    try:
        value, _ = decoder.raw_decode(src, start)
    except (ValueError, RecursionError) as exc:
        return Extraction(None, f"invalid JSON: {str(exc)[:120]}")
    return Extraction(value)


_MOVE_WORDS = {
    "U": "U",
    "UP": "U",
    "D": "D",
    "DOWN": "D",
    "L": "L",
    "LEFT": "L",
    "R": "R",
    "RIGHT": "R",
}
_LIST_BODY = re.compile(r"\[([^\[\]]*)\]")


def parse_move_list(text: object, max_moves: int = 1000) -> Extraction:
    """Parse an action list such as ``[U,R,D,L]`` or ``["up", "right"]`` into ``['U','R',...]``.

    Takes the last bracketed list in the text. Every item must be one of U/D/L/R (or the words
    up/down/left/right, any case, optionally quoted); anything else is a format failure with the
    offending token named.

    >>> parse_move_list("#### [U, R, 'D', \\"left\\"]").value
    ['U', 'R', 'D', 'L']
    >>> parse_move_list("[]").value
    []
    >>> parse_move_list("[U, X]").reason
    "unknown move 'X' (expected U, D, L or R)"
    >>> parse_move_list("go up").reason
    'no bracketed action list found'
    """
    src = _prepare(text)
    if src is None:
        return Extraction(None, "not a string")
    found = _LIST_BODY.findall(src)
    if not found:
        return Extraction(None, "no bracketed action list found")
    body = found[-1].strip()
    if not body:
        return Extraction([])
    moves: list[str] = []
    for raw in body.split(","):
        token = raw.strip().strip("'\"` ").upper()
        if token not in _MOVE_WORDS:
            shown = raw.strip()[:20]
            return Extraction(None, f"unknown move {shown!r} (expected U, D, L or R)")
        moves.append(_MOVE_WORDS[token])
        if len(moves) > max_moves:
            return Extraction(None, f"more than {max_moves} moves")
    return Extraction(moves)
