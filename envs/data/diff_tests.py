"""Differential tests with the verdict on the host, in evalplus's semantics (HumanEval+, MBPP+).

evalplus tests a candidate function by calling it on many inputs and comparing each result with
the canonical solution's (``evalplus/eval/__init__.py``, ``unsafe_execute``). Here the expected
values never enter the sandbox (DESIGN.md section 9): the sandbox runs the candidate program
followed by a small driver that reads the *inputs* from stdin, calls the entry point on each
(stdout/stderr/stdin swallowed, a per-input time limit), and prints each result serialised; the
host decodes the results and compares them with the expected values it kept.

Test format. A differential test is a :class:`~verifiers.code_tests.TestCase` of kind
``stdio`` whose name starts with ``evalplus:`` (:func:`make_test`): ``stdin`` holds the encoded
argument list, ``expected_stdout`` a JSON spec the host keeps (expected value, ``atol``, the
dataset and entry point for evalplus's special oracles, the canonical solution's run time), and
``code`` the same check as an exact ``assert`` (:func:`as_assert`: shown to people and used by the
code setting's oracle tester; never run by the differential runner).
:func:`run_tests_many` has the signature of :func:`verifiers.code_tests.run_tests_many` and
hands every other test to it, so lists may mix both kinds. Run through a plain stdio runner by
mistake, a differential test fails (the program prints nothing), never passes.

One sandbox job runs all differential tests of one program (one job per program, batched with
``run_many``); the driver's header carries per-input time limits ``max(limits.wall_s, 4 x the
canonical run time)`` (evalplus: ``max(4 s, 4 x ref)``) and the job's wall limit is ``min(60 s,
sum of them) + 1`` (evalplus: ``EVALPLUS_TIMEOUT_PER_TASK``). The driver stops at the first
input that times out; it and the inputs after it fail (evalplus fails the whole task then).

Comparison (:func:`judge`), as evalplus: ``out == exp``; evalplus's special oracles (MBPP
``are_equivalent``, ``sum_div``, ``surface_Area``, ``digit_distance_nums``, the set-equality and
output-not-None tasks; HumanEval ``find_zero`` by ``|poly(xs, x)| <= atol``); then, when
``atol == 0`` and the expected value is a float or a non-empty list/tuple of floats, ``atol =
1e-6`` (and, as in evalplus, that ``atol`` holds for the later inputs of the same base/plus
group); when not equal and ``atol != 0``: same type, same length, ``numpy.allclose(out, exp,
rtol=1e-07, atol=atol)``. Results are rebuilt on the host as plain Python values (int, float,
complex, str, bytes, None, bool, list, tuple, dict, set, frozenset; subclasses become their base
type), so an object with a forged ``__eq__`` (which passes evalplus itself) compares as what it
is: a value of another type equals nothing.

Value encoding (:func:`encode` / :func:`decode`, the same source inside the sandbox): JSON with
tags: ``{"__t": [...]}`` tuple, ``{"__s": [...]}`` set, ``{"__f": [...]}`` frozenset,
``{"__d": [[k, v], ...]}`` dict, ``{"__c": [re, im]}`` complex, ``{"__b": base64}`` bytes,
``{"__i": hex}`` an int beyond 2**63, ``{"__o": type name}`` anything else; floats keep
NaN/Infinity.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from verifiers.code_tests import (
    TestCase,
    TestReport,
    TestResult,
    check_compiles,
)
from verifiers.code_tests import run_tests_many as run_plain_tests_many
from verifiers.extract import clip_text

__all__ = [
    "MARKER",
    "decode",
    "encode",
    "is_diff_test",
    "judge",
    "make_test",
    "run_inputs",
    "run_tests_many",
]

MARKER = "evalplus:"
TASK_TIMEOUT_S = 60.0
"""Cap of one program's whole run (evalplus's ``EVALPLUS_TIMEOUT_PER_TASK``)."""
TIME_FACTOR = 4.0
"""Per-input limit = max(min limit, factor x canonical time) (evalplus's default factor)."""
MAX_VALUE_CHARS = 1 << 20
"""An encoded result longer than this counts as an error (``output too large``)."""
MIN_OUTPUT_BYTES = 16 << 20
_CLIP = 300
_START = "\x1emas-difftest-start\x1e"
_END = "\x1emas-difftest-end\x1e"

# The codec runs on the host (exec'd below) and, verbatim, inside the sandbox before the driver.
CODEC = r'''
def _mas_encode(v, depth=0):
    import base64
    if depth > 200:
        return {"__o": "too deep"}
    if v is None or v is True or v is False:
        return v
    if isinstance(v, int):
        v = int.__index__(v)
        return v if -(1 << 63) <= v < (1 << 63) else {"__i": hex(v)}
    if isinstance(v, float):
        return float.__float__(v)
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, complex):
        return {"__c": [complex.__complex__(v).real, complex.__complex__(v).imag]}
    if isinstance(v, bytes | bytearray):
        return {"__b": base64.b64encode(bytes(v)).decode("ascii")}
    d = depth + 1
    if isinstance(v, list):
        return [_mas_encode(x, d) for x in list.__iter__(v)]
    if isinstance(v, tuple):
        return {"__t": [_mas_encode(x, d) for x in tuple.__iter__(v)]}
    if isinstance(v, frozenset):
        return {"__f": [_mas_encode(x, d) for x in frozenset.__iter__(v)]}
    if isinstance(v, set):
        return {"__s": [_mas_encode(x, d) for x in set.__iter__(v)]}
    if isinstance(v, dict):
        return {"__d": [[_mas_encode(k, d), _mas_encode(x, d)] for k, x in dict.items(v)]}
    return {"__o": type(v).__name__[:100]}


class _MasOpaque:
    """A value that was not plain data: equal to nothing but itself."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = str(name)

    def __repr__(self):
        return f"<{self.name} object>"


def _mas_decode(v):
    import base64
    if isinstance(v, list):
        return [_mas_decode(x) for x in v]
    if not isinstance(v, dict):
        return v
    (tag, x), = v.items()
    if tag == "__t":
        return tuple(_mas_decode(y) for y in x)
    if tag == "__s":
        return {_mas_decode(y) for y in x}
    if tag == "__f":
        return frozenset(_mas_decode(y) for y in x)
    if tag == "__d":
        return {_mas_decode(k): _mas_decode(y) for k, y in x}
    if tag == "__c":
        return complex(x[0], x[1])
    if tag == "__b":
        return base64.b64decode(x)
    if tag == "__i":
        return int(x, 16)
    if tag == "__o":
        return _MasOpaque(x)
    raise ValueError(f"unknown tag {tag!r}")
'''

DRIVER = (
    CODEC
    + r"""

def _mas_driver():
    import io, json, os, signal, sys, time
    raw = b""
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        raw += chunk
    lines = raw.decode("utf-8").split("\n")
    head = json.loads(lines[0])
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout.flush()  # what the program printed so far comes before the marker
    out.write("\n" + __START__ + "\n")
    out.flush()
    fn = globals().get(head["entry"])
    if not callable(fn):
        out.write(json.dumps({"fatal": "the program does not define %s" % head["entry"]}) + "\n")
        out.flush()
        return

    class _Timeout(BaseException):
        pass

    def _alarm(*_):
        raise _Timeout()

    signal.signal(signal.SIGALRM, _alarm)
    for i, limit in enumerate(head["limits"]):
        args = _mas_decode(json.loads(lines[1 + i]))
        saved = sys.stdout, sys.stderr, sys.stdin
        sys.stdout = sys.stderr = io.StringIO()
        sys.stdin = io.StringIO()
        t0 = time.perf_counter()
        try:
            signal.setitimer(signal.ITIMER_REAL, limit)
            value = fn(*args)
            signal.setitimer(signal.ITIMER_REAL, 0)
            rec = {"i": i, "v": _mas_encode(value)}
        except _Timeout:
            rec = {"i": i, "timeout": True}
        except BaseException as exc:
            signal.setitimer(signal.ITIMER_REAL, 0)
            rec = {"i": i, "err": (type(exc).__name__ + ": " + str(exc))[:300]}
        finally:
            sys.stdout, sys.stderr, sys.stdin = saved
        rec["t"] = time.perf_counter() - t0
        try:
            text = json.dumps(rec)
        except (ValueError, RecursionError) as exc:
            text = json.dumps({"i": i, "err": "unserialisable result: %s" % exc, "t": rec["t"]})
        if len(text) > __MAXV__:
            text = json.dumps({"i": i, "err": "output too large", "t": rec["t"]})
        out.write(text + "\n")
        out.flush()
        if "timeout" in rec and head.get("stop_on_timeout", True):
            break
    out.write(__END__ + "\n")
    out.flush()


_mas_driver()
"""
)
DRIVER = (
    DRIVER.replace("__START__", repr(_START))
    .replace("__END__", repr(_END))
    .replace("__MAXV__", str(MAX_VALUE_CHARS))
)

_ns: dict[str, Any] = {}
exec(compile(CODEC, "<difftest codec>", "exec"), _ns)
encode = _ns["_mas_encode"]
decode = _ns["_mas_decode"]
Opaque = _ns["_MasOpaque"]


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
    tester (never run by :func:`run_tests_many`); ``""`` when the values have no literal form
    (NaN, infinities, opaque objects) or it would exceed 2000 characters.

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


# ---------------------------------------------------------------- running


def _show(value: Any) -> str:
    try:
        return clip_text(repr(value), _CLIP)
    except Exception:
        return "<unprintable>"


def _parse(stdout: str, n: int) -> tuple[dict[int, dict[str, Any]], str | None, bool]:
    """Driver records by input index, a fatal message, and whether the driver finished."""
    at = stdout.rfind(_START)
    if at < 0:
        return {}, None, False
    recs: dict[int, dict[str, Any]] = {}
    fatal = None
    finished = False
    for line in stdout[at + len(_START) :].split("\n"):
        line = line.strip()
        if line == _END:
            finished = True
            break
        if not line or len(line) > MAX_VALUE_CHARS + 200:
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(rec, dict):
            continue
        if "fatal" in rec:
            fatal = str(rec["fatal"])[:_CLIP]
            continue
        i = rec.get("i")
        if isinstance(i, int) and 0 <= i < n and i not in recs:
            recs[i] = rec
    return recs, fatal, finished


def run_inputs(
    programs: Sequence[tuple[str, str, Sequence[str], Sequence[float]]],
    *,
    sandbox: Any = None,
    limits: Any = None,
    stop_on_timeout: bool = True,
    task_timeout_s: float = TASK_TIMEOUT_S,
) -> list[tuple[Any, dict[int, dict[str, Any]], str | None]]:
    """Run ``(program, entry_point, encoded inputs, per-input limits)`` items, one sandbox job
    each (one ``run_many`` batch): ``(ExecResult, records by input index, fatal)`` each. A job's
    wall limit is ``max(limits.wall_s, min(task_timeout_s, sum of the per-input limits)) + 1``."""
    import sandboxes

    sb = sandbox if sandbox is not None else sandboxes.default()
    base = limits if limits is not None else sandboxes.Limits()
    jobs = []
    for program, entry, inputs, per_input in programs:
        header = {
            "entry": entry,
            "limits": [float(x) for x in per_input],
            "stop_on_timeout": stop_on_timeout,
        }
        stdin = "\n".join([json.dumps(header), *inputs]) + "\n"
        wall = max(base.wall_s, min(task_timeout_s, float(sum(per_input)))) + 1.0
        job_limits = sandboxes.Limits(
            wall_s=wall,
            cpu_s=wall,
            memory_mb=base.memory_mb,
            max_output_bytes=max(base.max_output_bytes, MIN_OUTPUT_BYTES),
            max_procs=base.max_procs,
            max_file_mb=base.max_file_mb,
            max_open_files=base.max_open_files,
        )
        code = program.rstrip("\n") + "\n\n\n" + DRIVER
        jobs.append(sandboxes.Job(code, stdin, job_limits))
    results = sb.run_many(jobs) if jobs else []
    out = []
    for (_, _, inputs, _), res in zip(programs, results):
        recs, fatal, _ = _parse(res.stdout or "", len(inputs))
        out.append((res, recs, fatal))
    return out


def _missing(res: Any, fatal: str | None, stopped: bool) -> TestResult:
    """The result of an input the driver reported nothing for."""
    dur = float(getattr(res, "duration_s", 0.0) or 0.0)
    if fatal:
        return TestResult(False, "runtime_error", fatal, duration_s=dur)
    if res.error:
        return TestResult(False, "sandbox_error", f"sandbox error: {res.error}", duration_s=dur)
    if stopped or res.timed_out:
        why = "not run: an earlier input timed out" if stopped else "time limit exceeded"
        return TestResult(False, "timeout", why, duration_s=dur)
    if res.memory_exceeded:
        return TestResult(False, "memory", "memory limit exceeded", duration_s=dur)
    if res.output_truncated:
        return TestResult(False, "output_limit", "output limit exceeded", duration_s=dur)
    lines = [ln for ln in (res.stderr or "").strip().splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else f"exit code {res.exit_code}, no result"
    return TestResult(False, "runtime_error", clip_text(last, _CLIP), duration_s=dur)


def _verdicts(tests: list[TestCase], res: Any, recs: dict, fatal: str | None) -> list[TestResult]:
    out: list[TestResult] = []
    carried: dict[str, float] = {}
    stopped = False
    for i, test in enumerate(tests):
        rec = recs.get(i)
        if rec is None:
            out.append(_missing(res, fatal, stopped))
            continue
        dur = float(rec.get("t", 0.0)) if isinstance(rec.get("t"), int | float) else 0.0
        if rec.get("timeout"):
            stopped = True
            out.append(TestResult(False, "timeout", "time limit exceeded", duration_s=dur))
            continue
        if "err" in rec:
            reason = clip_text(str(rec["err"]), _CLIP)
            out.append(TestResult(False, "runtime_error", reason, duration_s=dur))
            continue
        spec = _spec(test)
        try:
            got = decode(rec.get("v"))
        except Exception:
            out.append(TestResult(False, "wrong_answer", "undecodable result", duration_s=dur))
            continue
        group = _group(test)
        atol = carried.get(group, spec["atol"])
        args = decode(json.loads(test.stdin))
        ok, carried[group] = judge(
            got, spec["expected"], atol=atol, dataset=spec["dataset"], entry=spec["entry"],
            args=args,
        )  # fmt: skip
        shown_e, shown_a = _show(spec["expected"]), _show(got)
        if ok:
            out.append(TestResult(True, "passed", "ok", shown_e, shown_a, dur))
        else:
            reason = f"wrong answer: expected {shown_e}, got {shown_a}"
            out.append(TestResult(False, "wrong_answer", reason, shown_e, shown_a, dur))
    return out


def per_input_limits(tests: Sequence[TestCase], min_s: float) -> list[float]:
    """``max(min_s, 4 x the canonical run time)`` per test."""
    return [max(min_s, TIME_FACTOR * float(json.loads(t.expected_stdout)["ref_s"])) for t in tests]


def run_tests_many(
    items: Sequence[tuple[object, Sequence[TestCase]]],
    *,
    sandbox: Any = None,
    limits: Any = None,
    entry_point: str | None = None,
    float_tol: float | None = None,
) -> list[TestReport]:
    """:func:`verifiers.code_tests.run_tests_many` that also runs differential tests (module
    docstring): those with host-side verdicts, every other test by the verifier unchanged."""
    import sandboxes

    base = limits if limits is not None else sandboxes.Limits()
    plain_items: list[tuple[object, list[TestCase]]] = []
    diff_items: list[tuple[str, str, list[str], list[float]]] = []
    plan = []
    for solution, tests in items:
        tlist = list(tests)
        diff = [t for t in tlist if is_diff_test(t)]
        plain = [t for t in tlist if not is_diff_test(t)]
        build = check_compiles(solution)
        slot = None
        if diff and build.ok:
            entry = json.loads(diff[0].expected_stdout)["entry"]
            slot = len(diff_items)
            inputs = [t.stdin for t in diff]
            diff_items.append((str(solution), entry, inputs, per_input_limits(diff, base.wall_s)))
        plan.append((tlist, diff, len(plain_items), slot, build))
        plain_items.append((solution, plain))
    plain_reports = run_plain_tests_many(
        plain_items, sandbox=sandbox, limits=limits, entry_point=entry_point, float_tol=float_tol
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
