"""Code setting (coder + tester): A.1.2 rewards on hand-computed cases, workflow, oracle, data."""

from __future__ import annotations

import re

import pytest

import envs
from envs.code import parse_assert_tests, parse_stdin_tests
from sandboxes import ExecResult
from tests.envs.contract import oracle_policy, play
from verifiers.mutation import make_mutants

LAM = 0.5  # A.1.2 gives no lambda for code: the suite's default mixing coefficient

CLIP_SOLUTION = (
    "def clip(x, lo, hi):\n"
    "    if x < lo:\n"
    "        return lo\n"
    "    if x > hi:\n"
    "        return hi\n"
    "    return x\n"
)
CLIP = {
    "prompt": "Write clip(x, lo, hi): x limited to the interval [lo, hi] (lo <= hi).",
    "style": "function",
    "entry_point": "clip",
    "solution": CLIP_SOLUTION,
    "tests": [
        "assert clip(5, 0, 10) == 5",
        "assert clip(-3, 0, 10) == 0",
        "assert clip(12, 0, 10) == 10",
        "assert clip(0, 0, 10) == 0",
    ],
}
SUM = {
    "prompt": "Read two integers a and b on one line and print a + b.\n\nExample: 3 4 -> 7",
    "style": "stdin",
    "solution": "a, b = map(int, input().split())\nprint(a + b)\n",
    "tests": [
        {"input": "1 2\n", "output": "3"},
        {"input": "10 -3\n", "output": "7"},
        {"input": "0 0\n", "output": "0"},
        {"input": "5 5\n", "output": "10"},
    ],
    "public_tests": [{"input": "3 4\n", "output": "7"}],
}


def py(code: str) -> str:
    return f"Here is my answer.\n```python\n{code}\n```"


def io_test(inp: str, out: str) -> str:
    return f"**Test Input:**\n```\n{inp}\n```\n**Test Output:**\n```\n{out}\n```"


def make(instance, mode="multi", **config):
    env = envs.make("code", mode=mode, **config)
    env.reset(options={"instance": instance})
    return env


def parts(env, agent):
    return env.infos[agent]["reward_parts"]


def mixed(team, local, mask=1.0):
    return LAM * team + (1 - LAM) * mask * local


# ---------------------------------------------------------------------- coder rewards
def test_coder_syntax_error_a12_mask():
    """AT-GRPO A.1.2: m = 1{build/run logs and test diffs available}: a program that does not
    compile never runs (no run logs, no test diffs): mask 0, team p = 0, reward 0."""
    env = make(CLIP)
    env.step(py("def clip(x lo, hi):\n    return x"))
    p = parts(env, "coder")
    # build 0, run 0, nr 1 (no previously passing tests at turn 0): local = 0.8; team p = 0
    assert p["components"] == {"build": 0.0, "run": 0.0, "nr": 1.0}
    assert p["team"] == 0.0 and p["mask"] == 0.0 and p["reward"] == 0.0
    assert "does not compile" in p["reasons"]["build"] and "never ran" in p["reasons"]["mask"]
    # coder_mask="found": a found program is masked in: 0.5 * 0 + 0.5 * 0.8 = 0.4
    env = make(CLIP, coder_mask="found")
    env.step(py("def clip(x lo, hi):\n    return x"))
    assert parts(env, "coder")["reward"] == pytest.approx(mixed(0.0, 0.8))


def test_coder_crash_and_no_code_block():
    env = make(CLIP)
    env.step(py("def clip(x, lo, hi):\n    return x / 0"))
    p = parts(env, "coder")
    # compiles (0.1), crashes on the smoke tests (run 0), nr 1: local 0.9, team 0 -> 0.45
    assert p["components"] == {"build": 1.0, "run": 0.0, "nr": 1.0}
    assert p["reward"] == pytest.approx(mixed(0.0, 0.9))
    assert "ZeroDivisionError" in p["reasons"]["run"]
    env = make(CLIP)
    env.step("I would clip it, but I will not write code.")
    p = parts(env, "coder")
    assert p["components"] == {"build": 0.0, "run": 0.0, "nr": 1.0}
    assert p["reasons"]["build"] == "no code block found" and p["mask"] == 0.0


@pytest.mark.parametrize("coder_mask, reward", [("ran", 0.0), ("found", 0.0), ("always", 0.4)])
def test_a12_refusing_coder_earns_zero(coder_mask, reward):
    """AT-GRPO A.1.2: a coder that writes no program has no build/run logs or test diffs:
    m = 0, and p_k = 0, so r = 0.5 * 0 + 0.5 * 0 * 0.8 = 0 (it was 0.4: mask 1, nr = 1).
    The earlier reading stays available as coder_mask="always"."""
    env = make(CLIP, coder_mask=coder_mask)
    env.step("I refuse to write code.")
    p = parts(env, "coder")
    assert p["team"] == 0.0 and p["local"] == pytest.approx(0.8)
    assert p["reward"] == pytest.approx(reward)
    assert env.rewards["coder"] == pytest.approx(reward)


def test_coder_timeout():
    env = make(CLIP, wall_s=0.3)
    env.step(py("def clip(x, lo, hi):\n    while True:\n        pass"))
    p = parts(env, "coder")
    assert p["components"] == {"build": 1.0, "run": 0.0, "nr": 1.0} and p["team"] == 0.0
    assert "time limit" in p["reasons"]["run"]


def test_coder_partial_pass_then_regression():
    env = make(CLIP, mode="single", single_turns=None)
    env.step(py("def clip(x, lo, hi):\n    return max(x, lo)"))
    p = parts(env, "coder")
    # passes tests 1, 2, 4 (clip(12, 0, 10) gives 12): p = 3/4; smoke (tests 1-2) runs: run 1
    assert p["team"] == pytest.approx(0.75)
    assert p["components"] == {"build": 1.0, "run": 1.0, "nr": 1.0}
    assert p["reward"] == pytest.approx(mixed(0.75, 1.0))  # 0.875
    env.step(py("def clip(x, lo, hi):\n    return min(x, hi)"))
    p = parts(env, "coder")
    # passes tests 1, 3, 4: p = 3/4; of G = {1, 2, 4} tests 1 and 4 still pass: nr = 2/3
    # local = 0.1 + 0.1 + 0.8 * 2/3 = 0.7333; reward = 0.5 * 0.75 + 0.5 * 0.7333 = 0.74167
    assert p["team"] == pytest.approx(0.75)
    assert p["components"]["nr"] == pytest.approx(2 / 3)
    assert p["reward"] == pytest.approx(0.5 * 0.75 + 0.5 * (0.2 + 0.8 * 2 / 3))
    assert "1 of 3 previously passing" in p["reasons"]["nr"]


def test_stdin_wrong_answer_runs_and_public_examples_are_the_smoke_subset():
    env = make(SUM)
    env.step(py("print(0)"))
    p = parts(env, "coder")
    # prints 0: passes only "0 0" (p = 1/4); the public example runs (wrong answer, no crash)
    assert p["components"] == {"build": 1.0, "run": 1.0, "nr": 1.0}
    assert p["reward"] == pytest.approx(mixed(0.25, 1.0))  # 0.625
    env = make(SUM)
    env.step(py("a, b = input().split()\nprint(int(a) + int(b) + int(input()))"))
    # crashes (EOFError) on every input, the public example included: run 0, p = 0
    p = parts(env, "coder")
    assert p["components"] == {"build": 1.0, "run": 0.0, "nr": 1.0} and p["team"] == 0.0


# ---------------------------------------------------------------------- tester rewards
def _mutants_of_clip():
    ms = make_mutants(CLIP_SOLUTION, seed=0, max_mutants=16)
    # 7 mutants: both conditions negated, '<' -> '<=' and '>' -> '>=' (both equivalent:
    # unkillable), and each of the 3 returns -> None.
    assert len(ms) == 7
    return ms


def test_tester_kills_some_mutants():
    _mutants_of_clip()
    env = make(CLIP)
    env.step(py("def clip(x, lo, hi):\n    return max(x, lo)"))  # p = 3/4
    env.step(py("assert clip(5, 0, 10) == 5"))
    p = parts(env, "tester")
    # a middle value kills: 'not x < lo' (returns lo = 0), 'not x > hi' (returns hi = 10) and
    # 'return x -> None': 3 of 7. MutScore = 3/7, cov = min(1, (3/7) / 0.6) = 0.7143.
    # valid 1. local = 0.2 + 0.8 * 0.7143 = 0.7714; team = the program's pass rate 3/4.
    assert p["components"]["valid"] == 1.0
    assert p["components"]["cov"] == pytest.approx((3 / 7) / 0.6)
    assert p["team"] == pytest.approx(0.75)
    assert p["reward"] == pytest.approx(mixed(0.75, 0.2 + 0.8 * (3 / 7) / 0.6))
    assert p["reasons"]["cov"] == "killed 3/7 mutants"
    # the program max(x, lo) passes this test: agreement ends the episode; p < 1: failure
    assert env.terminations["coder"] and not env.infos["tester"]["success"]


def test_tester_strong_tests_reach_full_coverage():
    env = make(CLIP, max_tester_tests=3)
    env.step(py(CLIP_SOLUTION))
    env.step(
        py("assert clip(5, 0, 10) == 5\nassert clip(-1, 0, 10) == 0\nassert clip(11, 0, 10) == 10")
    )
    p = parts(env, "tester")
    # low and high values also kill the two other 'return None' mutants: 5/7 >= 0.6: cov 1
    assert p["components"] == {"valid": 1.0, "cov": 1.0}
    assert p["reward"] == pytest.approx(mixed(1.0, 1.0))
    assert env.infos["tester"]["success"] and env.terminations["tester"]


def test_tester_wrong_test_and_unparsable_and_format_violation():
    env = make(CLIP)
    env.step(py(CLIP_SOLUTION))
    env.step(py("assert clip(5, 0, 10) == 6"))
    p = parts(env, "tester")
    # the golden solution fails it: valid 0; no usable test for the mutation analysis: cov 0
    assert p["components"] == {"valid": 0.0, "cov": 0.0} and p["mask"] == 1.0
    assert p["reward"] == pytest.approx(mixed(1.0, 0.0))  # team = 1 (the program is golden)
    assert "fails test 1" in p["reasons"]["valid"]
    assert not env.terminations["tester"]  # the golden program fails the wrong test
    env.step(py(CLIP_SOLUTION))
    env.step("The function looks fine to me.")
    p = parts(env, "tester")
    assert p["components"] == {"valid": 0.0, "cov": 0.0}
    assert p["reasons"]["valid"] == "no python code block with assert statements found"
    env.step(py(CLIP_SOLUTION))
    env.step(py("assert True\nassert clip(5, 0, 10) == 5"))
    p = parts(env, "tester")
    # an assert that does not call clip breaks the format: valid 0; the usable test still
    # counts for coverage (3/7 killed, as above)
    assert p["components"]["valid"] == 0.0
    assert p["components"]["cov"] == pytest.approx((3 / 7) / 0.6)


def test_tester_may_not_redefine_the_entry_point_or_exit():
    tests, problem = parse_assert_tests(
        py("def clip(*a):\n    return 5\nassert clip(1, 2, 3) == 5"), "clip"
    )
    assert not tests and "may not define" in problem
    tests, problem = parse_assert_tests(
        py("import sys\nsys.exit(0)\nassert clip(1, 2, 3) == 2"), "clip"
    )
    assert not tests and "exit" in problem


def test_tester_stdin_rewards():
    env = make(SUM)
    env.step(py("a, b = map(int, input().split())\nprint(a + b)"))
    env.step(io_test("2 2", "4"))
    p = parts(env, "tester")
    # the golden's only mutant is a - b, which prints 0 for "2 2": killed, 1/1: cov 1
    assert p["components"] == {"valid": 1.0, "cov": 1.0} and p["reward"] == pytest.approx(1.0)
    env = make(SUM)
    env.step(py("print(0)"))
    env.step(io_test("0 0", "0"))
    p = parts(env, "tester")
    # valid, but 0 - 0 = 0 + 0: the mutant survives, cov 0; team = p of print(0) = 1/4
    assert p["components"] == {"valid": 1.0, "cov": 0.0}
    assert p["reward"] == pytest.approx(mixed(0.25, 0.2))
    assert env.terminations["tester"] and not env.infos["tester"]["success"]  # print(0) agreed
    env = make(SUM, max_tester_tests=2)
    env.step(py("print(0)"))
    env.step(io_test("0 0", "0") + "\n" + io_test("2 2", "4"))
    # the second test kills the mutant the first lets through: 1/1, cov 1, valid 1
    p = parts(env, "tester")
    assert (
        p["components"] == {"valid": 1.0, "cov": 1.0}
        and p["reasons"]["cov"] == "killed 1/1 mutants"
    )
    assert not env.terminations["tester"]  # print(0) fails "2 2"


def test_masks_are_zero_on_sandbox_failure():
    class Broken:
        def run(self, code, stdin="", limits=None):
            return ExecResult(None, error="worker died")

        def run_many(self, jobs):
            return [ExecResult(None, error="worker died") for _ in jobs]

        def close(self):
            pass

    env = envs.make("code", sandbox=Broken())
    env.reset(options={"instance": {k: v for k, v in CLIP.items() if k != "solution"}})
    env.step(py("def clip(x, lo, hi):\n    return 1"))
    p = parts(env, "coder")
    assert p["mask"] == 0.0 and p["reasons"]["mask"] == "sandbox failure"
    env.step(py("assert clip(1, 0, 2) == 1"))
    p = parts(env, "tester")  # no golden solution here: nothing to measure against
    assert p["mask"] == 0.0 and p["reward"] == pytest.approx(mixed(0.0, 0.0))


# ---------------------------------------------------------------------- workflow
def test_mismatch_history_reaches_both_agents_and_hidden_tests_stay_hidden():
    env = make(SUM)
    env.step(py("a, b = map(int, input().split())\nprint(a * b)"))
    env.step(io_test("2 5", "7"))
    assert not env.terminations["coder"]
    for agent in ("coder", "tester"):
        prompt = env.observe(agent)["prompt"]
        assert "print(a * b)" in prompt and "2 5" in prompt
        assert re.search(r"the program printed:\s*```\s*10\s*```", prompt)
        assert "10 -3" not in prompt  # a hidden golden test input
    assert env.unwrapped.turn == 1 and env.agent_selection == "coder"


def test_horizon_truncates_without_agreement():
    env = make(CLIP, max_turns=2)
    for _ in range(2):
        env.step(py("def clip(x, lo, hi):\n    return x"))
        env.step(py("assert clip(-1, 0, 10) == 0"))
    assert all(env.truncations.values()) and not any(env.terminations.values())
    assert not env.infos["tester"]["success"]
    env = make(CLIP, max_turns=1)
    env.step(py(CLIP_SOLUTION))
    env.step("no test")
    # the final program is correct: success at the horizon ends the episode (terminated)
    assert env.infos["tester"]["success"] and all(env.terminations.values())


def test_single_mode_multi_turn_option_ends_when_the_program_repeats():
    # single_turns=None: the multi-turn single agent (not AT-GRPO 5.1's baseline)
    env = make(CLIP, mode="single", single_turns=None)
    env.step(py("def clip(x, lo, hi):\n    return x"))
    env.step(py("def clip(x, lo, hi):\n    # same program, other comment\n    return x"))
    assert all(env.terminations.values()) and not env.infos["coder"]["success"]
    env = make(SUM, mode="single", single_turns=None)
    env.step(py("print(7)"))
    prompt = env.observe("coder")["prompt"]
    assert "Example 1: passed" in prompt and "5 5" not in prompt


def test_oracle_bundled_stdin_all_problems_both_modes():
    for mode in ("multi", "single"):
        env = envs.make("code", dataset="bundled_stdin", mode=mode)
        ok = 0
        for split in ("train", "val", "test"):
            for seed in range(8):
                r = play(env, oracle_policy, seed=seed, options={"split": split})
                ok += r["success"]
                if mode == "multi":
                    tester = env.unwrapped.history[-1]
                    assert tester.agreed and len(tester.tests) >= 1
        assert ok == 24


def test_oracle_100_humaneval_instances_both_modes():
    for mode in ("multi", "single"):
        env = envs.make("code", mode=mode, max_mutants=4)
        results = [play(env, oracle_policy, seed=s) for s in range(100)]
        assert all(r["success"] for r in results)
        if mode == "multi":  # the tester oracle's hidden tests are valid tests
            assert all(r["steps"] == 2 for r in results)


def test_oracle_tester_tests_are_valid_on_humaneval():
    env = envs.make("code", max_mutants=4)
    for seed in range(10):
        env.reset(seed=seed)
        env.step(env.unwrapped.oracle("coder"))
        env.step(env.unwrapped.oracle("tester"))
        assert parts(env, "tester")["components"]["valid"] == 1.0


# ---------------------------------------------------------------------- formats and data
def test_stdin_test_format_variants():
    tests, problem = parse_stdin_tests("**Test Input:** 5\n**Test Output:** 25\n\nbecause 5 * 5")
    assert problem == "" and (tests[0].stdin, tests[0].expected_stdout) == ("5\n", "25")
    text = io_test("2\n1 2", "3") + "\n" + io_test("1\n5", "5")
    tests, problem = parse_stdin_tests(text, max_tests=1)
    assert len(tests) == 1 and "at most 1" in problem and tests[0].stdin == "2\n1 2\n"
    tests, problem = parse_stdin_tests("**Test Input:**\n```\n1\n```\n")
    assert not tests and problem == "a Test Input without its Test Output"
    # mid-sentence mentions are not markers
    assert parse_stdin_tests("the test input: 4 gives test output: 5")[0] == []


def test_explicit_instances_are_validated():
    bad = dict(CLIP, solution="def clip(x, lo, hi):\n    return x\n")
    with pytest.raises(ValueError, match="fails test 2"):
        make(bad)
    with pytest.raises(ValueError, match="entry_point"):
        make({k: v for k, v in CLIP.items() if k != "entry_point"})
    with pytest.raises(ValueError, match="unknown code instance keys"):
        make(dict(CLIP, hints="none"))


def test_clone_shares_the_problem_and_is_independent():
    env = make(CLIP)
    env.step(py("def clip(x, lo, hi):\n    return x"))
    raw = env.unwrapped
    twin = raw.clone()
    assert twin.instance is raw.instance
    twin.step(py("assert clip(-1, 0, 10) == 0"))
    assert raw.agent_selection == "tester" and raw.history == [] and len(twin.history) == 1


def test_hub_loader_fixture_and_empty_split_error():
    env = envs.make("code", dataset="apps", data_path="tests/data/fixtures/apps.jsonl")
    raw = env.unwrapped
    pool = raw._problems()
    split = next(s for s in ("train", "val", "test") if pool.count(s))
    r = play(env, oracle_policy, seed=0, options={"split": split})
    assert r["success"]
    empty = next((s for s in ("train", "val", "test") if not pool.count(s)), None)
    if empty is not None:
        with pytest.raises(ValueError, match="no problem in the"):
            env.reset(seed=0, options={"split": empty})


def test_render_ansi_mentions_progress():
    env = envs.make("code", render_mode="ansi")
    env.reset(options={"instance": CLIP})
    env.step(py(CLIP_SOLUTION))
    env.step(py("assert clip(5, 0, 10) == 5"))
    text = env.render()
    assert "4/4 golden tests" in text and "agreed" in text


# ---------------------------------------------------------------------- AT-GRPO A.2.2 / 5.1
def test_a22_one_tester_test_per_turn_extra_tests_are_a_format_violation():
    """AT-GRPO A.2.2: the tester "provides one new high-quality test case" per turn. Two tests:
    a format violation (valid 0) and only the first counts: the mutant a - b survives "0 0",
    cov 0; team = p of print(0) = 1/4: r = 0.5 * 0.25 + 0.5 * 0 = 0.125."""
    env = make(SUM)
    assert "exactly one test case" in env.observe("tester")["prompt"]
    env.step(py("print(0)"))
    env.step(io_test("0 0", "0") + "\n" + io_test("2 2", "4"))
    p = parts(env, "tester")
    assert p["components"] == {"valid": 0.0, "cov": 0.0}
    assert p["reasons"]["valid"] == "2 tests; at most 1 count"
    assert p["reward"] == pytest.approx(0.125)
    assert env.infos["tester"]["num_tests"] == 1 and env.infos["tester"]["agreed"]
    # one test: valid, and it kills the mutant: 0.5 * 0.25 + 0.5 * 1.0 = 0.625
    env = make(SUM)
    env.step(py("print(0)"))
    env.step(io_test("2 2", "4"))
    assert parts(env, "tester")["reward"] == pytest.approx(0.625)


@pytest.mark.parametrize(
    "program, success", [(CLIP_SOLUTION, True), ("def clip(x, lo, hi):\n    return x", False)]
)
def test_51_single_agent_baseline_is_single_turn(program, success):
    """AT-GRPO 5.1, Code SA: "one agent emits code; single-turn termination (no verification
    loop)". The first program ends the episode: golden 0.5 * 1 + 0.5 * 1 = 1.0; return x
    passes tests 1 and 4 (p = 1/2), smoke runs: 0.5 * 0.5 + 0.5 * 1 = 0.75."""
    env = make(CLIP, mode="single")
    env.step(py(program))
    p = parts(env, "coder")
    assert p["reward"] == pytest.approx(1.0 if success else 0.75)
    ended = env.terminations if success else env.truncations
    assert all(ended.values()) and env.infos["coder"]["success"] is success
