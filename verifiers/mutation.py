"""Mutation score of a test suite on a golden solution (AT-GRPO tester reward, Appendix A.1.2).

:func:`make_mutants` makes small faulty variants of a program by AST edits:

==========  ===============================================================================
operator    edit
==========  ===============================================================================
arith       ``+ <-> -``, ``* <-> /``, ``// -> *``, ``% -> //``, ``** -> *``, shifts, bit ops
            (also in augmented assignments ``x += 1``)
compare     ``< <-> <=``, ``> <-> >=``, ``== <-> !=``, ``is <-> is not``, ``in <-> not in``
bool        ``and <-> or``
not         ``not x -> x``; conditions of ``if``/``while``/``x if c else y`` negated
const       integer constants ``c -> c+1`` and ``c -> c-1``; ``True <-> False``
range       ``range(..., n) -> range(..., n+1 / n-1)``, ``range(a, n) -> range(a+1, n)``
slice       slice bounds ``x[a:b]`` moved by one
return      ``return x -> return None``; numeric-looking ``return x -> return x + 1``
==========  ===============================================================================

All candidate edits are enumerated, shuffled with ``random.Random(seed)`` and taken in that order
until ``max_mutants`` distinct mutants exist; a mutant whose source text equals the original (or
an earlier mutant) after ``ast.unparse`` is dropped as equivalent, and one that does not compile
is dropped. So the set is deterministic given ``(source, seed, max_mutants)``.

:func:`mutation_score` runs the golden solution on every test and keeps the tests it passes.
Then the golden solution and every mutant run on those tests in one batch under the *same*
conditions: the same short time limit (derived from the golden run) and the same source
formatting (the golden solution is printed by ``ast.unparse`` like the mutants), so a test cannot
tell the golden run from a mutant's by its limits or its source layout. A mutant is killed when
a kept test that the golden solution passes in that batch fails on it (a wrong answer, crash,
timeout or memory error all count). ``score = killed / mutants``. The tester's coverage
sub-score is then ``min(1, score / 0.60)`` (:func:`coverage_score`).
"""

from __future__ import annotations

import ast
import dataclasses
import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verifiers.code_tests import TestCase, run_tests, run_tests_many
from verifiers.source_checks import MAX_SOURCE_CHARS, check_compiles, quiet_parse

__all__ = [
    "TAU_MUT",
    "Mutant",
    "MutantResult",
    "MutationReport",
    "make_mutants",
    "mutation_score",
    "coverage_score",
]

TAU_MUT = 0.60
"""The paper's mutation-score threshold tau_mut."""
MAX_CANDIDATES = 20_000

_ARITH: dict[type, list[type]] = {
    ast.Add: [ast.Sub],
    ast.Sub: [ast.Add],
    ast.Mult: [ast.Div],
    ast.Div: [ast.Mult],
    ast.FloorDiv: [ast.Mult],
    ast.Mod: [ast.FloorDiv],
    ast.Pow: [ast.Mult],
    ast.LShift: [ast.RShift],
    ast.RShift: [ast.LShift],
    ast.BitAnd: [ast.BitOr],
    ast.BitOr: [ast.BitAnd],
    ast.BitXor: [ast.BitAnd],
}
_CMP: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_BOOL: dict[type, type] = {ast.And: ast.Or, ast.Or: ast.And}
_NUMERIC_CALLS = {"len", "sum", "abs", "int", "max", "min", "round", "pow", "float", "ord"}
_SYMBOLS: dict[type, str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|",
    ast.BitXor: "^", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
    ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
    ast.And: "and", ast.Or: "or",
}  # fmt: skip


@dataclass(frozen=True)
class Mutant:
    """A mutated program: its source, the operator class, and a readable description."""

    source: str
    operator: str
    description: str
    lineno: int


@dataclass(frozen=True)
class MutantResult:
    """One mutant's fate: killed or not, and which tests (indices into ``tests``) killed it."""

    mutant: Mutant
    killed: bool
    killed_by: tuple[int, ...] = ()


@dataclass(frozen=True)
class MutationReport:
    """``score = killed / total``; ``available`` is False when nothing could be measured
    (golden does not compile, passes no test, or no mutant could be made), then score is 0."""

    score: float
    killed: int
    total: int
    available: bool
    reason: str
    golden_passed: tuple[bool, ...] = ()
    mutants: tuple[MutantResult, ...] = ()


# ---------------------------------------------------------------- mutant generation


_Site = tuple[ast.AST, ast.AST | None, str, int | None]
"""A node with its parent, the parent's field holding it, and its index in that field's list."""


def _preorder(tree: ast.AST) -> list[_Site]:
    """Every node with (parent, field, index-in-list), in a fixed depth-first order."""
    out: list[_Site] = []
    stack: list[_Site] = [(tree, None, "", None)]
    while stack:
        node, parent, fld, idx = stack.pop()
        out.append((node, parent, fld, idx))
        children: list[_Site] = []
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                children.append((value, node, name, None))
            elif isinstance(value, list):
                children.extend(
                    (v, node, name, i) for i, v in enumerate(value) if isinstance(v, ast.AST)
                )
        stack.extend(reversed(children))
    return out


def _is_int_const(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    )


def _numeric_looking(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in _NUMERIC_CALLS
    return False


def _mentions_dunder_name(node: ast.Compare) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(node))


def _candidates(nodes: list[_Site]) -> list[tuple]:
    """(node index, kind, payload) for every possible edit."""
    cands: list[tuple] = []
    for i, (node, parent, fld, _) in enumerate(nodes):
        if isinstance(node, ast.BinOp | ast.AugAssign):
            for new in _ARITH.get(type(node.op), []):
                cands.append((i, "arith", new))
        elif isinstance(node, ast.Compare) and not _mentions_dunder_name(node):
            for j, op in enumerate(node.ops):
                if type(op) in _CMP:
                    cands.append((i, "compare", j))
        elif isinstance(node, ast.BoolOp):
            cands.append((i, "bool", None))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            cands.append((i, "not_remove", None))
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                cands.append((i, "const_bool", None))
            elif isinstance(node.value, int) and abs(node.value) < 10**18:
                cands.append((i, "const", 1))
                cands.append((i, "const", -1))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "range" and 1 <= len(node.args) <= 3 and not node.keywords:
                stop = 0 if len(node.args) == 1 else 1
                if not _is_int_const(node.args[stop]):
                    cands.append((i, "range_arg", (stop, 1)))
                    cands.append((i, "range_arg", (stop, -1)))
                if len(node.args) >= 2 and not _is_int_const(node.args[0]):
                    cands.append((i, "range_arg", (0, 1)))
        elif isinstance(node, ast.Slice):
            for bound in ("lower", "upper"):
                value = getattr(node, bound)
                if value is not None and not _is_int_const(value):
                    cands.append((i, "slice", (bound, 1)))
                    cands.append((i, "slice", (bound, -1)))
        elif (
            isinstance(node, ast.Return)
            and node.value is not None
            and not (isinstance(node.value, ast.Constant) and node.value.value is None)
        ):
            cands.append((i, "return_none", None))
            if _numeric_looking(node.value):
                cands.append((i, "return_plus", None))
        if isinstance(node, ast.If | ast.While | ast.IfExp) and not (
            isinstance(node.test, ast.Compare) and _mentions_dunder_name(node.test)
        ):
            cands.append((i, "negate", None))
        del parent, fld
    return cands


def _shift(expr: ast.expr, delta: int) -> ast.expr:
    op: ast.operator = ast.Add() if delta > 0 else ast.Sub()
    return ast.BinOp(left=expr, op=op, right=ast.Constant(abs(delta)))


def _apply(tree: ast.AST, index: int, kind: str, payload: Any) -> tuple[str, str, int] | None:
    """Apply one edit in place; return (operator, description, lineno) or None."""
    nodes = _preorder(tree)
    node, parent, fld, idx = nodes[index]
    line = getattr(node, "lineno", 0) or (getattr(parent, "lineno", 0) if parent else 0)

    def replace(new: ast.AST) -> None:
        assert parent is not None
        if idx is None:
            setattr(parent, fld, new)
        else:
            getattr(parent, fld)[idx] = new

    # ``_candidates`` pairs each kind with its node type; the checks below only narrow the types.
    if kind == "arith" and isinstance(node, ast.BinOp | ast.AugAssign):
        old = type(node.op)
        node.op = payload()
        return "arith", f"'{_SYMBOLS[old]}' -> '{_SYMBOLS[payload]}'", line
    if kind == "compare" and isinstance(node, ast.Compare):
        old_cmp = type(node.ops[payload])
        node.ops[payload] = _CMP[old_cmp]()
        return "compare", f"'{_SYMBOLS[old_cmp]}' -> '{_SYMBOLS[_CMP[old_cmp]]}'", line
    if kind == "bool" and isinstance(node, ast.BoolOp):
        old_bool = type(node.op)
        node.op = _BOOL[old_bool]()
        return "bool", f"'{_SYMBOLS[old_bool]}' -> '{_SYMBOLS[_BOOL[old_bool]]}'", line
    if kind == "not_remove" and isinstance(node, ast.UnaryOp):
        replace(node.operand)
        return "not", "removed 'not'", line
    if kind == "negate" and isinstance(node, ast.If | ast.While | ast.IfExp):
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
        return "not", "negated condition", line
    if kind == "const_bool" and isinstance(node, ast.Constant):
        node.value = not node.value
        return "const", f"{not node.value} -> {node.value}", line
    if kind == "const" and isinstance(node, ast.Constant) and isinstance(node.value, int):
        old_v = node.value
        node.value = old_v + payload
        return "const", f"{old_v} -> {old_v + payload}", line
    if kind == "range_arg" and isinstance(node, ast.Call):
        pos, delta = payload
        node.args[pos] = _shift(node.args[pos], delta)
        which = "start" if pos == 0 and len(node.args) > 1 else "stop"
        return "range", f"range {which} {delta:+d}", line
    if kind == "slice":
        bound, delta = payload
        setattr(node, bound, _shift(getattr(node, bound), delta))
        return "slice", f"slice {bound} {delta:+d}", line
    if kind == "return_none" and isinstance(node, ast.Return):
        node.value = ast.Constant(None)
        return "return", "return None", line
    if kind == "return_plus" and isinstance(node, ast.Return) and node.value is not None:
        node.value = _shift(node.value, 1)
        return "return", "return value + 1", line
    return None


def make_mutants(source: str, seed: int = 0, max_mutants: int = 30) -> list[Mutant]:
    """Up to ``max_mutants`` distinct, compiling mutants of ``source`` (deterministic in ``seed``).

    Returns ``[]`` when ``source`` does not parse. Mutants are listed in source order.

    >>> ms = make_mutants("def f(a, b):\\n    return a + b\\n", seed=0, max_mutants=10)
    >>> sorted(m.description for m in ms)
    ["'+' -> '-'", 'return None', 'return value + 1']
    >>> sorted(m.source.splitlines()[1].strip() for m in ms)
    ['return None', 'return a + b + 1', 'return a - b']
    >>> [m.source for m in make_mutants("x = 1", seed=3)] == [
    ...     m.source for m in make_mutants("x = 1", seed=3)
    ... ]
    True
    """
    if not isinstance(source, str):
        raise TypeError("source must be a string")
    if max_mutants < 0:
        raise ValueError("max_mutants must be >= 0")
    if len(source) > MAX_SOURCE_CHARS:
        return []
    try:
        tree = quiet_parse(source)
        original = ast.unparse(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    nodes = _preorder(tree)
    cands = _candidates(nodes)[:MAX_CANDIDATES]
    order = list(range(len(cands)))
    random.Random(seed).shuffle(order)
    seen = {original}
    chosen: list[tuple[int, Mutant]] = []
    for k in order:
        if len(chosen) >= max_mutants:
            break
        fresh = quiet_parse(source)
        info = _apply(fresh, *cands[k])
        if info is None:
            continue
        try:
            text = ast.unparse(ast.fix_missing_locations(fresh))
        except (ValueError, RecursionError, AttributeError):
            continue
        if text in seen or not check_compiles(text, "<mutant>").ok:
            continue
        seen.add(text)
        op, desc, line = info
        chosen.append((k, Mutant(text, op, desc, line)))
    chosen.sort(key=lambda kc: (kc[1].lineno, kc[0]))
    return [m for _, m in chosen]


# ---------------------------------------------------------------- scoring


def _short_limits(limits: Any, golden_max_s: float, floor_s: float) -> Any:
    import sandboxes

    base = limits if limits is not None else sandboxes.Limits()
    wall = max(floor_s, 5.0 * golden_max_s)
    wall = min(wall, float(getattr(base, "wall_s", wall) or wall))
    changes: dict[str, float] = {"wall_s": wall}
    if hasattr(base, "cpu_s"):
        changes["cpu_s"] = min(float(base.cpu_s or wall), wall)
    return dataclasses.replace(base, **changes)


def mutation_score(
    golden_source: str,
    tests: Sequence[TestCase],
    sandbox: Any = None,
    *,
    seed: int = 0,
    max_mutants: int = 30,
    limits: Any = None,
    mutant_floor_s: float = 1.0,
    entry_point: str | None = None,
    float_tol: float | None = None,
    mutants: Sequence[Mutant] | None = None,
    prelude: str = "",
    trusted_tests: bool = True,
) -> MutationReport:
    """Share of mutants of ``golden_source`` killed by ``tests`` (see the module docstring).

    ``mutants`` are precomputed mutants of ``golden_source`` (e.g. cached per problem, since they
    do not depend on the tests); by default ``make_mutants(golden_source, seed, max_mutants)``.
    ``prelude``: trusted code run before the golden solution and every mutant (not mutated).
    ``trusted_tests=False``: a policy wrote the tests (see
    :func:`verifiers.code_tests.run_tests_many`); none of them runs where the golden program's
    or a mutant's results are.

    >>> gold = "def f(x):\\n    if x > 0:\\n        return 2 * x\\n    return 0\\n"
    >>> strong = [TestCase.asserts(f"assert f({v}) == {max(0, 2 * v)}") for v in (-1, 0, 1, 5)]
    >>> weak = [TestCase.asserts("assert f(-3) == 0")]
    >>> s, w = mutation_score(gold, strong), mutation_score(gold, weak)
    >>> s.score > w.score, s.total == w.total, 0 < s.score <= 1
    (True, True, True)
    """
    tlist = list(tests)
    build = check_compiles(golden_source)
    if not build.ok:
        return MutationReport(0.0, 0, 0, False, f"golden solution does not compile: {build.reason}")
    if not tlist:
        return MutationReport(0.0, 0, 0, False, "no tests")
    gold = run_tests(
        golden_source,
        tlist,
        sandbox=sandbox,
        limits=limits,
        entry_point=entry_point,
        float_tol=float_tol,
        prelude=prelude,
        trusted_tests=trusted_tests,
    )
    mask = gold.passed_mask
    keep = [i for i, ok in enumerate(mask) if ok]
    if not keep:
        return MutationReport(
            0.0, 0, 0, False, "the golden solution passes none of the tests", mask
        )
    if mutants is None:
        mutants = make_mutants(golden_source, seed=seed, max_mutants=max_mutants)
    else:
        mutants = list(mutants)
    if not mutants:
        return MutationReport(0.0, 0, 0, False, "no mutants could be made", mask)
    golden_max = max(gold.results[i].duration_s for i in keep)
    short = _short_limits(limits, golden_max, mutant_floor_s)
    kept_tests = [tlist[i] for i in keep]
    # The reference run and the mutants go in one batch in a random order: no position (first
    # on a worker, right after the golden run) tells a program under test which one it is.
    items = [(_unparsed(golden_source), kept_tests)] + [(m.source, kept_tests) for m in mutants]
    order = list(range(len(items)))
    secrets.SystemRandom().shuffle(order)
    shuffled = run_tests_many(
        [items[k] for k in order],
        sandbox=sandbox,
        limits=short,
        entry_point=entry_point,
        float_tol=float_tol,
        prelude=prelude,
        trusted_tests=trusted_tests,
    )
    by_item = dict(zip(order, shuffled))
    reference, *reports = [by_item[k] for k in range(len(items))]
    fair = [j for j, r in enumerate(reference.results) if r.passed]
    if not fair:
        why = "the golden solution passes none of the tests under the mutants' limits"
        return MutationReport(0.0, 0, 0, False, why, mask)
    results = []
    for m, rep in zip(mutants, reports):
        by = tuple(keep[j] for j in fair if not rep.results[j].passed)
        results.append(MutantResult(m, bool(by), by))
    killed = sum(r.killed for r in results)
    return MutationReport(
        killed / len(results), killed, len(results), True, "ok", mask, tuple(results)
    )


def _unparsed(source: str) -> str:
    """``source`` printed the way the mutants are (``ast.unparse``)."""
    try:
        return ast.unparse(quiet_parse(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source


def coverage_score(mut_score: float, tau: float = TAU_MUT) -> float:
    """The tester's coverage sub-score ``min(1, MutScore / tau_mut)``.

    >>> coverage_score(0.3), coverage_score(0.9)
    (0.5, 1.0)
    """
    if tau <= 0:
        raise ValueError("tau must be positive")
    return min(1.0, max(0.0, mut_score) / tau)
