"""Discussion (CoMAS): protocol, seeded draws, history trimming, hand-computed rewards."""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict

import pytest

import envs
from envs.discussion import answer_key, majority_answer, problem_from_dict
from tests.envs.contract import GARBAGE, oracle_policy, play

Q = {"question": "What is 6 * 7?", "answer": "42"}


def _env(seed: int = 0, instance=Q, **cfg):
    env = envs.make("discussion", **cfg)
    env.reset(seed=seed, options={"instance": instance})
    return env


def drive(env, respond):
    """Step until the end with ``respond(job, round, j) -> text``; return per-step records and
    the total reward per agent (summed from ``env.rewards``, awards included)."""
    raw = env.unwrapped
    records, totals = [], defaultdict(float)
    while raw.agents:
        agent = env.agent_selection
        if raw.terminations[agent] or raw.truncations[agent]:
            env.step(None)
            continue
        job, rnd, j = raw.current_job()
        step = raw.num_steps
        env.step(respond(job, rnd, j))
        for a, r in raw.rewards.items():
            totals[a] += r
        records.append(
            {
                "agent": agent,
                "job": job,
                "round": rnd,
                "j": j,
                "step": step,
                "parts": raw.infos[agent]["reward_parts"],
                "info": dict(raw.infos[agent]),
                "awards": [
                    (w["agent"], w["step"], w["reward_parts"]["reward"]) for w in raw.last_awards
                ],
                "success": raw.success,
                "done": not raw.agents or all(raw.terminations.values()),
            }
        )
    return records, dict(totals)


def test_hand_computed_rewards_with_unparsed_score():
    env = _env(seed=3, num_agents=3, num_rounds=2, num_evaluations=2)
    texts = {
        ("solution", 0, 0): "6 * 7 = 42. \\boxed{42}",
        ("solution", 1, 0): "I get \\boxed{41}",
        ("scoring", 0, 0): "The criticism is baseless. <score>3</score>",
        ("scoring", 0, 1): "I think the solution is fine.",  # no score -> scorer -1
        ("scoring", 1, 0): "Fatal slip. <score>1</score>",
        ("scoring", 1, 1): "Minor issue only. <score>2</score>",
    }
    records, totals = drive(env, lambda job, r, j: texts.get((job, r, j), "some evaluation"))
    assert [(x["job"], x["round"], x["j"]) for x in records] == [
        ("solution", 0, 0),
        ("evaluation", 0, 0),
        ("evaluation", 0, 1),
        ("scoring", 0, 0),
        ("scoring", 0, 1),
        ("solution", 1, 0),
        ("evaluation", 1, 0),
        ("evaluation", 1, 1),
        ("scoring", 1, 0),
        ("scoring", 1, 1),
    ]
    by = {(x["job"], x["round"], x["j"]): x for x in records}
    who = {k: v["agent"] for k, v in by.items()}
    # provisional zeros for solutions and evaluations
    for k in [("solution", 0, 0), ("evaluation", 0, 0), ("evaluation", 1, 1)]:
        assert by[k]["parts"]["reward"] == 0.0 and by[k]["info"]["pending"] is True
    # round 0: tau = 3 -> evaluation 0; unparsed -> scorer -1, evaluation 0.5 (neutral),
    # solution = mean over parsed scores = (3 - 1) / 2 = 1.0
    assert by[("scoring", 0, 0)]["parts"]["reward"] == 0.0
    assert by[("scoring", 0, 0)]["awards"] == [(who[("evaluation", 0, 0)], 1, 0.0)]
    t01 = by[("scoring", 0, 1)]
    assert t01["parts"]["reward"] == -1.0 and t01["parts"]["components"] == {"penalty": -1.0}
    assert t01["parts"]["reasons"]["score"] == "no <score> block"
    assert t01["awards"] == [(who[("evaluation", 0, 1)], 2, 0.5), (who[("solution", 0, 0)], 0, 1.0)]
    # round 1: tau = 1 -> evaluation 1.0; tau = 2 -> evaluation 0.5; solution (0 + 0.5) / 2
    assert by[("scoring", 1, 0)]["awards"] == [(who[("evaluation", 1, 0)], 6, 1.0)]
    assert by[("scoring", 1, 1)]["awards"] == [
        (who[("evaluation", 1, 1)], 7, 0.5),
        (who[("solution", 1, 0)], 5, 0.25),
    ]
    expected = defaultdict(float)
    for key, value in [
        (("evaluation", 0, 0), 0.0),
        (("evaluation", 0, 1), 0.5),
        (("solution", 0, 0), 1.0),
        (("scoring", 0, 1), -1.0),
        (("evaluation", 1, 0), 1.0),
        (("evaluation", 1, 1), 0.5),
        (("solution", 1, 0), 0.25),
    ]:
        expected[who[key]] += value
    assert {a: pytest.approx(v) for a, v in totals.items() if v or expected[a]} == dict(expected)
    # accuracy is reported, never rewarded: answers 42 (right) and 41 (wrong) tie, latest wins
    last = records[-1]
    assert last["done"] and last["info"]["accuracy"] == 0.5
    assert last["info"]["majority_answer"] == "41" and last["info"]["final_answer"] == "41"
    assert last["success"] is False


@pytest.mark.parametrize("bad", ["<score>5</score>", "<score>2.5</score>", "", "score: 3"])
def test_scorer_bad_scores_get_minus_one(bad):
    env = _env(num_agents=2, num_rounds=1)
    texts = {"solution": "\\boxed{42}", "evaluation": "wrong", "scoring": bad}
    records, _ = drive(env, lambda job, r, j: texts[job])
    scoring = records[2]
    assert scoring["parts"]["reward"] == -1.0
    assert scoring["awards"] == [(records[1]["agent"], 1, 0.5), (records[0]["agent"], 0, 0.5)]


def test_score_three_rewards_a_wrong_solution():
    """Rewards come from the scores only: a wrong answer scored 3 still earns 1."""
    env = _env(num_agents=2, num_rounds=1)
    texts = {"solution": "\\boxed{7}", "evaluation": "fine", "scoring": "<score>3</score>"}
    records, _ = drive(env, lambda job, r, j: texts[job])
    assert records[0]["info"]["correct"] is False
    assert records[2]["awards"] == [(records[1]["agent"], 1, 0.0), (records[0]["agent"], 0, 1.0)]
    assert records[-1]["success"] is False


def test_history_trimmed_to_kappa_and_scoring_left_out():
    env = _env(num_agents=4, num_rounds=5, history_rounds=2)
    raw = env.unwrapped
    prompts = {}

    def respond(job, r, j):
        prompts[(job, r, j)] = raw.observe(env.agent_selection)["prompt"]
        if job == "solution":
            return f"SOL-R{r} \\boxed{{{r}}}"
        if job == "evaluation":
            return f"EVAL-R{r}"
        return f"SCORE-TXT-R{r} <score>2</score>"

    drive(env, respond)
    p = prompts[("solution", 4, 0)]
    assert "SOL-R2" in p and "SOL-R3" in p and "EVAL-R2" in p and "EVAL-R3" in p
    assert "SOL-R1" not in p and "EVAL-R1" not in p and "SOL-R0" not in p
    assert "SCORE-TXT" not in "".join(prompts.values())
    ev = prompts[("evaluation", 4, 0)]
    assert "SOL-R4" in ev and "SOL-R3" in ev and "SOL-R1" not in ev
    sc = prompts[("scoring", 4, 0)]
    assert "SOL-R4" in sc and "EVAL-R4" in sc and "SOL-R3" not in sc
    assert "(nothing yet)" in prompts[("solution", 0, 0)]
    # kappa = 0: no history at all
    env = _env(num_agents=2, num_rounds=2, history_rounds=0)
    raw = env.unwrapped
    prompts.clear()
    drive(env, respond)
    assert "SOL-R0" not in prompts[("solution", 1, 0)]


def test_prompts_name_the_job_and_format():
    env = _env(num_agents=3, num_rounds=1)
    raw = env.unwrapped
    seen = {}

    def respond(job, r, j):
        actor = env.agent_selection
        seen[job] = raw.observe(actor)["prompt"]
        other = next(a for a in raw.possible_agents if a != actor)
        seen[job + "/other"] = raw.observe(other)["prompt"]
        return {"solution": "\\boxed{1}", "evaluation": "x", "scoring": "<score>1</score>"}[job]

    drive(env, respond)
    assert "YOUR JOB NOW: SOLUTION" in seen["solution"] and "\\boxed{}" in seen["solution"]
    assert "YOUR JOB NOW: EVALUATION" in seen["evaluation"] and "\\boxed{1}" in seen["evaluation"]
    assert "YOUR JOB NOW: SCORING" in seen["scoring"] and "<score>1</score>" in seen["scoring"]
    for job in ("solution", "evaluation", "scoring"):
        assert "wait for your turn" in seen[job + "/other"]
        assert "YOUR JOB NOW" not in seen[job + "/other"]


def _schedules(seed, **cfg):
    env = _env(seed=seed, **cfg)
    raw = env.unwrapped
    out = []
    while raw.agents:
        if raw.current_job() and raw.current_job()[0] == "solution":
            out.append(tuple(raw.schedule()))
        a = env.agent_selection
        env.step(None if raw.terminations[a] else "")
    return out


def test_seeded_agent_draws():
    assert _schedules(7) == _schedules(7)
    assert _schedules(7) != _schedules(8)
    assert len(_schedules(7)) == 8  # m = 2 l rounds by default
    counts = Counter()
    self_evaluations = 0
    for seed in range(60):
        for sched in _schedules(seed):
            counts.update(agent for _, agent in sched)
            self_evaluations += sched[0][1] == sched[1][1]
    # 60 episodes * 8 rounds * 3 steps = 1440 draws, 360 expected per agent
    assert sum(counts.values()) == 1440
    assert all(300 < c < 420 for c in counts.values()), counts
    assert self_evaluations > 0  # the paper draws every step from all agents
    for seed in range(30):
        for sched in _schedules(seed, agent_draw="others"):
            (_, solver), (_, evaluator), (_, scorer) = sched
            assert evaluator != solver and scorer not in (solver, evaluator)


def test_clone_continues_with_the_same_draws():
    env = _env(seed=11)
    env.step("\\boxed{42}")
    clone = env.unwrapped.clone()
    original = []
    while env.unwrapped.agents and len(original) < 12:
        original.append(env.agent_selection)
        env.step("")
    copied = []
    while clone.agents and len(copied) < 12:
        copied.append(clone.agent_selection)
        clone.step("")
    assert original == copied


def test_oracle_episode_and_default_length():
    env = envs.make("discussion", num_agents=2)
    result = play(env, oracle_policy, seed=0)
    assert result["steps"] == 4 * 3 and result["success"] is True
    env = _env(seed=1)
    records, totals = drive(env, lambda job, r, j: env.unwrapped.oracle(env.agent_selection))
    assert len(records) == 24 and records[-1]["success"] is True
    # every solution scored 3 -> solver 1 each, evaluation 0, scorer 0
    assert sum(totals.values()) == pytest.approx(8.0)
    assert all(x["info"]["correct"] for x in records if x["job"] == "solution")


def test_no_reference_answer():
    env = _env(instance={"question": "Name a prime between 10 and 20."}, num_rounds=1)
    records, totals = drive(
        env,
        lambda job, r, j: {"solution": "\\boxed{13}", "evaluation": "ok"}.get(
            job, "<score>2</score>"
        ),
    )
    assert records[0]["info"]["correct"] is None and records[-1]["info"]["accuracy"] is None
    assert records[-1]["info"]["final_answer"] == "13" and records[-1]["success"] is False
    assert sum(totals.values()) == pytest.approx(1.0)  # 0.5 + 0.5, zero-sum pair


def test_garbage_in_every_job_never_raises():
    env = _env(num_agents=3, num_rounds=3)
    it = iter(GARBAGE * 2)
    records, _ = drive(env, lambda job, r, j: next(it))
    assert len(records) == 9
    assert all(x["parts"]["reward"] in (0.0, -1.0) for x in records)
    env = envs.make("discussion", render_mode="ansi")
    env.reset(seed=0)
    env.step("\\boxed{1}")
    assert "next:" in env.render()


def test_majority_and_answer_keys():
    assert majority_answer(["1/2", "0.5", "3", r"\frac{1}{2}"]) == 3
    assert majority_answer(["3", None, "4"]) == 2
    assert answer_key(" 12 ") == answer_key("12.0") == "12"


def test_config_and_instance_errors():
    with pytest.raises(ValueError, match="multi-agent"):
        envs.make("discussion", mode="single")
    with pytest.raises(ValueError, match="num_agents"):
        envs.make("comas", num_agents=0)
    with pytest.raises(ValueError, match="others"):
        envs.make("comas", num_agents=1, agent_draw="others")
    env = envs.make("comas")
    with pytest.raises(ValueError, match="question"):
        env.reset(options={"instance": {"q": "x"}})
    with pytest.raises(ValueError, match="empty"):
        env.reset(options={"instance": {"question": "  "}})
    assert problem_from_dict({"question": "a", "answer": 3}).answer == "3"


def test_custom_problem_list_and_one_agent():
    problems = [{"question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(60)]
    env = envs.make("discussion", problems=problems, num_agents=1, num_rounds=2)
    env.reset(seed=4, options={"split": "train"})
    raw = env.unwrapped
    assert raw.instance.question in {p["question"] for p in problems}
    assert raw.possible_agents == ["agent_0"]
    result = play(env, oracle_policy, seed=5)
    assert result["steps"] == 6 and result["success"]


def test_registered_math_set_from_a_file():
    path = "tests/data/fixtures/amc.jsonl"  # AMC in its released schema (answers are floats)
    raw = envs.make("discussion", dataset="amc", data_path=path, num_agents=2).unwrapped
    got = []
    for split in ("train", "val", "test"):
        with contextlib.suppress(ValueError):  # a split may hold none of 2 problems
            got.append(raw.sample_instance(split, 0))
    assert got and {p.source for p in got} == {"amc"}
    assert {p.answer for p in got} <= {"7", "9"}
