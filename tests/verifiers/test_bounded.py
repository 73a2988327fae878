"""The bounded worker of host-side checks (:mod:`verifiers._bounded`): answers, deadlines,
memory, recovery."""

from __future__ import annotations

import time

import pytest

from sandboxes.calls import CallResult
from tests.cost import cpu_cost
from verifiers import _bounded
from verifiers.assert_plans import plan_test, static_verdict
from verifiers.host_eval import INLINE_WORK
from verifiers.source_checks import INLINE_COMPILE_CHARS, check_compiles


def test_long_programs_compile_in_the_worker():
    good = "x = 1\n" * (INLINE_COMPILE_CHARS // 6 + 10)
    assert check_compiles(good).ok
    bad = good + "def f(:\n"
    assert check_compiles(bad).reason.startswith("SyntaxError: invalid syntax")


def test_a_request_past_its_deadline_fails_and_the_worker_is_replaced():
    slow = "x = 1\n" * 30_000
    with pytest.raises(_bounded.BoundedError, match="took more than"):
        _bounded.call("compile", slow, "<s>", timeout_s=0.001)
    assert _bounded.call("compile", "x = 1\n", "<s>") == [True, "ok"]


def test_a_worker_error_is_reported_and_the_worker_kept():
    with pytest.raises(_bounded.BoundedError) as info:
        _bounded.call("compile", 12, "<s>")
    assert info.value.reported
    assert _bounded.call("compile", "y = 2\n", "<s>") == [True, "ok"]


def test_tests_past_the_inline_budget_are_decided_in_the_worker():
    """A test whose work passes the in-process budget is planned and decided by the worker,
    with the full budget: the same verdicts as in-process evaluation would give."""
    n = INLINE_WORK // 1000 + 50  # comparing n lists of 1,000 items each: past the budget
    code = f"rows = [list(range(1000)) for _ in range({n})]\nassert f(3) == len(rows) - {n - 9}"
    plan = plan_test(code, "f")
    assert plan.static and plan.remote
    with cpu_cost(time.thread_time) as spent:
        assert static_verdict(plan, [CallResult("ok", 9)]).passed
        out = static_verdict(plan, [CallResult("ok", 8)])
    assert not out.passed and out.status == "wrong_answer"
    assert spent.seconds < 0.2  # (this thread only waited)


def test_long_tests_are_parsed_and_planned_in_the_worker():
    """Parsing a long test costs the host real CPU (and full garbage collections): past
    ``INLINE_COMPILE_CHARS`` the worker plans it; short tests with the same meaning stay here."""
    setup = "x = 1\n" * (INLINE_COMPILE_CHARS // 6 + 10)
    long = plan_test(setup + "assert f(x) == 2", "f")
    assert long.static and long.remote and len(long.calls) == 1
    with cpu_cost(time.thread_time) as spent:
        assert static_verdict(long, [CallResult("ok", 2)]).passed
        assert not static_verdict(long, [CallResult("ok", 3)]).passed
    assert spent.seconds < 0.2  # (this thread only waited)
    short = plan_test("x = 1\nassert f(x) == 2", "f")
    assert short.static and not short.remote and short.calls == long.calls
