"""Math setting (reasoner + tool): A.1.1 rewards on hand-computed cases, workflow, oracle, data."""

from __future__ import annotations

import pytest

import envs
from envs.math import reasoner_answer
from sandboxes import ExecResult
from tests.envs.contract import oracle_policy, play

LAM = 0.70
Q = {
    "question": "Tom has 3 boxes of 4 apples and eats 2. How many apples are left?",
    "answer": "10",
}


def py(code: str) -> str:
    return f"```python\n{code}\n```"


def make(instance=Q, mode="multi", **config):
    env = envs.make("math", mode=mode, **config)
    env.reset(options={"instance": instance})
    return env


def parts(env, agent):
    return env.infos[agent]["reward_parts"]


def mixed(team, local, mask=1.0):
    return LAM * team + (1 - LAM) * mask * local


# ---------------------------------------------------------------------- reasoner
@pytest.mark.parametrize(
    "completion, fmt, step",
    [
        ("3 * 4 - 2 = 10, so there are ten left.", 0.0, 0.0),  # no box, no ####: unparsable
        ("\\boxed{}", 0.0, 0.0),  # empty box
        ("3 * 4 = 12, minus 2 is \\boxed{9}", 1.0, 0.0),  # wrong
        ("3 * 4 - 2\n#### 10", 1.0, 1.0),  # GSM8K marker
        ("**Reasoning Steps:** 12 - 2\n\\boxed{10}", 1.0, 1.0),
        ("\\boxed{\\frac{20}{2}}", 1.0, 1.0),  # equivalent form
        ("#### \\boxed{10.0000001}", 1.0, 0.0),  # an integer gold needs the integer (NumEq)
        ("#### \\boxed{10.000000000000002}", 1.0, 1.0),  # float print noise is fine
        ("\\boxed{10.01}", 1.0, 0.0),
    ],
)
def test_reasoner_rewards(completion, fmt, step):
    env = make()
    env.step(completion)
    p = parts(env, "reasoner")
    assert p["components"] == {"fmt": fmt, "step": step}
    # multi mode: the episode cannot end at the reasoner's step, so team = 0;
    # reward = 0.3 * (0.2 fmt + 0.8 step)
    assert p["team"] == 0.0 and p["mask"] == 1.0
    assert p["reward"] == pytest.approx(mixed(0.0, 0.2 * fmt + 0.8 * step))


# ---------------------------------------------------------------------- tool
@pytest.mark.parametrize(
    "completion, comps",
    [
        ("print(10)", (0, 0, 0)),  # no code block
        (py("print(10)") + "\n" + py("print(10)"), (0, 0, 0)),  # two blocks
        (py("print(10"), (0, 0, 0)),  # syntax error: not run
        (py("x = 1 / 0\nprint(10)"), (0, 0, 0)),  # crashes before printing
        (py("print(10)\nraise ValueError('late')"), (1, 0, 0)),  # printed, then crashed
        (py("while True:\n    pass"), (0, 0, 0)),  # timeout
        (py("x = 3 * 4 - 2"), (0, 1, 0)),  # ran, printed nothing
        (py("print(3 * 4 + 2)"), (1, 1, 0)),  # wrong answer
        (py("from fractions import Fraction\nprint(Fraction(20, 2))"), (1, 1, 1)),
        (py("print('work:', 12)\nprint(10.0000000001)"), (1, 1, 1)),  # last line counts
    ],
)
def test_tool_rewards(completion, comps):
    env = make(wall_s=0.5)
    env.step("I am not sure.")  # the reasoner gives no answer: no agreement possible
    env.step(completion)
    p = parts(env, "tool")
    fmt, tool, step = comps
    assert p["components"] == {"fmt": fmt, "tool": tool, "step": step}, p["reasons"]
    # team 0 (the episode goes on); reward = 0.3 * (0.1 fmt + 0.1 tool + 0.8 step)
    assert p["team"] == 0.0 and not env.terminations["tool"]
    assert p["reward"] == pytest.approx(mixed(0.0, 0.1 * fmt + 0.1 * tool + 0.8 * step))


def test_agreement_on_a_correct_answer_ends_with_team_reward():
    env = make()
    env.step("#### 10")
    env.step(py("print(3 * 4 - 2)"))
    p = parts(env, "tool")
    # agreement ends the episode; the final (reasoner's) answer is correct: team 1
    # reward = 0.7 * 1 + 0.3 * 1 = 1.0
    assert p["team"] == 1.0 and p["reward"] == pytest.approx(1.0)
    assert all(env.terminations.values()) and env.infos["tool"]["success"]
    assert env.infos["tool"]["agreed"]


def test_agreement_on_a_wrong_answer_ends_in_failure():
    env = make()
    env.step("\\boxed{14}")
    env.step(py("print(3 * 4 + 2)"))
    p = parts(env, "tool")
    # agreed on 14: ends; team 0; local 0.1 + 0.1 = 0.2 -> reward 0.06
    assert p["team"] == 0.0 and p["reward"] == pytest.approx(mixed(0.0, 0.2))
    assert all(env.terminations.values()) and not env.infos["tool"]["success"]


def test_a_correct_tool_disagreeing_with_a_wrong_reasoner_continues():
    env = make()
    env.step("\\boxed{14}")
    env.step(py("print(10)"))
    p = parts(env, "tool")
    assert p["team"] == 0.0 and p["reward"] == pytest.approx(mixed(0.0, 1.0))  # 0.3
    assert not any(env.terminations.values()) and env.agent_selection == "reasoner"
    prompt = env.observe("reasoner")["prompt"]
    assert "The reasoner's final answer: 14" in prompt and "The tool's answer: 10" in prompt
    assert "do not agree" in prompt
    env.step("The program is right.\n\\boxed{10}")
    assert parts(env, "reasoner")["reward"] == pytest.approx(mixed(0.0, 1.0))


def test_horizon():
    env = make(max_turns=2)
    for _ in range(2):
        env.step("\\boxed{14}")
        env.step(py("print(10)"))
    # never agreed; the final answer (14) is wrong: truncated, team 0
    assert all(env.truncations.values()) and not any(env.terminations.values())
    assert parts(env, "tool")["team"] == 0.0 and not env.infos["tool"]["success"]
    env = make(max_turns=2)
    env.step("\\boxed{14}")
    env.step(py("print(10)"))
    env.step("\\boxed{10}")
    env.step(py("print(11)"))
    # at the horizon the final answer (10) is correct: team 1 for the ending step
    p = parts(env, "tool")
    assert p["team"] == 1.0 and env.infos["tool"]["success"]
    assert p["reward"] == pytest.approx(mixed(1.0, 0.2))  # fmt + tool, step 0
    # ... and for the reasoner of that (final) turn, at its own step (A.1.1)
    assert parts(env, "reasoner")["team"] == 1.0 and "for_step" not in parts(env, "reasoner")


def test_single_mode_multi_turn_option_ends_when_the_answer_repeats():
    # single_turns=None: the multi-turn single agent (not AT-GRPO 5.1's baseline)
    env = make(mode="single", single_turns=None)
    env.step("\\boxed{14}")
    p = parts(env, "reasoner")
    assert p["team"] == 0.0 and not any(env.terminations.values())
    assert "Your final answer: 14" in env.observe("reasoner")["prompt"]
    env.step("\\boxed{10}")
    assert not any(env.terminations.values())
    env.step("#### 10.0")
    p = parts(env, "reasoner")
    # the same answer twice: the episode ends; correct: team 1, reward 0.7 + 0.3 = 1.0
    assert all(env.terminations.values()) and env.infos["reasoner"]["success"]
    assert p["team"] == 1.0 and p["reward"] == pytest.approx(1.0)


def test_tool_mask_is_zero_on_sandbox_failure():
    class Broken:
        def run(self, code, stdin="", limits=None):
            return ExecResult(None, error="worker died")

        def run_many(self, jobs):
            return [ExecResult(None, error="worker died") for _ in jobs]

        def close(self):
            pass

    env = envs.make("math", sandbox=Broken())
    env.reset(options={"instance": Q})
    env.step("\\boxed{10}")
    env.step(py("print(10)"))
    p = parts(env, "tool")
    assert p["mask"] == 0.0 and p["components"] == {"fmt": 0.0, "tool": 0.0, "step": 0.0}
    assert p["reward"] == pytest.approx(0.0)


def test_reasoner_answer_extraction():
    assert reasoner_answer("a \\boxed{1} then \\boxed{2}").value == "2"
    assert reasoner_answer("#### 1,200").value == "1,200"
    assert reasoner_answer("#### ").reason == "nothing after '####'"
    assert reasoner_answer(None).reason == "completion is not a string"


# ---------------------------------------------------------------------- oracle and data
def test_oracle_100_instances_both_modes():
    for mode, steps in (("multi", 2), ("single", 1)):
        env = envs.make("math", mode=mode)
        results = [play(env, oracle_policy, seed=s) for s in range(100)]
        assert all(r["success"] for r in results)
        assert all(r["steps"] == steps for r in results)  # agreement (multi), one turn (single)


def test_generated_instances_mix_generators_and_are_deterministic():
    raw = envs.make("math").unwrapped
    sources = {raw.sample_instance("train", s).source for s in range(30)}
    assert sources == {"reasoning_gym/gsm_symbolic", "reasoning_gym/basic_arithmetic"}
    assert raw.sample_instance("test", 4) == raw.sample_instance("test", 4)
    only = envs.make("math", generators=("basic_arithmetic",)).unwrapped
    assert only.sample_instance("val", 1).question.startswith("Calculate")


def test_hub_loader_fixture():
    env = envs.make("math", dataset="gsm8k", data_path="tests/data/fixtures/gsm8k.jsonl")
    pool_splits = [s for s in ("train", "val", "test") if _has(env, s)]
    assert pool_splits
    r = play(env, oracle_policy, seed=0, options={"split": pool_splits[0]})
    assert r["success"]


def _has(env, split):
    try:
        env.unwrapped.sample_instance(split, 0)
    except ValueError:
        return False
    return True


def test_explicit_instance_validation_and_clone():
    with pytest.raises(ValueError, match="question"):
        make({"answer": "1"})
    with pytest.raises(ValueError, match="unknown math instance keys"):
        make(dict(Q, hint="x"))
    env = make({"question": "What is 6 * 7?", "answer": 42})
    raw = env.unwrapped
    raw.step("\\boxed{42}")
    twin = raw.clone()
    assert twin.instance is raw.instance
    twin.step(py("print(42)"))
    assert twin.success and not raw.success and raw.agent_selection == "tool"


def test_render_ansi():
    env = envs.make("math", render_mode="ansi")
    env.reset(options={"instance": Q})
    env.step("\\boxed{10}")
    env.step(py("print(10)"))
    text = env.render()
    assert "reasoner 10, tool 10, agreed" in text and "success=True" in text


# ---------------------------------------------------------------------- AT-GRPO A.1.1 / 5.1
def _run(env, completions):
    """Step the completions; return the sum of ``env.rewards`` per agent over the steps."""
    total: dict[str, float] = {}
    for c in completions:
        env.step(c)
        for a, r in env.rewards.items():
            total[a] = total.get(a, 0.0) + r
    return total


def test_a11_team_reward_reaches_the_reasoner_of_the_final_turn():
    """AT-GRPO A.1.1: r_team = 1{k = T, CheckFinal = pass} for the agents of the final turn;
    the turn whose tool step ends the episode by agreement is the final turn. A correct
    reasoner with an agreeing tool: 0.7 * 1 + 0.3 * (0.2 * 1 + 0.8 * 1) = 1.0 (was 0.3)."""
    env = make()
    env.step("#### 10")
    first = parts(env, "reasoner")
    assert first["team"] == 0.0 and first["reward"] == pytest.approx(0.3)  # provisional
    assert env.infos["reasoner"]["trainable"] is True
    env.step(py("print(3 * 4 - 2)"))
    assert all(env.terminations.values())
    final = parts(env, "reasoner")
    assert final["for_step"] == 0 and final["team"] == 1.0
    assert final["reward"] == pytest.approx(LAM * 1 + (1 - LAM) * (0.2 + 0.8)) == 1.0
    raw = env.unwrapped
    assert [(a["agent"], a["step"]) for a in raw.last_awards] == [("reasoner", 0)]
    # the award replaces the provisional 0.3: this step pays the reasoner the difference
    assert env.rewards["reasoner"] == pytest.approx(0.7)
    assert parts(env, "tool")["reward"] == pytest.approx(1.0)


def test_a11_episode_returns_equal_final_rewards():
    env = make()
    totals = _run(env, ["\\boxed{14}", py("print(10)"), "\\boxed{10}", py("print(10)")])
    # turn 1: reasoner wrong (0.3 * 0.2 = 0.06), tool right but no agreement (0.3);
    # turn 2 is final: reasoner 1.0, tool 1.0
    assert totals["reasoner"] == pytest.approx(0.06 + 1.0)
    assert totals["tool"] == pytest.approx(0.3 + 1.0)


def test_a11_no_team_award_when_the_agreed_answer_is_wrong():
    env = make()
    env.step("\\boxed{14}")
    env.step(py("print(14)"))
    assert all(env.terminations.values()) and not env.unwrapped.last_awards
    assert parts(env, "reasoner")["reward"] == pytest.approx(mixed(0.0, 0.2))


def test_a11_horizon_turn_reasoner_gets_team_at_its_own_step():
    env = make(max_turns=1)
    env.step("\\boxed{10}")
    p = parts(env, "reasoner")
    assert p["team"] == 1.0 and p["reward"] == pytest.approx(1.0)
    env.step(py("print(11)"))  # the tool disagrees: truncated at the horizon, still final
    assert not env.unwrapped.last_awards and env.infos["tool"]["success"]


def test_a11_team_credit_ending_step_option():
    env = make(rewards={"team_credit": "ending_step"})
    env.step("#### 10")
    env.step(py("print(10)"))
    assert not env.unwrapped.last_awards
    assert parts(env, "reasoner")["reward"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="team_credit"):
        make(rewards={"team_credit": "everyone"})


@pytest.mark.parametrize("answer, success", [("\\boxed{10}", True), ("\\boxed{9}", False)])
def test_51_single_agent_baseline_is_single_turn(answer, success):
    """AT-GRPO 5.1, Math SA: "one agent performs reasoning ... in a single turn; single-turn
    termination". The first answer ends the episode: correct 0.7 + 0.3 * 1 = 1.0,
    wrong (formatted) 0.3 * 0.2 = 0.06."""
    env = make(mode="single")
    env.step(answer)
    p = parts(env, "reasoner")
    assert p["team"] == float(success)
    assert p["reward"] == pytest.approx(1.0 if success else 0.06)
    ended = env.terminations if success else env.truncations
    assert all(ended.values()) and env.infos["reasoner"]["success"] is success
    with pytest.raises(ValueError, match="single_turns"):
        make(mode="single", single_turns=0)


# ---------------------------------------------------------------------- non-math questions
MC = {
    "question": "Which city is the capital of Italy?\n\nA. Paris\nB. Rome\nC. Berlin",
    "answer": "B",
    "answer_format": "choice",
    "choices": ["Paris", "Rome", "Berlin"],
}


@pytest.mark.parametrize(
    "completion, fmt, step",
    [
        ("Rome is the capital, so \\boxed{B}", 1.0, 1.0),
        ("The answer is (B).", 1.0, 1.0),  # the MMLU-Pro harness phrase
        ("<answer>Rome</answer>", 1.0, 1.0),  # option text -> its letter
        ("The answer is (A).", 1.0, 0.0),
        ("The answer is Madrid", 0.0, 0.0),  # no option: a format failure, with the reason
        ("", 0.0, 0.0),
    ],
)
def test_multiple_choice_question_graded_by_letter(completion, fmt, step):
    env = make(MC)
    env.step(completion)
    p = parts(env, "reasoner")
    assert p["components"] == {"fmt": fmt, "step": step}
    if not fmt:
        assert p["reasons"]["fmt"]


def test_short_answer_and_yes_no_single_mode_episodes():
    qa = {
        "question": "Who won?",
        "answer": "Denver Broncos",
        "answer_format": "qa",
        "aliases": ["Broncos"],
    }
    env = make(qa, mode="single")
    env.step("Answer: the Broncos")  # an alias, after normalisation
    assert env.unwrapped.success
    env = make(dict(qa, question="Who lost?"), mode="single")
    env.step("Answer: Carolina")
    assert not env.unwrapped.success and "matches none" in parts(env, "reasoner")["reasons"]["step"]
    yn = {"question": "Is water wet?", "answer": "yes", "answer_format": "yesno"}
    env = make(yn, mode="single")
    env.step("\\boxed{Yes}")
    assert env.unwrapped.success


def test_non_math_agreement_and_oracle():
    env = make(MC)
    env.step("The answer is (B)")
    env.step(py("print('B')"))  # the tool prints the same letter: agreement, correct
    assert env.unwrapped.success and all(env.terminations.values())
    for inst in (MC, {"question": "q?", "answer": "(C)", "answer_format": "bbh"}):
        r = play(envs.make("math"), oracle_policy, seed=0, options={"instance": inst})
        assert r["success"]
    with pytest.raises(ValueError, match="choices"):
        make(dict(MC, choices="Paris"))


def test_question_answering_dataset_from_file():
    env = envs.make("math", dataset="mmlu", data_path="tests/data/fixtures/mmlu.jsonl")
    ok = [s for s in ("train", "val", "test") if _has(env, s)]
    r = play(env, oracle_policy, seed=0, options={"split": ok[0]})
    assert r["success"] and env.unwrapped.instance.answer_format == "choice"


@pytest.mark.parametrize(
    "inst",
    [
        MC,
        {"question": "Who?", "answer": "Ann", "answer_format": "qa", "aliases": ["Anne"]},
        {"question": "Is it?", "answer": "no", "answer_format": "yesno"},
        {"question": "not True is", "answer": "False", "answer_format": "bbh"},
    ],
)
def test_hostile_completions_on_question_answering_are_format_failures(inst):
    import time

    for bad in ["\\boxed{" * 40_000, "answer is " * 40_000, "\x00" * 1000, "(" * 100_000]:
        env = make(inst, mode="single")
        t0 = time.perf_counter()
        env.step(bad)
        assert time.perf_counter() - t0 < 5.0
        p = parts(env, "reasoner")
        assert p["components"]["step"] == 0.0 and not env.unwrapped.success
