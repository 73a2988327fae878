"""The Gymnasium entry: every role of every setting through ``gymnasium.make``, checked by
Gymnasium's own ``check_env`` and replayed against the multi-agent env in lockstep."""

from __future__ import annotations

import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs.core.gymnasium_ids import gym_id
from tests.integrations.conftest import flush

ALL_IDS = [(s, r) for s in envs.list_envs() for r in envs.spec(s).roles]


def test_every_setting_and_role_is_registered():
    """Registering a setting registers a Gymnasium id for each of its roles, which are the
    agents of its env under the default config."""
    for setting in envs.list_envs():
        roles = envs.spec(setting).roles
        assert roles and tuple(envs.make(setting).unwrapped.possible_agents) == roles, setting
        for role in roles:
            assert gym_id(setting, role) in gymnasium.registry
    assert gym_id("propose_solve_judge", "judge") == "mas_rl_envs/ProposeSolveJudge-judge-v0"


@pytest.mark.parametrize("setting, role", ALL_IDS, ids=[f"{s}-{r}" for s, r in ALL_IDS])
def test_check_env_passes_without_warnings(setting, role):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(gym_id(setting, role))
        check_env(env.unwrapped)
        env.close()
    assert not [str(w.message) for w in caught]


def _lockstep(env_id: str, setting: str, role: str, seed: int, completions) -> list[float]:
    """Play ``completions`` (of the prompt and the twin) as ``role`` through Gymnasium and on a
    twin multi-agent env where the oracle plays the other roles: the prompts, each step's reward
    (the role's own step plus the awards the others' steps paid it) and the end must agree."""
    env = gymnasium.make(env_id)
    obs, info = env.reset(seed=seed)
    twin = envs.make(setting).unwrapped
    twin.reset(seed=env.unwrapped._episode_seed)

    def others() -> float:
        earned = 0.0
        flush(twin)
        while twin.agents and twin.agent_selection != role:
            agent = twin.agent_selection
            twin.step(twin.oracle(agent))
            earned += twin.rewards.get(role, 0.0)
            flush(twin)
        return earned

    pending = others()
    rewards = []
    done = False
    while not done:
        assert obs == twin.observe(role)["prompt"]
        text = completions(obs, twin)
        obs, reward, terminated, truncated, info = env.step(text)
        twin.step(text)
        expected = pending + twin.rewards[role]
        pending = 0.0
        expected += others()
        assert reward == pytest.approx(expected, abs=1e-12)
        done = terminated or truncated
        assert done == (not twin.agents)
        rewards.append(reward)
    assert info["success"] == bool(twin.success) and obs == ""
    return rewards


def test_episodes_match_the_multi_agent_env():
    """MAE's judge is paid by later steps of other roles (delayed awards); the planner of
    Plan-Path acts several times when its plans fall short; a garbage completion is scored as a
    format failure, never raised."""
    rewards = _lockstep(
        gym_id("propose_solve_judge", "judge"),
        "propose_solve_judge",
        "judge",
        3,
        lambda prompt, twin: twin.oracle("judge"),
    )
    assert len(rewards) > 1 and sum(rewards) > 0
    rewards = _lockstep(
        gym_id("plan_path", "planner"),
        "plan_path",
        "planner",
        5,
        lambda prompt, twin: "#### [U]" if twin.turn == 0 else twin.oracle("planner"),
    )
    assert len(rewards) >= 2
    garbage = _lockstep(gym_id("code", "tester"), "code", "tester", 1, lambda p, t: "```py\n(")
    oracle = _lockstep(
        gym_id("code", "tester"), "code", "tester", 1, lambda p, t: t.oracle("tester")
    )
    assert garbage[0] < oracle[0]  # the step's own score (a stalled episode has more steps)


def test_other_roles_by_policy_spec_and_bad_arguments():
    """The other roles played by ``constant:`` (the no-op) or a model (``tiny``, greedy); a bad
    role or policy is refused at make time with the choices listed."""
    env = gymnasium.make(gym_id("plan_path", "planner"), policy="constant:")
    obs, info = env.reset(seed=2)
    assert info["others"] == [("tool", "")] and "planner" in obs
    env = gymnasium.make(gym_id("plan_path", "planner"), policy="tiny", max_new_tokens=4)
    obs, info = env.reset(seed=2)
    ((agent, text),) = info["others"]
    assert agent == "tool" and isinstance(text, str)
    assert env.reset(seed=2)[1]["others"] == [("tool", text)]  # greedy: the same completion
    with pytest.raises(ValueError, match="no role 'pilot'"):
        gymnasium.make("mas_rl_envs/PlanPath-planner-v0", role="pilot")
    with pytest.raises(ValueError, match=r"names roles \['judge'\]"):
        gymnasium.make(gym_id("plan_path", "planner"), policy={"judge": "oracle"})
    with pytest.raises(ValueError, match="unknown policy spec"):
        gymnasium.make(gym_id("plan_path", "planner"), policy="no-such-model")
    single = gymnasium.make(gym_id("plan_path", "planner"), mode="single")
    obs, info = single.reset(seed=1)
    assert info["others"] == [] and "planner" in obs
