"""Calling a sandboxed program's functions and getting their results back as plain data.

``Job(code, calls=[Call.make("f", (1, 2)), ...])`` runs ``code`` as ``__main__`` and then, in the
same process, calls ``f(1, 2)`` and the other requested functions in order. Each result travels
to the host on a channel of its own (file descriptor 3 of the job, not stdout), one line per
call tagged with a random per-job nonce, in the encoding of :mod:`sandboxes.plain`; right after
the last result the job process ends (``os._exit(0)``), so nothing the program registered
(``atexit``, ``sys.excepthook``, threads, ``__del__``) runs after its results. The host decodes
them into :class:`CallResult` values (``ExecResult.calls``, in call order): a missing line
(the program exited, crashed, hung or was killed first), a line without the nonce, a malformed
line or two different lines for one call all leave or make that call's result ``None`` / ``bad``:
whoever reads the results counts such a call as failed.

What comes back is only ever *data*: a result is a fresh value of a built-in type, so a
program cannot make a comparison on the host come out its way with a custom ``__eq__``. What it
cannot do either is learn what the host will compare it with: the call and its plain arguments
are all the program sees. (A program can write lines to fd 3 itself; a line it forges for a
call states a return value the program could as well have returned.)

>>> c = Call.make("add", (2, 3))
>>> c.path, c.args
(('add',), ['t', [2, 3]])
>>> parse_results("n1 0 [\\"ok\\",5]\\nn1 end\\nforged 0 [\\"ok\\",6]\\n", "n1", 1)
((CallResult(status='ok', value=5, exc_type='', message=''),), True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from . import plain

__all__ = ["Call", "CallResult", "parse_results", "request"]

_STEP = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\(\)")


@dataclass(frozen=True)
class Call:
    """One call of a function of the program: ``path`` names it (``("f",)``, or
    ``("Solution", "()", "twoSum")`` for ``Solution().twoSum``); ``args`` / ``kwargs`` are
    already in the plain encoding (use :meth:`make`). No step may start with ``_``: a call
    reaches the program's public names only, never ``__builtins__``, ``f.__code__`` or
    private helpers (the job runner refuses them too).

    >>> Call.make(("__builtins__", "eval"), ("1",))
    Traceback (most recent call last):
    ...
    ValueError: a call path reaches only public names, not ('__builtins__', 'eval')
    """

    path: tuple[str, ...]
    args: Any = ("t", [])
    kwargs: Any = ("d", [])

    def __post_init__(self) -> None:
        if not self.path or not all(isinstance(s, str) and _STEP.fullmatch(s) for s in self.path):
            raise ValueError(f"bad call path {self.path!r}")
        if self.path[0] == "()":
            raise ValueError("a call path starts with a name")
        if any(s.startswith("_") for s in self.path):
            raise ValueError(f"a call path reaches only public names, not {self.path!r}")

    @classmethod
    def make(
        cls, path: str | tuple[str, ...], args: tuple = (), kwargs: dict | None = None
    ) -> Call:
        """A call with plain Python arguments (encoded here; ``PlainError`` if they are not)."""
        steps = (path,) if isinstance(path, str) else tuple(path)
        return cls(steps, plain.encode(tuple(args)), plain.encode(dict(kwargs or {})))

    def to_json(self) -> list:
        return [list(self.path), self.args, self.kwargs]


@dataclass(frozen=True)
class CallResult:
    """A call's outcome: ``ok`` (``value``), ``exc`` (the program raised: ``exc_type`` is the
    nearest built-in exception class, ``message`` its text), ``big`` (the value has no plain
    encoding within the limits) or ``bad`` (malformed or conflicting result lines)."""

    status: Literal["ok", "exc", "big", "bad"]
    value: Any = None
    exc_type: str = ""
    message: str = ""


def request(calls: tuple[Call, ...], nonce: str, max_items: int = plain.MAX_ITEMS) -> dict:
    """The ``calls`` part of a request header."""
    return {"nonce": nonce, "max_items": max_items, "calls": [c.to_json() for c in calls]}


def parse_results(text: str, nonce: str, n: int) -> tuple[tuple[CallResult | None, ...], bool]:
    """The ``n`` call results in the results channel's ``text``, and whether the end line came.

    Only lines that start with ``nonce`` count; the rest is ignored.
    """
    found: list[CallResult | None] = [None] * n
    seen: list[str | None] = [None] * n
    done = False
    prefix = nonce + " "
    for line in text.split("\n"):
        if not line.startswith(prefix):
            continue
        rest = line[len(prefix) :]
        if rest == "end":
            done = True
            continue
        index, _, payload = rest.partition(" ")
        if not index.isdigit() or len(index) > 9 or int(index) >= n:
            continue
        i = int(index)
        if seen[i] is not None:
            if seen[i] != payload:
                found[i] = CallResult("bad", message="conflicting results")
            continue
        seen[i] = payload
        found[i] = _decode_record(payload)
    return tuple(found), done


def _decode_record(payload: str) -> CallResult:
    try:
        rec = plain.loads(payload)
    except plain.PlainError as exc:
        return CallResult("bad", message=str(exc))
    if not isinstance(rec, list) or not rec or not isinstance(rec[0], str):
        return CallResult("bad", message="malformed result")
    kind = rec[0]
    if kind == "ok" and len(rec) == 2:
        try:
            return CallResult("ok", plain.decode(rec[1]))
        except plain.PlainError as exc:
            return CallResult("bad", message=str(exc))
    if kind == "exc" and len(rec) == 3 and all(isinstance(x, str) for x in rec[1:]):
        return CallResult("exc", exc_type=rec[1][:80], message=rec[2][:1000])
    if kind == "big" and len(rec) == 2 and isinstance(rec[1], str):
        return CallResult("big", message=rec[1][:200])
    return CallResult("bad", message="malformed result")
