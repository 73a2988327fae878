"""Differential tests with the verdict on the host, in evalplus's semantics (HumanEval+, MBPP+).

evalplus tests a candidate function by calling it on many inputs and comparing each result with
the canonical solution's (``evalplus/eval/__init__.py``, ``unsafe_execute``). Here the expected
values never enter the sandbox (docs/design.md section 5): one sandbox job per program runs the
candidate and then calls its entry point on each input through the calls channel of
:mod:`sandboxes.calls` (results as plain data, one nonce-tagged line per call on fd 3, the job
ending right after the last call), and the host compares each result with the expected value it
kept. A program cannot print fake results (stdout is not the channel and the nonce is unknown to
it), cannot make a comparison on the host succeed with a custom ``__eq__`` (results come back as
fresh built-in values), and a missing result (the program exited, crashed or hung first) fails.

Test format. A differential test is a :class:`~verifiers.code_tests.TestCase` of kind ``stdio``
whose name starts with ``evalplus:`` (:func:`make_test`): ``stdin`` holds the argument list in the
plain encoding, ``expected_stdout`` a JSON spec the host keeps (expected value, ``atol``, the
dataset and entry point for evalplus's special oracles, the canonical solution's time per input),
and ``code`` the same check as an exact ``assert`` (:func:`as_assert`: shown to people and used
by the code setting's oracle tester; never run here). :func:`verifiers.code_tests.run_tests_many`
runs lists that mix both kinds (through :func:`run_with_differential`). Run through a plain stdio
runner by mistake, a differential test fails, never passes.

Time. The job's wall limit is ``max(limits.wall_s, min(60 s, sum of the per-input limits)) + 1``
with a per-input limit of ``max(limits.wall_s, 4 x the canonical time per input)`` (evalplus:
``max(4 s, 4 x ref)`` per input, ``EVALPLUS_TIMEOUT_PER_TASK`` for the task). The calls run one
after the other in that job; when it is stopped, the first call without a result failed (timeout,
crash or memory) and the calls after it are not run and fail too (evalplus fails the whole task).
Unlike evalplus, one slow input does not fail on its own while the job's total stays in budget.

Comparison (:func:`judge`), as evalplus: ``out == exp``; evalplus's special oracles (MBPP
``are_equivalent``, ``sum_div``, ``surface_Area``, ``digit_distance_nums``, the set-equality and
output-not-None tasks; HumanEval ``find_zero`` by ``|poly(xs, x)| <= atol``); then, when
``atol == 0`` and the expected value is a float or a non-empty list/tuple of floats, ``atol =
1e-6`` (and, as in evalplus, that ``atol`` holds for the later inputs of the same base/plus
group); when not equal and ``atol != 0``: same type, same length, ``numpy.allclose(out, exp,
rtol=1e-07, atol=atol)``.

Values (:func:`encode` / :func:`decode`) use :mod:`sandboxes.plain`, the encoding of the calls
channel itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from sandboxes import plain
from sandboxes.calls import Call, CallResult
from verifiers.extract import clip_text
from verifiers.plain_tests import TestCase, TestReport, TestResult, run_plain_tests_many
from verifiers.source_checks import check_compiles

__all__ = [
    "MARKER",
    "RUNNER_VERSION",
    "decode",
    "encode",
    "is_diff_test",
    "judge",
    "make_test",
    "run_inputs",
    "run_with_differential",
]

MARKER = "evalplus:"
RUNNER_VERSION = "calls-1"
"""Changes whenever expected outputs computed by :func:`run_inputs` could differ (cache keys)."""
TASK_TIMEOUT_S = 60.0
"""Cap of one program's whole run (evalplus's ``EVALPLUS_TIMEOUT_PER_TASK``)."""
TIME_FACTOR = 4.0
"""Per-input limit = max(min limit, factor x canonical time) (evalplus's default factor)."""
_CLIP = 300

encode = plain.encode
decode = plain.decode


# ---------------------------------------------------------------- test cases


def make_test(
    args: Sequence[Any],
    expected: Any,
    *,
    atol: float,
    dataset: str,
    entry_point: str,
    ref_s: float,
    name: str,
) -> TestCase:
    """A differential test: call ``entry_point(*args)``, compare with ``expected``.

    >>> t = make_test([2, 3], 5, atol=0, dataset="humaneval", entry_point="add", ref_s=0.0,
    ...               name="add:base:0")
    >>> t.name, is_diff_test(t), decode(json.loads(t.stdin)), t.code
    ('evalplus:add:base:0', True, [2, 3], 'assert add(2, 3) == 5')
    """
    spec = {
        "expected": encode(expected),
        "atol": float(atol),
        "dataset": dataset,
        "entry": entry_point,
        "ref_s": float(ref_s),
    }
    return TestCase(
        "stdio",
        stdin=json.dumps(encode(list(args))),
        expected_stdout=json.dumps(spec),
        code=as_assert(entry_point, args, expected, dataset),
        name=MARKER + name,
    )


def as_assert(entry_point: str, args: Sequence[Any], expected: Any, dataset: str) -> str:
    """The test as one exact ``assert`` statement, for people and for the code setting's oracle
    tester (never run by :func:`verifiers.code_tests.run_tests_many`); ``""`` when the values have
    no literal form (NaN, infinities, opaque objects) or it would exceed 2000 characters.

    >>> as_assert("add", [2, 3], 5, "humaneval")
    'assert add(2, 3) == 5'
    """
    import ast

    try:
        shown_args = ", ".join(repr(a) for a in args)
        shown_exp = repr(expected)
        for text, value in ((f"[{shown_args}]", list(args)), (shown_exp, expected)):
            if len(text) > 2000 or ast.literal_eval(text) != value:
                return ""
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return ""
    call = f"{entry_point}({shown_args})"
    if dataset == "mbpp" and entry_point in MBPP_OUTPUT_NOT_NONE_TASKS:
        return f"assert ({call} is not None) == {shown_exp}"
    return f"assert {call} == {shown_exp}"


def is_diff_test(test: TestCase) -> bool:
    return test.kind == "stdio" and test.name.startswith(MARKER)


def _spec(test: TestCase) -> dict[str, Any]:
    spec = json.loads(test.expected_stdout)
    spec["expected"] = decode(spec["expected"])
    return spec


def _group(test: TestCase) -> str:
    """The base/plus group of a test (``evalplus:TASK:GROUP:I``): atol carries within it."""
    return test.name.rsplit(":", 1)[0]


# ---------------------------------------------------------------- evalplus's comparison


def _poly(xs: list, x: float) -> float:
    """evalplus's oracle for HumanEval/32 (``find_zero``)."""
    return sum(coeff * math.pow(x, i) for i, coeff in enumerate(xs))


def _surface_area(base_edge: float, height: float) -> int:
    """evalplus's oracle for Mbpp/581."""
    slant = math.sqrt((base_edge / 2) ** 2 + height**2)
    return round(base_edge**2 + 4 * (base_edge * slant) / 2)


def _digit_distance_nums(num1: int, num2: int) -> int:
    """evalplus's oracle for Mbpp/558."""
    a, b = str(num1), str(num2)
    n = max(len(a), len(b))
    return sum(abs(int(x) - int(y)) for x, y in zip(a.zfill(n), b.zfill(n)))


MBPP_OUTPUT_NOT_NONE_TASKS = ("check_str", "text_match_three", "text_starta_endb")


MBPP_OUTPUT_SET_EQ_TASKS = (
    "similar_elements",
    "find_char_long",
    "common_in_nested_lists",
    "extract_singly",
    "larg_nnum",
    "intersection_array",
    "find_dissimilar",
    "Diff",
)


def is_floats(x: Any) -> bool:
    """evalplus's ``is_floats``: a float, or a non-empty list/tuple of floats."""
    if isinstance(x, float):
        return True
    if isinstance(x, list | tuple) and x:
        return all(isinstance(i, float) for i in x)
    return False


def judge(
    out: Any, exp: Any, *, atol: float, dataset: str, entry: str, args: Sequence[Any]
) -> tuple[bool, float]:
    """evalplus's verdict on one output: ``(passed, atol for the next inputs of the group)``.

    >>> judge(0.1 + 0.2, 0.3, atol=0, dataset="humaneval", entry="f", args=())
    (True, 1e-06)
    >>> judge([1.0, 2.0], (1.0, 2.0), atol=1e-6, dataset="humaneval", entry="f", args=())
    (False, 1e-06)
    >>> judge({2, 1}, {1, 2}, atol=0.0, dataset="mbpp", entry="f", args=())
    (True, 0.0)
    """
    try:
        exact = bool(out == exp)
        if dataset == "mbpp":
            if entry == "are_equivalent":
                exact = True
            elif entry == "sum_div":
                exact = exact or out == 0
            elif entry == "surface_Area":
                exact = exact or abs(out - _surface_area(*args)) <= atol
            elif entry == "digit_distance_nums":
                exact = exact or out == _digit_distance_nums(*args)
            elif entry in MBPP_OUTPUT_SET_EQ_TASKS:
                exact = set(out) == set(exp)
            elif entry in MBPP_OUTPUT_NOT_NONE_TASKS:
                exact = out == exp if isinstance(out, bool) else exp == (out is not None)
        if dataset == "humaneval" and entry == "find_zero":
            return len(args) == 1 and abs(_poly(args[0], out)) <= atol, atol
    except Exception:
        return False, atol
    if atol == 0 and is_floats(exp):
        atol = 1e-6  # evalplus enforces a tolerance on float outputs
    if exact or atol == 0:
        return exact, atol
    try:
        import numpy as np

        if type(out) is not type(exp):
            return False, atol
        if isinstance(exp, list | tuple) and len(out) != len(exp):
            return False, atol
        return bool(np.allclose(out, exp, rtol=1e-07, atol=atol)), atol
    except Exception:
        return False, atol


def _show(value: Any) -> str:
    try:
        return clip_text(repr(value), _CLIP)
    except Exception:
        return "<unprintable>"


def per_input_limits(tests: Sequence[TestCase], min_s: float) -> list[float]:
    """``max(min_s, 4 x the canonical run time)`` per test."""
    return [max(min_s, TIME_FACTOR * float(json.loads(t.expected_stdout)["ref_s"])) for t in tests]


# ---------------------------------------------------------------- running


def _call(entry: str, encoded_args: str) -> Call:
    """``entry(*args)`` for an argument list stored in the plain encoding."""
    tree = json.loads(encoded_args)
    if not (isinstance(tree, list) and len(tree) == 2 and tree[0] == "l"):
        raise ValueError("a differential test's input must be an encoded argument list")
    return Call((entry,), ["t", tree[1]])


def run_inputs(
    programs: Sequence[tuple[str, str, Sequence[str], Sequence[float]]],
    *,
    sandbox: Any = None,
    limits: Any = None,
    task_timeout_s: float = TASK_TIMEOUT_S,
) -> list[tuple[Any, tuple[CallResult | None, ...]]]:
    """Run ``(program, entry_point, encoded argument lists, per-input limits)`` items, one
    sandbox job each (one ``run_many`` batch): ``(ExecResult, one CallResult or None per
    input)`` each. A job's wall limit is ``max(limits.wall_s, min(task_timeout_s, sum of the
    per-input limits)) + 1``."""
    import sandboxes

    sb = sandbox if sandbox is not None else sandboxes.default()
    base = limits if limits is not None else sandboxes.Limits()
    jobs = []
    for program, entry, inputs, per_input in programs:
        wall = max(base.wall_s, min(task_timeout_s, float(sum(per_input)))) + 1.0
        job_limits = sandboxes.Limits(
            wall_s=wall,
            cpu_s=wall,
            memory_mb=base.memory_mb,
            max_output_bytes=base.max_output_bytes,
            max_procs=base.max_procs,
            max_file_mb=base.max_file_mb,
            max_open_files=base.max_open_files,
        )
        calls = tuple(_call(entry, x) for x in inputs)
        jobs.append(sandboxes.Job(program, "", job_limits, calls=calls))
    results = sb.run_many(jobs) if jobs else []
    out = []
    for (_, _, inputs, _), res in zip(programs, results):
        got = tuple(res.calls)[: len(inputs)]
        out.append((res, got + (None,) * (len(inputs) - len(got))))
    return out


def _stopped(res: Any) -> TestResult:
    """The result of the first input without a result: why the job stopped there."""
    dur = float(getattr(res, "duration_s", 0.0) or 0.0)
    if res.error:
        return TestResult(False, "sandbox_error", f"sandbox error: {res.error}", duration_s=dur)
    if res.timed_out:
        return TestResult(False, "timeout", "time limit exceeded", duration_s=dur)
    if res.memory_exceeded:
        return TestResult(False, "memory", "memory limit exceeded", duration_s=dur)
    lines = [ln for ln in (res.stderr or "").strip().splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else f"exit code {res.exit_code}, no result"
    return TestResult(False, "runtime_error", clip_text(last, _CLIP), duration_s=dur)


def _verdicts(
    tests: list[TestCase], res: Any, got: tuple[CallResult | None, ...]
) -> list[TestResult]:
    out: list[TestResult] = []
    carried: dict[str, float] = {}
    stop: TestResult | None = None
    for test, rec in zip(tests, got):
        if stop is not None:  # the job ended at an earlier input
            why = "timed out" if stop.status == "timeout" else f"failed ({stop.reason})"
            out.append(TestResult(False, stop.status, f"not run: an earlier input {why}"))
            continue
        if rec is None:
            stop = _stopped(res)
            out.append(stop)
            continue
        if rec.status == "exc":
            reason = clip_text(f"{rec.exc_type}: {rec.message}", _CLIP)
            out.append(TestResult(False, "runtime_error", reason))
            continue
        if rec.status != "ok":
            why = "result too large" if rec.status == "big" else "malformed result"
            out.append(TestResult(False, "wrong_answer", why))
            continue
        spec = _spec(test)
        group = _group(test)
        atol = carried.get(group, spec["atol"])
        args = list(decode(json.loads(test.stdin)))  # type: ignore[call-overload]
        ok, carried[group] = judge(
            rec.value, spec["expected"], atol=atol, dataset=spec["dataset"],
            entry=spec["entry"], args=args,
        )  # fmt: skip
        shown_e, shown_a = _show(spec["expected"]), _show(rec.value)
        if ok:
            out.append(TestResult(True, "passed", "ok", shown_e, shown_a))
        else:
            reason = f"wrong answer: expected {shown_e}, got {shown_a}"
            out.append(TestResult(False, "wrong_answer", reason, shown_e, shown_a))
    return out


def run_with_differential(
    items: Sequence[tuple[object, Sequence[TestCase]] | tuple[object, Sequence[TestCase], str]],
    *,
    sandbox: Any = None,
    limits: Any = None,
    entry_point: str | None = None,
    float_tol: float | None = None,
    prelude: str = "",
    trusted_tests: bool = True,
) -> list[TestReport]:
    """What :func:`verifiers.code_tests.run_tests_many` runs for lists holding differential
    tests (module docstring): those with host-side verdicts, every other test by the plain runner
    (:func:`verifiers.plain_tests.run_plain_tests_many`). An item's prelude (trusted starter code)
    goes before the program of its differential job too."""
    import sandboxes

    base = limits if limits is not None else sandboxes.Limits()
    plain_items: list[tuple[object, list[TestCase], str]] = []
    diff_items: list[tuple[str, str, list[str], list[float]]] = []
    plan = []
    for item in items:
        solution, tests = item[0], item[1]
        pre = str(item[2]) if len(item) > 2 else prelude  # type: ignore[misc]
        tlist = list(tests)
        diff = [t for t in tlist if is_diff_test(t)]
        build = check_compiles(solution)
        slot = None
        if diff and build.ok:
            entry = json.loads(diff[0].expected_stdout)["entry"]
            slot = len(diff_items)
            program = f"{pre.rstrip()}\n\n{solution}" if pre.strip() else str(solution)
            inputs = [t.stdin for t in diff]
            diff_items.append((program, entry, inputs, per_input_limits(diff, base.wall_s)))
        plan.append((tlist, diff, len(plain_items), slot, build))
        plain_items.append((solution, [t for t in tlist if not is_diff_test(t)], pre))
    plain_reports = run_plain_tests_many(
        plain_items,
        sandbox=sandbox,
        limits=limits,
        entry_point=entry_point,
        float_tol=float_tol,
        trusted_tests=trusted_tests,
    )
    diff_runs = run_inputs(diff_items, sandbox=sandbox, limits=base)
    reports = []
    for tlist, diff, p_idx, slot, build in plan:
        plain_results = iter(plain_reports[p_idx].results)
        if slot is None:
            diff_results = iter([TestResult(False, "syntax_error", build.reason)] * len(diff))
        else:
            diff_results = iter(_verdicts(diff, *diff_runs[slot]))
        results = tuple(next(diff_results if is_diff_test(t) else plain_results) for t in tlist)
        reports.append(TestReport(results, "" if build.ok else build.reason))
    return reports
