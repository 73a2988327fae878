"""Static checks of Python source: parsing and compiling model-written code, safely bounded.

Nothing here executes code. :func:`quiet_parse` and :func:`bounded_parse` parse without letting
``SyntaxWarning`` reach the logs; the latter turns recursion and memory blow-ups and trees deeper
than a limit into ``SyntaxError`` (so a hostile test or program cannot crash a host-side tool such
as ``ast.unparse``). :func:`check_compiles` says whether a program compiles, and why not.
"""

from __future__ import annotations

import ast
import functools
import warnings
from dataclasses import dataclass

from verifiers.extract import clip_text

__all__ = [
    "MAX_SOURCE_CHARS",
    "Check",
    "bounded_parse",
    "check_compiles",
    "compiles",
    "quiet_parse",
]

MAX_SOURCE_CHARS = 200_000
"""Programs longer than this are rejected as not compiling (nothing is run)."""


@dataclass(frozen=True)
class Check:
    """A yes/no check with the reason; truthy when ``ok``."""

    ok: bool
    reason: str = "ok"

    def __bool__(self) -> bool:
        return self.ok


def quiet_parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` without letting model-written code's ``SyntaxWarning``s reach the logs.

    >>> type(quiet_parse("x = 1")).__name__
    'Module'
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(source, filename)


def bounded_parse(source: str, filename: str = "<test>", limit: int = 60) -> ast.Module:
    """``ast.parse`` that raises ``SyntaxError`` instead of ``RecursionError`` / ``MemoryError``
    and refuses trees deeper than ``limit`` (which would break recursive tools like
    ``ast.unparse``).

    >>> bounded_parse("assert f([]) == " + "-" * 400 + "1")
    Traceback (most recent call last):
    ...
    SyntaxError: the code is nested deeper than 60 levels
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(source, filename)
    except (RecursionError, MemoryError, ValueError, OverflowError) as exc:
        raise SyntaxError(f"the code does not parse ({type(exc).__name__})") from None
    from verifiers.host_eval import max_depth

    if max_depth(tree, limit) > limit:
        raise SyntaxError(f"the code is nested deeper than {limit} levels")
    return tree


def check_compiles(source: object, filename: str = "<solution>") -> Check:
    """Does ``source`` compile as Python? (``compile()`` only; nothing is executed.)

    >>> check_compiles("def f(x):\\n    return x + 1\\n")
    Check(ok=True, reason='ok')
    >>> check_compiles("def f(:\\n").reason
    "SyntaxError: invalid syntax (line 1): 'def f(:'"
    >>> check_compiles("").reason
    'empty program'
    """
    if not isinstance(source, str):
        return Check(False, "program is not a string")
    if not source.strip():
        return Check(False, "empty program")
    if len(source) > MAX_SOURCE_CHARS:
        return Check(False, f"program longer than {MAX_SOURCE_CHARS} characters")
    return _compile_check(source, filename)


INLINE_COMPILE_CHARS = 16_000
"""Programs up to this long are compiled in the host process; longer ones (compiling 200,000
crafted characters takes about a second of CPU, holding the GIL) in a bounded worker process
(:mod:`verifiers._bounded`)."""


@functools.lru_cache(maxsize=32)
def _compile_check(source: str, filename: str) -> Check:
    """The compile step of :func:`check_compiles`, cached: one step checks the same program in
    several places (build log, plain tests, differential tests)."""
    if len(source) <= INLINE_COMPILE_CHARS:
        return _compile_local(source, filename)
    from verifiers import _bounded

    try:
        ok, reason = _bounded.call("compile", source, filename)
    except _bounded.BoundedError as exc:
        return Check(False, f"the program is too expensive to compile ({exc})")
    return Check(bool(ok), str(reason))


def _compile_local(source: str, filename: str) -> Check:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        line = (exc.text or "").strip()
        where = f" (line {exc.lineno})" if exc.lineno else ""
        shown = f": {clip_text(line, 80)!r}" if line else ""
        return Check(False, f"{type(exc).__name__}: {exc.msg}{where}{shown}")
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return Check(False, f"{type(exc).__name__}: {clip_text(str(exc), 120)}")
    return Check(True)


def compiles(source: object) -> bool:
    """``check_compiles(source).ok``.

    >>> compiles("print(1)"), compiles("print(")
    (True, False)
    """
    return check_compiles(source).ok
