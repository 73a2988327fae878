"""Each setting's default configuration runs its paper's whole protocol to the end (no loop is
cut short by the horizon), with agents that never succeed early; and the knobs that shrink a
setting for CPU runs leave the protocol's shape intact."""

from __future__ import annotations

import pytest

import envs
from envs.pools import PoolItem, QuestionPool

MATH_Q = {"question": "What is 6 * 7?", "answer": "42"}
MATH_REF = {"question": "What is 6 * 7?", "kind": "math", "answer": "42"}


def _toy_pool() -> QuestionPool:
    items = [
        PoolItem(f"What is {i} * {i + 1}?", kind="math", answer=str(i * (i + 1))) for i in range(30)
    ]
    return QuestionPool(items, seed_set="toy")


def _run(env, policy, options=None, seed=0):
    """Play one episode; return the acting agents in order and how it ended."""
    env.reset(seed=seed, options=options)
    order, ended = [], None
    for agent in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        if term or trunc:
            ended = ended or ("terminated" if term else "truncated")
            env.step(None)
            continue
        order.append(agent)
        env.step(policy(env.unwrapped, agent))
    return order, ended


def _never(raw, agent):
    """Answers that parse where it matters but never solve, agree or accept."""
    prompt = raw.observe(agent)["prompt"]
    if agent == "verifier":
        return "Step 1 is wrong.\nVerdict: incorrect"
    if agent in ("solver", "corrector") and "VERIFIER" not in prompt:
        return "6 * 7 = 48, so \\boxed{48}"
    return "I am not sure. \\boxed{1}\n<score>2</score>"


@pytest.mark.parametrize("env_id", ["sudoku", "sokoban", "plan_path", "math", "code"])
def test_atgrpo_default_horizon_is_t_4(env_id):
    """AT-GRPO 5.1: turn horizon T = 4 (both agents act each turn): 8 steps, then truncation."""
    opts = {"instance": MATH_Q} if env_id == "math" else None
    order, ended = _run(envs.make(env_id), _never, options=opts)
    roles = envs.make(env_id).unwrapped.possible_agents
    assert order == roles * 4 and ended == "truncated"


def test_marsrl_default_runs_solver_v1_c1_v2_c2():
    """MarsRL 3.1: Solver, Verifier1, Corrector1, Verifier2, Corrector2 (at most five steps)."""
    order, ended = _run(envs.make("marsrl"), _never, options={"instance": MATH_Q})
    assert order == ["solver", "verifier", "corrector", "verifier", "corrector"]
    assert ended == "terminated"


@pytest.mark.parametrize(("agents", "rounds"), [(4, 8), (2, 4)])
def test_comas_default_runs_m_rounds(agents, rounds):
    """CoMAS 4.1 (Parameters): l = 4 agents, m = 2 l = 8 rounds, n = 1 evaluation; l = 2 (the
    paper's ablation, a CPU-sized run) keeps the protocol: m = 4 rounds of solution,
    evaluation, scoring."""
    env = envs.make("comas", num_agents=agents)
    order, ended = _run(env, _never, options={"instance": MATH_Q})
    assert len(order) == 3 * rounds and ended == "terminated"
    assert set(order) == {f"agent_{i}" for i in range(agents)}


def test_mae_default_runs_both_phases():
    """MAE 4.4: proposer phase (question, its rating, N = 5 difficulty answers and their
    ratings), solver phase (an answer to a pool question and its rating) and judge phase (a
    rating of a pair drawn from the pair dataset): 15 steps."""

    def policy(raw, agent):
        return {
            "proposer": "<question>What is 3 ** 4?</question>",
            "judge": "<score>9</score>",
        }.get(agent, "<answer>81</answer>")

    env = envs.make("mae", pool=_toy_pool())
    order, ended = _run(env, policy, options={"instance": {**MATH_REF, "use_reference": True}})
    assert order == ["proposer", "judge"] + ["solver"] * 5 + ["judge"] * 5 + [
        "solver",
        "judge",
        "judge",
    ]
    assert ended == "terminated"


def test_sage_default_runs_challenge_and_plan_solve_phases():
    """SAGE Algorithm 1: challenge phase (question, critic, N_s = 4 difficulty samples) then the
    plan-solve phase (plan, critic, answer): 9 steps."""

    def policy(raw, agent):
        return {
            "challenger": "<question>What is 17 * 3?</question>\n<answer>51</answer>",
            "critic": "<score>9</score>",
            "planner": "<plan>multiply</plan>",
        }.get(agent, "<answer>51</answer>")

    env = envs.make("sage", pool=_toy_pool())
    order, ended = _run(env, policy, options={"instance": MATH_REF})
    assert order == ["challenger", "critic"] + ["solver"] * 4 + ["planner", "critic", "solver"]
    assert ended == "terminated"
