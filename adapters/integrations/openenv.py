"""Any setting as an `OpenEnv <https://github.com/meta-pytorch/OpenEnv>`_ environment server.

OpenEnv (PyPI ``openenv``, which replaced ``openenv-core``; the ``serve`` extra pins
``openenv>=0.10,<0.11``, and the tests pass on openenv-core 0.3.0 too) is the HTTP/WebSocket
protocol TRL's ``GRPOTrainer``, SkyRL and Prime Intellect's ``verifiers`` speak to environments
that live in another process. Serving a
setting over it is also how a user combines this suite with a library whose top-level package
name clashes with ours (``verifiers``, ``adapters``: see the README's installation notes)::

    python -m adapters.serve_env --env sokoban --port 8000 --env-config num_boxes=2

The server is openenv-core's own (:class:`openenv.core.env_server.http_server.HTTPEnvServer`,
FastAPI + uvicorn) with stateful HTTP added
(:class:`~adapters.integrations.openenv_sessions.SessionServer`): ``/ws`` holds one session per
WebSocket connection (one env instance each, isolated from the others, up to ``max_sessions``
at once), plus ``/health``, ``/metadata``, ``/schema`` (its state is :class:`MasState`'s),
``/mcp`` and ``/docs``; ``/reset`` ``/step`` ``/state`` and ``/close`` keep HTTP sessions
(below). ``/mcp`` has tools only in MCP mode (``--mcp``, below). The client is a
subclass of openenv-core's :class:`~openenv.core.EnvClient`::

    from adapters.integrations.openenv import MasAction, MasEnvClient

    with MasEnvClient(base_url="http://localhost:8000").sync() as client:
        result = client.reset(seed=0, split="val")       # or instance={...}, config={...}
        while not result.done:
            obs = result.observation                     # obs.agent acts next; obs.prompt
            result = client.step(MasAction(completion=my_llm(obs.prompt), agent=obs.agent))
            print(obs.agent, result.reward, result.observation.rewards)

Protocol
--------
``reset(seed=None, split=None, instance=None, config=None, episode_id=None)``: ``seed`` and
``split`` as in ``env.reset(seed, options={"split": ...})``; ``instance`` an explicit instance
(``options={"instance": ...}``, the setting's own dict format); ``config`` overrides of the
server's env config for this session, from an allowlist: choices and weights
(:data:`CLIENT_KEYS`, e.g. ``mode``, ``rewards``) freely, sizes and sandbox limits
(:data:`CEILING_KEYS`, e.g. ``max_turns``, ``memory_mb``, ``num_answers``) only at or below the
server's value (a larger one is clamped to it and listed in the observation's
``info["clamped"]``); anything else, such as ``data_path``, is refused. ``episode_id`` names the
episode (default: a fresh uuid, echoed in ``info["episode_id"]`` and the state).

``step(MasAction(completion, agent=None))``: the completion of the agent that acts now (``agent``,
when given, must name it: a guard against a client that lost track). Any JSON value is taken as
the completion's text (``42`` -> ``"42"``), since clients such as Prime Intellect's ``verifiers``
parse completions that look like JSON. Dead steps (agents that are done) are taken by the
server, so every observation is either a live agent's turn or the end.

:class:`MasObservation`: ``agent`` (who acts next, ``None`` at the end), ``prompt`` (its
observation), ``agents`` (every role), ``turn``, ``step``, ``instance_id``; after a step also
``acted`` (whose completion was applied), ``rewards`` (every role's reward for this step,
``env.rewards``, delayed awards included), ``reward_parts`` (role -> the ``reward_parts`` dict
this step wrote to ``infos``: the acting role's and those of roles that received a delayed award),
``awards`` (``env.last_awards``), ``info`` (the acting role's other step info), ``returns``
(each role's total so far), ``success``, ``terminated``, ``truncated``. These travel as
observation fields because OpenEnv's wire format drops ``Observation.metadata``.

The step result's ``reward`` is what generic clients sum over an episode (``--reward``):
``step-sum`` (default) the sum over roles of the step's rewards, delayed awards included, so
that summing ``reward`` over an episode gives the team's total return, as Prime Intellect's
``verifiers``, SkyRL's OpenEnv wrapper and TRL environment classes do; ``acting`` the acting
role's reward only (per-role credit: read ``observation.rewards`` for the others); ``team``
the mean over roles.

HTTP (:mod:`adapters.integrations.openenv_sessions`): OpenEnv's simulation flow works as is.
``POST /reset`` with a JSON body of the reset options starts an episode in the server's default
HTTP session; ``POST /step`` ``{"action": {"completion": ...}}`` steps it and ``GET /state``
reads it (``step_count``: steps since the reset; ``episode_id``). Concurrent HTTP clients key
their requests: ``POST /reset`` with ``"new_session": true`` starts a session of their own,
every answer carries its ``session_id`` (also in ``observation.session_id``), and ``/step``
(``{"session_id": ..., "action": ...}``), ``/state?session_id=...`` and ``/close``
(``{"session_id": ...}``) take it. A session is never ended to make room for another: at the
quota (``--max-http-sessions``) a new one is refused with status 429 and a ``Retry-After``
header (the seconds until a session idle past ``--http-session-timeout`` frees a slot), and a
client that names itself with the ``X-Client-Id`` header gets at most
``--max-sessions-per-client`` of them (those that send no name share the rest); the default
session has a slot of its own.

MCP mode (``--mcp``, :mod:`adapters.integrations.openenv_mcp`): each session is also an
OpenEnv ``MCPEnvironment`` whose tool ``answer(completion, agent=None)`` plays the acting role's
turn and returns ``{"observation", "reward", "done"}`` as ``/step`` does (and ``observe()`` the
current turn), for OpenEnv's ``MCPToolClient`` and plain JSON-RPC ``tools/call`` on ``/mcp``;
episodes still start with ``reset`` (a name OpenEnv reserves for the control plane), and
everything above keeps working on the same server. Without ``--mcp``, ``/mcp`` answers
openenv's "Environment does not support MCP".

Errors: a bad request (step before reset or after the end, wrong agent, unknown option, invalid
instance or config) gets a clear message: on the WebSocket an OpenEnv error frame
(``EXECUTION_ERROR``/``VALIDATION_ERROR``, which the client raises as ``RuntimeError``), over
HTTP status 400 (422 for a malformed body) with ``{"detail": ...}``; never a traceback. A bad
*completion* is not an error: the setting scores it as a format failure, as in-process.

Pools: MAE/SAGE question pools (``create_shared``) belong to each session by default, so
sessions never see each other's questions; ``share_pools=True`` gives every session started
with the server's config one run-wide pool, as a trainer would use.

Threat model (a server someone exposed)
---------------------------------------
Every request first passes :mod:`adapters.integrations._guard` (optional bearer token from
``$MAS_SERVICE_TOKEN``, bodies over 20 MiB and WebSocket frames over 1 MiB refused before they
are buffered, header-read timeout, connection limit). Then: sessions idle ``--session-timeout``
seconds (default 600) are closed, HTTP ones after ``--http-session-timeout`` (120); sessions
made over plain HTTP or MCP (``openenv/session/create``) are counted apart from WebSocket ones
and at most ``--max-http-sessions`` (default a quarter of ``--max-sessions``), so HTTP clients
never lock out WebSocket clients; beyond that a new HTTP session is refused (429,
``Retry-After``), never made by ending one in use, so a client that opens sessions in a loop
cannot end another's episode (the default session's included: it has a slot of its own), and
``--max-sessions-per-client`` caps what one client naming itself (``X-Client-Id``) may hold;
HTTP may close only HTTP sessions; a client's reset config cannot raise a limit the operator set
(the allowlist above). Session ids are random uuids, and a WebSocket client's id is never sent
to anyone. What stays out: a holder of the token can still fill the HTTP quota until its
sessions idle out (client names are self-declared, not identities), and CPU spent inside one
session's steps is bounded by the settings' own limits, not per client.

TRL: its ``environment_factory`` needs ``--max-sessions`` at least the generation batch (one
session per rollout), and a chat template with tool calling for tool-using settings.
"""

from __future__ import annotations

import functools
import json
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field, field_validator

from adapters.integrations.openenv_sessions import (
    DEFAULT_HTTP_SESSION_TIMEOUT_S,
    HttpOrigin,
    RequestError,
    SessionServer,
)
from adapters.rollout import flush_dead_steps

__all__ = [
    "MasAction",
    "MasEnvClient",
    "MasEnvironment",
    "MasObservation",
    "MasState",
    "RequestError",
    "ServeSettings",
    "create_app",
]

SERVER_ONLY_KEYS = frozenset(
    {"data_path", "data_options", "seed_sources", "sandbox", "pool", "render_mode"}
)
"""Config keys a client may not set at reset: they make the server read files or hold objects."""
CLIENT_KEYS = frozenset(
    {
        "mode", "split", "rewards", "oracle_tool", "coder_mask", "mutant_seed", "tau_mut",
        "float_tol", "reference_prob", "quality_threshold", "solve_filtered", "solver_phase",
        "train_difficulty", "train_question_judge", "add_to_pool", "alpha", "beta", "planning",
        "plan_source", "critic_norm", "duplicate_credit", "empty_format_score", "agent_draw",
        "unparsed_verdict", "wall_fraction", "boxes_start_off_goals", "legal_counts_givens",
        "san_needs_change",
    }
)  # fmt: skip
"""Config keys a client may set at reset freely: choices and weights of its own episodes."""
CEILING_KEYS = frozenset(
    {
        "max_turns", "single_turns", "history_turns", "max_prompt_chars",
        "max_completion_chars", "wall_s", "memory_mb", "max_output_bytes", "tool_wall_s",
        "tool_memory_mb", "tool_max_output_bytes", "max_tester_tests", "smoke_tests",
        "max_mutants", "mutant_floor_s", "grade_timeout_s", "num_answers", "max_question_chars",
        "max_shown_chars", "test_timeout_s", "num_samples", "max_tests", "num_agents",
        "num_evaluations", "history_rounds", "max_entry_chars", "max_steps", "accept_after",
        "height", "width", "num_boxes", "solver_max_nodes", "min_optimal_moves",
        "max_optimal_moves", "min_distance", "size",
    }
)  # fmt: skip
"""Config keys a client may lower at reset but not raise above the server's value: sandbox
limits, sizes and work (the operator sets the ceiling). A larger value is clamped to the
server's, and the reset observation's ``info["clamped"]`` says so."""
RESET_KEYS = ("seed", "split", "instance", "config", "episode_id")
REWARD_MODES = ("step-sum", "acting", "team")


# ----------------------------------------------------------------------------------------------
# wire types


class MasAction(Action):
    """The completion of the agent that acts now. Any JSON value is accepted as the completion
    and turned into text (a string as is, anything else as compact JSON: ``42`` -> ``"42"``),
    because a bad completion is scored, never refused: clients such as Prime Intellect's
    ``verifiers`` parse a completion that looks like JSON before sending it."""

    completion: str = Field(description="the acting agent's completion (raw text)")
    agent: str | None = Field(
        default=None, description="the agent the client believes acts now (checked if given)"
    )

    @field_validator("completion", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> str:
        return completion_text(value)


def completion_text(value: Any) -> str:
    """A completion sent as any JSON value, as text.

    >>> completion_text("x = 1"), completion_text(42), completion_text([1, {"a": None}])
    ('x = 1', '42', '[1,{"a":null}]')
    >>> completion_text(True), completion_text(None), completion_text(2.5)
    ('true', 'null', '2.5')
    """
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return str(value)


class MasObservation(Observation):
    """Whose turn it is and its prompt, plus what the last step did (see the module docstring)."""

    env_id: str = ""
    agent: str | None = Field(default=None, description="the agent that acts next (None: over)")
    prompt: str = Field(default="", description="that agent's observation prompt")
    agents: list[str] = Field(default_factory=list, description="every role, in turn order")
    turn: int = 0
    step: int = 0
    instance_id: str = ""
    acted: str | None = Field(default=None, description="the agent whose completion was applied")
    rewards: dict[str, float] = Field(default_factory=dict)
    reward_parts: dict[str, dict[str, Any]] = Field(default_factory=dict)
    awards: list[dict[str, Any]] = Field(default_factory=list)
    info: dict[str, Any] = Field(default_factory=dict)
    returns: dict[str, float] = Field(default_factory=dict)
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    session_id: str | None = Field(
        default=None, description="the HTTP session (HTTP answers only): key /step, /state with it"
    )


class MasState(State):
    """The session's episode: env id, instance, whose turn, totals so far; ``step_count`` is
    the number of steps taken since the reset (each applies one completion)."""

    env_id: str = ""
    instance_id: str = ""
    agent: str | None = None
    turn: int = 0
    success: bool = False
    done: bool = True
    returns: dict[str, float] = Field(default_factory=dict)


# ----------------------------------------------------------------------------------------------
# the server-side environment


def _jsonable(value: Any, depth: int = 0) -> Any:
    """Plain JSON data (numpy scalars and tuples converted; non-finite floats as strings)."""
    if depth > 64:
        return repr(value)[:200]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, depth + 1) for v in value]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return _jsonable(item(), depth + 1)
        except (TypeError, ValueError):
            pass
    return repr(value)[:200]


@dataclass(frozen=True)
class ServeSettings:
    """What every session of a server starts from.

    ``ceilings``: the server's value of every :data:`CEILING_KEYS` option (what a client's value
    is clamped to). ``reward``: what a step result's ``reward`` carries (see :func:`step_reward`).
    """

    env_id: str
    config: dict[str, Any] = field(default_factory=dict)
    allow_reset_config: bool = True
    shared: dict[str, Any] | None = None  # run-wide objects (share_pools=True)
    ceilings: dict[str, Any] = field(default_factory=dict)
    reward: str = "step-sum"

    def __post_init__(self) -> None:
        if self.reward not in REWARD_MODES:
            raise ValueError(f"reward must be one of {REWARD_MODES}, got {self.reward!r}")


def step_reward(mode: str, rewards: Mapping[str, float], acting: str) -> float:
    """The step result's ``reward`` from every role's reward of the step (delayed awards
    included). ``step-sum`` (the default): their sum, so a client that sums ``reward`` over the
    episode gets the team's total return, as generic OpenEnv clients (Prime Intellect's
    ``verifiers``, SkyRL, TRL environment classes) do; ``acting``: the acting role's only;
    ``team``: their mean over the roles.

    >>> r = {"solver": 1.0, "judge": 0.5, "proposer": 0.0}
    >>> step_reward("step-sum", r, "judge"), step_reward("acting", r, "judge")
    (1.5, 0.5)
    >>> step_reward("team", r, "judge")
    0.5
    """
    if mode == "acting":
        return float(rewards.get(acting, 0.0))
    total = float(sum(rewards.values()))
    return total / max(1, len(rewards)) if mode == "team" else total


def clamp_config(
    config: Mapping[str, Any], ceilings: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A client's reset config checked against the allowlist: ``(config, clamped)`` where
    ``clamped`` maps each option lowered to the server's ceiling to the value asked for.

    >>> clamp_config({"memory_mb": 65536, "max_turns": 2, "mode": "single"},
    ...              {"memory_mb": 512, "max_turns": 4})
    ({'memory_mb': 512, 'max_turns': 2, 'mode': 'single'}, {'memory_mb': 65536})
    >>> clamp_config({"dataset": "x"}, {})
    Traceback (most recent call last):
    ...
    adapters.integrations.openenv_sessions.RequestError: config keys ['dataset'] cannot be set at reset ...
    """  # noqa: E501
    refused = sorted(set(config) & SERVER_ONLY_KEYS)
    if refused:
        raise RequestError(
            f"config keys {refused} can only be set when the server starts (--env-config)"
        )
    unknown = sorted(k for k in config if k not in CLIENT_KEYS and k not in CEILING_KEYS)
    if unknown:
        raise RequestError(
            f"config keys {unknown} cannot be set at reset (set them when the server starts); "
            f"a client may set {sorted(CLIENT_KEYS)} and lower {sorted(CEILING_KEYS)}"
        )
    out, clamped = dict(config), {}
    for key, value in config.items():
        if key not in CEILING_KEYS or key not in ceilings:
            continue
        top = ceilings[key]
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            if value != top:
                raise RequestError(f"config {key} must be a number <= {top!r}, got {value!r}")
            continue
        if top is None:
            raise RequestError(f"config {key} cannot be set at reset on this server")
        if value > top:
            out[key], clamped[key] = top, value
    return out, clamped


class MasEnvironment(Environment[MasAction, MasObservation, MasState]):
    """One session: a setting's env, reset and stepped by an OpenEnv client."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, settings: ServeSettings) -> None:
        super().__init__()
        self.settings = settings
        self._env: Any = None
        self._env_config: dict[str, Any] | None = None
        self._returns: dict[str, float] = {}
        self._episode_id: str | None = None
        self._steps = 0  # steps taken since the reset (the state's step_count)

    # -- helpers -----------------------------------------------------------------------------
    @property
    def raw(self) -> Any:
        return None if self._env is None else self._env.unwrapped

    def _build(self, overrides: dict[str, Any]) -> Any:
        import envs

        config = {**self.settings.config, **overrides}
        if self._env is not None and config == self._env_config:
            return self._env
        if self._env is not None:
            self._env.close()
            self._env = None
        shared = self.settings.shared if not overrides and self.settings.shared else {}
        try:
            env = envs.make(self.settings.env_id, **config, **shared)
        except (TypeError, ValueError) as exc:
            raise RequestError(f"invalid env config {config!r}: {exc}") from exc
        self._env, self._env_config = env, config
        return env

    def _flush_dead_steps(self) -> None:
        flush_dead_steps(self.raw)

    def _observation(self, **extra: Any) -> MasObservation:
        raw = self.raw
        live = bool(raw.agents)
        agent = raw.agent_selection if live else None
        return MasObservation(
            env_id=self.settings.env_id,
            agent=agent,
            prompt=raw.observe(agent)["prompt"] if agent is not None else "",
            agents=list(raw.possible_agents),
            turn=int(raw.turn),
            step=int(raw.num_steps),
            instance_id=str(raw.instance_id),
            returns=dict(self._returns),
            success=bool(raw.success),
            done=not live,
            **extra,
        )

    def current(self) -> MasObservation:
        """The current turn without acting: whose turn, its prompt, the returns so far."""
        if self.raw is None or self.raw.instance is None:
            raise RequestError("no episode: call reset() first")
        return self._observation()

    # -- OpenEnv API ---------------------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        split: str | None = None,
        instance: Any = None,
        config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> MasObservation:
        if kwargs:
            raise RequestError(
                f"unknown reset option(s) {sorted(kwargs)}; known: {', '.join(RESET_KEYS)}"
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise RequestError(f"seed must be a non-negative int or null, got {seed!r}")
        if split is not None and split not in ("train", "val", "test"):
            raise RequestError(f"split must be 'train', 'val' or 'test', got {split!r}")
        overrides, clamped = self._check_config(config)
        env = self._build(overrides)
        options: dict[str, Any] = {}
        if split is not None:
            options["split"] = split
        if instance is not None:
            options["instance"] = instance
        try:
            env.unwrapped.reset(seed=seed, options=options)
        except (TypeError, ValueError, KeyError) as exc:
            raise RequestError(f"reset failed: {exc}") from exc
        self._episode_id = episode_id or str(uuid.uuid4())
        self._steps = 0
        self._returns = {a: 0.0 for a in env.unwrapped.possible_agents}
        self._flush_dead_steps()
        info: dict[str, Any] = {"episode_id": self._episode_id}
        if clamped:
            info["clamped"] = {k: _jsonable(v) for k, v in clamped.items()}
        return self._observation(rewards=dict(self._returns), info=info)

    def _check_config(self, config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        if config is None:
            return {}, {}
        if not isinstance(config, dict):
            raise RequestError(f"config must be an object of env options, got {config!r}")
        if config and not self.settings.allow_reset_config:
            raise RequestError("this server does not accept env config at reset")
        return clamp_config(config, self.settings.ceilings)

    def step(
        self, action: MasAction, timeout_s: float | None = None, **kwargs: Any
    ) -> MasObservation:
        raw = self.raw
        if raw is None or raw.instance is None:
            raise RequestError("no episode: call reset() before step()")
        if not raw.agents:
            raise RequestError("the episode is over: call reset() to start a new one")
        if not isinstance(action, MasAction):
            raise RequestError(f"expected a MasAction, got {type(action).__name__}")
        agent = raw.agent_selection
        if action.agent is not None and action.agent != agent:
            raise RequestError(
                f"it is {agent!r}'s turn, not {action.agent!r}: the action was not applied"
            )
        raw.step(action.completion)
        self._steps += 1
        rewards = {a: float(r) for a, r in raw.rewards.items()}
        for a, r in rewards.items():
            self._returns[a] = self._returns.get(a, 0.0) + r
        awards = _jsonable(list(raw.last_awards))
        recipients = [agent] + [w["agent"] for w in raw.last_awards if w["agent"] != agent]
        parts = {a: _jsonable(raw.infos[a].get("reward_parts")) for a in dict.fromkeys(recipients)}
        info = {k: v for k, v in raw.infos[agent].items() if k != "reward_parts"}
        terminated = any(raw.terminations.values())
        truncated = any(raw.truncations.values())
        self._flush_dead_steps()
        return self._observation(
            acted=agent,
            rewards=rewards,
            reward_parts=parts,
            awards=awards,
            info=_jsonable(info),
            terminated=terminated,
            truncated=truncated,
            reward=step_reward(self.settings.reward, rewards, agent),
        )

    @property
    def state(self) -> MasState:
        raw = self.raw
        if raw is None or raw.instance is None:
            return MasState(env_id=self.settings.env_id, episode_id=self._episode_id)
        return MasState(
            env_id=self.settings.env_id,
            episode_id=self._episode_id,
            step_count=self._steps,
            instance_id=str(raw.instance_id),
            agent=raw.agent_selection if raw.agents else None,
            turn=int(raw.turn),
            success=bool(raw.success),
            done=not raw.agents,
            returns=dict(self._returns),
        )

    def get_metadata(self) -> EnvironmentMetadata:
        import envs

        spec = envs.spec(self.settings.env_id)
        return EnvironmentMetadata(
            name=spec.id,
            description=spec.description or spec.id,
            version="0",
            documentation_url=f"{spec.entry_point.partition(':')[0].replace('.', '/')}.py "
            "(module docstring)",
        )

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


# ----------------------------------------------------------------------------------------------
# the app and the server


DEFAULT_SESSION_TIMEOUT_S = 600.0


def create_app(
    env_id: str,
    config: dict[str, Any] | None = None,
    *,
    max_sessions: int = 64,
    max_http_sessions: int | None = None,
    session_timeout_s: float | None = DEFAULT_SESSION_TIMEOUT_S,
    http_session_timeout_s: float | None = DEFAULT_HTTP_SESSION_TIMEOUT_S,
    max_sessions_per_client: int | None = None,
    allow_reset_config: bool = True,
    share_pools: bool = False,
    reward: str = "step-sum",
    session_cls: Callable[[ServeSettings], Environment] = MasEnvironment,
    action_cls: type[MasAction] = MasAction,
) -> Any:
    """The ASGI app of the server for ``env_id`` (config checked now): openenv's server with
    HTTP sessions (:class:`~adapters.integrations.openenv_sessions.SessionServer`).

    ``session_cls`` and ``action_cls``: what each session is and the action type it takes
    (:func:`adapters.integrations.openenv_mcp.create_mcp_app` passes its MCP ones).

    ``max_sessions`` WebSocket sessions at once, whatever HTTP clients do; ``max_http_sessions``
    (default a quarter of ``max_sessions``, at least 1) HTTP sessions (``POST /reset``, MCP
    ``openenv/session/create``) besides the default one, a new one beyond that refused with 429
    and ``Retry-After`` (none in use is ended for it); ``max_sessions_per_client`` (None: no cap
    but the quota) HTTP sessions for each client that names itself with ``X-Client-Id``;
    ``http_session_timeout_s`` closes HTTP sessions idle that long, ``session_timeout_s`` any
    session (None: never).
    """
    import dataclasses

    from fastapi import FastAPI
    from openenv.core.env_server.types import ConcurrencyConfig

    import envs

    canonical = envs.spec(env_id).id
    config = dict(config or {})
    probe = envs.make(canonical, **config)  # a bad server config fails here, not per session
    shared = type(probe.unwrapped).create_shared(**config) if share_pools else None
    server_config = probe.unwrapped.config
    ceilings = {
        f.name: getattr(server_config, f.name)
        for f in dataclasses.fields(server_config)
        if f.name in CEILING_KEYS
    }
    probe.close()
    settings = ServeSettings(
        canonical, config, allow_reset_config, shared or None, ceilings, reward
    )
    factory = functools.partial(session_cls, settings)
    app = FastAPI(title=f"mas-rl-envs: {canonical} (OpenEnv)")
    server = SessionServer(
        factory,
        action_cls,
        MasObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=max_sessions, session_timeout=session_timeout_s
        ),
        state_cls=MasState,
        max_http_sessions=max_http_sessions,
        http_session_timeout_s=http_session_timeout_s,
        max_sessions_per_client=max_sessions_per_client,
    )
    server.register_routes(app)
    app.state.env_factory = factory  # what each session is made with
    app.state.env_server = server
    _install_error_handlers(app)
    return HttpOrigin(app, server)


def _install_error_handlers(app: Any) -> None:
    from fastapi import Request
    from fastapi.responses import JSONResponse

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    async def internal(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            status_code=500, content={"detail": f"{type(exc).__name__}: {str(exc)[:500]}"}
        )

    app.add_exception_handler(RequestError, bad_request)
    app.add_exception_handler(Exception, internal)


# ----------------------------------------------------------------------------------------------
# the client


class MasEnvClient(EnvClient[MasAction, MasObservation, MasState]):
    """openenv-core's WebSocket client for a served setting (async; ``.sync()`` for blocking).

    ``step`` also accepts the completion as a plain string, or the action as a plain dict.
    """

    def _step_payload(self, action: MasAction | str | dict[str, Any]) -> dict[str, Any]:
        if isinstance(action, str):
            action = MasAction(completion=action)
        if isinstance(action, dict):
            return dict(action)
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[MasObservation]:
        obs = MasObservation(
            **payload.get("observation", {}),
            reward=payload.get("reward"),
            done=bool(payload.get("done", False)),
        )
        return StepResult(observation=obs, reward=payload.get("reward"), done=obs.done)

    def _parse_state(self, payload: dict[str, Any]) -> MasState:
        return MasState(**payload)
