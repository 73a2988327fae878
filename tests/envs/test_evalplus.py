"""evalplus (HumanEval+, MBPP+) loaders and their differential tests, offline on hand-written
fixtures in evalplus's release schema (``tests/data/fixtures/*Plus-*.jsonl``)."""

from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import pytest

import envs
import sandboxes
from envs.data import load_humaneval_plus, load_mbpp_plus
from envs.data.evalplus import evalplus_file, mbpp_deserialize_inputs, read_tasks
from verifiers import diff_tests
from verifiers.code_tests import run_tests_many

FIX = Path(__file__).resolve().parents[1] / "data" / "fixtures"
HE_FILE = FIX / "HumanEvalPlus-v0.1.10.jsonl"
MBPP_FILE = FIX / "MbppPlus-v0.2.0.jsonl"


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MAS_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mas-cache"))


@pytest.fixture(scope="module")
def he():
    return {p.entry_point: p for p in load_humaneval_plus(HE_FILE)}


@pytest.fixture(scope="module")
def mbpp():
    return {p.entry_point: p for p in load_mbpp_plus(MBPP_FILE)}


def report(problem, code):
    return run_tests_many([(code, problem.tests)])[0]


# ---------------------------------------------------------------- reading the release format


def test_problems_follow_the_release(he, mbpp):
    rows = {r["task_id"]: r for r in read_tasks(HE_FILE) + read_tasks(MBPP_FILE)}
    for p in [*he.values(), *mbpp.values()]:
        row = rows[p.id]
        assert p.golden_solution == row["prompt"] + row["canonical_solution"]
        assert len(p.tests) == len(row["base_input"]) + len(row["plus_input"])
        assert p.style == "function" and p.metadata["dropped_inputs"] == 0
        assert all(diff_tests.is_diff_test(t) for t in p.tests)
    assert he["has_close_elements"].starter_code == rows["HumanEval/0"]["prompt"]
    assert he["has_close_elements"].source == "humaneval+"
    assert mbpp["similar_elements"].prompt.startswith("Write a function to find the shared")
    assert mbpp["similar_elements"].starter_code == "" and mbpp["is_not_prime"].source == "mbpp+"


def test_canonical_solutions_pass_every_test(he, mbpp):
    for p in [*he.values(), *mbpp.values()]:
        rep = report(p, p.golden_solution)
        assert rep.all_passed, (p.id, [r.reason for r in rep.results if not r.passed])


def test_file_locations(tmp_path, monkeypatch):
    assert evalplus_file("humaneval+", HE_FILE) == HE_FILE
    assert evalplus_file("humaneval+", FIX) == HE_FILE  # a directory with evalplus's file name
    gz = tmp_path / "evalplus" / "MbppPlus-v0.2.0.jsonl.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(MBPP_FILE.read_bytes()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # evalplus's cache directory
    assert evalplus_file("mbpp+") == gz
    assert [p.id for p in load_mbpp_plus()] == [r["task_id"] for r in read_tasks(MBPP_FILE)]
    monkeypatch.setenv("MBPP_OVERRIDE_PATH", str(MBPP_FILE))
    assert evalplus_file("mbpp+") == MBPP_FILE
    with pytest.raises(FileNotFoundError, match=r"HumanEvalPlus-Mini\.jsonl\.gz"):
        evalplus_file("humaneval+", tmp_path, mini=True)
    with pytest.raises(ValueError, match="unknown evalplus dataset"):
        evalplus_file("apps+")


def test_schema_errors_name_the_line(tmp_path):
    rows = [json.loads(x) for x in HE_FILE.read_text().splitlines()]
    del rows[1]["plus_input"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match=r"line 2: task lacks \['plus_input'\]"):
        read_tasks(bad)
    bad.write_text(HE_FILE.read_text() + "{not json\n")
    with pytest.raises(ValueError, match="line 5: not JSON"):
        read_tasks(bad)


def test_mbpp_inputs_get_their_python_types():
    assert mbpp_deserialize_inputs("Mbpp/2", [[[1, 2], [3]]]) == [[(1, 2), (3,)]]
    assert mbpp_deserialize_inputs("Mbpp/124", [[0, "1j"]]) == [(0.0, 1j)]
    assert mbpp_deserialize_inputs("Mbpp/3", [[5]]) == [[5]]
    assert mbpp_deserialize_inputs("Mbpp/580", [[[1, [2, 3]]]]) == [((1, (2, 3)),)]


def test_expected_outputs_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("MAS_CACHE_DIR", str(tmp_path))
    first = load_humaneval_plus(HE_FILE, limit=2)
    assert len(first) == 2 and list((tmp_path / "evalplus").glob("*.json"))

    def no_sandbox(*a, **k):
        raise AssertionError("the canonical solutions ran again")

    monkeypatch.setattr(diff_tests, "run_inputs", no_sandbox)
    again = load_humaneval_plus(HE_FILE, limit=2)
    assert [t.expected_stdout for p in again for t in p.tests] == [
        t.expected_stdout for p in first for t in p.tests
    ]


# ---------------------------------------------------------------- evalplus's comparison rules


def test_float_tolerance_as_evalplus(he):
    p = he["truncate_number"]  # atol 1e-6
    close = "def truncate_number(number):\n    return round(number % 1.0, 9)\n"
    assert report(p, close).all_passed
    far = "def truncate_number(number):\n    return round(number % 1.0, 3)\n"
    rep = report(p, far)
    assert 0 < rep.pass_rate < 1
    assert any("expected 0.99999" in r.reason for r in rep.results if not r.passed)


def test_types_must_match(he):
    p = he["sum_product"]
    assert report(p, "def sum_product(numbers):\n    return (sum(numbers), math.prod(numbers))\n"
                  "import math\n").all_passed  # fmt: skip
    as_list = (
        "import math\ndef sum_product(numbers):\n    return [sum(numbers), math.prod(numbers)]\n"
    )
    rep = report(p, as_list)
    assert rep.pass_rate == 0 and rep.results[0].status == "wrong_answer"


def test_special_oracles(he, mbpp):
    # HumanEval/32: any root within atol, not the canonical one
    newton = (
        "import math\ndef poly(xs, x):\n"
        "    return sum(c * math.pow(x, i) for i, c in enumerate(xs))\n"
        "def find_zero(xs):\n    x = 3.5\n    for _ in range(200):\n"
        "        d = sum(i * c * math.pow(x, i - 1) for i, c in enumerate(xs) if i)\n"
        "        x = x - poly(xs, x) / d if d else x + 0.1\n    return x\n"
    )
    assert report(he["find_zero"], newton).all_passed
    assert report(he["find_zero"], "def find_zero(xs):\n    return 0.0\n").pass_rate < 1
    # MBPP set-equality task: order and container do not matter
    listed = "def similar_elements(a, b):\n    return sorted(set(a) & set(b), reverse=True)\n"
    assert report(mbpp["similar_elements"], listed).all_passed
    # MBPP output-not-None task: a bool is compared, anything else only for being not None
    as_bool = "import re\ndef text_match_three(text):\n    return bool(re.search('ab{3}', text))\n"
    assert report(mbpp["text_match_three"], as_bool).all_passed
    always = "def text_match_three(text):\n    return 'yes'\n"
    assert 0 < report(mbpp["text_match_three"], always).pass_rate < 1
    # complex inputs restored, float output within atol
    atan = "import math\ndef angle_complex(a, b):\n    return math.atan2(b.imag, a + b.real)\n"
    assert report(mbpp["angle_complex"], atan).all_passed


def test_judge_matches_evalplus_cases():
    def j(out, exp, atol=0.0):
        return diff_tests.judge(out, exp, atol=atol, dataset="humaneval", entry="f", args=())[0]

    assert j(0.1 + 0.2, 0.3)  # floats: atol 1e-6 is enforced
    assert not j(0.3001, 0.3)
    assert j([1.0, 2.0000000001], [1.0, 2.0])
    assert not j(1, 1.5, atol=1.0)  # not equal, and int is not float
    assert j(True, 1)  # evalplus compares with ==
    assert not j(float("nan"), float("nan"))
    assert j(1e20 * (1 + 1e-8), 1e20)  # rtol 1e-7
    assert not j("a", "b", atol=1e-3)
    # the atol evalplus switches on for a float expectation holds for the group's later inputs
    _, atol = diff_tests.judge(0.5, 0.5, atol=0, dataset="humaneval", entry="f", args=())
    assert atol == 1e-6


# ---------------------------------------------------------------- hostile candidates


def test_forged_equality_and_hostile_programs_fail(he):
    p = he["has_close_elements"]
    forged = "class A:\n    def __eq__(self, o):\n        return True\n" + (
        "def has_close_elements(numbers, threshold):\n    return A()\n"
    )
    rep = report(p, forged)  # passes evalplus itself; here an opaque object equals nothing
    assert rep.pass_rate == 0 and "<A object>" in rep.results[0].reason
    subclass = "class B(int):\n    def __eq__(self, o):\n        return True\n" + (
        "def has_close_elements(numbers, threshold):\n    return B(7)\n"
    )
    assert report(p, subclass).pass_rate == 0  # compared as the int 7
    exits = "import sys\nsys.exit(0)\ndef has_close_elements(numbers, threshold):\n    pass\n"
    rep = report(p, exits)
    assert rep.pass_rate == 0 and rep.results[0].status == "runtime_error"
    missing = "def something_else():\n    pass\n"
    assert "has_close_elements' is not defined" in report(p, missing).results[0].reason
    noisy = (
        "print('chatter')\nimport sys\n"
        "def has_close_elements(numbers, threshold):\n    print('x' * 1000)\n"
        "    sys.stderr.write('y')\n    s = sorted(numbers)\n"
        "    return any(b - a < threshold for a, b in zip(s, s[1:]))\n"
    )
    assert report(p, noisy).all_passed  # prints are swallowed, as in evalplus
    crash = "def has_close_elements(numbers, threshold):\n    return numbers[0] / 0\n"
    rep = report(p, crash)
    assert rep.pass_rate == 0 and rep.results[0].status == "runtime_error"
    assert "ZeroDivisionError" in rep.results[0].reason or "IndexError" in rep.results[0].reason
    assert report(p, "def has_close_elements(:\n").results[0].status == "syntax_error"


def test_a_looping_input_times_out_and_stops_the_run(he):
    p = he["has_close_elements"]
    loop = (
        "def has_close_elements(numbers, threshold):\n    if len(numbers) == 5:\n"
        "        while True:\n            pass\n"
        "    s = sorted(numbers)\n    return any(b - a < threshold for a, b in zip(s, s[1:]))\n"
    )
    limits = sandboxes.Limits(wall_s=0.5)
    rep = run_tests_many([(loop, p.tests)], limits=limits)[0]
    statuses = [r.status for r in rep.results]
    first = statuses.index("timeout")
    assert all(s == "passed" for s in statuses[:first])  # inputs 0 and 1 have 6 numbers
    assert all(s == "timeout" for s in statuses[first:])
    assert "earlier input timed out" in rep.results[-1].reason


def test_expected_values_never_enter_the_sandbox():
    sentinel = "EXPECTED-" + "7" * 12
    test = diff_tests.make_test(
        ["INPUT-1"], sentinel, atol=0, dataset="humaneval", entry_point="f", ref_s=0.0, name="f:0"
    )
    seen: list[str] = []

    class Spy:
        def run_many(self, jobs):
            jobs = list(jobs)
            seen.extend(j.code + str(j.stdin) + repr(j.calls) for j in jobs)
            return sandboxes.default().run_many(jobs)

    code = "def f(x):\n    return x.replace('INPUT-1', 'EXPECTED-' + '7' * 12)\n"
    rep = run_tests_many([(code, [test])], sandbox=Spy())[0]
    assert rep.all_passed and seen
    assert all(sentinel not in text and "INPUT-1" in text for text in seen)


def test_codec_round_trips_python_values():
    values = [
        None, True, 3, -(10**30), 2.5, float("inf"), "s", b"\x00\xff", 1 + 2j, [1, (2, 3)],
        {"a": {1, 2}, (1, 2): frozenset({3})}, (), [],
    ]  # fmt: skip
    for v in values:
        assert diff_tests.decode(json.loads(json.dumps(diff_tests.encode(v)))) == v
    nan = diff_tests.decode(json.loads(json.dumps(diff_tests.encode(float("nan")))))
    assert math.isnan(nan)


# ---------------------------------------------------------------- in the code setting


@pytest.mark.parametrize("dataset,path", [("humaneval+", HE_FILE), ("mbpp+", MBPP_FILE)])
def test_code_setting_plays_evalplus_problems(dataset, path, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(path, data / path.name)
    env = envs.make("code", dataset=dataset, data_path=str(data), max_turns=1)
    raw = env.unwrapped
    played = set()
    for split in ("train", "val", "test"):  # four problems: not every split has one
        for seed in range(3):
            try:
                raw.reset(seed=seed, options={"split": split})
            except ValueError as exc:
                assert "has no problem in the" in str(exc)
                break
            assert raw.instance.source == dataset
            raw.step(raw.oracle("coder"))
            assert raw.pass_rate == 1.0
            raw.step(raw.oracle("tester"))
            assert raw.success
            assert raw.infos["tester"]["reward_parts"]["components"]["valid"] == 1.0
            played.add(raw.instance.id)
    assert len(played) >= 2
    raw.reset(options={"instance": raw.instance})
    entry = raw.instance.entry_point
    raw.step(f"```python\ndef {entry}(*args):\n    return None\n```")
    assert raw.pass_rate < 1.0
    parts = raw.infos["coder"]["reward_parts"]
    assert parts["team"] == raw.pass_rate and parts["components"]["build"] == 1.0


def test_printed_fake_results_are_not_results(he):
    """A program that prints what an old stdout protocol would read as results, then exits
    before any call, gets nothing: results only come on the nonce-tagged calls channel."""
    p = he["has_close_elements"]
    fake = (
        "import os, json\n"
        "print('\\x1emas-difftest-start\\x1e')\n"
        "for i in range(100):\n    print(json.dumps({'i': i, 'v': True}))\n"
        "os._exit(0)\n"
        "def has_close_elements(numbers, threshold):\n    return True\n"
    )
    rep = report(p, fake)
    assert rep.pass_rate == 0
    assert all(r.status != "passed" for r in rep.results)
