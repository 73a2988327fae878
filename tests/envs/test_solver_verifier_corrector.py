"""Solver-Verifier-Corrector (MarsRL): verdict parsing, hand-computed rewards, the final-answer
rule, turn accounting and adaptive keep rules through the rollout engine."""

from __future__ import annotations

import random
import re
from collections import defaultdict

import pytest

import envs
from envs.solver_verifier_corrector import EVALUATION_CONFIG, parse_verdict, select_final
from tests.envs.contract import GARBAGE, oracle_policy, play

Q = {"question": "What is 6 * 7?", "answer": "42"}
RIGHT, WRONG = "6 * 7 = 42, so \\boxed{42}", "6 * 7 = 48, so \\boxed{48}"
ACCEPT, REJECT = "Each step holds.\nVerdict: correct", "Step 1 is wrong.\nVerdict: incorrect"


def run(actions, **cfg):
    """Play ``actions`` in order; return per-step (agent, reward, info) and the raw env."""
    env = envs.make("marsrl", **cfg)
    env.reset(seed=0, options={"instance": Q})
    raw = env.unwrapped
    out = []
    for text in actions:
        agent = env.agent_selection
        assert raw.agents and not raw.terminations[agent], "episode ended before the script"
        turn = raw.turn
        env.step(text)
        out.append((agent, raw.rewards[agent], dict(raw.infos[agent]), turn))
    return out, raw


@pytest.mark.parametrize(
    ("report", "value"),
    [
        ("Verdict: correct", True),
        ("**Verdict:** Correct.", True),
        ("Final verdict: the solution is correct", True),
        ("**Correctness:** Correct", True),
        ("Verdict: no errors found", True),
        ("\\boxed{correct}", True),
        ("Verdict: incorrect", False),
        ("Verdict: **INCORRECT**", False),
        ("Verdict: not correct", False),
        ("Verdict: the solution isn't correct", False),
        ("Verdict: wrong", False),
        ("Verdict: has errors", False),
        ("Verdict: the solution contains a critical error", False),
        ("**Correctness:** Wrong", False),
        ("\\boxed{\\text{incorrect}}", False),
        ("The final answer \\boxed{42} is right.\nVerdict: incorrect", False),
        ("Verdict: correct\nOn second thought:\nVerdict: incorrect", False),
        ("Verdict: incorrect\nActually I was wrong.\nVerdict: correct", True),
    ],
)
def test_parse_verdict(report, value):
    assert parse_verdict(report).value is value


@pytest.mark.parametrize(
    "report",
    [
        "The solution is correct.",  # no verdict line: free text is not searched
        "This is incorrect",
        "Verdict: correct/incorrect",
        "Verdict: partially correct",
        "Verdict:",
        "\\boxed{42}",
        "",
        None,
    ],
)
def test_parse_verdict_format_failures(report):
    v = parse_verdict(report)
    assert v.value is None and v.reason


def test_flagging_a_correct_solution_is_penalised():
    steps, raw = run([RIGHT, REJECT, RIGHT, ACCEPT])
    assert [(a, r) for a, r, _, _ in steps] == [
        ("solver", 1.0),
        ("verifier", 0.0),  # rejected a correct solution
        ("corrector", 1.0),
        ("verifier", 1.0),  # accepted a correct solution
    ]
    assert steps[1][2]["reward_parts"]["reasons"]["judgment"] == "rejected a correct solution"
    assert not raw.agents or all(raw.terminations.values())
    assert steps[-1][2]["final_answer"] == "42" and steps[-1][2]["accepted"] is True
    assert raw.success is True


def test_accepting_a_wrong_solution_ends_with_failure():
    steps, raw = run([WRONG, ACCEPT])
    assert [(a, r) for a, r, _, _ in steps] == [("solver", 0.0), ("verifier", 0.0)]
    assert all(raw.terminations.values()) and raw.success is False
    assert steps[-1][2]["final_answer"] == "48"


def test_incorrect_is_never_read_as_correct():
    steps, raw = run([RIGHT, "I believe this is incorrect.\nVerdict: incorrect", WRONG])
    assert steps[1][2]["verdict"] is False and steps[1][1] == 0.0
    assert raw.agent_selection == "verifier" and not raw.terminations["verifier"]


def test_full_chain_and_step_limit():
    # S wrong, V1 rejects (right: 1), C1 wrong (0), V2 rejects (right: 1), C2 right (1): 5 steps
    steps, raw = run([WRONG, REJECT, WRONG, REJECT, RIGHT])
    assert [(a, r) for a, r, _, _ in steps] == [
        ("solver", 0.0),
        ("verifier", 1.0),
        ("corrector", 0.0),
        ("verifier", 1.0),
        ("corrector", 1.0),
    ]
    assert [t for *_, t in steps] == [0, 0, 1, 1, 2]  # turn = correction cycle
    assert all(raw.terminations.values())
    # no acceptance: passes all 0, the two wrong solutions were rejected: C2 wins
    assert steps[-1][2]["final_index"] == 2 and steps[-1][2]["final_answer"] == "42"
    assert raw.success is True


def test_33_unparsed_verdict_never_reaches_the_corrector():
    """MarsRL 3.3: "the Corrector exclusively samples outputs that contain identified errors
    from the Verifier. If no such outputs are available, the process terminates early." V2's
    report has no verdict: reward 0 (format failure) and the episode ends there; the final
    answer is C1's (never rejected, latest): 48, wrong."""
    steps, raw = run([WRONG, REJECT, WRONG, "Looks fine to me."])
    assert [(a, r) for a, r, _, _ in steps] == [
        ("solver", 0.0),
        ("verifier", 1.0),
        ("corrector", 0.0),
        ("verifier", 0.0),
    ]
    v2 = steps[3][2]
    assert v2["verdict"] is None and "no verdict line" in v2["reward_parts"]["reasons"]["judgment"]
    assert all(raw.terminations.values()) and raw.success is False
    assert v2["final_index"] == 1 and v2["final_answer"] == "48"
    # already at V1: no corrector step at all
    steps, raw = run([RIGHT, "Seems right."])
    assert [a for a, *_ in steps] == ["solver", "verifier"] and all(raw.terminations.values())
    assert raw.success is True  # the only solution is the final answer


def test_33_unparsed_verdict_retry_option():
    """unparsed_verdict="retry": the verifier checks the same solution again (a step of the 5);
    the corrector still sees only the rejection."""
    steps, raw = run([WRONG, "Hmm.", REJECT, RIGHT, ACCEPT], unparsed_verdict="retry")
    assert [(a, r) for a, r, _, _ in steps] == [
        ("solver", 0.0),
        ("verifier", 0.0),
        ("verifier", 1.0),
        ("corrector", 1.0),
        ("verifier", 1.0),
    ]
    assert all(raw.terminations.values()) and raw.success is True
    env = envs.make("marsrl", unparsed_verdict="retry")
    env.reset(seed=0, options={"instance": Q})
    env.step(WRONG)
    env.step("Hmm.")
    assert "without a verdict line" in env.observe("verifier")["prompt"]
    env.step(REJECT)
    prompt = env.observe("corrector")["prompt"]
    assert REJECT in prompt and "Hmm." not in prompt
    with pytest.raises(ValueError, match="unparsed_verdict"):
        envs.make("marsrl", unparsed_verdict="corrector")


def test_most_verified_solution_is_the_final_answer():
    # accept_after=3: the solver's right solution passes twice, is then rejected; the corrector's
    # wrong one passes once before the step limit. Most passes wins: the solver's.
    steps, raw = run([RIGHT, ACCEPT, ACCEPT, REJECT, WRONG, ACCEPT], accept_after=3, max_steps=6)
    assert [a for a, *_ in steps] == [
        "solver",
        "verifier",
        "verifier",
        "verifier",
        "corrector",
        "verifier",
    ]
    assert [r for _, r, *_ in steps] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert steps[-1][2]["final_index"] == 0 and steps[-1][2]["final_answer"] == "42"
    assert steps[-1][2]["accepted"] is False and raw.success is True


def test_evaluation_process_accepts_after_four_checks_public_inference_script():
    # vc_reasoning_system.py: a solution is accepted after 4 accepting checks in a row; a
    # rejection sends it to the corrector and the count starts again for the new solution.
    script = [RIGHT, ACCEPT, ACCEPT, REJECT, WRONG, REJECT, RIGHT, ACCEPT, ACCEPT, ACCEPT, ACCEPT]
    steps, raw = run(script, **EVALUATION_CONFIG)
    assert [a for a, *_ in steps] == ["solver"] + ["verifier"] * 3 + ["corrector", "verifier"] + [
        "corrector"
    ] + ["verifier"] * 4
    assert all(raw.terminations.values()) and steps[-1][2]["accepted"] is True
    assert steps[-1][2]["final_index"] == 2 and raw.success is True


def test_evaluation_process_ends_after_eleven_checks_public_inference_script():
    # one initial check and ten more rounds: after the 11th rejection no correction follows
    script = [WRONG] + [REJECT, WRONG] * 10 + [REJECT]
    steps, raw = run(script, **EVALUATION_CONFIG)
    assert len(steps) == 22 and sum(a == "verifier" for a, *_ in steps) == 11
    assert all(raw.terminations.values()) and steps[-1][2]["accepted"] is False
    # the training limits would have stopped at five steps (MarsRL 3.1)
    steps5, _ = run(script[:5])
    assert [a for a, *_ in steps5][-1] == "corrector"


def test_quoted_completions_leave_out_the_reasoning_block():
    env = envs.make("marsrl")
    env.reset(seed=0, options={"instance": Q})
    env.step("<think>scratch: maybe 48? no, 42</think>\n6 * 7 = 42, so \\boxed{42}")
    prompt = env.observe("verifier")["prompt"]
    assert "scratch" not in prompt and "6 * 7 = 42, so \\boxed{42}" in prompt
    assert env.unwrapped._solutions[0].correct  # graded on the whole completion
    env = envs.make("marsrl", strip_thinking=False)
    env.reset(seed=0, options={"instance": Q})
    env.step("<think>scratch</think> \\boxed{42}")
    assert "scratch" in env.observe("verifier")["prompt"]


def test_select_final_rule():
    assert select_final([0], [0]) == 0
    assert select_final([1, 1], [0, 1]) == 0  # fewer rejections
    assert select_final([1, 1], [1, 1]) == 1  # then latest
    assert select_final([3, 0, 0], [0, 1, 0], accepted=1) == 1
    with pytest.raises(ValueError):
        select_final([], [])


def test_oracle_and_prompts():
    result = play(envs.make("marsrl"), oracle_policy, seed=2)
    assert result["success"] and result["steps"] == 2
    env = envs.make("marsrl")
    env.reset(seed=0, options={"instance": Q})
    raw = env.unwrapped
    assert (
        "SOLVER" in env.observe("solver")["prompt"]
        and "\\boxed{}" in env.observe("solver")["prompt"]
    )
    assert "wait" in env.observe("verifier")["prompt"]
    env.step(WRONG)
    p = env.observe("verifier")["prompt"]
    assert "VERIFIER" in p and WRONG in p and "Verdict: incorrect" in p
    assert raw.oracle("verifier").endswith("Verdict: incorrect")
    env.step(REJECT)
    p = env.observe("corrector")["prompt"]
    assert "CORRECTOR" in p and WRONG in p and REJECT in p
    env.step(raw.oracle("corrector"))
    assert raw.oracle("verifier").endswith("Verdict: correct")


def test_limits_modes_and_errors():
    steps, raw = run([WRONG], max_steps=1)
    assert all(raw.terminations.values()) and steps[0][2]["final_answer"] == "48"
    with pytest.raises(ValueError, match="multi-agent"):
        envs.make("marsrl", mode="single")
    with pytest.raises(ValueError, match="reference answer"):
        envs.make("marsrl").reset(options={"instance": {"question": "Why?"}})
    with pytest.raises(ValueError, match="max_steps"):
        envs.make("marsrl", max_steps=0)
    with pytest.raises(ValueError, match="max_checks"):
        envs.make("marsrl", max_checks=0)
    raw = envs.make("marsrl").unwrapped
    assert [raw.adaptive_preference(a) for a in raw.possible_agents] == ["low", "high", "low"]
    it = iter(GARBAGE)
    env = envs.make("marsrl", render_mode="ansi")
    env.reset(seed=1)
    for agent in env.agent_iter():
        if env.terminations[agent]:
            env.step(None)
            continue
        env.step(next(it))
        assert env.infos[agent]["reward_parts"]["reward"] in (0.0, 1.0)
        assert "marsrl" in env.render() or "solver_verifier_corrector" in env.render()


def test_rollout_engine_adaptive_keeps_follow_the_rule():
    from adapters.policies.scripted import ScriptedPolicy
    from adapters.rollout import EpisodeSpec, RolloutConfig, RolloutEngine

    rng = random.Random(0)

    def policy(prompt: str) -> str:
        if "You are the VERIFIER" in prompt:
            # live verifier candidates all judge the same solution: only a clean rejection
            # (reward 1 on a wrong solution) and a format failure (0) can differ
            return rng.choice([ACCEPT, REJECT, REJECT, "It looks fine overall."])
        return rng.choice([RIGHT, WRONG])

    engine = RolloutEngine(
        "marsrl",
        ScriptedPolicy(policy),
        RolloutConfig(keep="adaptive", keep_n=2, candidates=4),
    )
    specs = [EpisodeSpec("marsrl", seed=s, options={"instance": Q}) for s in range(3)]
    result = engine.run(specs, seed=1)
    engine.close()
    groups = defaultdict(list)
    for s in result.samples:
        groups[s.group].append(s)
    informative = defaultdict(int)
    for samples in groups.values():
        role = samples[0].role
        live = [s for s in samples if not s.done]
        kept = [s.reward for s in samples if s.kept]
        others = [s.reward for s in live if not s.kept]
        assert all(s in live for s in samples if s.kept)  # only continuing candidates are kept
        assert len(kept) == min(2, len(live))
        if role == "verifier":
            # MarsRL 3.3: the corrector receives only reports that identified errors; the
            # acceptances and the unparsed report end their episodes
            assert all(s.completion == REJECT for s in live)
            assert all(s.done for s in samples if s.completion != REJECT)
        else:  # the verifier prefers wrong solutions (reward 0)
            assert not others or max(kept) <= min(others)
        if others and set(kept + others) == {0.0, 1.0}:
            informative[role] += 1
    assert informative["solver"] and informative["corrector"]
    assert len(result.episodes) > 3


def test_registered_math_set_from_a_file():
    path = "tests/data/fixtures/aime25.jsonl"  # AIME25 in its released schema
    env = envs.make("solver_verifier_corrector", dataset="aime25", data_path=path)
    raw = env.unwrapped
    split = next(s for s in ("train", "val", "test") if _has(raw, s))
    r = play(env, oracle_policy, seed=0, options={"split": split})
    assert r["success"] and raw.instance.source == "aime25" and raw.instance.answer == "70"
    bad = envs.make("solver_verifier_corrector", dataset="gsm_symbolic", data_path=path)
    with pytest.raises(ValueError, match="data_path"):
        bad.reset(seed=0)


def _has(raw, split):
    try:
        raw.sample_instance(split, 0)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("setting", ["solver_verifier_corrector", "discussion"])
def test_generator_options_shape_the_question_pool(setting):
    small = {"min_terms": 2, "max_terms": 2, "max_digits": 1, "operators": ["+"]}
    raw = envs.make(
        setting, dataset="basic_arithmetic", dataset_size=40, dataset_options=small
    ).unwrapped
    questions = {raw.sample_instance("train", s).question for s in range(10)}
    for q in questions:  # "Calculate 3 + 4." with one-digit terms only
        terms = re.findall(r"\d+", q)
        assert len(terms) == 2 and all(len(t) == 1 for t in terms), q
    big = envs.make(setting, dataset="basic_arithmetic", dataset_size=40).unwrapped
    assert {big.sample_instance("train", s).question for s in range(10)} != questions
    bad = envs.make(setting, dataset="aime25", dataset_options=small)
    with pytest.raises(ValueError, match="dataset_options"):
        bad.reset(seed=0)
