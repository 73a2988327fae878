"""Size limits on explicit instances, the ones a client sends with ``reset(options={"instance":
...})``.

A server (``python -m adapters.serve_env``) takes an instance from any client and the setting
checks it in the host process before the episode starts; the episode's steps then do work that
grows with it (hashing and showing the question, running every test). These limits keep one
reset at a small, bounded cost to the host (``tests/redteam/test_round5_reset_cost.py``: at
most 0.5 s of CPU and 64 MB of peak memory), and a larger instance gets a ``ValueError`` that
says which limit it broke (HTTP 400 through the server). Each setting's module docstring
("Explicit instance") lists its own; the puzzles (Sokoban, Sudoku, Plan-Path) have size limits
of their own and bound their solvers' work.

Records passed in-process (a ``MathProblem``, ``CodeProblem`` or ``PoolItem`` made by a dataset
loader) are the operator's own data and are not limited; only plain dicts and lists, what a
client can send, are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "ASSERT_CHARS",
    "INSTANCE_CHARS",
    "MAX_ASSERT_TESTS",
    "MAX_TESTS",
    "check_count",
    "check_size",
    "check_tests",
]

INSTANCE_CHARS = 1_000_000
"""Text in one explicit instance, all of it together (question, answer, tests, ...)."""
MAX_TESTS = 256
"""Tests in one list of an explicit code instance or code question (every program the episode
judges runs them all; a stdin test costs the host a fraction of a millisecond, and its output
up to the sandbox's ``max_output_bytes``)."""
MAX_ASSERT_TESTS = 20
"""Assert tests among them: the host plans each one (:mod:`verifiers.assert_plans`), up to its
in-process budget, several milliseconds for a crafted one. Several ``assert`` statements may
share one test."""
ASSERT_CHARS = 16_000
"""Characters of assert code in one list of tests (planning a long literal costs the host about
3 microseconds a character)."""


def check_size(data: Any, what: str, limit: int = INSTANCE_CHARS) -> None:
    """``ValueError`` when ``data`` (JSON-like: dicts, lists, strings, numbers) holds more than
    ``limit`` characters: the lengths of its strings and keys plus one for every number, item
    and key. The walk stops as soon as it is over, so it costs O(limit) whatever ``data`` is.

    >>> check_size({"question": "What is 6 * 7?", "answer": 42}, "a math instance")
    >>> check_size({"question": "x" * 2_000}, "a math instance", limit=1_000)
    Traceback (most recent call last):
    ...
    ValueError: a math instance is too large: explicit instances hold at most 1,000 characters of text
    """  # noqa: E501
    left = limit
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            left -= len(x)
        elif isinstance(x, Mapping):
            left -= len(x)
            if left >= 0:
                stack.extend(x)
                stack.extend(x.values())
        elif isinstance(x, list | tuple):
            left -= len(x)
            if left >= 0:
                stack.extend(x)
        else:
            left -= 1
        if left < 0:
            raise ValueError(
                f"{what} is too large: explicit instances hold at most {limit:,} characters of text"
            )


def check_count(items: Any, what: str, limit: int = MAX_TESTS) -> None:
    """``ValueError`` when ``items`` is a list with more than ``limit`` entries.

    >>> check_count(["assert f(1) == 1"] * 600, "tests")
    Traceback (most recent call last):
    ...
    ValueError: an explicit instance has at most 256 tests, got 600
    """
    if isinstance(items, list | tuple) and len(items) > limit:
        raise ValueError(f"an explicit instance has at most {limit:,} {what}, got {len(items):,}")


def check_tests(tests: Any, what: str = "tests") -> None:
    """``ValueError`` when a list of tests as a client sends them (strings of assert code,
    ``TestCase`` dicts, ``{"input": ..., "output": ...}``) is over :data:`MAX_TESTS`,
    :data:`MAX_ASSERT_TESTS` or :data:`ASSERT_CHARS`.

    >>> check_tests(["assert f(1) == 1"] * 20 + [{"input": "1", "output": "1"}] * 200)
    >>> check_tests([{"kind": "assert", "code": "assert f(1) == 1"}] * 21)
    Traceback (most recent call last):
    ...
    ValueError: an explicit instance has at most 20 assert tests, got 21 (several assert statements may share one test)
    """  # noqa: E501
    if not isinstance(tests, list | tuple):
        return
    check_count(tests, what)
    codes = []
    for t in tests:
        if isinstance(t, str):
            codes.append(t)
        elif isinstance(t, Mapping) and t.get("kind") == "assert":
            codes.append(t.get("code", ""))
        elif getattr(t, "kind", None) == "assert":  # a TestCase
            codes.append(getattr(t, "code", ""))
    if len(codes) > MAX_ASSERT_TESTS:
        raise ValueError(
            f"an explicit instance has at most {MAX_ASSERT_TESTS} assert {what}, got "
            f"{len(codes)} (several assert statements may share one test)"
        )
    chars = sum(len(c) for c in codes if isinstance(c, str))
    if chars > ASSERT_CHARS:
        raise ValueError(
            f"an explicit instance's assert {what} hold at most {ASSERT_CHARS:,} characters of "
            f"code, got {chars:,}"
        )
