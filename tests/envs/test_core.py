"""envs/core: config overrides, reward mixing, registry, spaces."""

from __future__ import annotations

import dataclasses

import pytest

import envs
from envs.core.config import RewardConfig
from envs.core.rewards import RewardParts, mix
from envs.core.spaces import UnicodeText
from envs.plan_path import PlanPathConfig, PlanPathRewards

PAPER_SETTINGS = [
    "sudoku",
    "sokoban",
    "plan_path",
    "code",
    "math",
    "propose_solve_judge",
    "challenge_plan_solve",
    "discussion",
    "solver_verifier_corrector",
]


def test_list_envs_has_every_setting_and_aliases():
    """The papers' nine settings, in registration order (a setting added later joins the list
    without changing this test)."""
    ids = envs.list_envs()
    assert [i for i in ids if i in PAPER_SETTINGS] == PAPER_SETTINGS
    assert len(ids) == len(set(ids))
    with_aliases = envs.list_envs(include_aliases=True)
    assert {"mae", "sage", "comas", "marsrl"} <= set(with_aliases)
    assert envs.spec("mae").id == "propose_solve_judge"


def test_config_overrides_and_errors():
    raw = envs.make("plan_path", height=7, width=9, rewards={"lam": 0.3}).unwrapped
    assert (raw.config.height, raw.config.width, raw.config.rewards.lam) == (7, 9, 0.3)
    assert raw.config.rewards.coefficients("planner") == {"fmt": 0.2, "leg": 0.4, "sp": 0.4}
    with pytest.raises(dataclasses.FrozenInstanceError):
        raw.config.height = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"did you mean 'height'"):
        envs.make("plan_path", heigth=3)
    with pytest.raises(TypeError, match="unknown rewards option"):
        envs.make("plan_path", rewards={"planner_speed": 1.0})
    with pytest.raises(ValueError, match="planner weights must sum to 1"):
        envs.make("plan_path", rewards={"planner_fmt": 0.5})
    with pytest.raises(ValueError, match="mode"):
        envs.make("plan_path", mode="solo")
    with pytest.raises(ValueError, match="render_mode"):
        envs.make("plan_path", render_mode="3d")
    with pytest.raises(TypeError, match="PlanPathRewards"):
        envs.make("plan_path", rewards=RewardConfig())
    custom = PlanPathRewards(lam=0.9)
    assert envs.make("plan_path", rewards=custom).unwrapped.config.rewards is custom
    assert envs.make("plan_path", config=PlanPathConfig(height=5)).unwrapped.config.height == 5


def test_mixing_formulas_hand_computed():
    assert mix(1.0, 0.5, 1.0, lam=0.6) == pytest.approx(0.8)
    assert mix(0.0, 1.0, 1.0, lam=0.4) == pytest.approx(0.6)
    assert mix(0.25, 1.0, 0.0, lam=0.4) == pytest.approx(0.1)
    assert mix(0.5, 0.7, 1.0, lam=0.0, mixing="additive", alpha=2.0) == pytest.approx(1.7)
    with pytest.raises(ValueError):
        mix(0, 0, 0, lam=0.5, mixing="other")


def test_reward_parts_rederivable():
    cfg = PlanPathRewards()
    parts = RewardParts.build("tool", {"fmt": 1.0, "exec": 0.0, "shape": 1.0}, cfg, team=0.25)
    d = parts.to_dict()
    local = sum(d["coefficients"][k] * d["components"][k] for k in d["coefficients"])
    assert d["local"] == pytest.approx(local) == pytest.approx(0.6)
    assert d["reward"] == pytest.approx(0.5 * 0.25 + 0.5 * 1.0 * 0.6)
    assert d["reward"] == mix(d["team"], d["local"], d["mask"], lam=d["lam"], mixing=d["mixing"])
    additive = RewardParts.build(
        "tool", {"fmt": 1.0}, dataclasses.replace(cfg, mixing="additive", alpha=1.0), team=1.0
    )
    assert additive.reward == pytest.approx(1.0 + 0.1)
    with pytest.raises(ValueError, match="no weight"):
        RewardParts.build("tool", {"speed": 1.0}, cfg)


def test_unicode_text_space():
    space = UnicodeText(100)
    assert space.contains("héllo 中文 ```python\n```")
    assert not space.contains("x" * 101)
    assert not space.contains(b"bytes")
    space.seed(7)
    a = [space.sample() for _ in range(5)]
    space.seed(7)
    assert a == [space.sample() for _ in range(5)]
    assert all(isinstance(s, str) and len(s) <= 100 for s in a)


def test_reset_options_and_split_validation():
    env = envs.make("plan_path")
    with pytest.raises(ValueError, match="unknown split"):
        env.reset(seed=0, options={"split": "dev"})
    with pytest.warns(UserWarning, match="unknown options"):
        env.reset(seed=0, options={"spilt": "val"})
    env.reset(seed=0, options={"split": "test"})
    assert env.unwrapped.infos["tool"]["instance_id"] == env.unwrapped.instance_id


def test_dead_steps_and_step_after_end():
    env = envs.make("plan_path", mode="single", max_turns=1)
    env.reset(seed=1)
    env.step("no answer")
    assert env.truncations["planner"] and not env.terminations["planner"]
    with pytest.raises(ValueError, match="step\\(None\\)"):
        env.step("again")
    env.step(None)
    assert env.agents == []
    # The PettingZoo wrapper only logs a warning here; the raw env refuses clearly.
    with pytest.raises(RuntimeError, match="reset"):
        env.unwrapped.step(None)


def test_trainable_info_contract():
    """``infos[agent]["trainable"]``: absent after reset (means True), a bool after each step
    (False only for steps a setting marks with ``mark_untrainable``)."""
    env = envs.make("plan_path")
    env.reset(seed=0)
    agent = env.agent_selection
    assert "trainable" not in env.infos[agent]
    env.step("no idea")
    assert env.infos[agent]["trainable"] is True and "untrainable_reason" not in env.infos[agent]


@pytest.mark.parametrize(
    "env_id", [e for e in envs.list_envs() if envs.spec(e).recipe == "at-grpo"]
)
def test_eq4_additive_mixing_is_one_option_away_in_every_atgrpo_setting(env_id):
    """AT-GRPO Eq. 4 (main text): r = alpha * r_team + r_local with alpha = 1 (Section 5.1),
    versus Appendix A.1's convex lam mixing (the default): rewards={"mixing": "additive"}."""
    extra = {"max_mutants": 2} if env_id == "code" else {}
    env = envs.make(env_id, rewards={"mixing": "additive"}, **extra)
    env.reset(seed=0)
    agent = env.agent_selection
    env.step(env.unwrapped.oracle(agent))
    p = env.infos[agent]["reward_parts"]
    assert p["mixing"] == "additive" and p["alpha"] == 1.0
    assert p["reward"] == pytest.approx(p["team"] + p["local"])
    assert envs.make(env_id).unwrapped.config.rewards.mixing == "convex"
