"""The plain test runner behind :func:`verifiers.code_tests.run_tests_many`: the records a run
reports (:class:`TestCase`, :class:`TestResult`, :class:`TestReport`), output comparison, and
the sandboxed run of ``stdio`` and ``assert`` tests (the design is on
:mod:`verifiers.code_tests`' page). Differential tests (:mod:`verifiers.diff_tests`) build on
this module; :func:`verifiers.code_tests.run_tests_many` takes both kinds.
"""

from __future__ import annotations

import ast
import math
import secrets
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from verifiers.extract import clip_text
from verifiers.source_checks import check_compiles, quiet_parse

__all__ = [
    "MAX_ROUNDS",
    "Status",
    "TestCase",
    "TestReport",
    "TestResult",
    "normalize_output",
    "outputs_match",
    "run_plain_tests_many",
    "split_check_function",
]

_CLIP = 300

Status = Literal[
    "passed",
    "wrong_answer",
    "runtime_error",
    "timeout",
    "memory",
    "output_limit",
    "syntax_error",
    "invalid_test",
    "sandbox_error",
]


@dataclass(frozen=True)
class TestCase:
    """One test: ``TestCase.io(stdin, expected_stdout)`` or ``TestCase.asserts(code)``."""

    __test__ = False  # not a pytest test class

    kind: Literal["stdio", "assert"]
    stdin: str = ""
    expected_stdout: str = ""
    code: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("stdio", "assert"):
            raise ValueError(f"TestCase.kind must be 'stdio' or 'assert', got {self.kind!r}")
        for f in ("stdin", "expected_stdout", "code", "name"):
            if not isinstance(getattr(self, f), str):
                raise TypeError(f"TestCase.{f} must be a string")

    @classmethod
    def io(cls, stdin: str, expected_stdout: str, name: str = "") -> TestCase:
        return cls("stdio", stdin=stdin, expected_stdout=expected_stdout, name=name)

    @classmethod
    def asserts(cls, code: str, name: str = "") -> TestCase:
        return cls("assert", code=code, name=name)

    def to_dict(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in ("kind", "stdin", "expected_stdout", "code", "name")}


@dataclass(frozen=True)
class TestResult:
    """Outcome of one test (``expected``/``actual`` clipped; ``None`` for assert tests)."""

    __test__ = False

    passed: bool
    status: Status
    reason: str
    expected: str | None = None
    actual: str | None = None
    duration_s: float = 0.0

    @property
    def crashed(self) -> bool:
        """Did the program fail to run to completion (anything but passed / wrong answer)?"""
        return self.status not in ("passed", "wrong_answer")


@dataclass(frozen=True)
class TestReport:
    """All test results of one program; ``compile_error`` is set when nothing was run."""

    __test__ = False

    results: tuple[TestResult, ...]
    compile_error: str = ""

    @property
    def compiled(self) -> bool:
        return not self.compile_error

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def n_passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def pass_rate(self) -> float:
        """Share of tests passed (``p_k`` in the paper); 0.0 for an empty suite."""
        return self.n_passed / self.total if self.results else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def passed_mask(self) -> tuple[bool, ...]:
        return tuple(r.passed for r in self.results)


# ---------------------------------------------------------------- static checks


# ---------------------------------------------------------------- output comparison


def normalize_output(text: str) -> str:
    """Unify line endings, strip trailing whitespace per line and trailing blank lines.

    >>> normalize_output("1 2  \\r\\n3\\n\\n\\n")
    '1 2\\n3'
    """
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _float(tok: str) -> float | None:
    if len(tok) > 60:
        return None
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def outputs_match(actual: str, expected: str, float_tol: float | None = None) -> bool:
    """Compare outputs after :func:`normalize_output`; with ``float_tol`` numbers may differ
    by that much, absolutely or relative to the expected value.

    >>> outputs_match("3\\n", "3"), outputs_match("3 4", "3  4")
    (True, False)
    >>> outputs_match("0.333336", "0.333333", float_tol=1e-6)
    False
    >>> outputs_match("0.3333334\\nYES", "0.3333333\\nYES", float_tol=1e-6)
    True
    """
    a, e = normalize_output(actual), normalize_output(expected)
    if a == e:
        return True
    if float_tol is None:
        return False
    a_lines, e_lines = a.split("\n"), e.split("\n")
    if len(a_lines) != len(e_lines):
        return False
    for al, el in zip(a_lines, e_lines):
        at, et = al.split(), el.split()
        if len(at) != len(et):
            return False
        for x, y in zip(at, et):
            if x == y:
                continue
            fx, fy = _float(x), _float(y)
            if fx is None or fy is None:
                return False
            if abs(fx - fy) > float_tol and abs(fx - fy) > float_tol * abs(fy):
                return False
    return True


# ---------------------------------------------------------------- HumanEval checks


def split_check_function(test_code: str, entry_point: str) -> list[TestCase]:
    """Split a HumanEval-style ``def check(candidate)`` into one test per asserting statement.

    Statements of ``check`` that contain no ``assert`` (imports, helpers, setup) are kept in every
    piece, in order; each statement that asserts something becomes its own test. Falls back to
    the whole test when the code does not parse or has no ``check``.

    >>> code = (
    ...     "def check(candidate):\\n    x = 2\\n    assert candidate(x) == 4\\n"
    ...     "    assert candidate(0) == 0\\n"
    ... )
    >>> [t.code.count("assert") for t in split_check_function(code, "sq")]
    [1, 1]
    >>> split_check_function(code, "sq")[1].code.endswith("check(sq)\\n")
    True
    """
    whole = [TestCase.asserts(test_code.rstrip("\n") + f"\n\ncheck({entry_point})\n", "check")]
    try:
        tree = quiet_parse(test_code)
    except (SyntaxError, ValueError, RecursionError):
        return whole
    check = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None
    )
    if check is None:
        return whole
    asserting = [any(isinstance(x, ast.Assert) for x in ast.walk(s)) for s in check.body]
    if sum(asserting) <= 1:
        return whole
    others = [n for n in tree.body if n is not check]
    tests = []
    for k in range(len(check.body)):
        if not asserting[k]:
            continue
        body = [s for j, s in enumerate(check.body) if not asserting[j] or j == k]
        fn = ast.FunctionDef(
            name="check",
            args=check.args,
            body=body,
            decorator_list=[],
            returns=None,
            type_comment=None,
        )
        if sys.version_info >= (3, 12):  # the field exists from 3.12 on
            fn.type_params = []
        module = ast.Module(body=[*others, fn], type_ignores=[])
        try:
            src = ast.unparse(ast.fix_missing_locations(module))
        except (RecursionError, ValueError):
            return whole
        tests.append(TestCase.asserts(src + f"\n\ncheck({entry_point})\n", f"check[{k}]"))
    return tests


# ---------------------------------------------------------------- running


def _default_sandbox(sandbox: Any) -> Any:
    if sandbox is not None:
        return sandbox
    import sandboxes

    return sandboxes.default()


def _last_line(text: str) -> str:
    for line in reversed(text[-20_000:].strip().splitlines()):
        if line.strip():
            return clip_text(line.strip(), _CLIP)
    return ""


def _limit_failure(res: Any) -> TestResult | None:
    """The test's result when the job hit a limit or the sandbox failed, else None."""
    dur = float(getattr(res, "duration_s", 0.0) or 0.0)
    if getattr(res, "timed_out", False):
        why = "CPU time limit exceeded" if getattr(res, "cpu_exceeded", False) else None
        return TestResult(False, "timeout", why or "time limit exceeded", duration_s=dur)
    if getattr(res, "memory_exceeded", False):
        return TestResult(False, "memory", "memory limit exceeded", duration_s=dur)
    if getattr(res, "output_truncated", False):
        return TestResult(False, "output_limit", "output limit exceeded", duration_s=dur)
    if res.exit_code is None and getattr(res, "error", None):
        why = clip_text(str(res.error), _CLIP)
        return TestResult(False, "sandbox_error", f"sandbox error: {why}", duration_s=dur)
    return None


def _exited(res: Any) -> str:
    """Why a program's job gave no result for a call: it ended or crashed before."""
    if res.exit_code == 0:
        return "the program exited before the test could call it (exit code 0)"
    sig = getattr(res, "signal", None)
    fallback = f"killed by signal {sig}" if sig else f"exit code {res.exit_code}"
    return _last_line(res.stderr or "") or fallback


def _classify_stdio(res: Any, test: TestCase, float_tol: float | None) -> TestResult:
    dur = float(getattr(res, "duration_s", 0.0) or 0.0)
    failed = _limit_failure(res)
    if failed is not None:
        return failed
    if res.exit_code != 0:
        return TestResult(False, "runtime_error", _exited(res), duration_s=dur)
    actual = res.stdout or ""
    shown_e = clip_text(normalize_output(test.expected_stdout), _CLIP)
    shown_a = clip_text(normalize_output(actual), _CLIP)
    if outputs_match(actual, test.expected_stdout, float_tol):
        return TestResult(True, "passed", "ok", shown_e, shown_a, dur)
    reason = f"wrong answer: expected {shown_e!r}, got {shown_a!r}"
    return TestResult(False, "wrong_answer", reason, shown_e, shown_a, dur)


def _check_inputs(solution: object, tests: object) -> list[TestCase]:
    if not isinstance(tests, Sequence) or isinstance(tests, str):
        raise TypeError("tests must be a sequence of TestCase")
    out = list(tests)
    for t in out:
        if not isinstance(t, TestCase):
            raise TypeError(f"tests must be TestCase values, got {type(t).__name__}")
    return out


MAX_ROUNDS = 3
"""Rounds of program job + replay for a replayed test whose calls depend on results."""


class _Task:
    """One (program, test) pair on its way to a :class:`TestResult`."""

    def __init__(self, test: TestCase, program: str, prelude: str) -> None:
        self.test = test
        self.program = program
        self.prelude = prelude
        self.result: TestResult | None = None
        self.plan: Any = None
        self.calls: list[Any] = []
        self.run: Any = None  # the program job's ExecResult
        self.rounds = 0


def _discover(plans: list[tuple[Any, str]], limits: Any, sb: Any) -> dict[int, Any]:
    """Run each replayed test once without the program's results: the calls it makes."""
    from sandboxes import Job
    from verifiers.assert_plans import parse_replay, replay_code

    out: dict[int, Any] = {}
    todo = []
    for plan, prelude in plans:
        key = (plan.code, plan.stubs, prelude, limits)
        hit = _DISCOVERED.get(key)
        if hit is not None:
            out[id(plan)] = hit
        else:
            todo.append((plan, key, secrets.token_hex(16)))
    if todo:
        jobs = [
            Job(replay_code(p, key[2], n, ()), limits=limits, results=True) for p, key, n in todo
        ]
        for (plan, key, nonce), res in zip(todo, sb.run_many(jobs)):
            rep = parse_replay(res.results, nonce)
            if rep is None or rep["status"] != "discovered" or _limit_failure(res) is not None:
                why = _limit_failure(res) or TestResult(
                    False, "runtime_error", f"the test itself failed: {_exited(res)}"
                )
                out[id(plan)] = why
                continue
            out[id(plan)] = rep["needed"]
            _DISCOVERED[key] = rep["needed"]
            while len(_DISCOVERED) > 256:
                _DISCOVERED.pop(next(iter(_DISCOVERED)))
    return out


_DISCOVERED: dict[tuple, Any] = {}


def _concretize(tasks: list[_Task], limits: Any, sb: Any) -> None:
    """Give each policy-written test the host cannot decide as written the static plan of its
    concretized form (one job per distinct test, with no program and no result in it; see
    :mod:`verifiers.assert_plans`), or an ``invalid_test`` result saying why there is none."""
    from sandboxes import Job
    from verifiers.assert_plans import concretize_code

    def key(t: _Task) -> tuple:
        return (t.plan.code, t.plan.entry_point, t.prelude, t.plan.stubs, limits)

    decided = {key(t): _CONCRETE[key(t)] for t in tasks if key(t) in _CONCRETE}
    todo = {key(t): t for t in tasks if key(t) not in decided}
    nonces = [secrets.token_hex(16) for _ in todo]
    jobs = [
        Job(concretize_code(t.plan, t.prelude, n), limits=limits, results=True)
        for t, n in zip(todo.values(), nonces)
    ]
    for (k, t), nonce, res in zip(todo.items(), nonces, sb.run_many(jobs) if jobs else ()):
        decided[k] = _concretized(t, res, nonce)
        if not (isinstance(decided[k], TestResult) and decided[k].status == "sandbox_error"):
            _CONCRETE[k] = decided[k]
            while len(_CONCRETE) > 256:
                _CONCRETE.pop(next(iter(_CONCRETE)))
    for t in tasks:
        got = decided[key(t)]
        if isinstance(got, TestResult):
            t.result = got
        else:
            t.plan, t.calls = got, list(got.calls)


def _concretized(t: _Task, res: Any, nonce: str) -> Any:
    """The static plan of a concretized test, or the result saying why there is none."""
    from verifiers.assert_plans import parse_concretized, plan_test

    failed = _limit_failure(res)
    if failed is not None:
        return TestResult(False, failed.status, f"the test itself: {failed.reason}")
    code, why = parse_concretized(res.results, nonce)
    if why:
        return TestResult(False, "invalid_test", f"the test is invalid: {why}")
    plan = plan_test(code, t.plan.entry_point, t.prelude)
    if plan.static:
        return plan
    why = plan.error or plan.why
    return TestResult(
        False,
        "invalid_test",
        f"the test is not decided on the host with its inputs written out: {why}",
    )


_CONCRETE: dict[tuple, Any] = {}


def run_plain_tests_many(
    items: Sequence[tuple[object, Sequence[TestCase]] | tuple[object, Sequence[TestCase], str]],
    *,
    sandbox: Any = None,
    limits: Any = None,
    entry_point: str | None = None,
    float_tol: float | None = None,
    prelude: str = "",
    trusted_tests: bool = True,
) -> list[TestReport]:
    """:func:`verifiers.code_tests.run_tests_many` for ``stdio`` and ``assert`` tests only."""
    from verifiers.assert_plans import plan_test

    plan_of: dict[tuple[str, str], Any] = {}
    tasks_by_item: list[tuple[str, list[_Task]]] = []
    tasks: list[_Task] = []
    for item in items:
        solution, tests = item[0], item[1]
        pre = str(item[2]) if len(item) > 2 else prelude  # type: ignore[misc]
        tlist = _check_inputs(solution, tests)
        build = check_compiles(solution)
        program = f"{pre.rstrip()}\n\n{solution}" if pre.strip() else str(solution)
        if build.ok and program is not solution:
            build = check_compiles(program)
        mine = [_Task(t, program, pre) for t in tlist]
        for task in mine:
            case = task.test
            if not build.ok:
                task.result = TestResult(False, "syntax_error", build.reason)
            elif case.kind == "assert":
                plan = plan_of.get((case.code, pre))
                if plan is None:
                    plan = plan_of[case.code, pre] = plan_test(case.code, entry_point, pre)
                task.plan = plan
                if plan.error:
                    task.result = TestResult(False, "invalid_test", plan.error)
                else:
                    task.calls = list(plan.calls)
        tasks_by_item.append((build.reason if not build.ok else "", mine))
        tasks.extend(mine)
    live = [t for t in tasks if t.result is None]
    sb = _default_sandbox(sandbox) if live else None
    if not trusted_tests:
        _concretize([t for t in live if t.plan is not None and not t.plan.static], limits, sb)
        live = [t for t in live if t.result is None]
    direct = [t for t in live if t.plan is None or t.plan.static]
    replayed = [t for t in live if t.plan is not None and not t.plan.static]
    if not replayed:
        _run_programs(direct, limits, float_tol, sb)
    else:
        # Replayed tests take rounds (discovery, the program, the test); the others need one
        # batch, which runs meanwhile on the same workers.
        with ThreadPoolExecutor(1) as ex:
            pending = ex.submit(_run_programs, direct, limits, float_tol, sb) if direct else None
            _replayed_rounds(replayed, limits, float_tol, sb)
            if pending is not None:
                pending.result()
    reports = []
    for err, mine in tasks_by_item:
        results = tuple(t.result for t in mine)  # type: ignore[misc]
        reports.append(TestReport(results, err))  # type: ignore[arg-type]
    return reports


def _run_programs(tasks: list[_Task], limits: Any, float_tol: float | None, sb: Any) -> list[_Task]:
    """One batch of program jobs; decides stdio and static tests, returns the replayed ones
    whose program ran (their test comes next)."""
    from sandboxes import Job

    if not tasks:
        return []
    jobs = [
        Job(t.program, t.test.stdin, limits)
        if t.test.kind == "stdio"
        else Job(t.program, "", limits, calls=tuple(t.calls))
        for t in tasks
    ]
    outs = list(sb.run_many(jobs))
    if len(outs) != len(jobs):
        raise RuntimeError(f"sandbox returned {len(outs)} results for {len(jobs)} jobs")
    replays = []
    for t, res in zip(tasks, outs):
        t.run = res
        if t.test.kind == "stdio":
            t.result = _classify_stdio(res, t.test, float_tol)
        elif _limit_failure(res) is not None:
            t.result = _limit_failure(res)
        elif t.plan.static:
            t.result = _static_result(t, res)
        else:
            replays.append(t)
    return replays


def _replayed_rounds(tasks: list[_Task], limits: Any, float_tol: float | None, sb: Any) -> None:
    """Discovery, then rounds of program jobs and replays until every test is decided."""
    found = _discover(list({id(t.plan): (t.plan, t.prelude) for t in tasks}.values()), limits, sb)
    for t in tasks:
        got = found[id(t.plan)]
        if isinstance(got, TestResult):
            t.result = got
        else:
            t.calls = list(got)
    while True:
        todo = [t for t in tasks if t.result is None and t.run is None]
        if not todo:
            return
        replays = _run_programs(todo, limits, float_tol, sb)
        if replays:
            _replay_round(replays, limits, sb)


def _static_result(task: _Task, res: Any) -> TestResult:
    from verifiers.assert_plans import static_verdict

    calls = res.calls if len(res.calls) == len(task.calls) else (None,) * len(task.calls)
    out = static_verdict(task.plan, calls)
    dur = float(res.duration_s or 0.0)
    if out.status == "missing":
        return TestResult(False, "runtime_error", _exited(res), duration_s=dur)
    return TestResult(out.passed, out.status, out.reason, duration_s=dur)  # type: ignore[arg-type]


def _replay_round(tasks: list[_Task], limits: Any, sb: Any) -> None:
    """Run the replayed tests over their program jobs' results; tests that met calls not yet
    made go to another round (their program job runs again, with those calls too)."""
    from sandboxes import Job
    from verifiers.assert_plans import parse_replay, record_of, replay_code

    nonces = [secrets.token_hex(16) for _ in tasks]
    jobs = []
    for t, nonce in zip(tasks, nonces):
        got = t.run.calls if len(t.run.calls) == len(t.calls) else (None,) * len(t.calls)
        missing = _exited(t.run)
        table = [(c, record_of(r, missing)) for c, r in zip(t.calls, got)]
        jobs.append(Job(replay_code(t.plan, t.prelude, nonce, table), limits=limits, results=True))
    for t, nonce, res in zip(tasks, nonces, sb.run_many(jobs)):
        dur = float(t.run.duration_s or 0.0)
        rep = parse_replay(res.results, nonce)
        failed = _limit_failure(res)
        if failed is not None:
            t.result = failed
        elif rep is None:
            t.result = TestResult(
                False, "runtime_error", f"the test did not finish: {_exited(res)}"
            )
        elif rep["missing"]:
            t.result = TestResult(False, "runtime_error", rep["missing"], duration_s=dur)
        elif rep["needed"]:
            t.rounds += 1
            if t.rounds >= MAX_ROUNDS:
                why = f"the test needs more than {MAX_ROUNDS} rounds of calls"
                t.result = TestResult(False, "runtime_error", why, duration_s=dur)
            else:
                known = {repr(c.to_json()) for c in t.calls}
                t.calls += [c for c in rep["needed"] if repr(c.to_json()) not in known]
                t.run = None  # run the program again, with the new calls
        elif rep["status"] == "pass":
            t.result = TestResult(True, "passed", "ok", duration_s=dur)
        elif rep["status"] == "fail":
            t.result = TestResult(False, "wrong_answer", rep["reason"], duration_s=dur)
        else:
            t.result = TestResult(
                False, "runtime_error", rep["reason"] or rep["status"], duration_s=dur
            )
