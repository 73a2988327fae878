"""The shared base of every setting: AEC bookkeeping done once.

A setting subclasses :class:`TurnBasedEnv` and supplies only what is specific to it:

- ``AGENTS`` / ``SINGLE_AGENTS``: agent names in turn order for ``mode="multi"`` / ``"single"``
  (``_single_agents()`` when the single agent is an option, as in the tool + planner settings);
- ``config_cls``: its frozen :class:`~envs.core.config.EnvConfig` subclass;
- ``_generate_instance(rng)``: a fresh instance (generation + verification) from a numpy
  ``Generator``; ``_instance_key(instance)``: its JSON-able content (hashed for ``instance_id``);
  ``_split_key(instance)``: what decides its split (default the instance key; a setting whose
  instances have symmetric twins returns a canonical form, see :mod:`envs.core.splits`);
  ``_instance_from_dict(d)``: validation of an explicit instance from ``reset(options=...)``;
  or override ``_sample_instance(split, seed)`` wholesale for dataset-backed settings;
- ``_reset_state(instance)``: the episode state;
- ``_prompt(agent)``: the observation text for an agent;
- ``_act(agent, completion) -> RewardParts``: parse, apply, score. It sets ``self.success`` and
  may call ``self.end_episode()`` (success, agreement, natural end). It must never raise on a
  bad completion;
- ``_render_text()``, and for a grid setting ``cell_grid()``: its state as a
  :class:`~envs.core.render.CellGrid` of cells, which ``render_mode="rgb_array"`` draws (and the
  episode viewer shows); ``_render_rgb()`` for any other picture;
- optionally ``_next_agent(agent)`` for schedules other than round-robin, ``_horizon_reached()``,
  ``oracle(agent)`` (a correct scripted completion), ``_shared_attrs`` (attributes that
  ``clone()`` shares instead of copying: the sandbox always, pools and datasets by choice),
  ``create_shared(**config)`` (run-wide objects such as question pools that every instance must
  share and trainers checkpoint), ``adaptive_preference(agent)`` (MarsRL keep rule) and
  ``award_lookahead()`` (how many steps later this configuration's awards can arrive).

Hook order: what runs when, in this class and in the tool + planner layer
(:class:`~envs.core.toolplanner.ToolPlannerEnv`, the grid settings) that fills ``_act`` and
``_prompt`` with finer hooks of its own. Everything not named here is bookkeeping.

====================  ===================================  ===================================
call                  TurnBasedEnv, in order               ToolPlannerEnv, inside
====================  ===================================  ===================================
``reset``             ``_instance_from_dict`` (an          ``_reset_state``:
                      explicit instance) or                ``_initial_state(instance)``, empty
                      ``_sample_instance(split, seed)``    history
                      (default: ``_generate_instance``
                      until ``_split_key`` hashes into
                      the split); ``_instance_key``
                      (``instance_id``);
                      ``_reset_state(instance)``
``observe(agent)``    ``_prompt(agent)``, clipped to       ``_rules_text``, ``_role_text``
                      ``max_prompt_chars``                 (``_answer_format``,
                                                           ``_tool_output_format``), the
                                                           tool's program and output for the
                                                           planner, ``_instance_text``,
                                                           ``_history_text``, ``_state_text``
``step(text)``        ``_act(agent, text)`` (may call      tool: code block, sandbox run,
                      ``award()``, ``end_episode()``,      ``_parse_answer(stdout)``,
                      ``mark_untrainable()``); the         ``_format_proposal``, ``_simulate``
                      awards applied; ``_next_agent``;     (or ``_noop_sim``),
                      ``_step_info(agent)`` into the       ``_tool_components``, ``_team``
                      step's info; termination (ended or   (``tool_team="proposal"``);
                      success) else truncation             planner: ``####`` answer,
                      (``_horizon_reached``); rewards      ``_parse_answer``, ``_simulate``,
                      accumulated; ``render`` in           ``_planner_components``, ``_team``,
                      ``"human"`` mode                     ``_award_tool`` (the tool's
                                                           ``award()``), the state advances,
                                                           ``_is_solved``
``oracle(agent)``     the setting's                        ``_oracle_code`` (tool),
                                                           ``_oracle_answer`` /
                                                           ``_solving_proposal`` (planner)
``render()``          ``_render_text`` (``"ansi"``,        (the settings' ``cell_grid``)
                      ``"human"``) or ``_render_rgb``
                      (default: ``cell_grid`` drawn)
``clone()``           deep copy but ``_shared_attrs``
====================  ===================================  ===================================

What the layers above need to know without building an env (the modes, whether some rewards
arrive later through :meth:`award`, how many steps later at most, the default recipe) is
registered with the setting's spec (:mod:`envs.core.registry`).

The base class handles agent selection, rewards and cumulative rewards, terminations and
truncations (termination on ``end_episode()``, truncation at ``max_turns``), dead steps, infos
(``reward_parts``, ``success``, ``turn``, ``instance_id``, ``trainable``), seeding and splits,
spaces, clone and rendering.

Step infos. After each step the acting agent's ``infos[agent]`` holds ``reward_parts`` (see
:mod:`envs.core.rewards`), ``success``, ``turn`` (the turn of that step), ``instance_id``,
``trainable`` and whatever the setting adds (``_step_info``).

``trainable`` (a bool, always present in the acting agent's info after a step; absent means
``True``, e.g. in the infos ``reset()`` writes): whether the sample of this step is a training
sample of its role. A setting calls :meth:`TurnBasedEnv.mark_untrainable` in ``_act`` for steps
that the paper samples only to compute someone else's reward (MAE's N difficulty answers and
their judge scores, SAGE's N_s difficulty samples): the step still acts and is scored for the
record, its info says ``trainable: False`` with ``untrainable_reason``, and a trainer must drop
its sample (the rollout engine does). Such steps return reward 0, so cumulative rewards are the
sum over training samples.

Delayed rewards. ``award(agent, parts, step)`` delivers the final reward of an earlier step (see
its docstring). It replaces that step's provisional reward: ``rewards[agent]`` receives the
difference (final minus what the step returned), so cumulative rewards equal the final rewards
whether the provisional reward was 0 (MAE, SAGE, CoMAS) or a partial value (the math reasoner's
team reward, AT-GRPO A.1.1).

Version history: v0 (initial); v1 (``trainable`` infos and ``mark_untrainable``; awards replace
a non-zero provisional reward instead of adding to it).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, ClassVar

import numpy as np
from pettingzoo import AECEnv
from pettingzoo.utils import wrappers

from envs.core.config import EnvConfig, build_config
from envs.core.render import CellGrid, draw_cell_grid
from envs.core.rewards import RewardParts
from envs.core.spaces import completion_space, prompt_space
from envs.core.splits import check_split, split_of, stable_hash

__all__ = ["TurnBasedEnv", "wrap"]

_KNOWN_OPTIONS = {"split", "instance"}
_MAX_SPLIT_ATTEMPTS = 10_000


class TurnBasedEnv(AECEnv):
    """Base class for turn-based multi-agent LLM settings (see module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["human", "ansi"],
        "name": "turn_based_v0",
        "is_parallelizable": False,
    }
    AGENTS: ClassVar[tuple[str, ...]] = ()
    SINGLE_AGENTS: ClassVar[tuple[str, ...]] = ()
    config_cls: ClassVar[type[EnvConfig]] = EnvConfig
    _shared_attrs: ClassVar[tuple[str, ...]] = ()
    # what progress() measures (a setting with partial progress names its own measure)
    PROGRESS: ClassVar[str] = "solved"

    def __init__(
        self,
        config: EnvConfig | None = None,
        *,
        render_mode: str | None = None,
        sandbox: Any = None,
        **overrides: Any,
    ) -> None:
        super().__init__()
        self.config = build_config(self.config_cls, config, overrides)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode {render_mode!r} is not supported by {type(self).__module__}; "
                f"choose one of {self.metadata['render_modes']}"
            )
        self.render_mode = render_mode
        self._sandbox = sandbox
        roles = self._single_agents() if self.config.mode == "single" else self.AGENTS
        if not roles:
            raise ValueError(f"{type(self).__name__} does not support mode={self.config.mode!r}")
        self.possible_agents = list(roles)
        self.agents: list[str] = []
        self.observation_spaces = {
            a: prompt_space(self.config.max_prompt_chars) for a in self.possible_agents
        }
        self.action_spaces = {
            a: completion_space(self.config.max_completion_chars) for a in self.possible_agents
        }
        self._seed_rng = np.random.default_rng()
        self.instance: Any = None
        self.instance_id = ""
        self.turn = 0
        self.num_steps = 0
        self.success = False
        self._ended = False
        self.last_awards: list[dict[str, Any]] = []
        self._pending_awards: list[tuple[str, RewardParts, int]] = []
        self._step_rewards: dict[int, float] = {}  # env step -> the reward it has now
        self._untrainable: str | None = None

    # ------------------------------------------------------------------ setting hooks
    def _single_agents(self) -> tuple[str, ...]:
        """The agents of ``mode="single"`` (``SINGLE_AGENTS``; a setting whose config picks
        which role acts alone overrides this)."""
        return self.SINGLE_AGENTS

    def _generate_instance(self, rng: np.random.Generator) -> Any:
        raise NotImplementedError

    def _instance_key(self, instance: Any) -> Any:
        return instance

    def _split_key(self, instance: Any) -> Any:
        """What decides ``instance``'s split. Settings whose instances have twins (a rotated
        level, a relabelled puzzle) return one representative of the class
        (:func:`~envs.core.splits.canonical_form`), so all twins land in one split."""
        return self._instance_key(instance)

    def _instance_from_dict(self, data: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not accept explicit instances")

    def _reset_state(self, instance: Any) -> None:
        raise NotImplementedError

    def _prompt(self, agent: str) -> str:
        raise NotImplementedError

    def _act(self, agent: str, completion: str) -> RewardParts:
        raise NotImplementedError

    def _render_text(self) -> str:
        return f"{type(self).__name__}: turn {self.turn}, success={self.success}"

    def cell_grid(self) -> CellGrid | None:
        """The current state as a grid of cells (:class:`~envs.core.render.CellGrid`), for pictures
        of it; ``None`` for a setting that is not played on a grid (the default)."""
        return None

    def _render_rgb(self) -> np.ndarray:
        grid = self.cell_grid()
        if grid is None:
            raise NotImplementedError(f"{type(self).__name__} has no picture of its state")
        return draw_cell_grid(grid)

    def progress(self) -> float:
        """The task's own progress in the current state, in [0, 1] with 1 = solved (``PROGRESS``
        names it). The default is success itself; settings where part of the task can be done
        (boxes on goals, distance closed, cells solved, tests passed) override it. Evaluations
        report it at the end of every episode beside the success rate."""
        return float(self.success)

    def oracle(self, agent: str) -> str:
        """A correct scripted completion for ``agent`` in the current state (tests, baselines)."""
        raise NotImplementedError(f"{type(self).__name__} has no oracle")

    @classmethod
    def create_shared(cls, **config: Any) -> dict[str, Any]:
        """Objects all env instances of a run must share (e.g. MAE/SAGE question pools), keyed by
        the ``envs.make`` keyword that accepts them. Each has ``state_dict()`` and
        ``load_state_dict(d)`` so trainers can checkpoint them. Default: none."""
        return {}

    @classmethod
    def has_shared_objects(cls) -> bool:
        """Whether the setting has run-wide shared objects (overrides :meth:`create_shared`):
        its episodes then read and change common state, so stepping them in another order can
        change what they see, and pools step them one at a time in request order."""
        return getattr(cls.create_shared, "__func__", None) is not getattr(
            TurnBasedEnv.create_shared, "__func__", None
        )

    def _next_agent(self, agent: str) -> str:
        """Round-robin in ``possible_agents`` order; a wrap-around starts a new turn."""
        order = self.possible_agents
        i = order.index(agent) + 1
        if i >= len(order):
            self.turn += 1
            i = 0
        return order[i]

    def _horizon_reached(self) -> bool:
        return self.turn >= self.config.max_turns

    def step_budget(self) -> int | None:
        """At most how many agent steps an episode of this configuration takes, or ``None`` when
        the setting cannot say before the episode ends. Progress bars count on it (the ETA of a
        rollout, :mod:`adapters.rollout.progress`); an episode that ends early takes fewer.

        The default holds for the base schedule (round-robin, every agent once per turn, up to
        ``max_turns`` turns); a setting that changes the schedule or the horizon says its own
        budget, and is ``None`` until it does."""
        base = TurnBasedEnv
        own = type(self)
        if own._next_agent is not base._next_agent or (
            own._horizon_reached is not base._horizon_reached
        ):
            return None
        return int(self.config.max_turns) * len(self.possible_agents)

    # ------------------------------------------------------------------ public helpers
    @property
    def sandbox(self) -> Any:
        """The sandbox tool code runs in: the one passed in, else the process-wide default."""
        if self._sandbox is None:
            import sandboxes

            self._sandbox = sandboxes.default()
        return self._sandbox

    def award(self, agent: str, parts: RewardParts, step: int) -> None:
        """Deliver, during the current step, the final reward of an earlier action of ``agent``
        (the one it took at env step ``step``, i.e. ``self.num_steps`` at that time).

        For settings whose rewards depend on later agents (MAE's proposer is scored by the
        judge's scores of later answers; CoMAS's solution by a later score; the math reasoner's
        team reward by the tool's step that ends the episode): the earlier step returns a
        provisional reward (usually 0) and the final one arrives here. ``parts`` is the complete
        final reward of that step, not an increment: ``rewards[agent]`` receives final minus
        the step's current reward (so cumulative rewards equal the final rewards), the parts go
        to ``infos[agent]["reward_parts"]`` with ``"for_step"``, and to ``last_awards`` (with
        ``"delta"``, final minus provisional) so rollout engines can replace the reward of the
        sample of that step and add only the difference to episode returns.
        """
        self._pending_awards.append((agent, parts, int(step)))

    def award_lookahead(self) -> int:
        """At most how many steps after a step its :meth:`award` arrives in this configuration
        (0: none; never more than the spec's ``award_lookahead``). Rollout engines use it for
        tree sampling. Default: 0 (a setting with awards overrides it)."""
        return 0

    def mark_untrainable(self, reason: str) -> None:
        """Called by a setting from ``_act``: the current step's sample is not a training sample
        (``infos[agent]["trainable"] = False`` with ``untrainable_reason``); see the module
        docstring."""
        self._untrainable = str(reason) or "not a training sample"

    def end_episode(self) -> None:
        """Called by a setting from ``_act`` to terminate the episode after this step."""
        self._ended = True

    def observation_space(self, agent: str):
        return self.observation_spaces[agent]

    def action_space(self, agent: str):
        return self.action_spaces[agent]

    def sample_instance(self, split: str = "train", seed: int = 0) -> Any:
        """The instance ``reset(seed=...)`` would produce for ``split`` (no episode started)."""
        return self._sample_instance(check_split(split), int(seed))

    def split_of_instance(self, instance: Any) -> str:
        """The split ``instance`` (or any of its twins) belongs to: train, val or test."""
        return split_of(stable_hash(self._split_key(instance)))

    def _sample_instance(self, split: str, seed: int) -> Any:
        for attempt in range(_MAX_SPLIT_ATTEMPTS):
            rng = np.random.default_rng([seed, attempt])
            instance = self._generate_instance(rng)
            if self.split_of_instance(instance) == split:
                return instance
        raise RuntimeError(
            f"no {split} instance found in {_MAX_SPLIT_ATTEMPTS} attempts"
            ": instances are split by symmetry class, and a small configuration may have few "
            "or none in a split; use a larger size or another split"
        )

    # ------------------------------------------------------------------ AEC API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        options = dict(options or {})
        unknown = set(options) - _KNOWN_OPTIONS
        if unknown:
            warnings.warn(
                f"reset() ignores unknown options {sorted(unknown)}; "
                f"known: {sorted(_KNOWN_OPTIONS)}",
                stacklevel=2,
            )
        if seed is not None:
            self._seed_rng = np.random.default_rng(seed)
        if options.get("instance") is not None:
            instance = self._instance_from_dict(options["instance"])
        else:
            split = check_split(options.get("split", self.config.split))
            instance = self._sample_instance(split, int(self._seed_rng.integers(2**63)))
        self.instance = instance
        self.instance_id = stable_hash(self._instance_key(instance))[:16]
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.turn = 0
        self.num_steps = 0
        self.success = False
        self._ended = False
        self.last_awards = []
        self._step_rewards = {}
        self._untrainable = None
        self._reset_state(instance)
        self.infos = {a: self._base_info() for a in self.agents}
        self.agent_selection = self.agents[0]

    def _base_info(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "success": bool(self.success),
            "instance_id": self.instance_id,
            "reward_parts": None,
        }

    def observe(self, agent: str) -> dict[str, str]:
        if agent not in self.possible_agents:
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        text = self._prompt(agent)
        limit = self.config.max_prompt_chars
        if len(text) > limit:
            from verifiers.extract import clip_text

            text = clip_text(text, limit)
        return {"prompt": text}

    def step(self, action: Any) -> None:
        if not self.agents:
            raise RuntimeError("the episode is over: call reset() before step()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            if action is not None:
                raise ValueError(
                    f"agent {agent!r} is done (terminated or truncated): step(None) to remove it"
                )
            self._was_dead_step(action)
            return
        if not isinstance(action, str):
            raise TypeError(
                f"an action is the agent's completion text (str); got {type(action).__name__}"
            )
        self._cumulative_rewards[agent] = 0.0
        self._pending_awards = []
        self._untrainable = None
        this_step = self.num_steps
        parts = self._act(agent, action)
        self.num_steps += 1
        self.rewards = {a: 0.0 for a in self.agents}
        self.rewards[agent] = parts.reward
        self._step_rewards[this_step] = parts.reward
        self.last_awards = []
        for who, awarded, for_step in self._pending_awards:
            before = self._step_rewards.get(for_step, 0.0)
            self._step_rewards[for_step] = awarded.reward
            self.rewards[who] = self.rewards.get(who, 0.0) + awarded.reward - before
            record = {**awarded.to_dict(), "for_step": for_step}
            delta = awarded.reward - before  # what the award adds to the agent's return
            self.last_awards.append(
                {"agent": who, "step": for_step, "reward_parts": record, "delta": delta}
            )
        turn_of_step = self.turn
        next_agent = self._next_agent(agent)
        for a in self.agents:
            self.infos[a]["success"] = bool(self.success)
            self.infos[a]["turn"] = self.turn
        info = self._base_info()
        info["turn"] = turn_of_step
        info["reward_parts"] = parts.to_dict()
        info["trainable"] = self._untrainable is None
        if self._untrainable is not None:
            info["untrainable_reason"] = self._untrainable
        info.update(self._step_info(agent))
        self.infos[agent] = info
        for award in self.last_awards:
            if award["agent"] != agent:
                self.infos[award["agent"]]["reward_parts"] = award["reward_parts"]
        if self._ended or self.success:
            self.terminations = {a: True for a in self.agents}
        elif self._horizon_reached():
            self.truncations = {a: True for a in self.agents}
        self.agent_selection = next_agent
        self._accumulate_rewards()
        if self.render_mode == "human":
            self.render()

    def _step_info(self, agent: str) -> dict[str, Any]:
        """Extra per-step info a setting wants to expose (must be deterministic)."""
        return {}

    def render(self) -> Any:
        if self.render_mode is None:
            warnings.warn(
                "render() called without a render_mode; pass render_mode=...", stacklevel=2
            )
            return None
        if self.instance is None:
            raise RuntimeError("call reset() before render()")
        if self.render_mode == "ansi":
            return self._render_text()
        if self.render_mode == "human":
            print(self._render_text())
            return None
        if self.render_mode == "rgb_array":
            return self._render_rgb()
        raise ValueError(f"unsupported render_mode {self.render_mode!r}")

    def close(self) -> None:
        """Release resources owned by this env (a shared sandbox is not closed)."""

    def clone(self) -> TurnBasedEnv:
        """An independent copy of this env (state, RNGs, spaces); the sandbox and the objects
        named in ``_shared_attrs`` are shared, everything else is deep-copied."""
        memo: dict[int, Any] = {}
        if self._sandbox is not None:
            memo[id(self._sandbox)] = self._sandbox
        for name in self._shared_attrs:
            obj = getattr(self, name, None)
            if obj is not None:
                memo[id(obj)] = obj
        return copy.deepcopy(self, memo)

    def __str__(self) -> str:
        return self.metadata.get("name", type(self).__name__)


def wrap(raw: TurnBasedEnv) -> AECEnv:
    """Wrap a raw env the way PettingZoo's ``env()`` constructors do."""
    return wrappers.OrderEnforcingWrapper(raw)
