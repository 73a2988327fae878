"""Code verifier: static checks, output comparison, result classification, real sandbox runs."""

from __future__ import annotations

import time

import pytest

import sandboxes
from verifiers.code_tests import (
    TestCase,
    check_compiles,
    check_deterministic,
    compiles,
    normalize_output,
    outputs_match,
    pass_rate,
    run_tests,
    run_tests_many,
    smoke_test,
    split_check_function,
)

# ---------------------------------------------------------------- pure parts


def test_compiles():
    assert compiles("x = 1\n") and not compiles("x = (1\n") and not compiles("")
    assert not compiles(None) and not compiles(b"print(1)")
    assert check_compiles("a\x00b").reason.startswith(("SyntaxError", "ValueError"))
    assert "line 2" in check_compiles("x = 1\ny = )\n").reason
    deep = "x = " + "(" * 5000 + ")" * 5000
    assert not check_compiles(deep).ok  # too deep for the parser: a reason, not a crash
    assert not check_compiles("x" * 300_000).ok


def test_compile_does_not_execute(tmp_path):
    marker = tmp_path / "ran"
    assert compiles(f"open({str(marker)!r}, 'w').write('x')")
    assert not marker.exists()


def test_normalize_and_match():
    assert normalize_output("a  \r\nb\t\n\n \n") == "a\nb"
    assert normalize_output("") == ""
    assert outputs_match("1 2\n3\n", "1 2\n3")
    assert not outputs_match(" 1", "1")  # leading whitespace matters
    assert not outputs_match("1\n2", "1\n\n2")
    assert outputs_match("3.0000001 x", "3 x", float_tol=1e-6)
    assert outputs_match("1000001", "1000000", float_tol=1e-6)  # relative
    assert not outputs_match("3.01 x", "3 x", float_tol=1e-6)
    assert not outputs_match("3 y", "3 x", float_tol=1e-6)
    assert outputs_match("nan", "nan ", float_tol=1e-6)
    assert not outputs_match("nan", "0", float_tol=1e-6)
    assert not outputs_match("1 2", "1", float_tol=0.5)


def test_testcase_validation():
    with pytest.raises(ValueError):
        TestCase("bogus")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        TestCase.io(1, "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        run_tests("print(1)", ["not a test"], sandbox=object())  # type: ignore[list-item]
    with pytest.raises(TypeError):
        run_tests("print(1)", TestCase.io("", ""), sandbox=object())  # type: ignore[arg-type]
    t = TestCase.io("1", "2", name="n")
    assert TestCase(**t.to_dict()) == t


def test_check_function_is_applied_to_the_entry_point(sandbox):
    sol = "def f(x):\n    return x\n"
    uncalled = TestCase.asserts("def check(candidate):\n    assert candidate(1) == 1\n")
    called = TestCase.asserts("def check(c):\n    assert c(1) == 1\ncheck(f)\n")
    wrong = TestCase.asserts("def check(c):\n    assert c(1) == 2\n")
    rep = run_tests(sol, [uncalled, called, wrong], sandbox=sandbox, entry_point="f")
    assert rep.passed_mask == (True, True, False)


def test_split_check_function():
    code = (
        "import math\n\ndef check(candidate):\n    tol = 1e-6\n"
        "    assert candidate(1) == 1\n    for i in range(3):\n        assert candidate(i) == i\n"
        "    assert abs(candidate(2.0) - 2.0) < tol\n"
    )
    parts = split_check_function(code, "f")
    assert len(parts) == 3
    for p in parts:
        assert "tol = 1e-06" in p.code and "import math" in p.code and p.code.endswith("check(f)\n")
        assert compiles(p.code)
    assert len(split_check_function("def check(c):\n    assert c(1)\n", "f")) == 1
    assert len(split_check_function("not python (", "f")) == 1


# ---------------------------------------------------------------- classification (fake sandbox)


def _res(**kw):
    base = {"exit_code": 0, "stdout": "", "stderr": ""}
    base.update(kw)
    return sandboxes.ExecResult(**base)


def test_classification_reasons(fake_sandbox):
    from sandboxes.calls import CallResult

    tests = [TestCase.io("", "5")] * 7 + [TestCase.asserts("assert f() == 1")] * 3
    tb = 'Traceback (most recent call last):\n  File "<string>", line 3, in <module>\n'
    sb = fake_sandbox(
        [
            _res(stdout="5\n"),
            _res(stdout="6\n"),
            _res(exit_code=1, stderr=tb + "ZeroDivisionError: division by zero\n"),
            _res(exit_code=None, timed_out=True),
            _res(exit_code=None, memory_exceeded=True),
            _res(stdout="5" * 100, output_truncated=True),
            _res(exit_code=None, error="worker died"),
            _res(calls=(CallResult("ok", 2),)),
            _res(calls=(CallResult("exc", exc_type="KeyError", message="'k'"),)),
            # an exit code of 0 proves nothing: the test's result is missing
            _res(stderr=tb + "AssertionError\n"),
        ]
    )
    rep = run_tests("def f(): pass", tests, sandbox=sb)
    got = [(r.status, r.reason) for r in rep.results]
    assert got[0] == ("passed", "ok")
    assert got[1] == ("wrong_answer", "wrong answer: expected '5', got '6'")
    assert got[2] == ("runtime_error", "ZeroDivisionError: division by zero")
    assert got[3][0] == "timeout" and got[4][0] == "memory" and got[5][0] == "output_limit"
    assert got[6] == ("sandbox_error", "sandbox error: worker died")
    assert got[7] == ("wrong_answer", "assertion failed: assert f() == 1; the program returned 2")
    assert got[8] == ("runtime_error", "KeyError: 'k'")
    assert got[9][0] == "runtime_error" and "exited before the test" in got[9][1]
    assert rep.n_passed == 1 and rep.pass_rate == pytest.approx(1 / 10)
    assert rep.results[1].expected == "5" and rep.results[1].actual == "6"
    crashed = [r.crashed for r in rep.results]
    assert crashed == [False, False, True, True, True, True, True, False, True, True]


def test_long_outputs_are_clipped(fake_sandbox):
    sb = fake_sandbox([_res(stdout="x" * 100_000)])
    r = run_tests("print(1)", [TestCase.io("", "y" * 100_000)], sandbox=sb).results[0]
    assert len(r.reason) < 800 and len(r.actual) <= 300 and len(r.expected) <= 300


def test_syntax_error_runs_nothing(fake_sandbox):
    sb = fake_sandbox([])
    rep = run_tests("def f(:\n", [TestCase.io("", "")] * 3, sandbox=sb)
    assert [r.status for r in rep.results] == ["syntax_error"] * 3
    assert not rep.compiled and "SyntaxError" in rep.compile_error and sb.jobs == []
    rep = run_tests("x = 1", [TestCase.asserts("assert x ==")], sandbox=sb)
    assert rep.results[0].status == "invalid_test" and sb.jobs == []


# ---------------------------------------------------------------- real sandbox


def test_stdio_program(sandbox):
    prog = "a, b = map(int, input().split())\nprint(a + b)\nprint()\n"
    tests = [TestCase.io("1 2", "3"), TestCase.io("5 5", "10\n\n"), TestCase.io("2 2", "5")]
    rep = run_tests(prog, tests, sandbox=sandbox)
    assert rep.passed_mask == (True, True, False)
    assert rep.results[2].reason == "wrong answer: expected '5', got '4'"


def test_assert_program_and_failures(sandbox):
    sol = "def add(a, b):\n    return a + b\n"
    tests = [
        TestCase.asserts("assert add(1, 2) == 3"),
        TestCase.asserts("assert add(1, 2) == 4, 'off by one'"),
        TestCase.asserts("assert mul(1, 2) == 2"),
        TestCase.asserts("while True:\n    pass"),
    ]
    lim = sandboxes.Limits(wall_s=1.0, cpu_s=1.0)
    rep = run_tests(sol, tests, sandbox=sandbox, limits=lim)
    st = [r.status for r in rep.results]
    assert st == ["passed", "wrong_answer", "runtime_error", "timeout"]
    assert "assert add(1, 2) == 4" in rep.results[1].reason
    assert "off by one" in rep.results[1].reason
    assert rep.results[2].reason == "NameError: name 'mul' is not defined"


def test_memory_and_output_limits(sandbox):
    lim = sandboxes.Limits(wall_s=5, cpu_s=5, memory_mb=128, max_output_bytes=10_000)
    hog = "x = bytearray(600 * 1024 * 1024)\nprint(len(x))"
    spam = "print('y' * 1_000_000)"
    rep = run_tests_many(
        [(hog, [TestCase.io("", "0")]), (spam, [TestCase.io("", "")])],
        sandbox=sandbox,
        limits=lim,
    )
    assert rep[0].results[0].status in ("memory", "runtime_error")
    assert not rep[0].results[0].passed
    assert rep[1].results[0].status == "output_limit"


def test_pass_rate_and_smoke(sandbox):
    prog = "n = int(input())\nprint(10 // n)"
    tests = [
        TestCase.io("2", "5"),
        TestCase.io("5", "2"),
        TestCase.io("3", "4"),
        TestCase.io("0", ""),
    ]
    assert pass_rate(prog, tests, sandbox=sandbox) == pytest.approx(0.5)
    assert smoke_test(prog, tests, k=3, sandbox=sandbox).ok  # wrong answer is not a crash
    bad = smoke_test(prog, tests, k=4, sandbox=sandbox)
    assert not bad and bad.reason == "test 4: ZeroDivisionError: integer division or modulo by zero"
    assert not smoke_test("def f(:", tests, sandbox=sandbox).ok
    assert smoke_test("print('hi')", [], sandbox=sandbox).ok


def test_determinism(sandbox):
    assert check_deterministic("print(sorted({3, 1, 2}))", sandbox=sandbox).ok
    assert check_deterministic("print(input()[::-1])", "abc", sandbox=sandbox).ok
    nondet = "import os\nprint(os.urandom(8).hex())"
    assert check_deterministic(nondet, sandbox=sandbox).reason == "different output across runs"
    lim = sandboxes.Limits(wall_s=0.5, cpu_s=0.5)
    assert check_deterministic("while 1: pass", sandbox=sandbox, limits=lim).reason == "timed out"
    assert not check_deterministic("print(", sandbox=sandbox).ok


def test_batching_uses_one_run_many(sandbox):
    calls = []

    class Spy:
        def run_many(self, jobs):
            jobs = list(jobs)
            calls.append(len(jobs))
            return sandbox.run_many(jobs)

    items = [(f"print({i})", [TestCase.io("", str(i)), TestCase.io("", "x")]) for i in range(5)]
    reps = run_tests_many(items, sandbox=Spy())
    assert calls == [10]
    assert [r.passed_mask for r in reps] == [(True, False)] * 5


def test_humaneval_check_split_matches_whole(sandbox):
    from envs.data import load_humaneval

    whole = {p.id: p for p in load_humaneval()[:10]}
    split = load_humaneval(split_tests=True)[:10]
    items = [(p.golden_solution, list(p.tests)) for p in split]
    for p, rep in zip(split, run_tests_many(items, sandbox=sandbox, entry_point=None)):
        assert rep.all_passed, (p.id, [r.reason for r in rep.results if not r.passed])
        assert len(p.tests) >= len(whole[p.id].tests)


def test_humaneval_canonical_solutions_all_pass(sandbox):
    """Oracle: all 164 canonical solutions pass their own check() in one batch (~1-3 s)."""
    from envs.data import load_humaneval

    problems = load_humaneval()
    t = time.perf_counter()
    reports = run_tests_many(
        [(p.golden_solution, list(p.tests)) for p in problems],
        sandbox=sandbox,
        limits=sandboxes.Limits(wall_s=10, cpu_s=10),
    )
    failures = {
        p.id: rep.results[0].reason for p, rep in zip(problems, reports) if not rep.all_passed
    }
    assert failures == {}
    assert len(reports) == 164
    assert time.perf_counter() - t < 60


def test_humaneval_wrong_solution_fails(sandbox):
    from envs.data import load_humaneval

    p = load_humaneval()[0]
    wrong = p.prompt + "    return False\n"
    rep = run_tests(wrong, list(p.tests), sandbox=sandbox)
    assert rep.results[0].status == "wrong_answer"
    assert rep.results[0].reason.startswith("assertion failed: assert candidate(")
