"""propose_solve_judge (MAE): schedule, every reward of its module docstring against hand-computed
values, delayed awards, the quality filter and the question pool."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import envs
from envs.pools import PoolItem, QuestionPool
from envs.propose_solve_judge import MaeConfig, judge_score
from tests.envs.contract import oracle_policy, play

REF = {"question": "What is 6 * 7?", "kind": "math", "answer": "42", "use_reference": True}


def _pool() -> QuestionPool:
    items = [
        PoolItem(f"What is {i} * {i + 1}?", kind="math", answer=str(i * (i + 1))) for i in range(60)
    ]
    return QuestionPool(items, seed_set="toy")


def _raw(**cfg):
    pool = cfg.pop("pool", None) or _pool()
    return envs.make("mae", pool=pool, **cfg).unwrapped


def _drive(raw, actions):
    """Step the raw env with ``actions``; per step: (agent, reward, info, awards)."""
    log = []
    for text in actions:
        agent = raw.agent_selection
        assert not raw.terminations[agent], f"{agent} is done; script too long"
        raw.step(text)
        info = copy.deepcopy(raw.infos[agent])
        log.append((agent, raw.rewards[agent], info, copy.deepcopy(raw.last_awards)))
    return log


def _totals(env, actions, options):
    """Play a scripted episode through the AEC loop; return the reward each agent saw."""
    it = iter(actions)
    return play(env, lambda e, a: next(it), options=options)["rewards"]


# ---------------------------------------------------------------- accepted question


ANSWERS = [
    "<answer>51</answer>",
    "<think>hm</think><answer>50</answer>",
    "51",  # no tag: format 0
    "<answer>51</answer>",
    "<answer>1</answer><answer>2</answer>",  # not unique: format 0
]
JUDGEMENTS = [
    "<score>10</score>",
    "<think>wrong</think><score>1</score>",
    "<score>5</score>",
    "I would say 6",  # no <score>: unparsable, 0.5
    "<score>7</score><score>9</score>",  # two scores: unparsable, 0.5
]
QUESTION = "<think>idea</think><question>What is 17 * 3?</question>"
S = [1.0, 0.0, 4 / 9, 0.5, 0.5]
FMT = [1, 1, 0, 1, 0]


def test_accepted_question_rewards_hand_computed():
    """MAE 4.1 (proposer: (quality + difficulty + format) / 3, difficulty = 1 - mean of the N
    judge scores), 4.2 (solver: 0.5 judge + 0.5 format) and 4.4 (the solver phase answers a
    pool question; the N difficulty answers are for the proposer's reward only)."""
    raw = _raw()
    raw.reset(options={"instance": REF})
    before = len(raw.pool)
    log = _drive(
        raw,
        [
            QUESTION,
            "<score>8</score>",
            *ANSWERS,
            *JUDGEMENTS,
            "<answer>42</answer>",
            "<score>8</score>",
            "<score>9</score>",  # the judge phase: a pair of the pair dataset
        ],
    )
    roles = ["proposer", "judge"] + ["solver"] * 5 + ["judge"] * 5 + ["solver", "judge", "judge"]
    assert [a for a, *_ in log] == roles
    assert all(raw.terminations.values())

    quality = 7 / 9
    difficulty = 1 - sum(S) / 5
    proposer = (quality + difficulty + 1) / 3
    # own steps: the proposer and the solver-phase answer get 0 now (pending)
    assert log[0][1] == 0.0 and "pending" in log[0][2]["reward_parts"]["reasons"]
    assert log[12][1] == 0.0 and "pending" in log[12][2]["reward_parts"]["reasons"]
    # the 2N difficulty steps are not training samples: reward 0, no solver award
    for k in range(2, 12):
        info = log[k][2]
        assert info["trainable"] is False and log[k][1] == 0.0
        assert "untrained" in info["reward_parts"]["reasons"]
        assert not [x for x in log[k][3] if x["agent"] == "solver"]
    assert [log[k][2]["format"] for k in range(2, 7)] == [bool(f) for f in FMT]
    assert [log[k][2]["trainable"] for k in (0, 1, 12, 13, 14)] == [True] * 3 + [False, True]
    assert [log[k][1] for k in (1, 13, 14)] == [1.0, 0.0, 1.0]  # trained judge steps: format
    prop = [x for x in log[11][3] if x["agent"] == "proposer"]
    assert len(prop) == 1 and prop[0]["step"] == 0
    parts = prop[0]["reward_parts"]
    assert parts["components"] == pytest.approx(
        {"quality": quality, "difficulty": difficulty, "format": 1.0}
    )
    assert parts["reward"] == pytest.approx(proposer) and parts["for_step"] == 0
    assert raw.infos["proposer"]["reward_parts"]["reward"] == pytest.approx(proposer)
    # the solver phase: judged 8 -> 0.5 * 7/9 + 0.5 * 1 = 0.8889, awarded to step 12
    solver = [x for x in log[13][3] if x["agent"] == "solver"]
    assert len(solver) == 1 and solver[0]["step"] == 12
    assert solver[0]["reward_parts"]["reward"] == pytest.approx(0.5 * 7 / 9 + 0.5)
    # the accepted question entered the pool, once, with its scores
    assert len(raw.pool) == before + 1 and log[-1][2]["pool_added"] is True
    item = raw.pool.get("What is 17 * 3?")
    assert item.origin == "generated" and item.kind == "text"
    assert item.metadata["quality"] == pytest.approx(quality)
    assert item.metadata["difficulty"] == pytest.approx(difficulty)
    assert item.metadata["reference"] == PoolItem(REF["question"]).key


def test_train_difficulty_option_restores_trained_difficulty_answers():
    raw = _raw(train_difficulty=True, solver_phase=False)
    raw.reset(options={"instance": REF})
    log = _drive(raw, [QUESTION, "<score>8</score>", *ANSWERS, *JUDGEMENTS])
    assert all(raw.terminations.values()) and len(log) == 12
    assert [r for a, r, *_ in log if a == "solver"] == [0.0] * 5  # pending
    judge_rewards = [log[i][1] for i in (1, 7, 8, 9, 10, 11)]
    assert judge_rewards == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert all(info["trainable"] for _, _, info, _ in log)
    for k, i in enumerate(range(7, 12)):
        solver_awards = [x for x in log[i][3] if x["agent"] == "solver"]
        assert len(solver_awards) == 1 and solver_awards[0]["step"] == 2 + k
        assert solver_awards[0]["reward_parts"]["reward"] == pytest.approx(
            0.5 * S[k] + 0.5 * FMT[k]
        )


def test_delayed_rewards_add_up_in_the_aec_loop():
    env = envs.make("mae", pool=_pool(), num_answers=2)
    actions = [
        "<question>Name a prime above 100.</question>",
        "<score>9.1</score>",
        "<answer>101</answer>",
        "101",
        "<score>4</score>",
        "<score>10</score>",
        "<answer>42</answer>",
        "<score>10</score>",
        "<score>10</score>",
    ]
    totals = _totals(env, actions, {"instance": REF})
    q, s = 8.1 / 9, [3 / 9, 1.0]
    assert totals["proposer"] == pytest.approx((q + (1 - sum(s) / 2) + 1) / 3)
    assert totals["solver"] == pytest.approx(1.0)  # the solver phase only
    assert totals["judge"] == pytest.approx(2.0)  # the question and the pair of the judge phase
    env = envs.make("mae", pool=_pool(), num_answers=2, train_difficulty=True, solver_phase=False)
    totals = _totals(env, actions[:6], {"instance": REF})
    assert totals["solver"] == pytest.approx((0.5 * s[0] + 0.5) + (0.5 * s[1] + 0.0))
    assert totals["judge"] == pytest.approx(3.0)


def test_44_solver_phase_question_is_an_independent_pool_draw():
    """MAE 4.4 (2): "The Solver samples from the valid dataset": the solver-phase question is
    a pool item of the instance's split drawn independently of the proposer's reference."""
    raw = _raw()
    differ = 0
    for seed in range(40):
        inst = raw.sample_instance("train", seed)
        assert inst.task.split == inst.item.split == "train" and inst.task in raw.pool
        differ += inst.task.key != inst.item.key
    assert differ >= 35
    raw.reset(seed=3)
    task = raw.instance.task
    _drive(raw, ["no question here"])
    assert raw.state.phase == "solve_pool"
    assert task.question in raw.observe("solver")["prompt"]
    solve = {"question": "What is 2 + 2?", "kind": "math", "answer": "4"}
    raw.reset(options={"instance": {**REF, "solve": solve}})
    assert (
        raw.instance.task.question == "What is 2 + 2?"
        and raw.instance.item.question == REF["question"]
    )
    with pytest.raises(ValueError, match="solve"):
        raw.reset(options={"instance": {**REF, "solve": "What?"}})


def test_train_question_judge_option():
    raw = _raw(train_question_judge=False)
    raw.reset(options={"instance": REF})
    log = _drive(raw, ["<question>Is 7 odd?</question>", "<score>3</score>"])
    assert log[1][2]["trainable"] is False and log[1][1] == 0.0 and log[1][2]["format"] == 1.0


# ---------------------------------------------------------------- filtered questions


def test_filtered_question_drops_difficulty_and_goes_to_the_solver_phase():
    raw = _raw()
    raw.reset(options={"instance": REF})
    n = len(raw.pool)
    log = _drive(raw, ["<question>a</question><question>Is 7 odd?</question>", "<score>7</score>"])
    assert not any(raw.terminations.values()) and raw.state.phase == "solve_pool"
    award = log[1][3][0]
    assert award["agent"] == "proposer" and award["step"] == 0
    parts = award["reward_parts"]
    # quality 6/9 < 0.7: (quality + format) / 3, format 0 for two <question> blocks
    assert parts["coefficients"] == pytest.approx({"quality": 1 / 3, "format": 1 / 3})
    assert parts["components"] == pytest.approx({"quality": 6 / 9, "format": 0.0})
    assert parts["reward"] == pytest.approx((6 / 9) / 3)
    assert "filtered" in parts["reasons"]["difficulty"]
    assert log[1][1] == 1.0  # the judge's format
    assert raw.state.question == "Is 7 odd?"
    log = _drive(raw, ["<answer>42</answer>", "<score>10</score>", "<score>10</score>"])
    assert all(raw.terminations.values()) and log[-1][1] == 1.0
    assert len(raw.pool) == n and log[-1][2]["pool_added"] is None
    raw = _raw(solver_phase=False)  # no solver phase: the episode ends at once
    raw.reset(options={"instance": REF})
    _drive(raw, ["<question>Is 7 odd?</question>", "<score>7</score>"])
    assert all(raw.terminations.values())


def test_filtered_question_solved_when_configured():
    env = envs.make("mae", pool=_pool(), num_answers=2, solve_filtered=True)
    actions = [
        "<question>Is 7 odd?</question>",
        "<score>3</score>",
        "<answer>yes</answer>",
        "<answer>yes</answer>",
        "<score>10</score>",
        "<score>9</score>",
        "<answer>42</answer>",
        "<score>9</score>",
        "<score>9</score>",
    ]
    totals = _totals(env, actions, {"instance": REF})
    assert totals["proposer"] == pytest.approx((2 / 9 + 1) / 3)
    assert totals["solver"] == pytest.approx(0.5 * 8 / 9 + 0.5)  # the solver phase only
    assert totals["judge"] == 2.0
    assert "Is 7 odd?" not in env.unwrapped.pool


def test_judge_score_parsing_rules():
    raw = _raw()
    raw.reset(options={"instance": REF})
    log = _drive(raw, ["<question>Q?</question>", "<score>eleven</score>"])
    assert raw.state.quality == 0.5 and not raw.state.accepted and log[1][1] == 0.0
    raw.reset(options={"instance": REF})
    log = _drive(raw, ["<question>Q?</question>", "<score>11</score>"])
    assert raw.state.quality == 1.0 and raw.state.accepted and log[1][1] == 0.0
    assert judge_score("<score>1</score>") == (1.0, 1.0, "ok")
    assert judge_score("<score>7/10</score>")[:2] == (7.0, 1.0)
    assert judge_score("")[:2] == (None, 0.0)


# ---------------------------------------------------------------- missing question


@pytest.mark.parametrize(
    "text",
    ["", "Here is a question: what is 2+2?", "<question></question>", "<question>unclosed", None],
)
def test_missing_question_gives_zero_and_skips_to_the_solver_phase(text):
    raw = _raw(max_question_chars=50)
    raw.reset(options={"instance": REF})
    text = "<question>" + "x" * 51 + "</question>" if text is None else text
    raw.step(text)
    parts = raw.infos["proposer"]["reward_parts"]
    assert parts["reward"] == 0.0 and parts["reasons"]["format"]
    assert raw.infos["proposer"]["question_ok"] is False and raw.agent_selection == "solver"
    _drive(raw, ["<answer>42</answer>", "<score>10</score>", "<score>10</score>"])
    assert all(raw.terminations.values())
    while raw.agents:
        raw.step(None)
    assert raw.num_steps == 4
    raw = _raw(max_question_chars=50, solver_phase=False)
    raw.reset(options={"instance": REF})
    raw.step(text)
    assert all(raw.terminations.values())


# ---------------------------------------------------------------- schedule, prompts, instances


def test_schedule_and_prompts():
    raw = _raw(num_answers=3)
    raw.reset(options={"instance": REF})
    assert "What is 6 * 7?" in raw.observe("proposer")["prompt"]
    assert "42" not in raw.observe("proposer")["prompt"]  # the reference's answer is hidden
    assert "not your turn" in raw.observe("judge")["prompt"]
    order = []
    script = ["<question>What is 2 ** 10?</question>", "<score>9</score>"]
    script += [f"<answer>{1000 + i}</answer>" for i in range(3)]
    script += ["<score>2</score>"] * 3
    script += ["<answer>42</answer>", "<score>9</score>", "<score>9</score>"]
    for k, text in enumerate(script):
        agent = raw.agent_selection
        prompt = raw.observe(agent)["prompt"]
        if agent != "proposer" and k < 8:
            assert "What is 2 ** 10?" in prompt
        if 5 <= k < 8:
            assert f"{1000 + k - 5}" in prompt and "<answer>" not in prompt
        if k >= 8:  # the solver phase: the pool question (here the reference)
            assert "What is 6 * 7?" in prompt and "2 ** 10" not in prompt
        if k in (9, 10):  # the solver's answer, then the only pair of the pair dataset
            assert "Answer:\n42" in prompt
        order.append(agent)
        raw.step(text)
    assert (
        order == ["proposer", "judge"] + ["solver"] * 3 + ["judge"] * 3 + ["solver"] + ["judge"] * 2
    )
    assert not raw.agents or all(raw.terminations.values())

    raw.reset(options={"instance": {**REF, "use_reference": False}})
    assert "What is 6 * 7?" not in raw.observe("proposer")["prompt"]


def test_reference_probability_and_seeding():
    raw = _raw()
    shown = [raw.sample_instance("train", s).use_reference for s in range(300)]
    assert 0.4 < np.mean(shown) < 0.6
    assert not any(
        _raw(reference_prob=0.0).sample_instance("train", s).use_reference for s in range(50)
    )
    assert all(
        _raw(reference_prob=1.0).sample_instance("train", s).use_reference for s in range(50)
    )
    a, b = _raw(), _raw()
    a.reset(seed=5)
    b.reset(seed=5)
    assert a.instance == b.instance and a.observe("proposer") == b.observe("proposer")
    assert a.sample_instance("test", 1).item.split == "test"


def test_explicit_instances_and_config_errors():
    raw = _raw()
    with pytest.raises(ValueError, match="MAE instance"):
        raw.reset(options={"instance": {"prompt": "x"}})
    with pytest.raises(ValueError, match="use_reference"):
        raw.reset(options={"instance": {**REF, "use_reference": "yes"}})
    raw.reset(options={"instance": PoolItem("Why?")})
    assert raw.instance.use_reference
    for bad in (
        {"num_answers": 0},
        {"reference_prob": 1.5},
        {"quality_threshold": -0.1},
        {"seed_sources": "humaneval"},
    ):
        with pytest.raises(ValueError):
            MaeConfig(**bad)
    with pytest.raises(ValueError, match="mode"):
        envs.make("mae", mode="single", pool=_pool())


# ---------------------------------------------------------------- oracle, clones, pool


def test_oracle_episode():
    env = envs.make("mae", pool=_pool())
    before = env.unwrapped.pool.state_dict()
    res = play(env, oracle_policy, options={"instance": REF})
    # judge 9 -> quality 8/9; five correct answers judged 10 -> difficulty 0
    assert res["rewards"]["proposer"] == pytest.approx((8 / 9 + 0 + 1) / 3)
    assert res["rewards"]["solver"] == pytest.approx(1.0)  # the solver phase: judged 10
    assert res["rewards"]["judge"] == pytest.approx(2.0) and res["steps"] == 15
    assert env.unwrapped.pool.state_dict()["items"] == before["items"]  # re-emitted: duplicate
    raw = env.unwrapped
    raw.reset(options={"instance": REF})
    _drive(raw, [raw.oracle("proposer")])
    _drive(raw, [raw.oracle("judge")] + ["<answer>41</answer>"] * 5)
    assert raw.oracle("judge").endswith("<score>1</score>")
    raw.reset(options={"instance": REF})
    _drive(raw, ["<question>Something else?</question>", raw.oracle("judge")])
    assert raw.state.question_score == 5.0 and raw.state.phase == "solve_pool"
    assert raw.oracle("solver") == "<answer>42</answer>"  # the pool question's answer
    raw.reset(options={"instance": REF})
    _drive(raw, ["<question>Something else?</question>", "<score>9</score>"])
    assert raw.oracle("solver") == "<answer>I do not know.</answer>"


def test_clone_shares_pool_and_questions_enter_at_episode_end():
    raw = _raw(num_answers=1)
    raw.reset(options={"instance": REF})
    n = len(raw.pool)
    _drive(
        raw,
        [
            "<question>What is 12 * 12?</question>",
            "<score>10</score>",
            "<answer>144</answer>",
            "<score>10</score>",
            "<answer>42</answer>",
        ],
    )
    assert len(raw.pool) == n  # accepted but the episode is not over
    clone = raw.clone()
    assert clone.pool is raw.pool and clone.state is not raw.state
    _drive(clone, ["<score>10</score>", "<score>10</score>"])
    assert (
        len(raw.pool) == n + 1 and raw.agent_selection == "judge" and not raw.terminations["judge"]
    )
    log = _drive(raw, ["<score>2</score>", "<score>2</score>"])
    assert log[-1][2]["pool_added"] is False and len(raw.pool) == n + 1  # de-duplicated
    raw2 = _raw(num_answers=1, add_to_pool=False)
    raw2.reset(options={"instance": REF})
    _drive(
        raw2,
        [
            "<question>New?</question>",
            "<score>10</score>",
            "<answer>1</answer>",
            "<score>5</score>",
            "<answer>42</answer>",
            "<score>5</score>",
            "<score>5</score>",
        ],
    )
    assert "New?" not in raw2.pool


def test_render_and_code_oracle():
    code = PoolItem(
        "Write inc(x).",
        kind="code",
        answer="def inc(x):\n    return x + 1",
        tests=({"kind": "assert", "code": "assert inc(1) == 2"},),
    )
    env = envs.make("mae", pool=_pool(), render_mode="ansi", num_answers=1)
    res = play(env, oracle_policy, options={"instance": code.to_dict()})
    assert res["rewards"]["solver"] == pytest.approx(1.0)
    text = env.unwrapped.render()
    assert "difficulty: 0.000" in text and "Write inc(x)." in text


# ---------------------------------------------------------------- MAE 4.3 question rubric


def test_mae_4_3_question_rubric_bands_and_filter():
    """MAE 4.3: 1-3 unsolvable, 4-7 ambiguous, 8-10 clear and well-formed. A clear question
    the judge scores 8 has quality 7/9 = 0.778 >= 0.7 and is accepted; the top of the ambiguous
    band, 7, gives 6/9 = 0.667 and is filtered (the old 7-8 "clear, solvable" band filtered
    some clear questions)."""
    raw = _raw()
    raw.reset(options={"instance": REF})
    _drive(raw, ["<question>Is 7 odd?</question>"])
    prompt = raw.observe("judge")["prompt"]
    assert "1-3 if the question cannot be solved" in prompt
    assert "4-7 if it is broadly reasonable but ambiguous" in prompt
    assert "8-10 only if it is clear, well-formed" in prompt
    assert "9-10" not in prompt and "7-8" not in prompt
    for score, quality, accepted in ((8, 7 / 9, True), (7, 6 / 9, False)):
        raw = _raw(num_answers=1)
        raw.reset(options={"instance": REF})
        log = _drive(raw, ["<question>Is 7 odd?</question>", f"<score>{score}</score>"])
        assert raw.state.quality == pytest.approx(quality)
        assert (raw.state.phase == "solve") is accepted
        if not accepted:
            assert "filtered" in log[1][3][0]["reward_parts"]["reasons"]["difficulty"]


# ---------------------------------------------------------------- MAE 4.4 (3) judge phase


def test_mae_4_4_judge_phase_samples_the_pair_dataset():
    """MAE 4.4 (3): "The Judge samples from the pair dataset". The solver phase's pair joins the
    pool's pair dataset; the judge's rating of the episode's own answer pays the solver (0.5 *
    8/9 + 0.5 = 0.944) but is not a judge training sample; the judge then rates a pair drawn
    from the dataset (this episode's or one an earlier episode stored) and that step is
    trained (format 1). judge_data="episode" trains the rating of the episode's own pair."""
    pool = _pool()
    pool.add_pair("Earlier question?", "<answer>earlier answer</answer>")
    raw = _raw(pool=pool)
    raw.reset(options={"instance": {**REF, "solve": {"question": "Q?", "kind": "text"}}})
    _drive(raw, ["no question"])
    log = _drive(raw, ["<answer>mine</answer>", "<score>9</score>"])
    assert log[1][2]["trainable"] is False and log[1][1] == 0.0
    assert log[1][3][0]["reward_parts"]["reward"] == pytest.approx(0.5 * 8 / 9 + 0.5)
    assert pool.pair_count() == 2 and raw.state.phase == "judge_pair"
    prompt = raw.observe("judge")["prompt"]
    pair = raw.state.pair  # drawn from the pairs of the task's split (both, when they share it)
    assert pair["question"] in prompt and pair["question"] in ("Q?", "Earlier question?")
    log = _drive(raw, ["<score>4</score>"])
    assert log[0][2]["trainable"] is True and log[0][1] == 1.0
    assert all(raw.terminations.values())
    old = _raw(pool=_pool(), judge_data="episode")
    old.reset(options={"instance": REF})
    log = _drive(old, ["no question", "<answer>42</answer>", "<score>9</score>"])
    assert log[-1][2]["trainable"] is True and all(old.terminations.values())
    assert old.pool.pair_count() == 0
    with pytest.raises(ValueError, match="judge_data"):
        MaeConfig(judge_data="mine")


def test_pair_dataset_is_deduplicated_split_aware_and_checkpointed():
    pool = _pool()
    assert pool.add_pair("What is 2 + 2?", "4") and not pool.add_pair("What is 2 + 2?", "4")
    pool.add_pair("What is 2 + 2?", "5", PoolItem("What is 2 + 2?", kind="math", answer="4"))
    split = PoolItem("What is 2 + 2?").split
    assert pool.pair_count() == pool.pair_count(split) == 2
    other = next(s for s in ("train", "val", "test") if s != split)
    assert pool.sample_pair(np.random.default_rng(0), other) is None
    back = QuestionPool()
    back.load_state_dict(copy.deepcopy(pool.state_dict()))
    assert back.pair_count() == 2
    got = back.sample_pair(np.random.default_rng(1), split)
    assert got is not None and got["question"] == "What is 2 + 2?"
    assert {p["answer"] for p in back.state_dict()["pairs"]} == {"4", "5"}
