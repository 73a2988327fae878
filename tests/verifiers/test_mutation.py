"""Mutant generation (pure) and mutation scores (sandbox), with hand-made weak/strong suites."""

from __future__ import annotations

import ast

import pytest

from verifiers.code_tests import TestCase, compiles
from verifiers.mutation import coverage_score, make_mutants, mutation_score

SRC = """
def clamp_sum(xs, lo, hi):
    total = 0
    for i in range(len(xs)):
        if xs[i] > 0 and not xs[i] == 7:
            total += xs[i] * 2
    if total < lo:
        return lo
    return min(total, hi) if hi is not None else total

def head(xs, k):
    return xs[1:k]

def size(xs):
    return len(xs)

flag = True
"""


def test_operator_classes_present():
    ms = make_mutants(SRC, seed=0, max_mutants=1000)
    ops = {m.operator for m in ms}
    assert ops == {"arith", "compare", "bool", "not", "const", "range", "slice", "return"}
    descs = {m.description for m in ms}
    for d in ("'*' -> '/'", "'+' -> '-'", "'<' -> '<='", "'>' -> '>='", "'==' -> '!='",
              "'and' -> 'or'", "removed 'not'", "negated condition", "2 -> 3", "2 -> 1",
              "True -> False", "range stop +1", "range stop -1", "slice upper +1",
              "return None", "return value + 1"):  # fmt: skip
        assert d in descs, d


def test_mutants_compile_differ_and_are_unique():
    ms = make_mutants(SRC, seed=1, max_mutants=1000)
    original = ast.unparse(ast.parse(SRC))
    texts = [m.source for m in ms]
    assert len(set(texts)) == len(texts) and original not in texts
    assert all(compiles(t) for t in texts)


def test_deterministic_and_capped():
    a = make_mutants(SRC, seed=7, max_mutants=10)
    b = make_mutants(SRC, seed=7, max_mutants=10)
    c = make_mutants(SRC, seed=8, max_mutants=10)
    assert [m.source for m in a] == [m.source for m in b]
    assert len(a) == 10 and [m.source for m in a] != [m.source for m in c]
    assert [m.lineno for m in a] == sorted(m.lineno for m in a)
    assert make_mutants(SRC, seed=0, max_mutants=0) == []


def test_small_and_bad_sources():
    ms = make_mutants("def f(a, b):\n    return a + b\n", seed=0, max_mutants=30)
    assert sorted(m.description for m in ms) == ["'+' -> '-'", "return None", "return value + 1"]
    assert make_mutants("def f(:", seed=0) == []
    assert make_mutants("x = 'just a string'\n", seed=0) == []
    main_guard = "if __name__ == '__main__':\n    print('hi')\n"
    assert make_mutants(main_guard, seed=0) == []  # the __main__ guard is never mutated
    with pytest.raises(TypeError):
        make_mutants(None)  # type: ignore[arg-type]


def test_equivalent_by_text_is_dropped():
    # "x = -1" style: const -1 on 1 gives 0, and 0 + ... ; "not not" removal gives same text twice
    ms = make_mutants("y = not not x\n", seed=0, max_mutants=30)
    texts = [m.source for m in ms]
    assert len(texts) == len(set(texts)) == 1 and texts[0] == "y = not x"


def test_coverage_score():
    assert coverage_score(0.0) == 0.0
    assert coverage_score(0.3) == pytest.approx(0.5)
    assert coverage_score(0.6) == 1.0 and coverage_score(1.0) == 1.0


# ---------------------------------------------------------------- scores (sandbox)

GOLD = """
def grade(score):
    if score >= 90:
        return "A"
    if score >= 80:
        return "B"
    return "C"
"""


def test_weak_suite_kills_fewer_than_strong(sandbox):
    strong = [
        TestCase.asserts(f"assert grade({s}) == {g!r}")
        for s, g in ((95, "A"), (90, "A"), (89, "B"), (80, "B"), (79, "C"), (0, "C"))
    ]
    weak = [TestCase.asserts("assert grade(50) == 'C'")]
    rs = mutation_score(GOLD, strong, sandbox, max_mutants=30)
    rw = mutation_score(GOLD, weak, sandbox, max_mutants=30)
    assert rs.available and rw.available and rs.total == rw.total > 0
    assert rs.score == 1.0  # boundaries 90 and 80 are tested on both sides
    assert 0 < rw.score < rs.score
    killed_w = {r.mutant.source for r in rw.mutants if r.killed}
    killed_s = {r.mutant.source for r in rs.mutants if r.killed}
    assert killed_w < killed_s
    assert rw.score == pytest.approx(rw.killed / rw.total)


def test_tests_the_golden_fails_are_ignored(sandbox):
    good = TestCase.asserts("assert grade(95) == 'A'")
    wrong = TestCase.asserts("assert grade(95) == 'B'")  # fails on golden: cannot kill
    r = mutation_score(GOLD, [wrong, good], sandbox, max_mutants=10)
    assert r.golden_passed == (False, True)
    assert all(0 not in m.killed_by for m in r.mutants)
    r = mutation_score(GOLD, [wrong], sandbox)
    assert not r.available and r.score == 0.0 and "passes none" in r.reason


def test_unavailable_cases(sandbox):
    assert not mutation_score("def f(:", [TestCase.asserts("pass")], sandbox).available
    assert mutation_score(GOLD, [], sandbox).reason == "no tests"
    r = mutation_score("print('x')", [TestCase.io("", "x")], sandbox)
    assert not r.available and r.reason == "no mutants could be made"


def test_stdio_mutants_and_infinite_loops_time_out_fast(sandbox):
    gold = "n = int(input())\ni = 0\ns = 0\nwhile i < n:\n    s += i\n    i += 1\nprint(s)\n"
    tests = [TestCase.io("4", "6"), TestCase.io("0", "0"), TestCase.io("1", "0")]
    r = mutation_score(gold, tests, sandbox, max_mutants=30)
    assert r.available and r.score > 0.5
    assert r.mutants and all(m.killed for m in r.mutants if "'+' -> '-'" in m.mutant.description)


def test_humaneval_handful(sandbox):
    from envs.data import load_humaneval

    problems = load_humaneval()[:6]
    scores = []
    for p in problems:
        r = mutation_score(p.golden_solution, list(p.tests), sandbox, seed=0, max_mutants=15)
        assert r.available and r.golden_passed == (True,), (p.id, r.reason)
        assert 0 < r.score <= 1
        scores.append(r.score)
    # the per-assert split kills at least as many mutants as the whole check (same mutants)
    split = load_humaneval(split_tests=True)[0]
    whole = problems[0]
    a = mutation_score(whole.golden_solution, list(whole.tests), sandbox, max_mutants=15)
    b = mutation_score(split.golden_solution, list(split.tests), sandbox, max_mutants=15)
    assert a.killed == b.killed and a.total == b.total


def test_golden_and_mutants_run_alike(sandbox):
    """The mutants' batch runs the golden program too, printed the same way and under the same
    limits, and only tests it passes there can kill: a test cannot tell the runs apart by
    their limits (nor by the golden program's layout)."""
    seen = []

    class Spy:
        def run_many(self, jobs):
            jobs = list(jobs)
            seen.append(jobs)
            return sandbox.run_many(jobs)

    gold = "def f(x):\n    # a comment only the golden source has\n    return 2 * x\n"
    rep = mutation_score(gold, [TestCase.asserts("assert f(3) == 6")], Spy(), max_mutants=5)
    assert rep.available and rep.total > 0
    batch = seen[-1]
    assert len(batch) == 1 + rep.total
    assert len({job.limits for job in batch}) == 1  # one set of limits for all
    # the batch runs in a random order (no position tells the golden run apart): find it by code
    assert all("comment" not in job.code for job in batch)
    assert sum(job.code == ast.unparse(ast.parse(gold)) for job in batch) == 1


def test_tests_that_detect_the_run_kill_nothing(sandbox):
    """The old forgery: asserting on RLIMIT_CPU, which mutants used to get lower."""
    gold = "def f(x):\n    return 2 * x\n"
    cheat = TestCase.asserts(
        "import resource\n"
        "assert f(3 if resource.getrlimit(resource.RLIMIT_CPU)[0] >= 5 else 0) == 6"
    )
    rep = mutation_score(gold, [cheat], sandbox, max_mutants=8)
    honest = mutation_score(gold, [TestCase.asserts("assert f(3) == 6")], sandbox, max_mutants=8)
    assert rep.killed <= honest.killed
