"""Running and judging the code setting's programs and tests: test reports (cached), the
tester's validity and mutation coverage against the golden program (cached), and golden tests
rewritten in the tester's format for the oracle (the setting's page is :mod:`envs.code`).

Caches are per process and keyed by everything a result depends on (program, tests, prelude,
limits, mutation options); a result with a sandbox failure is never cached.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from envs.code.options import CodeConfig
from envs.code.problems import prelude_of
from envs.core.program import LRU
from envs.data.records import CodeProblem
from verifiers.code_tests import TestCase, TestReport, run_tests_many
from verifiers.source_checks import quiet_parse

__all__ = [
    "golden_failure",
    "hidden_as_asserts",
    "judge_tests",
    "limits_key",
    "run_reports",
    "same_program",
    "tests_key",
]

_REPORTS: LRU[TestReport] = LRU(4096)
_MUTANTS: LRU[tuple] = LRU(1024)
_TESTER: LRU[dict] = LRU(4096)


def limits_key(cfg: CodeConfig) -> tuple:
    """The configuration a test result depends on (beyond program, tests and prelude)."""
    return (cfg.wall_s, cfg.memory_mb, cfg.max_output_bytes, cfg.float_tol)


def tests_key(tests: tuple[TestCase, ...] | list[TestCase]) -> tuple:
    return tuple((t.kind, t.stdin, t.expected_stdout, t.code) for t in tests)


def same_program(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    try:
        return ast.dump(quiet_parse(a)) == ast.dump(quiet_parse(b))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return a.strip() == b.strip()


def call_test_as_assert(tree: ast.Module) -> str | None:
    """A call test of :func:`envs.data.code_sets.call_test` (``_args`` / ``_expected`` JSON,
    ``_got = f(*_args)``) as one assert in the tester's format."""
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", None)
            value = node.value
            if name in ("_args", "_expected") and isinstance(value, ast.Call) and value.args:
                arg = value.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    try:
                        found[name] = json.loads(arg.value)
                    except ValueError:
                        return None
            elif name == "_got" and isinstance(value, ast.Call) and "call" not in found:
                found["call"] = ast.unparse(value.func)
    if not {"_args", "_expected", "call"} <= set(found) or not isinstance(found["_args"], list):
        return None
    expected = found["_expected"]
    lenient = any(isinstance(n, ast.Assert) and isinstance(n.test, ast.BoolOp) for n in tree.body)
    if lenient and isinstance(expected, list) and len(expected) == 1:
        expected = expected[0]  # APPS wraps outputs in a list and accepts the bare element
    args = ", ".join(repr(a) for a in found["_args"])
    # json round trip: tuples compare as lists, as in the golden test
    return f"import json\nassert json.loads(json.dumps({found['call']}({args}))) == {expected!r}"


def golden_failure(result: Any) -> str:
    """Why the golden program failed a test, without what it returned, printed or raised with:
    a reason goes into the tester's ``reward_parts`` (and through ``serve_env`` to clients), and
    the golden program is the secret the tester must not learn.

    >>> from verifiers.code_tests import TestResult
    >>> golden_failure(TestResult(False, "wrong_answer", "assertion failed: ...; returned 7"))
    ' (wrong answer)'
    """
    if result.status == "invalid_test":  # about the test alone
        return f": {result.reason}"
    return f" ({result.status.replace('_', ' ')})"


def hidden_as_asserts(code: str, entry_point: str) -> str | None:
    """A golden assert test rewritten in the tester's format: the body of ``def check(c)``
    with ``c`` renamed to the entry point, without the ``check(...)`` call; a JSON call test
    becomes one plain assert."""
    try:
        tree = quiet_parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return None
    call = call_test_as_assert(tree)
    if call is not None:
        return call
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            param = node.args.args[0].arg if node.args.args else "candidate"
            for stmt in node.body:
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Name | ast.Constant):
                    continue  # a no-op such as a bare ``print`` or a string
                for n in ast.walk(stmt):
                    if isinstance(n, ast.Name) and n.id == param:
                        n.id = entry_point
                body.append(stmt)
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "check"
        ):
            continue
        else:
            body.append(node)
    return ast.unparse(ast.Module(body=body, type_ignores=[])) if body else None


def run_reports(
    items: list[tuple[CodeProblem, str, Any]],
    cfg: CodeConfig,
    *,
    sandbox: Any,
    limits: Any,
    trusted_tests: bool = True,
) -> list[TestReport]:
    """Reports of ``(problem, code, tests)`` (the code runs after the problem's prelude), from
    the cache or one sandbox batch per entry point and prelude. ``trusted_tests=False``: the
    tests are a tester's (:func:`verifiers.code_tests.run_tests_many`)."""
    out: list[TestReport | None] = []
    todo: dict[tuple, list[int]] = {}
    jobs: list[tuple[CodeProblem, str, Any, tuple]] = []
    for k, (problem, program, tests) in enumerate(items):
        key: tuple = (problem.entry_point, prelude_of(problem), program, tests_key(tests))
        key += (*limits_key(cfg), trusted_tests)
        hit = _REPORTS.get(key)
        out.append(hit)
        if hit is None:
            if key not in todo:
                todo[key] = []
                jobs.append((problem, program, tests, key))
            todo[key].append(k)
    # one batch per entry point and prelude (run_tests_many takes one of each)
    by_entry: dict[Any, list[tuple[str, Any, tuple]]] = {}
    for problem, program, tests, key in jobs:
        group_key = (problem.entry_point, prelude_of(problem))
        by_entry.setdefault(group_key, []).append((program, tests, key))
    for (entry, prelude), group in by_entry.items():
        reps = run_tests_many(
            [(prog, list(tests)) for prog, tests, _ in group],
            sandbox=sandbox,
            limits=limits,
            entry_point=entry,
            float_tol=cfg.float_tol,
            prelude=prelude,
            trusted_tests=trusted_tests,
        )
        for (_, _, key), rep in zip(group, reps):
            if not any(r.status == "sandbox_error" for r in rep.results):
                _REPORTS.put(key, rep)
            for k in todo[key]:
                out[k] = rep
    return [r for r in out if r is not None]


def _mutants(golden: str, cfg: CodeConfig) -> tuple:
    key = (golden, cfg.mutant_seed, cfg.max_mutants)

    def make() -> tuple:
        from verifiers.mutation import make_mutants

        return tuple(make_mutants(golden, seed=cfg.mutant_seed, max_mutants=cfg.max_mutants))

    return _MUTANTS.get_or_compute(key, make)


def judge_tests(
    p: CodeProblem, tests: list[TestCase], cfg: CodeConfig, *, sandbox: Any, limits: Any
) -> dict[str, Any]:
    """valid / cov / mask of a tester's tests against the golden solution (cached), with the
    reasons (``valid_why``, ``cov_why``, ``why``) and the mutants ``killed``."""
    if p.golden_solution is None:
        return {
            "valid": 0.0,
            "cov": 0.0,
            "mask": 0.0,
            "why": "the problem has no golden solution",
        }
    golden = p.golden_solution
    key = (
        golden,
        p.entry_point,
        tests_key(tests),
        limits_key(cfg),
        cfg.mutant_seed,
        cfg.max_mutants,
        cfg.mutant_floor_s,
        cfg.tau_mut,
    )
    hit = _TESTER.get(key)
    if hit is not None:
        return hit
    from verifiers.mutation import coverage_score, mutation_score

    first, second = run_tests_many(
        [(golden, tests), (golden, tests)],
        sandbox=sandbox,
        limits=limits,
        entry_point=p.entry_point,
        float_tol=cfg.float_tol,
        prelude=prelude_of(p),
        trusted_tests=False,
    )
    infra = any(r.status == "sandbox_error" for r in (*first.results, *second.results))
    failing = [
        i
        for i, (a, b) in enumerate(zip(first.results, second.results))
        if not (a.passed and b.passed)
    ]
    res: dict[str, Any] = {"valid": float(not failing and not infra), "mask": 1.0}
    if failing:
        i = failing[0]
        res["valid_why"] = f"the golden solution fails test {i + 1}" + golden_failure(
            first.results[i]
        )
    mutants = _mutants(golden, cfg)
    if not mutants:
        res.update(cov=0.0, mask=0.0, why="no mutant can be made of the golden solution")
        return res
    kept = [t for i, t in enumerate(tests) if i not in failing]
    if not kept:
        res.update(cov=0.0, cov_why="the golden solution passes none of the tests")
        if not infra:
            _TESTER.put(key, res)
        return res
    # A mutant is killed when some kept test fails on it. Assert tests are joined into one
    # test per mutant; stdin tests go in rounds, each running only the mutants that
    # survived the previous tests. Same kills as one run per (mutant, test), far fewer runs,
    # and a looping mutant times out once.
    if kept[0].kind == "assert":
        rounds = [[TestCase.asserts("\n".join(t.code for t in kept), "tests")]]
    else:
        rounds = [[t] for t in kept]
    alive = list(mutants)
    measured, why = False, ""
    for batch in rounds:
        if not alive:
            break
        rep = mutation_score(
            golden,
            batch,
            sandbox,
            limits=limits,
            mutant_floor_s=cfg.mutant_floor_s,
            entry_point=p.entry_point,
            float_tol=cfg.float_tol,
            mutants=alive,
            prelude=prelude_of(p),
            trusted_tests=False,
        )
        if not rep.available:
            why = rep.reason
            continue
        measured = True
        alive = [r.mutant for r in rep.mutants if not r.killed]
    killed = len(mutants) - len(alive) if measured else 0
    res["mut_score"] = killed / len(mutants)
    res["killed"] = f"{killed}/{len(mutants)}"
    res["cov"] = coverage_score(res["mut_score"], cfg.tau_mut) if measured else 0.0
    if not measured:
        res["cov_why"] = why
    if infra:
        res["mask"] = 0.0
        res["why"] = "sandbox failure"
    else:
        _TESTER.put(key, res)
    return res
