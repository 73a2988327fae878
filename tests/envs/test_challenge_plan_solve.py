"""challenge_plan_solve (SAGE): schedule, every reward of its module docstring against
hand-computed values (accepted / filtered questions, invalid verifiers, gated and ungated plans,
missing tags, planning off), external verification (math and code) and the question pool."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import envs
from envs.challenge_plan_solve import SageConfig
from envs.pools import PoolItem, QuestionPool
from tests.envs.contract import oracle_policy, play

REF = {"question": "What is 6 * 7?", "kind": "math", "answer": "42"}
CODE_REF = {
    "question": "Write inc(x) that returns x + 1.",
    "kind": "code",
    "answer": "def inc(x):\n    return x + 1\n",
    "tests": [{"kind": "assert", "code": "assert inc(1) == 2\n"}],
    "entry_point": "inc",
}
NEW_MATH = "<question>What is 17 * 3?</question>\n<answer>51</answer>"


def _pool() -> QuestionPool:
    items = [
        PoolItem(f"What is {i} * {i + 1}?", kind="math", answer=str(i * (i + 1))) for i in range(60)
    ]
    items.append(PoolItem("Explain why the sky is blue."))  # no verifier: never drawn
    return QuestionPool(items, seed_set="toy")


def _raw(**cfg):
    pool = cfg.pop("pool", None) or _pool()
    return envs.make("sage", pool=pool, **cfg).unwrapped


def _drive(raw, actions):
    log = []
    for text in actions:
        agent = raw.agent_selection
        assert not raw.terminations[agent], f"{agent} is done; script too long"
        prompt = raw.observe(agent)["prompt"]
        raw.step(text)
        info = copy.deepcopy(raw.infos[agent])
        log.append((agent, raw.rewards[agent], info, copy.deepcopy(raw.last_awards), prompt))
    return log


def _award(entry, agent):
    found = [a for a in entry[3] if a["agent"] == agent]
    assert len(found) == 1, entry[3]
    return found[0]


# ---------------------------------------------------------------- the full accepted round


def test_accepted_math_round_hand_computed():
    raw = _raw()
    raw.reset(options={"instance": REF})
    n = len(raw.pool)
    log = _drive(
        raw,
        [
            NEW_MATH,
            "<think>clear</think><score>8</score>",
            "<answer>51</answer>",
            "<answer>50</answer>",
            "<answer>\\boxed{51}</answer><answer>51</answer>",  # duplicate tag: r_f 0.5
            "51",  # no tag: not graded, r_f 0
            "<plan>1. Multiply 6 by 7.</plan>",
            "<score>5</score>",
            "<answer>42</answer>",
        ],
    )
    agents = [e[0] for e in log]
    assert agents == ["challenger", "critic"] + ["solver"] * 4 + ["planner", "critic", "solver"]
    assert all(raw.terminations.values())
    # challenger: pending, then (s_q + r_d + r_f) / 3 after the 4th difficulty sample
    assert log[0][1] == 0.0 and "pending" in log[0][2]["reward_parts"]["reasons"]
    s_q, s_gt = 7 / 9, [1.0, 0.0, 1.0, 0.0]
    r_d = 1 - np.mean(s_gt)
    aw = _award(log[5], "challenger")
    assert aw["step"] == 0
    assert aw["reward_parts"]["components"] == pytest.approx(
        {"quality": s_q, "difficulty": r_d, "format": 1.0}
    )
    assert aw["reward_parts"]["reward"] == pytest.approx((s_q + r_d + 1) / 3)
    # difficulty samples (Algorithm 1 line 8): for r_d only, not training samples: reward 0
    rf = [1.0, 1.0, 0.5, 0.0]
    assert [e[1] for e in log[2:6]] == [0.0] * 4
    assert [(e[2]["s_gt"], e[2]["r_f"]) for e in log[2:6]] == list(zip(s_gt, rf))
    assert [e[2]["trainable"] for e in log] == [True, True] + [False] * 4 + [True] * 3
    assert "untrained" in log[2][2]["reward_parts"]["reasons"]
    assert [e[2]["phase"] for e in log[2:6]] == ["difficulty"] * 4
    assert "What is 17 * 3?" in log[2][4] and "plan" not in log[2][4].lower()
    # critic: r_f each time
    assert log[1][1] == 1.0 and log[7][1] == 1.0
    # planner: pending, then 0.5 s_p + 0.5 r_f when the critic scores the plan
    s_p = 4 / 9
    assert log[6][1] == 0.0
    assert _award(log[7], "planner")["reward_parts"]["reward"] == pytest.approx(0.5 * s_p + 0.5)
    assert _award(log[7], "planner")["step"] == 6
    # the plan passed the gate (4/9 >= 0.3): the solver saw it; 0.2 s_p + 0.6 s_gt + 0.2 r_f
    assert "Multiply 6 by 7." in log[8][4] and log[8][2]["plan_shown"]
    assert log[8][1] == pytest.approx(0.2 * s_p + 0.6 + 0.2)
    assert "What is 6 * 7?" in log[8][4] and raw.success
    # the accepted question entered the pool with its verifier, once, at the end
    assert len(raw.pool) == n + 1 and log[8][2]["pool_added"] is True
    item = raw.pool.get("What is 17 * 3?")
    assert item.answer == "51" and item.kind == "math" and item.origin == "generated"
    assert item.metadata == pytest.approx(
        {"s_q": s_q, "r_d": r_d, "reference": PoolItem(**REF).key}
    )


def test_cumulative_rewards_in_the_aec_loop():
    env = envs.make("sage", pool=_pool(), num_samples=2)
    script = iter(
        [
            NEW_MATH,
            "<score>10</score>",
            "<answer>51</answer>",
            "<answer>1</answer>",
            "<plan>multiply</plan>",
            "<score>7</score>",
            "<answer>41</answer>",
        ]
    )
    totals = play(env, lambda e, a: next(script), options={"instance": REF})["rewards"]
    assert totals["challenger"] == pytest.approx((1.0 + 0.5 + 1.0) / 3)
    assert totals["planner"] == pytest.approx(0.5 * 6 / 9 + 0.5)
    assert totals["solver"] == pytest.approx(0.2 * 6 / 9 + 0.0 + 0.2)  # difficulty: untrained
    assert totals["critic"] == pytest.approx(2.0)


# ---------------------------------------------------------------- filtered challenges


def test_low_quality_question_is_filtered():
    raw = _raw()
    raw.reset(options={"instance": REF})
    n = len(raw.pool)
    log = _drive(raw, [NEW_MATH, "<score>7</score>"])
    aw = _award(log[1], "challenger")["reward_parts"]
    assert aw["coefficients"] == {"quality": 0.5, "format": 0.5}
    assert aw["reward"] == pytest.approx((6 / 9 + 1.0) / 2)
    assert "suppressed" in aw["reasons"]["difficulty"]
    assert raw.agent_selection == "planner"  # no difficulty samples
    _drive(raw, ["<plan>x</plan>", "<score>9</score>", "<answer>42</answer>"])
    assert len(raw.pool) == n and all(raw.terminations.values())


@pytest.mark.parametrize(
    ("text", "rf"),
    [
        ("<question>Q?</question><answer>the number forty</answer>", 1.0),  # prose answer
        ("<question>Q?</question><answer>1\n2</answer>", 1.0),  # not one line
        ("<question>Q?</question>", 0.5),  # no answer tag: half the tags
        ("<question>Q?</question><answer>1</answer><answer>2</answer>", 0.75),  # duplicate
    ],
)
def test_invalid_verifier_is_filtered_despite_high_score(text, rf):
    """An invalid verifier never enters the pool and earns Eq. 5 with r_d = 0: (s_q + 0 + r_f)/3,
    not Eq. 6's (s_q + r_f)/2, which would pay spoiling one's own verifier (rated 10: 1.0
    against the 0.667 of the same question answered correctly with a valid verifier)."""
    raw = _raw()
    raw.reset(options={"instance": REF})
    log = _drive(raw, [text, "<score>10</score>"])
    valid = log[0][2]["verifier_valid"]
    if rf == 0.75:  # the last answer block is used: "2" is a valid verifier
        assert valid and raw.agent_selection == "solver"
        return
    assert not valid and raw.agent_selection == "planner"
    aw = _award(log[1], "challenger")["reward_parts"]
    assert aw["reward"] == pytest.approx((1.0 + 0.0 + rf) / 3)
    assert (
        aw["components"]["difficulty"] == 0.0 and "invalid verifier" in aw["reasons"]["difficulty"]
    )


@pytest.mark.parametrize("reference", ["221,", "2 21", "221 +", "221;", "\\sqrt{4}", "2,21"])
def test_a_reference_no_correct_answer_can_match_is_invalid(reference):
    """Parsing is not enough: against each of these references the correct answer 221 (or 2)
    grades wrong, so they would make a question hard for free (r_d = 1) and enter the pool."""
    raw = _raw(num_samples=1)
    raw.reset(options={"instance": REF})
    log = _drive(raw, [f"<question>What is 13 * 17?</question><answer>{reference}</answer>"])
    assert not log[0][2]["verifier_valid"] and "canonical" in log[0][2]["reason"]
    raw.reset(options={"instance": REF})
    log = _drive(raw, ["<question>What is 13 * 17?</question><answer>221</answer>"])
    assert log[0][2]["verifier_valid"]


def test_eq6_stays_for_valid_questions_under_alpha_and_eq5_option():
    """Eq. 6 is the paper's for s_q < alpha (a valid verifier rated 7: (6/9 + 1)/2 = 0.833, more
    than the 0.593 of a question rated 8 that the solver answers: the paper's formula is not
    monotone in s_q); below_alpha="eq5" pays it (6/9 + 0 + 1)/3 = 0.556."""
    for rule, want in (("eq6", (6 / 9 + 1) / 2), ("eq5", (6 / 9 + 1) / 3)):
        raw = _raw(below_alpha=rule)
        raw.reset(options={"instance": REF})
        log = _drive(raw, [NEW_MATH, "<score>7</score>"])
        assert _award(log[1], "challenger")["reward_parts"]["reward"] == pytest.approx(want)
    with pytest.raises(ValueError, match="below_alpha"):
        SageConfig(below_alpha="eq7")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0.5 / 3),  # empty output: neutral r_f 0.5, s_q 0, no verifier: Eq. 5, r_d 0
        ("I propose: what is 2+2?", 0.0),
        ("<question></question><answer>4</answer>", 0.5 / 3),  # empty question tag
        ("<question>" + "x" * 51 + "</question><answer>4</answer>", 0.0),  # too long: r_f 0
    ],
)
def test_missing_question(text, expected):
    raw = _raw(max_question_chars=50)
    raw.reset(options={"instance": REF})
    log = _drive(raw, [text])
    assert log[0][1] == pytest.approx(expected) and not log[0][2]["question_ok"]
    assert raw.agent_selection == "planner"  # no critic step, no samples
    assert not any(a == "critic" for a, *_ in log)


# ---------------------------------------------------------------- plans and the gate


def test_gated_plan_is_not_shown():
    raw = _raw()
    raw.reset(options={"instance": REF})
    log = _drive(
        raw, ["nothing", "<plan>SECRET STEP</plan>", "<score>3</score>", "<answer>42</answer>"]
    )
    s_p = 2 / 9  # < beta = 0.3
    assert _award(log[2], "planner")["reward_parts"]["reward"] == pytest.approx(0.5 * s_p + 0.5)
    assert log[2][2]["gate"] is False and "SECRET STEP" not in log[3][4]
    assert log[3][2]["reward_parts"]["components"] == pytest.approx(
        {"plan": 0.0, "correct": 1.0, "format": 1.0}
    )
    assert log[3][1] == pytest.approx(0.6 + 0.2)


def test_gate_threshold_is_inclusive():
    raw = _raw(beta=4 / 9)
    raw.reset(options={"instance": REF})
    log = _drive(raw, ["", "<plan>step</plan>", "<score>5</score>", "<answer>41</answer>"])
    assert log[2][2]["gate"] is True
    assert log[3][1] == pytest.approx(0.2 * 4 / 9 + 0.0 + 0.2)


@pytest.mark.parametrize(
    ("text", "rf", "cfg"), [("I would multiply.", 0.0, {"untagged_plan": "zero"}), ("", 0.5, {})]
)
def test_missing_plan(text, rf, cfg):
    raw = _raw(**cfg)
    raw.reset(options={"instance": REF})
    log = _drive(raw, ["", text])
    assert log[1][0] == "planner" and log[1][1] == pytest.approx(0.5 * 0 + 0.5 * rf)
    assert raw.agent_selection == "solver"  # the critic is skipped
    log = _drive(raw, ["<answer>42</answer>"])
    assert log[0][1] == pytest.approx(0.6 + 0.2)


def test_planning_off():
    raw = _raw(planning=False, num_samples=2)
    assert raw.possible_agents == ["challenger", "solver", "critic"]
    raw.reset(options={"instance": REF})
    log = _drive(
        raw, [NEW_MATH, "<score>9</score>", "<answer>51</answer>", "<answer>51</answer>", "42"]
    )
    assert [e[0] for e in log] == ["challenger", "critic", "solver", "solver", "solver"]
    assert log[-1][2]["reward_parts"]["coefficients"] == {"correct": 0.5, "format": 0.5}
    assert log[-1][1] == pytest.approx(0.0)  # untagged: not graded, r_f 0
    raw.reset(options={"instance": REF})
    log = _drive(raw, ["", "<answer>42</answer>"])
    assert log[-1][1] == pytest.approx(1.0)


# ---------------------------------------------------------------- critic scores


def test_critic_format_and_norm():
    raw = _raw()
    cases = [
        ("<score>good</score>", 0.0, 0.5),
        ("<score>8</score><score>9</score>", 0.5, 8 / 9),
        ("", 0.5, 0.5),
        ("<score>0.8</score>", 1.0, 0.8),  # Norm: [0, 1] taken as is
        ("<score>1</score>", 1.0, 0.0),  # the bottom of the 1-10 scale (critic_norm="scale")
        ("<score>12</score>", 1.0, 0.5),  # outside (1, 10]: 0.5
    ]
    for text, rf, s_q in cases:
        raw.reset(options={"instance": REF})
        log = _drive(raw, [NEW_MATH, text])
        assert log[1][1] == pytest.approx(rf), text
        assert log[1][2]["s_q"] == pytest.approx(s_q), text
    lin = _raw(critic_norm="linear")
    lin.reset(options={"instance": REF})
    assert _drive(lin, [NEW_MATH, "<score>1</score>"])[1][2]["s_q"] == 0.0
    lin.reset(options={"instance": REF})
    assert _drive(lin, [NEW_MATH, "<score>0.8</score>"])[1][2]["s_q"] == 0.0


def test_eq2_norm_of_one_default_and_literal_option():
    """SAGE Eq. 2: Norm(s) = s on [0, 1], (s - 1)/9 on (1, 10]: literally Norm(1) = 1, the top
    mark for the lowest rating of the 1-10 scale (4.1). Default (critic_norm="scale"):
    Norm(1) = 0, so a question rated 1 gets r_c = (0 + r_f)/2 = 0.5 and is filtered;
    critic_norm="sage" (Eq. 2 as written): s_q = 1 >= alpha, accepted."""
    raw = _raw(num_samples=1)
    raw.reset(options={"instance": REF})
    log = _drive(raw, [NEW_MATH, "<score>1</score>"])
    assert log[1][2]["s_q"] == 0.0 and not log[1][2]["eligible"]
    assert _award(log[1], "challenger")["reward_parts"]["reward"] == pytest.approx(0.5)
    lit = _raw(num_samples=1, critic_norm="sage")
    lit.reset(options={"instance": REF})
    log = _drive(lit, [NEW_MATH, "<score>1</score>"])
    assert log[1][2]["s_q"] == 1.0 and log[1][2]["eligible"]


# ---------------------------------------------------------------- code, verified in the sandbox


def test_code_challenge_verified_by_tests():
    raw = _raw(num_samples=2)
    raw.reset(options={"instance": CODE_REF})
    assert "assert inc(1) == 2" in raw.observe("challenger")["prompt"]
    good = (
        "<question>Write dbl(x) returning 2 * x.</question>\n"
        "<tests>\nassert dbl(2) == 4\nassert dbl(0) == 0\n</tests>\n"
        "<solution>\n```python\ndef dbl(x):\n    return 2 * x\n```\n</solution>"
    )
    log = _drive(
        raw,
        [
            good,
            "<score>9</score>",
            "<answer>\n```python\ndef dbl(x):\n    return x + x\n```\n</answer>",
            "<answer>def dbl(x):\n    return 4</answer>",  # passes 1 of 2 tests
        ],
    )
    assert log[0][2]["verifier_valid"] and "`dbl`" in log[2][4]
    assert [e[2]["s_gt"] for e in log[2:4]] == [1.0, 0.5]
    r_d = 1 - 0.75
    assert _award(log[3], "challenger")["reward_parts"]["reward"] == pytest.approx(
        (8 / 9 + r_d + 1) / 3
    )
    log = _drive(
        raw,
        ["<plan>add one</plan>", "<score>2</score>", "<answer>def inc(x): return x + 1</answer>"],
    )
    assert log[-1][1] == pytest.approx(0.6 + 0.2)
    item = raw.pool.get("Write dbl(x) returning 2 * x.")
    assert item.entry_point == "dbl" and len(item.tests) == 2 and "return 2 * x" in item.answer

    wrong = good.replace("return 2 * x", "return 2 + x")  # fails dbl(0) == 0
    raw.reset(options={"instance": CODE_REF})
    log = _drive(raw, [wrong, "<score>9</score>"])
    assert not log[0][2]["verifier_valid"] and "fails its tests" in log[0][2]["reason"]
    assert _award(log[1], "challenger")["reward_parts"]["reward"] == pytest.approx((8 / 9 + 1) / 3)
    raw.reset(options={"instance": CODE_REF})
    log = _drive(raw, ["<question>Q</question><tests>x = 1</tests><solution>x = 2</solution>"])
    assert log[0][2]["reason"] == "the tests contain no assert"


# ---------------------------------------------------------------- sources, oracle, pool


def test_alg1_plan_solve_item_is_drawn_independently_of_the_reference():
    """SAGE Algorithm 1: line 5 samples (q_ref, v_ref) ~ D for the challenger, line 16 samples
    (q, v) ~ D again for the plan-solve phase: an independent draw from the same split."""
    raw = _raw(num_samples=1)
    differ = 0
    for seed in range(40):
        inst = raw.sample_instance("val", seed)
        assert inst.item.split == inst.task.split == "val"
        differ += inst.task.key != inst.item.key
    assert differ >= 35
    raw.reset(seed=7)
    ref, task = raw.instance.item, raw.instance.task
    assert ref.key != task.key
    log = _drive(raw, [NEW_MATH, "<score>2</score>", "<plan>p</plan>"])
    assert task.question in log[-1][4] and ref.question not in log[-1][4]
    old = _raw(num_samples=1, plan_source="reference")
    old.reset(seed=7)
    log = _drive(old, [NEW_MATH, "<score>2</score>", "<plan>p</plan>"])
    assert ref.question in log[-1][4]
    task = {"question": "What is 2 + 2?", "kind": "math", "answer": "4"}
    raw.reset(options={"instance": {**REF, "task": task}})
    log = _drive(raw, [NEW_MATH, "<score>2</score>", "<plan>p</plan>", "<score>5</score>"])
    assert "What is 2 + 2?" in raw.observe("solver")["prompt"]
    assert _drive(raw, ["<answer>4</answer>"])[0][2]["s_gt"] == 1.0


def test_train_difficulty_option_trains_the_difficulty_samples():
    raw = _raw(num_samples=2, train_difficulty=True)
    raw.reset(options={"instance": REF})
    log = _drive(raw, [NEW_MATH, "<score>9</score>", "<answer>51</answer>", "51"])
    assert [e[1] for e in log[2:4]] == pytest.approx([0.5 + 0.5, 0.0])  # 0.5 s_gt + 0.5 r_f
    assert all(e[2]["trainable"] for e in log)


def test_plan_source_accepted_uses_the_new_question():
    raw = _raw(plan_source="accepted", num_samples=1)
    raw.reset(options={"instance": REF})
    log = _drive(raw, [NEW_MATH, "<score>9</score>", "<answer>51</answer>", "<plan>p</plan>"])
    assert "What is 17 * 3?" in log[-1][4]
    raw.reset(options={"instance": REF})
    log = _drive(raw, [NEW_MATH, "<score>2</score>", "<plan>p</plan>"])
    assert "What is 6 * 7?" in log[-1][4] and "17 * 3" not in log[-1][4]


@pytest.mark.parametrize("ref", [REF, CODE_REF])
def test_oracle_round(ref):
    pool = _pool()
    pool.add(PoolItem.from_dict(ref))  # the oracle re-emits the reference: nothing new
    env = envs.make("sage", pool=pool)
    before = pool.state_dict()
    res = play(env, oracle_policy, options={"instance": ref})
    r = res["rewards"]
    assert r["challenger"] == pytest.approx((8 / 9 + 0.0 + 1) / 3)  # solved every time: r_d 0
    assert r["planner"] == pytest.approx(0.5 * 7 / 9 + 0.5)
    assert r["solver"] == pytest.approx(0.2 * 7 / 9 + 0.8)  # the difficulty samples: untrained
    assert r["critic"] == pytest.approx(2.0) and res["success"] and res["steps"] == 9
    assert env.unwrapped.pool.state_dict()["items"] == before["items"]


def test_instances_sampling_and_config():
    raw = _raw()
    for s in range(40):
        inst = raw.sample_instance("train", s)
        assert inst.item.verifiable and inst.task.verifiable
    with pytest.raises(ValueError, match="SAGE instance"):
        raw.reset(options={"instance": {"question": "Why is the sky blue?"}})
    with pytest.raises(ValueError, match="SAGE instance"):
        raw.reset(options={"instance": "What?"})
    for bad in ({"num_samples": 0}, {"alpha": 2.0}, {"plan_source": "other"}, {"critic_norm": "x"}):
        with pytest.raises(ValueError):
            SageConfig(**bad)
    a, b = _raw(), _raw()
    a.reset(seed=3)
    b.reset(seed=3)
    assert a.instance == b.instance and a.observe("challenger") == b.observe("challenger")


def test_clone_shares_pool_and_adds_only_at_the_end():
    raw = _raw(num_samples=1)
    raw.reset(options={"instance": REF})
    n = len(raw.pool)
    _drive(
        raw,
        [NEW_MATH, "<score>9</score>", "<answer>50</answer>", "<plan>p</plan>", "<score>9</score>"],
    )
    assert len(raw.pool) == n and raw.state.accepted
    clone = raw.clone()
    assert clone.pool is raw.pool
    _drive(clone, ["<answer>42</answer>"])
    assert len(raw.pool) == n + 1 and not raw.terminations["solver"]
    log = _drive(raw, ["<answer>0</answer>"])
    assert log[0][2]["pool_added"] is False and len(raw.pool) == n + 1
    off = _raw(num_samples=1, add_to_pool=False)
    off.reset(options={"instance": REF})
    _drive(off, [NEW_MATH, "<score>9</score>", "<answer>50</answer>", "", "<answer>42</answer>"])
    assert "What is 17 * 3?" not in off.pool


def test_render():
    env = envs.make("sage", pool=_pool(), render_mode="ansi")
    play(env, oracle_policy, options={"instance": REF})
    text = env.unwrapped.render()
    assert "s_q=0.889" in text and "s_gt=1.000" in text and "phase=done" in text


def test_sage_eq_6_8_untagged_plan_is_scored_by_the_critic():
    """SAGE Eqs. 6-8: the critic scores the plan, s_p = Norm(score); the <plan> tags only enter
    r_f. A plan without tags that the critic scores 5: s_p = 4/9 = 0.444, r_p = 0.5 * 0.444 +
    0.5 * 0 = 0.222, and it passes the gate (0.444 >= beta = 0.3), so the solver sees it (the
    earlier reading gave s_p = 0 with no critic step: r_p = 0)."""
    raw = _raw()
    raw.reset(options={"instance": REF})
    log = _drive(raw, ["", "1. Multiply 6 by 7.", "<score>5</score>", "<answer>42</answer>"])
    assert [a for a, *_ in log] == ["challenger", "planner", "critic", "solver"]
    assert log[1][2]["plan_untagged"] is True
    planner = _award(log[2], "planner")["reward_parts"]
    assert planner["components"] == pytest.approx({"plan": 4 / 9, "format": 0.0})
    assert planner["reward"] == pytest.approx(0.2222, abs=1e-4)
    assert log[2][2]["gate"] is True and "1. Multiply 6 by 7." in log[3][4]
