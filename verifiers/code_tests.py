"""Running programs against test cases in a sandbox (AT-GRPO Appendix A.1.2), with a verdict
the program cannot touch.

Two kinds of test case (:class:`TestCase`):

* ``stdio`` (APPS / CodeContests style): the program reads ``stdin`` and its output must equal
  ``expected_stdout`` after normalisation (line endings unified, trailing whitespace stripped per
  line, trailing blank lines dropped); with ``float_tol`` numeric tokens may differ by that much
  (absolute or relative). The output is compared here, on the host; the expected output never
  enters the sandbox.
* ``assert`` (HumanEval / MBPP style): ``code`` is Python that checks the program, e.g. a list of
  ``assert`` statements, or a ``def check(candidate)`` which is then called on ``entry_point``.

How an assert test is decided (the design, and why)
---------------------------------------------------
A policy under RL optimises against its verifier, so the verdict must be out of the program's
reach. The classic harness (test code appended to the program, one process, "exit code 0 means
passed", as in HumanEval's ``check``) is forgeable from inside: ``os._exit(0)``, ``sys.exit``,
``atexit`` / ``sys.excepthook`` handlers, an object whose ``__eq__`` is always true, a patched
``builtins`` or ``sys.modules['json']``, or reading the expected values from the program's own
file or stack frames. evalplus's ``untrusted_check`` already separates a test into inputs and
expected outputs, but hands both to the process that runs the program, compares there
(``out == exp``: the program's ``__eq__`` answers) and reads the verdict from shared memory that
process can write. LiveCodeBench's and APPS's graders likewise call the function in-process and
compare with ``==``; for stdin problems they compare the captured output *as text*, never an
object of the program's. That last idea is the one kept here, moved out of the program's
process, and applied to function tests too:

1. The host reads the test (:mod:`verifiers.assert_plans`): which calls of the program it makes
   (``f(2)``; a ``Solution().method``), with which plain arguments.
2. The program's sandbox job runs the program and then *only those calls*
   (:mod:`sandboxes.calls`); each result comes back as plain data (:mod:`sandboxes.plain`:
   built-in types only, so no object of the program's making reaches a comparison), on a channel
   of its own (fd 3, not stdout) in lines tagged with a random per-job nonce, and the job process
   ends right after the last result, so no exit handler, thread or ``__del__`` of the program
   runs after it. The job never holds the test's source or an expected value.
3. The host evaluates the test over those values (:mod:`verifiers.host_eval`: a bounded
   evaluator of a safe subset of Python) and decides each test. A result that is missing,
   malformed or duplicated fails the test, whatever the exit code.

Tests the host evaluator does not handle (helper functions, ``try``, random inputs, prelude
helpers applied to the program's output) are *replayed*: the test runs in a sandbox job of its
own that holds the trusted prelude and the test but not the program, and takes the program's
calls from a table of plain results (:mod:`verifiers._replay`); unknown calls are sent to the
program's job in another round. Either way the program never runs where the expected values
are, and the test never runs where the program is.

Every job of a batch goes through ``sandbox.run_many`` (one batch per round). Each test gets a
:class:`TestResult` with a status and a short reason: ``passed``, ``wrong_answer`` (expected and
actual output clipped, or the failing assert with what the program returned), ``runtime_error``
(the program raised or exited before the test got its result), ``timeout`` (wall or CPU time),
``memory``, ``output_limit``, ``syntax_error`` (the program does not compile; nothing is run),
``invalid_test`` (the test code itself does not compile or is too big) or ``sandbox_error`` (the
sandbox failed, not the program; still a failed test). Syntax is checked in-process with
``compile()``, which does not execute anything.

Verifiers take the sandbox as a parameter (default: ``sandboxes.default()``); they never create
one. Wrong argument types raise ``TypeError``; anything a model wrote only ever becomes a result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verifiers import diff_tests
from verifiers.plain_tests import (
    MAX_ROUNDS,
    TestCase,
    TestReport,
    TestResult,
    _check_inputs,
    _default_sandbox,
    normalize_output,
    outputs_match,
    run_plain_tests_many,
    split_check_function,
)
from verifiers.source_checks import (
    MAX_SOURCE_CHARS,
    Check,
    bounded_parse,
    check_compiles,
    compiles,
)

__all__ = [
    "MAX_ROUNDS",
    "bounded_parse",
    "TestCase",
    "TestResult",
    "TestReport",
    "Check",
    "MAX_SOURCE_CHARS",
    "check_compiles",
    "compiles",
    "normalize_output",
    "outputs_match",
    "split_check_function",
    "run_tests",
    "run_tests_many",
    "pass_rate",
    "smoke_test",
    "check_deterministic",
]


def run_tests_many(
    items: Sequence[tuple[object, Sequence[TestCase]] | tuple[object, Sequence[TestCase], str]],
    *,
    sandbox: Any = None,
    limits: Any = None,
    entry_point: str | None = None,
    float_tol: float | None = None,
    prelude: str = "",
    trusted_tests: bool = True,
) -> list[TestReport]:
    """Run several ``(solution, tests)`` pairs; one report each (see the module docstring).

    ``prelude``: trusted code put before every solution (starter-code imports and helpers); a
    test that calls its helpers gets their real definitions. An item may bring its own as a
    third element, ``(solution, tests, prelude)``. A solution that does not compile gets every
    test marked ``syntax_error`` and runs nothing. Lists may hold differential tests
    (:mod:`verifiers.diff_tests`, the verdict on the host in evalplus's semantics) beside
    ``stdio`` and ``assert`` ones.

    ``trusted_tests=False``: the tests were written by a policy (a tester's): an assert test the
    host cannot decide as written never runs where a program's results are; it is written out
    as plain asserts in a job of its own and decided on the host, or it is invalid
    (:mod:`verifiers.assert_plans`).
    """
    has_diff = any(
        isinstance(item, tuple | list)
        and len(item) > 1
        and isinstance(item[1], Sequence)
        and any(isinstance(t, TestCase) and diff_tests.is_diff_test(t) for t in item[1])
        for item in items
    )
    run = diff_tests.run_with_differential if has_diff else run_plain_tests_many
    return run(
        items,
        sandbox=sandbox,
        limits=limits,
        entry_point=entry_point,
        float_tol=float_tol,
        prelude=prelude,
        trusted_tests=trusted_tests,
    )


def run_tests(
    solution: object,
    tests: Sequence[TestCase],
    *,
    sandbox: Any = None,
    limits: Any = None,
    entry_point: str | None = None,
    float_tol: float | None = None,
    prelude: str = "",
    trusted_tests: bool = True,
) -> TestReport:
    """Run ``solution`` against ``tests`` and report per test (``prelude``, ``trusted_tests``:
    see :func:`run_tests_many`).

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
        prelude=prelude,
        trusted_tests=trusted_tests,
    )[0]


def pass_rate(
    solution: object,
    tests: Sequence[TestCase],
    *,
    sandbox: Any = None,
    limits: Any = None,
    entry_point: str | None = None,
    float_tol: float | None = None,
    prelude: str = "",
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
        prelude=prelude,
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
    from sandboxes import Job

    sb = _default_sandbox(sandbox)
    outs = list(sb.run_many([Job(str(code), stdin, limits) for _ in range(runs)]))
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
