"""One role of a setting as a single-agent Gymnasium environment.

Most trainers take a single-agent ``gymnasium.Env``. :class:`RoleEnv` is one role of a setting
seen that way: the agent writes that role's completions, and every other role is played by a
policy chosen when the env is made (the setting's scripted oracle by default). After ``import
envs`` every role of every setting is registered with Gymnasium
(:mod:`envs.core.gymnasium_ids`)::

    import gymnasium
    import envs

    env = gymnasium.make("mas_rl_envs/Sokoban-planner-v0")            # the tool: the oracle
    env = gymnasium.make("mas_rl_envs/Math-reasoner-v0", policy="smollm2")  # the tool: a model
    obs, info = env.reset(seed=0)                                     # obs: the role's prompt
    obs, reward, terminated, truncated, info = env.step(my_llm(obs))

Ids are ``mas_rl_envs/<Setting>-<role>-v0``, where ``<Setting>`` is the setting's id in
CamelCase (``plan_path`` -> ``PlanPath``, ``propose_solve_judge`` -> ``ProposeSolveJudge``) and
``<role>`` one of its roles under its default config (CoMAS's ``discussion`` has
``agent_0`` ... ``agent_3``); ``gymnasium.pprint_registry()`` lists them. Keyword arguments of
``make`` go to the setting (``gymnasium.make(id, num_boxes=2)``), except:

``policy``
    who plays the other roles: a ``--policy`` spec (``oracle``, ``constant:TEXT``, ``smollm2``,
    ``tiny``, a checkpoint or adapter directory, ``openai:URL#MODEL``;
    :mod:`adapters.policies.specs`), a :class:`~adapters.policies.base.Policy`, or a dict from
    role to either (roles left out play the oracle). A model plays greedily, one completion per
    turn, at most ``max_new_tokens`` (:data:`adapters.policies.base.MAX_NEW_TOKENS`) tokens.
``render_mode``
    ``"ansi"`` (``render()`` returns the board or transcript as text) or ``"human"`` (prints it).

Spaces: observation and action are ``Text`` spaces (:class:`envs.core.spaces.UnicodeText`: any
Unicode string up to the setting's ``max_prompt_chars`` / ``max_completion_chars``; Gymnasium's
plain ``Text`` admits only its charset). The observation is the role's prompt; the action is the
raw completion, and a malformed one is scored as the setting scores it (a format failure, never
an exception).

Step semantics: ``step(completion)`` applies the role's turn, then lets the other roles act until
it is the role's turn again or the episode is over. ``reward`` is everything the role earned in
between: its own step's reward plus the delayed awards the others' steps paid it (MAE's proposer,
SAGE's challenger, CoMAS's solver). ``terminated`` / ``truncated`` follow the setting's
termination and truncation (turn limit) of the role; once the role is done, the others still play
to the end of the episode so that awards owed to it arrive in the last step's reward. ``info``
holds the role's step info (``reward_parts`` ...), ``success`` and ``others``: the turns the
other roles took (role, completion) since the last step. A role that cannot act (the episode ends
before its first turn) gets ``terminated=True`` from its first ``step``.

Seeding follows Gymnasium: ``reset(seed=s)`` makes the episode's instance (and every later
``reset()`` without a seed) a function of ``s``; ``options`` are the setting's reset options
(``{"split": "val"}``, ``{"instance": ...}``). With the oracle (or any greedy policy) the env is
deterministic and passes ``gymnasium.utils.env_checker.check_env``
(``tests/integrations/test_gymnasium_env.py`` checks every registered id).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import gymnasium

from adapters.policies.base import MAX_NEW_TOKENS
from adapters.rollout import flush_dead_steps

__all__ = ["RoleEnv"]

_SEED_SPACE = 2**31 - 1


class RoleEnv(gymnasium.Env):  # type: ignore[type-arg]
    """One role of a setting; the other roles are played by ``policy`` (module docstring)."""

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(
        self,
        setting: str,
        role: str,
        policy: Any = "oracle",
        render_mode: str | None = None,
        max_new_tokens: int = MAX_NEW_TOKENS,
        **config: Any,
    ) -> None:
        import envs

        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode {render_mode!r}: choose one of {self.metadata['render_modes']}"
            )
        self.render_mode = render_mode
        self.setting = envs.spec(setting).id
        self._aec = envs.make(self.setting, render_mode=render_mode, **config)
        self.raw = self._aec.unwrapped
        roles = list(self.raw.possible_agents)
        if role not in roles:
            raise ValueError(f"{self.setting} has no role {role!r} in this config; roles: {roles}")
        self.role = role
        self.observation_space = copy.deepcopy(self.raw.observation_spaces[role]["prompt"])
        self.action_space = copy.deepcopy(self.raw.action_spaces[role])
        self._players = _players(policy, [r for r in roles if r != role], max_new_tokens)
        self._others: list[tuple[str, str]] = []
        self._pending = 0.0  # awards paid to the role before its first turn
        self._terminated = self._truncated = False
        self._episode_seed = 0

    # -- Gymnasium API --------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        # the instance follows the env's RNG, so that reset() after reset(seed=s) is determined
        self._episode_seed = int(self.np_random.integers(_SEED_SPACE))
        self.raw.reset(seed=self._episode_seed, options=dict(options or {}))
        self._others = []
        self._terminated = self._truncated = False
        self._pending = self._play_others()
        return self._observation(), self._info({})

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.raw.instance is None:
            raise RuntimeError("call reset() before step()")
        if not self._role_acts():
            return "", 0.0, *self._done(), self._info({})
        reward = self._pending + self._live_step(action if isinstance(action, str) else str(action))
        info = dict(self.raw.infos.get(self.role, {}))
        self._pending = 0.0
        self._others = []
        reward += self._play_others()
        return self._observation(), reward, *self._done(), self._info(info)

    def render(self) -> Any:
        return self.raw.render() if self.render_mode is not None else None

    def close(self) -> None:
        if self._aec is not None:
            self._aec.close()

    # -- helpers --------------------------------------------------------------------------------
    def _role_acts(self) -> bool:
        raw = self.raw
        return bool(
            raw.agents
            and raw.agent_selection == self.role
            and not (raw.terminations[self.role] or raw.truncations[self.role])
        )

    def _live_step(self, completion: str) -> float:
        """Apply the acting role's completion; what the step paid the role."""
        raw = self.raw
        raw.step(completion)
        self._terminated |= bool(raw.terminations.get(self.role))
        self._truncated |= bool(raw.truncations.get(self.role))
        return float(raw.rewards.get(self.role, 0.0))

    def _play_others(self) -> float:
        """Let the other roles act until the role's turn or the end; the role's earnings."""
        raw = self.raw
        earned = 0.0
        flush_dead_steps(raw)
        while raw.agents and not self._role_acts():
            agent = raw.agent_selection  # live: dead steps are flushed, and the role is done
            completion = self._players[agent](raw, agent)
            self._others.append((agent, completion))
            earned += self._live_step(completion)
            flush_dead_steps(raw)
        return earned

    def _done(self) -> tuple[bool, bool]:
        if self._role_acts():
            return False, False
        truncated = self._truncated and not self._terminated
        return not truncated, truncated

    def _observation(self) -> str:
        return str(self.raw.observe(self.role)["prompt"]) if self._role_acts() else ""

    def _info(self, step_info: Mapping[str, Any]) -> dict[str, Any]:
        info = copy.deepcopy(dict(step_info))
        info["success"] = bool(self.raw.success)
        info["others"] = list(self._others)
        return info


def _players(policy: Any, roles: list[str], max_new_tokens: int) -> dict[str, Any]:
    """role -> ``play(raw, agent) -> completion`` for each role the agent does not play."""
    given = policy if isinstance(policy, Mapping) else dict.fromkeys(roles, policy)
    unknown = sorted(set(given) - set(roles))
    if unknown:
        raise ValueError(f"policy names roles {unknown} that others do not play; others: {roles}")
    built: dict[int, Any] = {}  # one model per spec object, even when it plays several roles
    out = {}
    for role in roles:
        spec = given.get(role, "oracle")
        key = id(spec)
        if key not in built:
            built[key] = _player(spec, max_new_tokens)
        out[role] = built[key]
    return out


def _player(spec: Any, max_new_tokens: int) -> Any:
    from adapters.policies.base import Policy, SamplingParams
    from adapters.policies.specs import parse_policy_spec

    policy = parse_policy_spec(spec) if isinstance(spec, str) else spec
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be a spec string or a Policy, got {type(policy).__name__}")
    if getattr(policy, "env_aware", False):  # the oracle answers from the env's state
        return lambda raw, agent: raw.oracle(agent)
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)

    def play(raw: Any, agent: str) -> str:
        return policy.generate([raw.observe(agent)["prompt"]], params)[0][0].text

    return play
