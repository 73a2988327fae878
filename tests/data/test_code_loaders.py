"""Code loaders on small fixtures in each dataset's real schema; goldens pass their own tests."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest

from envs.data import (
    CodeProblem,
    load_apps,
    load_code_contests,
    load_humaneval,
    load_livecodebench,
    load_mbpp,
)
from envs.data.code_sets import call_test, decode_lcb_tests
from verifiers.code_tests import run_tests, run_tests_many

FIX = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def sandbox():
    import sandboxes

    sb = sandboxes.default()
    assert sb.run("print(1)").stdout == "1\n", "the local sandbox does not work here"
    return sb


def test_humaneval_offline():
    ps = load_humaneval()
    assert len(ps) == 164 and len({p.id for p in ps}) == 164
    p = ps[0]
    assert p.golden_solution.startswith(p.prompt) and p.style == "function"
    assert len(p.tests) == 1 and p.tests[0].code.rstrip().endswith("check(has_close_elements)")
    split = load_humaneval(split_tests=True)
    assert sum(len(q.tests) for q in split) > 3 * 164  # most checks hold several asserts
    assert CodeProblem.from_dict(p.to_dict()) == p


def test_apps_mapping():
    ps = load_apps(path=FIX / "apps.jsonl")
    assert [p.id for p in ps] == ["apps/4001", "apps/4002", "apps/4003"]  # broken one skipped
    stdin, fn, method = ps
    assert stdin.style == "stdin" and stdin.tests[1].stdin == "10 -3\n"
    assert stdin.tests[1].expected_stdout == "7\n" and stdin.difficulty == "introductory"
    assert fn.style == "function" and fn.entry_point == "reverse_words"
    assert "Solution().maxElement" in method.tests[0].code
    assert len(load_apps(path=FIX / "apps.jsonl", difficulty="interview")) == 1


def test_code_contests_mapping():
    ps = load_code_contests(path=FIX / "code_contests.jsonl")
    a, b = ps
    assert a.golden_solution == "n = int(input())\nprint(2 * n)\n"  # the Python 3 one
    assert len(a.tests) == 4 and len(a.public_tests) == 1  # private + generated
    assert a.metadata["time_limit_s"] == pytest.approx(1.5)
    assert b.golden_solution is None and len(b.tests) == 1  # falls back to public tests
    assert len(load_code_contests(path=FIX / "code_contests.jsonl", max_tests=2)[0].tests) == 2
    assert (
        len(load_code_contests(path=FIX / "code_contests.jsonl", include_generated=False)[0].tests)
        == 2
    )


def test_livecodebench_mapping():
    a, b = load_livecodebench(path=FIX / "livecodebench.jsonl")
    assert a.style == "stdin" and len(a.tests) == 2 and a.tests[0].expected_stdout == "30\n"
    assert a.golden_solution is None and len(a.public_tests) == 1
    assert b.style == "function" and b.entry_point == "maxSum" and "from typing import" in b.prelude
    assert "Solution().maxSum" in b.tests[0].code


def test_lcb_decoding_refuses_objects():
    evil = base64.b64encode(zlib.compress(pickle.dumps(Path("/etc")))).decode()
    with pytest.raises(pickle.UnpicklingError):
        decode_lcb_tests(evil)
    assert decode_lcb_tests(json.dumps([{"input": "1", "output": "2"}]))[0]["output"] == "2"
    assert decode_lcb_tests("") == []


def test_mbpp_both_configs():
    full = load_mbpp(path=FIX / "mbpp_full.jsonl")
    assert [p.entry_point for p in full] == ["remove_Occ", "circle_area"]
    assert full[1].tests[0].code.startswith("import math\n")
    assert "Your code should pass this test" in full[0].prompt
    assert len(load_mbpp(path=FIX / "mbpp_full.jsonl", include_challenge=True)[0].tests) == 4
    (san,) = load_mbpp(config="sanitized", path=FIX / "mbpp_sanitized.jsonl")
    assert san.entry_point == "similar_elements" and san.id == "mbpp/2"


def test_call_test_validation():
    with pytest.raises(ValueError):
        call_test("bad name", [], None)


def test_golden_solutions_pass_their_tests(sandbox):
    problems = (
        load_apps(path=FIX / "apps.jsonl")
        + load_code_contests(path=FIX / "code_contests.jsonl")[:1]
        + load_mbpp(path=FIX / "mbpp_full.jsonl", include_challenge=True)
        + load_mbpp(config="sanitized", path=FIX / "mbpp_sanitized.jsonl")
    )
    reports = run_tests_many(
        [(p.golden_solution, list(p.tests)) for p in problems], sandbox=sandbox
    )
    for p, rep in zip(problems, reports):
        assert rep.all_passed, (p.id, [r.reason for r in rep.results])


def test_wrong_solutions_fail_call_tests(sandbox):
    fn = load_apps(path=FIX / "apps.jsonl")[1]
    rep = run_tests("def reverse_words(s):\n    return s\n", list(fn.tests), sandbox=sandbox)
    assert rep.pass_rate == 0.0
    assert "expected ['world hello'], got 'hello world'" in rep.results[0].reason


def test_livecodebench_reference_programs(sandbox):
    a, b = load_livecodebench(path=FIX / "livecodebench.jsonl")
    sol_a = "a, b = map(int, input().split())\nprint(a + b)\n"
    sol_b = b.prelude + (
        "class Solution:\n    def maxSum(self, nums: List[int], k: int) -> int:\n"
        "        return sum(sorted(nums)[-k:])\n"
    )
    assert run_tests(sol_a, list(a.tests), sandbox=sandbox).all_passed
    assert run_tests(sol_b, list(b.tests + b.public_tests), sandbox=sandbox).all_passed
