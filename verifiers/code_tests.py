"""Running programs against test cases in a sandbox (AT-GRPO Appendix A.1.2).

Two kinds of test case (:class:`TestCase`):

* ``stdio`` (APPS / CodeContests style): the program reads ``stdin`` and its output must equal
  ``expected_stdout`` after normalisation (line endings unified, trailing whitespace stripped per
  line, trailing blank lines dropped); with ``float_tol`` numeric tokens may differ by that much
  (absolute or relative).
* ``assert`` (HumanEval / MBPP style): ``code`` is appended to the program and must run without
  error, e.g. a list of ``assert`` statements, or a ``def check(candidate)`` which is then called
  on ``entry_point`` automatically.

Every job of a batch goes through one ``sandbox.run_many`` call. Each test gets a
:class:`TestResult` with a status and a short reason: ``passed``, ``wrong_answer`` (expected and
actual output clipped, or the failing assert), ``runtime_error`` (the last stderr line),
``timeout`` (wall or CPU time), ``memory``, ``output_limit``, ``syntax_error`` (the program does
not compile; nothing is run), ``invalid_test`` (the test code itself does not compile) or
``sandbox_error`` (the sandbox failed, not the program; still a failed test). Syntax is checked
in-process with ``compile()``, which does not execute anything.

Verifiers take the sandbox as a parameter (default: ``sandboxes.default()``); they never create
one. Wrong argument types raise ``TypeError``; anything a model wrote only ever becomes a result.
"""

from __future__ import annotations

import ast
import math
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from verifiers.extract import clip_text

__all__ = [
    "TestCase",
    "TestResult",
    "TestReport",
    "Check",
    "MAX_SOURCE_CHARS",
    "check_compiles",
    "compiles",
    "normalize_output",
    "outputs_match",
    "build_program",
    "split_check_function",
    "run_tests",
    "run_tests_many",
    "pass_rate",
    "smoke_test",
    "check_deterministic",
]

MAX_SOURCE_CHARS = 200_000
"""Programs longer than this are rejected as not compiling (nothing is run)."""
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


@dataclass(frozen=True)
class Check:
    """A yes/no check with the reason; truthy when ``ok``."""

    ok: bool
    reason: str = "ok"

    def __bool__(self) -> bool:
        return self.ok


# ---------------------------------------------------------------- static checks


def quiet_parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` without letting model-written code's ``SyntaxWarning``s reach the logs.

    >>> type(quiet_parse("x = 1")).__name__
    'Module'
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(source, filename)


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


# ---------------------------------------------------------------- program assembly

_DEFINES_CHECK = re.compile(r"^def\s+check\s*\(", re.MULTILINE)
_CALLS_CHECK = re.compile(r"^check\s*\(", re.MULTILINE)


def build_program(solution: str, test: TestCase, entry_point: str | None = None) -> tuple[str, str]:
    """The ``(code, stdin)`` the sandbox runs for one test.

    For an assert test the test code is appended to the solution; a ``def check(candidate)``
    that is never called gets ``check(<entry_point>)`` appended.

    >>> build_program("def f(x): return x", TestCase.asserts("assert f(1) == 1"))[0]
    'def f(x): return x\\n\\nassert f(1) == 1\\n'
    >>> build_program("x", TestCase.asserts("def check(c):\\n    assert c(1)"), "f")[0].endswith(
    ...     "check(f)\\n")
    True
    >>> build_program("print(input())", TestCase.io("5\\n", "5"))
    ('print(input())', '5\\n')
    """
    if not isinstance(test, TestCase):
        raise TypeError(f"expected a TestCase, got {type(test).__name__}")
    if test.kind == "stdio":
        return solution, test.stdin
    code = solution.rstrip("\n") + "\n\n" + test.code.rstrip("\n") + "\n"
    if entry_point and _DEFINES_CHECK.search(test.code) and not _CALLS_CHECK.search(test.code):
        code += f"\ncheck({entry_point})\n"
    return code, test.stdin


def split_check_function(test_code: str, entry_point: str) -> list[TestCase]:
    """Split a HumanEval-style ``def check(candidate)`` into one test per asserting statement.

    Statements of ``check`` that contain no ``assert`` (imports, helpers, setup) are kept in every
    piece, in order; each statement that asserts something becomes its own test. Falls back to
    the whole test when the code does not parse or has no ``check``.

    >>> code = "def check(candidate):\\n    x = 2\\n    assert candidate(x) == 4\\n    assert candidate(0) == 0\\n"
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
        src = ast.unparse(ast.fix_missing_locations(module))
        tests.append(TestCase.asserts(src + f"\n\ncheck({entry_point})\n", f"check[{k}]"))
    return tests


# ---------------------------------------------------------------- running


def _default_sandbox(sandbox: Any) -> Any:
    if sandbox is not None:
        return sandbox
    import sandboxes

    return sandboxes.default()


def _make_job(code: str, stdin: str, limits: Any) -> Any:
    import sandboxes

    return sandboxes.Job(code, stdin, limits)


def _last_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        if line.strip():
            return clip_text(line.strip(), _CLIP)
    return ""


_FRAME = re.compile(r'^\s*File "([^"]*)", line (\d+)', re.MULTILINE)


def _failing_line(stderr: str, code: str) -> str:
    """The program line of the innermost traceback frame that lies in the program itself."""
    frames = _FRAME.findall(stderr[-20_000:])
    lines = code.splitlines()
    for fname, lineno in reversed(frames):
        if "/lib/python" in fname or "site-packages" in fname or fname.startswith("<frozen"):
            continue  # a library frame
        n = int(lineno)
        if 1 <= n <= len(lines) and lines[n - 1].strip():
            return clip_text(lines[n - 1].strip(), _CLIP)
        break
    return ""


def _classify(res: Any, test: TestCase, float_tol: float | None, code: str = "") -> TestResult:
    dur = float(getattr(res, "duration_s", 0.0) or 0.0)
    stderr = res.stderr or ""
    if getattr(res, "timed_out", False):
        return TestResult(False, "timeout", "time limit exceeded", duration_s=dur)
    if getattr(res, "cpu_exceeded", False):
        return TestResult(False, "timeout", "CPU time limit exceeded", duration_s=dur)
    if getattr(res, "memory_exceeded", False):
        return TestResult(False, "memory", "memory limit exceeded", duration_s=dur)
    if getattr(res, "output_truncated", False):
        return TestResult(False, "output_limit", "output limit exceeded", duration_s=dur)
    if res.exit_code is None and getattr(res, "error", None):
        why = clip_text(str(res.error), _CLIP)
        return TestResult(False, "sandbox_error", f"sandbox error: {why}", duration_s=dur)
    if res.exit_code != 0:
        sig = getattr(res, "signal", None)
        fallback = f"killed by signal {sig}" if sig else f"exit code {res.exit_code}"
        last = _last_line(stderr) or fallback
        if test.kind == "assert" and last.startswith("AssertionError"):
            where = _failing_line(stderr, code)
            reason = "assertion failed" + (f": {where}" if where else "")
            if last != "AssertionError":
                reason += f" ({last})"
            return TestResult(False, "wrong_answer", reason, duration_s=dur)
        return TestResult(False, "runtime_error", last, duration_s=dur)
    if test.kind == "assert":
        return TestResult(True, "passed", "ok", duration_s=dur)
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


def run_tests_many(
    items: Sequence[tuple[object, Sequence[TestCase]]],
    *,
    sandbox: Any = None,
    limits: Any = None,
    entry_point: str | None = None,
    float_tol: float | None = None,
) -> list[TestReport]:
    """Run several ``(solution, tests)`` pairs in one ``run_many`` batch; one report each.

    A solution that does not compile gets every test marked ``syntax_error`` and runs nothing.
    """
    sb = None
    jobs: list[Any] = []
    codes: list[str] = []
    plan: list[tuple[str, list[tuple[TestCase, TestResult | None, int]]]] = []
    for solution, tests in items:
        tlist = _check_inputs(solution, tests)
        build = check_compiles(solution)
        if not build.ok:
            res = TestResult(False, "syntax_error", build.reason)
            plan.append((build.reason, [(t, res, -1) for t in tlist]))
            continue
        entries: list[tuple[TestCase, TestResult | None, int]] = []
        for t in tlist:
            code, stdin = build_program(str(solution), t, entry_point)
            if t.kind == "assert":
                tb = check_compiles(code, "<test>")
                if not tb.ok:
                    entries.append((t, TestResult(False, "invalid_test", tb.reason), -1))
                    continue
            entries.append((t, None, len(jobs)))
            jobs.append(_make_job(code, stdin, limits))
            codes.append(code)
        plan.append(("", entries))
    outs: list[Any] = []
    if jobs:
        sb = _default_sandbox(sandbox)
        outs = list(sb.run_many(jobs))
        if len(outs) != len(jobs):
            raise RuntimeError(f"sandbox returned {len(outs)} results for {len(jobs)} jobs")
    reports = []
    for err, entries in plan:
        results = tuple(
            fixed if fixed is not None else _classify(outs[j], t, float_tol, codes[j])
            for t, fixed, j in entries
        )
        reports.append(TestReport(results, err))
    return reports


def run_tests(
    solution: object,
    tests: Sequence[TestCase],
    *,
    sandbox: Any = None,
    limits: Any = None,
    entry_point: str | None = None,
    float_tol: float | None = None,
) -> TestReport:
    """Run ``solution`` against ``tests`` (one ``run_many`` batch) and report per test.

    >>> rep = run_tests("print(int(input()) * 2)", [TestCase.io("2", "4"), TestCase.io("3", "7")])
    >>> rep.pass_rate, rep.results[1].reason
    (0.5, "wrong answer: expected '7', got '6'")
    >>> run_tests("def f(:", [TestCase.io("", "")]).results[0].status
    'syntax_error'
    """
    return run_tests_many(
        [(solution, tests)],
        sandbox=sandbox,
        limits=limits,
        entry_point=entry_point,
        float_tol=float_tol,
    )[0]


def pass_rate(
    solution: object,
    tests: Sequence[TestCase],
    *,
    sandbox: Any = None,
    limits: Any = None,
    entry_point: str | None = None,
    float_tol: float | None = None,
) -> float:
    """Share of ``tests`` that ``solution`` passes (the code team reward ``p_k``).

    >>> pass_rate("def sq(x):\\n    return x * x", [TestCase.asserts("assert sq(3) == 9")])
    1.0
    """
    return run_tests(
        solution,
        tests,
        sandbox=sandbox,
        limits=limits,
        entry_point=entry_point,
        float_tol=float_tol,
    ).pass_rate


def smoke_test(
    solution: object,
    tests: Sequence[TestCase],
    k: int = 3,
    *,
    sandbox: Any = None,
    limits: Any = None,
    entry_point: str | None = None,
) -> Check:
    """Does ``solution`` run the first ``k`` tests without crash, timeout or memory error?

    Wrong answers are fine here (the coder's ``run`` sub-score); with no tests the program is
    run once on empty input.

    >>> smoke_test("print(1 / int(input()))", [TestCase.io("2", "9"), TestCase.io("0", "0")])
    Check(ok=False, reason='test 2: ZeroDivisionError: division by zero')
    >>> smoke_test("print(1 / int(input()))", [TestCase.io("2", "9")]).ok
    True
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    subset = list(_check_inputs(solution, tests))[:k] or [TestCase.io("", "")]
    rep = run_tests(solution, subset, sandbox=sandbox, limits=limits, entry_point=entry_point)
    for i, r in enumerate(rep.results):
        if r.crashed:
            return Check(False, f"test {i + 1}: {r.reason}")
    return Check(True)


def check_deterministic(
    code: object, stdin: str = "", *, runs: int = 2, sandbox: Any = None, limits: Any = None
) -> Check:
    """Run ``code`` on ``stdin`` ``runs`` times (one batch); same exit code and output each time?

    A run that times out, runs out of memory or truncates its output fails the check.

    >>> check_deterministic("print(sum(range(10)))").ok
    True
    >>> check_deterministic("import random\\nprint(random.random())").reason
    'different output across runs'
    """
    if runs < 2:
        raise ValueError("runs must be >= 2")
    build = check_compiles(code)
    if not build.ok:
        return Check(False, build.reason)
    sb = _default_sandbox(sandbox)
    outs = list(sb.run_many([_make_job(str(code), stdin, limits) for _ in range(runs)]))
    for r in outs:
        if r.timed_out:
            return Check(False, "timed out")
        if r.memory_exceeded:
            return Check(False, "memory limit exceeded")
        if r.output_truncated:
            return Check(False, "output limit exceeded")
    if len({(r.exit_code, r.stdout) for r in outs}) > 1:
        return Check(False, "different output across runs")
    return Check(True)
