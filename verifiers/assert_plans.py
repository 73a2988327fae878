"""How one assert test is decided without the program under test touching the verdict.

:func:`plan_test` reads a test (``assert f(2) == 4``; setup statements; a HumanEval
``def check(candidate)`` plus its call; a JSON call test) on the host, once, and makes a
:class:`Plan`:

* **static** (almost every test): the host evaluator (:mod:`verifiers.host_eval`) runs the test
  with the program's results still unknown and so finds the calls of the program it needs
  (``f(2)``); only those calls, with plain arguments, go into the program's sandbox job
  (:mod:`sandboxes.calls`), and :func:`static_verdict` evaluates the test on the host over the
  plain results. The test's source never enters the sandbox.
* **replay** (tests the host evaluator does not handle: helper functions, ``while``, ``try``,
  random inputs, prelude helpers applied to the program's output): the test runs in a sandbox
  job of its own that does *not* contain the program (:mod:`verifiers._replay`), first to name
  the calls it makes, then over the program's plain results. The program's job never holds the
  test's source or expected values; the test's job never runs the program's code. Only a
  *trusted* test (a dataset's) is replayed: its job receives the program's results.
* **concretized** (such a test written by a policy, ``trusted_tests=False`` in
  :func:`verifiers.code_tests.run_tests_many`): a policy's test must never run where a
  program's results are, since the golden program's results are what a tester must not learn
  (a job can signal a later job through timing of shared host state, whatever the filters
  refuse). The test runs once in a job that holds no program and no result
  (:mod:`verifiers._concretize`): its inputs, helpers and expected values are computed there and
  written out as plain asserts (:func:`concretize_code`, :func:`parse_concretized`), which are
  planned again here and decided on the host like a static test. A test that cannot be written
  so (its control flow depends on a result) is invalid.

A call of a helper the trusted *prelude* defines (HumanEval's ``poly``, ``encode_cyclic``) is
never sent to the program's job, where the program could have redefined it: such a test is
replayed with the real prelude.

Everything here is bounded: the test source (``MAX_TEST_CHARS``), its parse depth, the host
evaluation (:mod:`verifiers.host_eval`), the number of calls (``MAX_CALLS``).
"""

from __future__ import annotations

import ast
import builtins
import functools
import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandboxes import plain
from sandboxes.calls import Call, CallResult
from verifiers.host_eval import (
    MAX_DEPTH,
    PENDING,
    AssertFailed,
    Evaluator,
    OverInline,
    Remote,
    TooExpensive,
    Unsupported,
)
from verifiers.source_checks import INLINE_COMPILE_CHARS, bounded_parse, check_compiles

__all__ = [
    "ENTRY_CLASS",
    "callable_name",
    "MAX_CALLS",
    "MAX_TEST_CHARS",
    "Plan",
    "Outcome",
    "plan_test",
    "static_verdict",
    "replay_code",
    "parse_replay",
    "concretize_code",
    "parse_concretized",
    "prelude_names",
]

MAX_CALLS = 2000
"""Most calls of the program one test may make."""
MAX_TEST_CHARS = 200_000
"""Longest test source."""
_REPLAY_SOURCE = Path(__file__).with_name("_replay.py")
_CONCRETIZE_SOURCE = Path(__file__).with_name("_concretize.py")
_BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass(frozen=True)
class Plan:
    """How a test is decided: ``error`` (the test is invalid), else ``static`` (``module``
    evaluated on the host, with ``bound`` names and the program's ``calls``) or replay (``why``
    says why; ``stubs`` are the names the test takes from the program)."""

    code: str
    error: str = ""
    static: bool = False
    module: ast.Module | None = None
    bound: tuple[tuple[str, tuple[str, ...]], ...] = ()
    calls: tuple[Call, ...] = ()
    why: str = ""
    stubs: tuple[str, ...] = ()
    entry_point: str | None = None
    prelude: str = ""
    remote: bool = False  # planned in the bounded worker: decided there too (``module`` None)


@dataclass(frozen=True)
class Outcome:
    """A test's verdict: ``status`` as in :class:`verifiers.code_tests.TestResult` (or
    ``missing``: a result the test needed did not come back)."""

    passed: bool
    status: str
    reason: str


@functools.lru_cache(maxsize=256)
def prelude_names(prelude: str) -> frozenset[str]:
    """Names the (trusted) prelude binds at its top level."""
    if not prelude.strip():
        return frozenset()
    try:
        tree = bounded_parse(prelude, "<prelude>", 200)
    except SyntaxError:
        return frozenset()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        else:
            for n in ast.walk(node):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    names.add(n.id)
    return frozenset(names)


# ----------------------------------------------------------------------------------------------
# planning
# ----------------------------------------------------------------------------------------------


def _unwrap_check(tree: ast.Module, entry_point: str | None) -> tuple[list[ast.stmt], dict]:
    """A HumanEval-style ``def check(candidate): ...`` (called, or to be called with the entry
    point) becomes its body with ``candidate`` bound to the program's function."""
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1:
        return list(tree.body), {}
    check = checks[0]
    a = check.args
    if (
        len(a.args) != 1
        or a.posonlyargs
        or a.kwonlyargs
        or a.vararg
        or a.kwarg
        or a.defaults
        or check.decorator_list
    ):
        return list(tree.body), {}
    calls = [
        n
        for n in tree.body
        if isinstance(n, ast.Expr)
        and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Name)
        and n.value.func.id == "check"
    ]
    target = None
    if len(calls) == 1:
        call = calls[0].value
        assert isinstance(call, ast.Call)
        if len(call.args) == 1 and not call.keywords and isinstance(call.args[0], ast.Name):
            target = call.args[0].id
    elif not calls:
        target = entry_point
    if target is None:
        return list(tree.body), {}
    body = [n for n in tree.body if n is not check and all(n is not c for c in calls)]
    return [*body, *check.body], {a.args[0].arg: (target,)}


def _stubs(tree: ast.Module, known: frozenset[str]) -> tuple[str, ...]:
    """Names the test uses but neither it, the prelude nor builtins define."""
    bound: set[str] = set()
    used: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            (used if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(n.name)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
        elif isinstance(n, ast.Global | ast.Nonlocal):
            bound.update(n.names)
    return tuple(sorted(used - bound - known - _BUILTIN_NAMES))


_PLANS: OrderedDict[tuple[str, str | None, str], Plan] = OrderedDict()
_PLANS_LOCK = threading.Lock()
_PLAN_CACHE_CHARS = 8_000_000
_plans_chars = 0


def plan_test(
    code: str, entry_point: str | None = None, prelude: str = "", *, inline: bool = True
) -> Plan:
    """The :class:`Plan` of one assert test (cached; the cache holds at most
    ``_PLAN_CACHE_CHARS`` characters of test code, least recently used out first).

    ``inline``: plan in this process under the small in-process budget and, past it, in the
    bounded worker (:mod:`verifiers._bounded`; the plan is then ``remote``). A test longer than
    ``INLINE_COMPILE_CHARS`` goes to the worker at once: parsing 100,000 characters of
    statements costs the host a third of a second and full garbage collections."""
    global _plans_chars
    key = (code, entry_point, prelude)
    with _PLANS_LOCK:
        hit = _PLANS.get(key)
        if hit is not None:
            _PLANS.move_to_end(key)
            return hit
    try:
        plan = _plan(code, entry_point, prelude, inline)
    except OverInline:
        plan = _plan_remote(code, entry_point, prelude)
    with _PLANS_LOCK:
        if key not in _PLANS:
            _PLANS[key] = plan
            _plans_chars += len(code)
        while _plans_chars > _PLAN_CACHE_CHARS and len(_PLANS) > 1:
            old, _ = _PLANS.popitem(last=False)
            _plans_chars -= len(old[0])
    return plan


def _plan_remote(code: str, entry_point: str | None, prelude: str) -> Plan:
    from verifiers import _bounded

    try:
        summary = _bounded.call("plan", code, entry_point, prelude)
    except _bounded.BoundedError as exc:
        return Plan(code, why=f"too expensive to evaluate on the host ({exc})")
    return plan_from_summary(summary, code, entry_point, prelude)


def plan_summary(plan: Plan) -> dict:
    """A plan as JSON data (what the bounded worker sends back; the syntax tree stays there)."""
    return {
        "error": plan.error,
        "static": plan.static,
        "why": plan.why,
        "stubs": list(plan.stubs),
        "calls": [c.to_json() for c in plan.calls],
        "bound": [[name, list(path)] for name, path in plan.bound],
    }


def plan_from_summary(s: dict, code: str, entry_point: str | None, prelude: str) -> Plan:
    return Plan(
        code,
        error=str(s["error"]),
        static=bool(s["static"]),
        bound=tuple((str(n), tuple(p)) for n, p in s["bound"]),
        calls=tuple(Call(tuple(p), a, k) for p, a, k in s["calls"]),
        why=str(s["why"]),
        stubs=tuple(s["stubs"]),
        entry_point=entry_point,
        prelude=prelude,
        remote=True,
    )


def _plan(code: str, entry_point: str | None, prelude: str, inline: bool = False) -> Plan:
    if len(code) > MAX_TEST_CHARS:
        return Plan(code, error=f"the test is longer than {MAX_TEST_CHARS} characters")
    if inline and len(code) > INLINE_COMPILE_CHARS:
        raise OverInline()  # parsing it would be the host's largest cost: the worker plans it
    built = check_compiles(code, "<test>")
    if not built.ok:
        return Plan(code, error=built.reason)
    try:
        tree = bounded_parse(code, limit=MAX_DEPTH)
    except SyntaxError as exc:
        return Plan(code, error=str(exc))
    known = prelude_names(prelude)
    stubs = _stubs(tree, known)
    bad = next((n for n in stubs if not callable_name(n, entry_point)), None)
    if bad is not None:
        return Plan(code, error=_reach_error(bad, entry_point))
    stmts, bound = _unwrap_check(tree, entry_point)
    module = ast.Module(body=stmts, type_ignores=[])
    ev = Evaluator(
        lambda path, args, kwargs: PENDING, discover=True, bound=_remotes(bound), inline=inline
    )
    why = ""
    try:
        ev.run(module, checked=True)  # bounded_parse checked the depth
    except AssertFailed:
        pass  # fails whatever the program does: the verdict will say so
    except TooExpensive as exc:
        why = str(exc)
    except Unsupported as exc:
        why = f"uses {exc}"
    except Exception as exc:
        why = f"raised {type(exc).__name__} on the host"
    if not why and len(ev.calls) > MAX_CALLS:
        return Plan(code, error=f"the test makes more than {MAX_CALLS} calls of the program")
    if not why and any(path[0] in known for path, _, _ in ev.calls):
        why = "calls a helper of the prelude"
    if not why:
        for path, _, _ in ev.calls:
            step = next((p for p in path if p.startswith("_")), None)
            if step is not None or not callable_name(path[0], entry_point):
                return Plan(code, error=_reach_error(step or path[0], entry_point))
    calls: list[Call] = []
    if not why:
        try:
            calls = [Call.make(path, args, kwargs) for path, args, kwargs in ev.calls]
        except (plain.PlainError, ValueError, TypeError, RecursionError):
            why = "passes something that is not plain data to the program"
    if why:
        return Plan(code, why=why, stubs=stubs, entry_point=entry_point, prelude=prelude)
    return Plan(
        code,
        static=True,
        module=module,
        bound=tuple(bound.items()),
        calls=tuple(calls),
        entry_point=entry_point,
        prelude=prelude,
    )


ENTRY_CLASS = "Solution"
"""The class a LeetCode-style problem's entry point is a method of (``Solution().f``)."""


def callable_name(name: str, entry_point: str | None) -> bool:
    """May a test take ``name`` from the program? Only the entry point (or the class
    ``Solution`` whose method it is), and never a name with a leading underscore: everything
    else a program defines (helpers, ``__builtins__``, dunders) is out of a test's reach, so a
    test can neither run code of its own in the program's job nor call what only the golden
    program defines.

    >>> callable_name("f", "f"), callable_name("Solution", "f"), callable_name("g", "f")
    (True, True, False)
    >>> callable_name("__builtins__", None), callable_name("g", None)
    (False, True)
    """
    if name.startswith("_"):
        return False
    return entry_point is None or name in (entry_point, ENTRY_CLASS)


def _reach_error(name: str, entry_point: str | None) -> str:
    if name.startswith("_"):
        return f"the test reaches `{name}` of the program: only public names may be called"
    return f"the test uses `{name}`, but it may call only the entry point `{entry_point}`"


def _remotes(bound: dict) -> dict[str, Any]:
    return {name: Remote(tuple(path)) for name, path in bound.items()}


# ----------------------------------------------------------------------------------------------
# the static verdict
# ----------------------------------------------------------------------------------------------


class _Missing(Exception):
    pass


class _Raised(Exception):
    def __init__(self, result: CallResult) -> None:
        super().__init__(result.message)
        self.result = result


def _key(path: tuple[str, ...], args: Any, kwargs: Any) -> str:
    return plain.dumps([list(path), args, kwargs])


def static_verdict(
    plan: Plan, results: Sequence[CallResult | None], *, inline: bool = True
) -> Outcome:
    """Evaluate a static plan's test over the program's results (``None``: missing): in this
    process under the small budget (``inline``), else, or past it, in the bounded worker."""
    assert plan.static
    if not plan.remote and plan.module is not None:
        try:
            return _verdict(plan, results, inline)
        except OverInline:
            pass
    from verifiers import _bounded

    records = [None if r is None else record_of_result(r) for r in results]
    try:
        passed, status, reason = _bounded.call(
            "verdict", plan.code, plan.entry_point, plan.prelude, records
        )
    except _bounded.BoundedError as exc:
        return Outcome(False, "runtime_error", f"the test is too expensive to check: {exc}")
    return Outcome(bool(passed), str(status), str(reason))


def record_of_result(r: CallResult) -> list:
    """A call result as JSON data (for the bounded worker)."""
    if r.status == "ok":
        return ["ok", plain.encode(r.value)]
    return [r.status, r.exc_type, r.message]


def result_of_record(rec: list | None) -> CallResult | None:
    if rec is None:
        return None
    if rec[0] == "ok":
        return CallResult("ok", plain.decode(rec[1]))
    return CallResult(rec[0], exc_type=rec[1], message=rec[2])


def _verdict(plan: Plan, results: Sequence[CallResult | None], inline: bool) -> Outcome:
    assert plan.module is not None
    table: dict[str, deque] = {}
    for call, res in zip(plan.calls, results):
        table.setdefault(_key(call.path, call.args, call.kwargs), deque()).append(res)

    def remote(path: tuple[str, ...], args: tuple, kwargs: dict) -> Any:
        try:
            key = _key(path, plain.encode(args), plain.encode(kwargs))
        except plain.PlainError:
            raise _Missing() from None
        queue = table.get(key)
        if not queue:
            raise _Missing()
        res = queue.popleft()
        if res is None:
            raise _Missing()
        if res.status == "ok":
            return res.value
        raise _Raised(res)

    ev = Evaluator(remote, bound=_remotes(dict(plan.bound)), inline=inline)
    try:
        ev.run(plan.module, checked=True)
    except AssertFailed as exc:
        src = _clip(ast.unparse(exc.node.test), 200)
        msg = ev.message(exc.node)
        if msg:
            src += f" ({_clip(msg, 200)})"
        got = f"; the program returned {', '.join(exc.shown[-3:])}" if exc.shown else ""
        return Outcome(False, "wrong_answer", f"assertion failed: assert {src}{got}")
    except _Missing:
        return Outcome(False, "missing", "the program gave no result")
    except _Raised as exc:
        r = exc.result
        if r.status == "exc":
            status = "memory" if r.exc_type == "MemoryError" else "runtime_error"
            return Outcome(False, status, _clip(f"{r.exc_type}: {r.message}".rstrip(": "), 300))
        why = "its value is too large to compare" if r.status == "big" else "an invalid result"
        return Outcome(False, "wrong_answer", f"the program returned {why} ({r.message})")
    except TooExpensive as exc:
        return Outcome(False, "runtime_error", f"the test is too expensive to check: {exc}")
    except Exception as exc:  # the test's own logic failed on the program's values
        return Outcome(False, "runtime_error", _clip(f"{type(exc).__name__}: {exc}", 300))
    return Outcome(True, "passed", "ok")


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ----------------------------------------------------------------------------------------------
# replayed tests
# ----------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _replay_source() -> str:
    return _REPLAY_SOURCE.read_text()


def replay_code(plan: Plan, prelude: str, nonce: str, table: Sequence[tuple]) -> str:
    """The code of a job that runs ``plan``'s test without the program: ``table`` holds the
    program's results (``(call, record)``; empty: discover the calls the test makes)."""
    mode = "verdict" if table else "discover"
    rows = [[list(c.path), c.args, c.kwargs, rec] for c, rec in table]
    args = ", ".join(repr(a) for a in (nonce, mode, plain.dumps(rows), list(plan.stubs)))
    return f"{_replay_source()}\n\n_mas_main({args}, {prelude!r}, {plan.code!r})\n"


@functools.lru_cache(maxsize=1)
def _concretize_source() -> str:
    return _CONCRETIZE_SOURCE.read_text()


def concretize_code(plan: Plan, prelude: str, nonce: str) -> str:
    """The code of a job that runs ``plan``'s test with no program and no result, and writes
    it out as plain asserts (:mod:`verifiers._concretize`)."""
    args = ", ".join(repr(a) for a in (nonce, list(plan.stubs), prelude, plan.code))
    return f"{_concretize_source()}\n\n_mas_concretize({args})\n"


def parse_concretized(text: str, nonce: str) -> tuple[str, str]:
    """The concretizing harness's report in a job's results channel: ``(code, "")`` with the
    plain asserts, or ``("", why)`` when the test could not be written so."""
    prefix = f"{nonce} C "
    found = [line[len(prefix) :] for line in text.split("\n") if line.startswith(prefix)]
    if len(found) != 1:
        return "", "the test's job gave no report"
    try:
        rep = plain.loads(found[0])
    except plain.PlainError:
        return "", "the test's job gave an unreadable report"
    if not isinstance(rep, dict):
        return "", "the test's job gave an unreadable report"
    code = rep.get("c")
    if rep.get("s") == "ok" and isinstance(code, str) and len(code) <= MAX_TEST_CHARS:
        return code, ""
    why = _clip(str(rep.get("r", "")), 300) or "no report"
    if rep.get("s") == "undecided":
        return "", f"it cannot be written as asserts over the program's results ({why})"
    return "", f"the test itself failed ({why})"


def record_of(result: CallResult | None, why_missing: str) -> list:
    """A program's call result as the replay harness reads it."""
    if result is None:
        return ["missing", why_missing]
    if result.status == "ok":
        return ["ok", plain.encode(result.value)]
    if result.status == "exc":
        return ["exc", result.exc_type, result.message]
    return ["missing", f"the result was unusable ({result.message})"]


def parse_replay(text: str, nonce: str) -> dict | None:
    """The replay harness's report in a job's results channel (None if there is none)."""
    prefix = f"{nonce} R "
    found = [line[len(prefix) :] for line in text.split("\n") if line.startswith(prefix)]
    if len(found) != 1:
        return None
    try:
        rep = plain.loads(found[0])
    except plain.PlainError:
        return None
    if not isinstance(rep, dict) or not isinstance(rep.get("s"), str):
        return None
    needed = rep.get("n")
    calls: list[Call] = []
    if isinstance(needed, list):
        for item in needed[:MAX_CALLS]:
            try:
                path, args, kwargs = item
                calls.append(Call(tuple(path), args, kwargs))
            except (TypeError, ValueError):
                return None
    return {
        "status": rep["s"],
        "reason": _clip(str(rep.get("r", "")), 300),
        "needed": calls,
        "missing": _clip(str(rep.get("m", "")), 300),
    }
