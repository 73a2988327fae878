"""Plan-Path: instances, hand-computed rewards (AT-GRPO A.1.4), oracle and garbage policies."""

from __future__ import annotations

import pytest

import envs
from envs.plan_path import bfs_distances, shortest_moves
from tests.envs.contract import GARBAGE, oracle_policy, play

# 0123
# ....   row 0: start (0,0)
# .##.   row 1
# ....   row 2: goal (2,3)
MAP = {"grid": ["....", ".##.", "...."], "start": [0, 0], "goal": [2, 3]}


def _parts(env, agent):
    return env.infos[agent]["reward_parts"]


def _fresh(mode="multi", **config):
    env = envs.make("plan_path", mode=mode, **config)
    env.reset(options={"instance": MAP})
    return env


def tool_code(moves: str) -> str:
    return f"```python\nprint('{moves}')\n```"


def test_instance_generation_500_reachable():
    raw = envs.make("plan_path").unwrapped
    for seed in range(500):
        split = ("train", "val", "test")[seed % 3]
        inst = raw.sample_instance(split, seed)
        dist = bfs_distances(inst.grid, inst.goal)
        assert dist[inst.start] == inst.shortest >= raw.config.min_distance
        assert len(shortest_moves(inst.grid, inst.start, inst.goal)) == inst.shortest
        assert len(inst.grid) == 10 and all(len(r) == 10 for r in inst.grid)


def test_tool_rewards_hand_computed():
    env = _fresh(tool_team="proposal")  # the team term of the tool's own proposal
    # d0 = 5. Tool proposes R,R,R: legal, d 5 -> 2, team = 3/5; fmt, exec, shape all 1.
    env.step(tool_code("[R,R,R]"))
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 1.0, "shape": 1.0}
    assert p["team"] == pytest.approx(0.6)
    assert p["reward"] == pytest.approx(0.5 * 0.6 + 0.5 * 1.0)
    # The tool never moves the agent.
    assert env.unwrapped.state.pos == (0, 0)


def test_tool_rewards_illegal_and_receding():
    env = _fresh(tool_team="proposal")
    env.step(tool_code("[D,R]"))  # D fine (1,0); R into wall (1,1): stops; d 5 -> 4
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 0.0, "shape": 1.0}
    assert p["team"] == pytest.approx(0.2)
    assert "wall" in p["reasons"]["exec"]
    env.step("#### []")
    env.step(tool_code("[U]"))  # leaves the grid: exec 0, no move, shape 1 (d unchanged)
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 0.0, "shape": 1.0}
    env.step("#### [D]")
    env.step(tool_code("[U]"))  # from (1,0) back up: legal, d 4 -> 5: shape 0, team 0
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 1.0, "exec": 1.0, "shape": 0.0}
    assert p["team"] == 0.0
    assert p["reward"] == pytest.approx(0.5 * (0.1 + 0.4))


def test_tool_format_and_crash_failures():
    env = _fresh()
    env.step("I would move right")
    p = _parts(env, "tool")
    assert p["components"] == {"fmt": 0.0, "exec": 0.0, "shape": 0.0}
    assert p["reasons"]["fmt"] == "no code block found"
    assert p["reward"] == 0.0
    env.step("#### [R]")
    env.step("```python\n1/0\n```")
    p = _parts(env, "tool")
    assert p["components"]["fmt"] == 0.0 and "ZeroDivisionError" in p["reasons"]["exec"]
    env.step("#### [R]")
    env.step("```python\nprint('go right')\n```")
    p = _parts(env, "tool")
    assert p["components"]["fmt"] == 0.0 and "printed output" in p["reasons"]["fmt"]


def test_planner_rewards_hand_computed():
    env = _fresh()
    env.step("")
    env.step("Going around the wall.\n#### [R, R, R]")
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "leg": 1.0, "sp": 1.0}
    assert p["team"] == pytest.approx(0.6)
    assert p["reward"] == pytest.approx(0.5 * 0.6 + 0.5 * 1.0)
    assert env.unwrapped.state.pos == (0, 3)
    env.step("")
    env.step("#### [L, D]")  # L is legal but off every shortest path; D into wall stops
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 1.0, "leg": 0.0, "sp": 0.0}
    assert p["team"] == 0.0  # d 2 -> 3
    assert env.unwrapped.state.pos == (0, 2)
    env.step("")
    env.step("#### go down")
    p = _parts(env, "planner")
    assert p["components"] == {"fmt": 0.0, "leg": 0.0, "sp": 0.0}
    assert p["reward"] == 0.0 and p["reasons"]["fmt"]
    assert env.unwrapped.state.pos == (0, 2)


def test_success_terminates_with_team_one():
    env = _fresh(mode="single")
    env.step("#### [D, D, R, R, R]")
    p = _parts(env, "planner")
    assert env.terminations["planner"] and env.infos["planner"]["success"]
    assert p["team"] == 1.0 and p["components"] == {"fmt": 1.0, "leg": 1.0, "sp": 1.0}
    assert p["reward"] == pytest.approx(1.0)


def test_horizon_truncates():
    env = envs.make("plan_path", max_turns=2)
    env.reset(options={"instance": MAP})
    for _ in range(4):
        env.step("")
    assert all(env.truncations.values()) and not any(env.terminations.values())


def test_explicit_instance_errors():
    env = envs.make("plan_path")
    bad = [
        ({"grid": ["..", "#."]}, "start"),
        ({"grid": [".#", "#."], "start": [0, 0], "goal": [1, 1]}, "not reachable"),
        ({"grid": ["..", "x."], "start": [0, 0], "goal": [1, 1]}, "only"),
        ({"grid": ["..", "."], "start": [0, 0], "goal": [1, 0]}, "equal-length"),
        ({"grid": ["..", ".."], "start": [0, 5], "goal": [1, 1]}, "out of bounds"),
        ("not a dict", "instance is"),
    ]
    for instance, message in bad:
        with pytest.raises(ValueError, match=message):
            env.reset(options={"instance": instance})


@pytest.mark.parametrize("mode", ["multi", "single"])
def test_oracle_solves_200_val_and_garbage_none(mode):
    env = envs.make("plan_path", mode=mode)
    solved = sum(
        play(env, oracle_policy, seed=s, options={"split": "val"})["success"] for s in range(200)
    )
    assert solved == 200
    garbage = [g for g in GARBAGE if "U" not in g]
    for s in range(50):
        out = play(
            env, lambda e, a, s=s: garbage[s % len(garbage)], seed=s, options={"split": "val"}
        )
        assert not out["success"]


def test_rgb_render_shows_player_and_goal():
    env = envs.make("plan_path", render_mode="rgb_array")
    env.reset(options={"instance": MAP})
    img = env.render()
    assert img.shape == (3 * 32 + 1, 4 * 32 + 1, 3)
    from envs.core.render import COLORS

    colours = {tuple(c) for c in img.reshape(-1, 3)}
    assert COLORS["player"] in colours and COLORS["goal"] in colours and COLORS["wall"] in colours


def test_a14_team_term_is_one_value_per_turn():
    """A.1.4: the tool's team term is the turn's r^team_k = max(0, (d_{k-1} - d_k) / d0) of the
    state after the planner's answer. d0 = 5; the tool proposes R,R,R (d 5 -> 2) but the planner
    moves R only (d 5 -> 4): team 1/5 for both, tool 0.5 * 0.2 + 0.5 * 1.0 = 0.60 (0.80 from
    its own proposal under tool_team="proposal")."""
    env = _fresh()
    env.step(tool_code("[R,R,R]"))
    assert _parts(env, "tool")["team"] == 0.0
    env.step("#### [R]")
    (award,) = env.unwrapped.last_awards
    assert award["agent"] == "tool"
    assert award["reward_parts"]["team"] == pytest.approx(0.2)
    assert award["reward_parts"]["reward"] == pytest.approx(0.60)
    assert _parts(env, "planner")["team"] == pytest.approx(0.2)
