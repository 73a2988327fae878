"""Reading the tests a model wrote into :class:`~verifiers.code_tests.TestCase` values.

Three formats, all parsed without running anything:

* :func:`parse_stdin_tests`: input/output pairs after ``**Test Input:**`` / ``**Test Output:**``
  markers (the AT-GRPO tester, stdin problems). A marker's content is the body of the first
  fenced block after it, or without a fence the text up to the first blank line.
* :func:`parse_assert_tests`: asserts that call a given entry point (the AT-GRPO tester,
  function problems), from the last python block of the completion (or its lines that begin
  with ``assert``). Strict: every asserting top-level statement must mention the entry point,
  other top-level statements may only be setup (imports, assignments, definitions), and the
  tests may neither define the entry point nor call ``exit``.
* :func:`split_assert_block`: a SAGE challenger's test block. Lenient: every top-level
  ``assert`` becomes one test preceded by all other top-level statements, and a block whose
  asserts are all nested (a HumanEval ``check`` function and its call) is one test.

Each returns the tests and a problem string. Text a model wrote never raises; it only yields
fewer tests and a reason.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache

from verifiers.code_tests import TestCase, bounded_parse, check_compiles
from verifiers.extract import code_from_answer, extract_code_block

__all__ = [
    "MAX_BLOCK_TESTS",
    "MAX_BLOCK_CHARS",
    "parse_stdin_tests",
    "parse_assert_tests",
    "split_assert_block",
]

MAX_BLOCK_TESTS = 20
"""At most this many assert tests are kept from a block by :func:`split_assert_block`."""
MAX_BLOCK_CHARS = 50_000
"""Test blocks longer than this are rejected by :func:`split_assert_block`."""

_SETUP_TYPES = (
    ast.Import,
    ast.ImportFrom,
    ast.Assign,
    ast.AnnAssign,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
)
_EXIT_NAMES = {"exit", "quit", "_exit", "abort"}

# ---------------------------------------------------------------------- stdin / stdout pairs

# No two neighbouring parts can match the same characters (no backtracking blow-up on long
# runs of blanks: the pattern is linear in the line length).
_MARK = re.compile(
    r"^[ \t>#]*(?:\*{1,2}[ \t]*)?test[ \t]+(input|output)[ \t]*(?:\*{1,2}[ \t]*)?:[ \t]*\**",
    re.IGNORECASE | re.MULTILINE,
)
_FENCED = re.compile(
    r"^[ \t]*(`{3,}|~{3,})[^\n]*\n(.*?)\n?[ \t]*\1[ \t]*$", re.DOTALL | re.MULTILINE
)


def _segment_text(seg: str) -> str | None:
    """A marker's content: the first fenced block's body, else text up to a blank line."""
    head = seg.lstrip(" \t")
    if head.startswith("\n"):
        head = head[1:]
    m = _FENCED.search(seg)
    before = seg[: m.start()] if m else seg
    if m and not before.strip():
        return m.group(2)
    lines: list[str] = []
    for line in head.split("\n"):
        if not line.strip():
            if lines:
                break
            continue
        lines.append(line.rstrip())
    text = "\n".join(lines).strip("`").strip()
    return text if lines else None


def parse_stdin_tests(text: object, max_tests: int = 5) -> tuple[list[TestCase], str]:
    """Input/output test pairs in ``**Test Input:**`` / ``**Test Output:**`` format.

    Returns ``(tests, problem)``: ``problem`` is ``""`` when the format was fully respected,
    else the violation (then ``tests`` holds what could still be used).

    >>> ts, bad = parse_stdin_tests(
    ...     "**Test Input:**\\n```\\n3 4\\n```\\n**Test Output:**\\n```\\n7\\n```"
    ... )
    >>> (ts[0].stdin, ts[0].expected_stdout, bad)
    ('3 4\\n', '7', '')
    >>> parse_stdin_tests(
    ...     "**Test Input:** 5\\n**Test Output:** 25\\n\\nbecause 5*5"
    ... )[0][0].expected_stdout
    '25'
    >>> parse_stdin_tests("no test here")
    ([], 'no **Test Input:** / **Test Output:** pair found')
    """
    if not isinstance(text, str):
        return [], "completion is not a string"
    src = text[:200_000].replace("\r\n", "\n")
    marks = list(_MARK.finditer(src))
    tests: list[TestCase] = []
    problems: list[str] = []
    i = 0
    while i < len(marks):
        m = marks[i]
        if m.group(1).lower() != "input":
            problems.append("a Test Output without a Test Input before it")
            i += 1
            continue
        nxt = marks[i + 1] if i + 1 < len(marks) else None
        if nxt is None or nxt.group(1).lower() != "output":
            problems.append("a Test Input without its Test Output")
            i += 1
            continue
        inp = _segment_text(src[m.end() : nxt.start()])
        end = marks[i + 2].start() if i + 2 < len(marks) else len(src)
        out = _segment_text(src[nxt.end() : end])
        i += 2
        if out is None or not out.strip():
            problems.append("an empty Test Output")
            continue
        stdin = "" if inp is None or not inp.strip() else inp.strip("\n") + "\n"
        tests.append(TestCase.io(stdin, out, f"test {len(tests) + 1}"))
    if not tests and not problems:
        return [], "no **Test Input:** / **Test Output:** pair found"
    if len(tests) > max_tests:
        problems.append(f"{len(tests)} tests; at most {max_tests} count")
        tests = tests[:max_tests]
    if not tests and problems:
        return [], problems[0]
    return tests, "; ".join(dict.fromkeys(problems))


# ---------------------------------------------------------------------- asserts on an entry point


def _mentions(node: ast.AST, name: str) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == name)
        or (isinstance(n, ast.Attribute) and n.attr == name)
        for n in ast.walk(node)
    )


def _binds(node: ast.AST, name: str) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    if isinstance(node, ast.Import | ast.ImportFrom):
        return any((a.asname or a.name.split(".")[0]) == name for a in node.names)
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store | ast.Del)
        for n in ast.walk(node)
    )


def parse_assert_tests(
    text: object, entry_point: str, max_tests: int = 5
) -> tuple[list[TestCase], str]:
    """Assert tests calling ``entry_point``, from the last python code block of ``text`` (or,
    without a block, from its lines that begin with ``assert``). Returns ``(tests, problem)``
    as :func:`parse_stdin_tests` does; each test is the setup plus one asserting statement.

    >>> ts, bad = parse_assert_tests(
    ...     "```python\\nx = 2\\nassert sq(x) == 4\\nassert sq(0) == 0\\n```", "sq"
    ... )
    >>> [t.code for t in ts], bad
    (['x = 2\\nassert sq(x) == 4', 'x = 2\\nassert sq(0) == 0'], '')
    >>> parse_assert_tests("```python\\nassert True\\n```", "sq")[1]
    "an assert that does not call 'sq'"
    >>> parse_assert_tests("```python\\ndef sq(x): return 4\\nassert sq(2) == 4\\n```", "sq")[1]
    "the tests may not define 'sq'"
    """
    if not isinstance(text, str):
        return [], "completion is not a string"
    block = extract_code_block(text, single=False)
    if block.ok:
        code = str(block.value)
    else:
        lines = [
            ln.strip() for ln in text[:200_000].splitlines() if ln.strip().startswith("assert")
        ]
        if not lines:
            return [], "no python code block with assert statements found"
        code = "\n".join(lines)
    if len(code) > INLINE_PARSE_CHARS:
        from verifiers import _bounded

        if not _bounded.IN_WORKER:
            try:
                found, problem = _bounded.call("parse_asserts", code, entry_point, max_tests)
            except _bounded.BoundedError as exc:
                return [], f"the test code is too expensive to read ({exc})"
            return [TestCase.asserts(c, n) for c, n in found], str(problem)
    return _parse_assert_code(code, entry_point, max_tests)


INLINE_PARSE_CHARS = 20_000
"""Assert blocks up to this long are parsed in the host process; longer ones (200,000
characters of asserts take about a second of CPU to parse and check) in a bounded worker
process (:mod:`verifiers._bounded`)."""


def _parse_assert_code(code: str, entry_point: str, max_tests: int) -> tuple[list[TestCase], str]:
    try:
        tree = bounded_parse(code)
    except SyntaxError as exc:
        return (
            [],
            f"the test code does not parse: {exc.msg if exc.lineno is None else 'SyntaxError'}",
        )
    setup: list[ast.stmt] = []
    checks: list[ast.stmt] = []
    problems: list[str] = []
    for stmt in tree.body:
        if any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
            if not _mentions(stmt, entry_point):
                problems.append(f"an assert that does not call {entry_point!r}")
                continue
            checks.append(stmt)
        elif isinstance(stmt, _SETUP_TYPES):
            setup.append(stmt)
        else:
            problems.append(f"a top-level {type(stmt).__name__} statement outside the asserts")
    for stmt in tree.body:
        if _binds(stmt, entry_point):
            return [], f"the tests may not define {entry_point!r}"
        if any(
            (isinstance(n, ast.Name) and n.id in _EXIT_NAMES)
            or (isinstance(n, ast.Attribute) and n.attr in _EXIT_NAMES)
            for n in ast.walk(stmt)
        ):
            return [], "the tests may not call exit()"
    if not checks:
        return [], problems[0] if problems else "no assert statement found"
    if len(checks) > max_tests:
        problems.append(f"{len(checks)} tests; at most {max_tests} count")
        checks = checks[:max_tests]
    try:  # (the tree is at most 60 levels deep: ast.unparse cannot overflow)
        head = ast.unparse(ast.Module(body=setup, type_ignores=[])) if setup else ""
        bodies = [ast.unparse(stmt) for stmt in checks]
    except (RecursionError, ValueError) as exc:
        return [], f"the test code cannot be read back: {type(exc).__name__}"
    tests = [
        TestCase.asserts(f"{head}\n{body}" if head else body, f"test {k + 1}")
        for k, body in enumerate(bodies)
    ]
    return tests, "; ".join(dict.fromkeys(problems))


# ---------------------------------------------------------------------- a whole assert block


def split_assert_block(
    text: str | None, max_tests: int = MAX_BLOCK_TESTS
) -> tuple[tuple[TestCase, ...], str]:
    """Assert tests from a test block (fences allowed): every top-level ``assert`` becomes one
    test, preceded by the block's other top-level statements (imports, helpers); a block with no
    top-level assert but asserts inside (a HumanEval ``check`` function plus its call) is one
    test. At most ``max_tests`` tests are kept. Returns ``(tests, "ok")``, or ``((), reason)``
    when there is nothing usable.

    >>> tests, why = split_assert_block("```python\\nimport math\\nassert math.isqrt(9) == 3\\n```")
    >>> [t.code for t in tests], why
    (['import math\\nassert math.isqrt(9) == 3\\n'], 'ok')
    >>> split_assert_block("x = 1")
    ((), 'the tests contain no assert')
    """
    if text is not None and len(text) > MAX_BLOCK_CHARS:
        return (), f"the tests are longer than {MAX_BLOCK_CHARS} characters"
    return _split_assert_block(text, max_tests)


@lru_cache(maxsize=256)
def _split_assert_block(text: str | None, max_tests: int) -> tuple[tuple[TestCase, ...], str]:
    if text is None or not text.strip():
        return (), "no tests"
    code = code_from_answer(text)
    built = check_compiles(code, "<tests>")
    if not built.ok:
        return (), f"the tests do not compile: {built.reason}"
    try:
        tree = bounded_parse(code)
    except SyntaxError:
        return (), "the tests do not parse (or are nested too deeply)"
    asserts = [n for n in tree.body if isinstance(n, ast.Assert)]
    if not asserts:
        if not any(isinstance(n, ast.Assert) for n in ast.walk(tree)):
            return (), "the tests contain no assert"
        return (TestCase.asserts(code.rstrip("\n") + "\n", "tests"),), "ok"
    setup = [
        ast.get_source_segment(code, n) or "" for n in tree.body if not isinstance(n, ast.Assert)
    ]
    tests = []
    for i, node in enumerate(asserts[:max_tests]):
        body = ast.get_source_segment(code, node) or ""
        tests.append(TestCase.asserts("\n".join([*setup, body]) + "\n", f"assert[{i}]"))
    return tuple(tests), "ok"
