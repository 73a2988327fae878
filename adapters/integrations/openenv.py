"""Any setting as an `OpenEnv <https://github.com/meta-pytorch/OpenEnv>`_ environment server.

OpenEnv (PyPI ``openenv-core``) is the HTTP/WebSocket protocol TRL's ``GRPOTrainer``, SkyRL and
Prime Intellect's ``verifiers`` speak to environments that live in another process. Serving a
setting over it is also how a user combines this suite with a library whose top-level package
name clashes with ours (``verifiers``, ``adapters``: see the README's installation notes)::

    python -m adapters.serve_env --env sokoban --port 8000 --set num_boxes=2

The server is openenv-core's own (:func:`openenv.core.env_server.create_fastapi_app`, FastAPI +
uvicorn): ``/ws`` holds one session per WebSocket connection (one env instance each, isolated
from the others, up to ``max_sessions`` at once), ``/reset`` ``/step`` ``/state`` are OpenEnv's
stateless HTTP endpoints, plus ``/health``, ``/schema``, ``/metadata`` and ``/docs``. The client
is a subclass of openenv-core's :class:`~openenv.core.EnvClient`::

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
server's env config for this session (``{"max_turns": 2, "mode": "single"}``; keys that make the
server read files, such as ``data_path``, are refused: set them when starting the server).
Unknown keys are refused with the list of known ones.

``step(MasAction(completion, agent=None))``: the completion of the agent that acts now (``agent``,
when given, must name it: a guard against a client that lost track). Dead steps (agents that are
done) are taken by the server, so every observation is either a live agent's turn or the end.

:class:`MasObservation`: ``agent`` (who acts next, ``None`` at the end), ``prompt`` (its
observation), ``agents`` (every role), ``turn``, ``step``, ``instance_id``; after a step also
``acted`` (whose completion was applied), ``rewards`` (every role's reward for this step,
``env.rewards``, delayed awards included), ``reward_parts`` (role -> the ``reward_parts`` dict
this step wrote to ``infos``: the acting role's and those of roles that received a delayed award),
``awards`` (``env.last_awards``), ``info`` (the acting role's other step info), ``returns``
(each role's total so far), ``success``, ``terminated``, ``truncated``. The step result's
``reward`` is the acting role's reward. These travel as observation fields because OpenEnv's
wire format drops ``Observation.metadata``.

Errors: a bad request (step before reset or after the end, wrong agent, unknown option, invalid
instance or config) gets a clear message: on the WebSocket an OpenEnv error frame
(``EXECUTION_ERROR``/``VALIDATION_ERROR``, which the client raises as ``RuntimeError``), over
HTTP status 400 (422 for a malformed body) with ``{"detail": ...}``; never a traceback. A bad
*completion* is not an error: the setting scores it as a format failure, as in-process.

Pools: MAE/SAGE question pools (``create_shared``) belong to each session by default, so
sessions never see each other's questions; ``share_pools=True`` gives every session started
with the server's config one run-wide pool, as a trainer would use.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

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
RESET_KEYS = ("seed", "split", "instance", "config", "episode_id")


class RequestError(ValueError):
    """A request the server cannot honour (sent back to the client as a clear error)."""


# ----------------------------------------------------------------------------------------------
# wire types


class MasAction(Action):
    """The completion of the agent that acts now."""

    completion: str = Field(description="the acting agent's completion (raw text)")
    agent: str | None = Field(
        default=None, description="the agent the client believes acts now (checked if given)"
    )


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


class MasState(State):
    """The session's episode: env id, instance, whose turn, totals so far."""

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
    """What every session of a server starts from."""

    env_id: str
    config: dict[str, Any] = field(default_factory=dict)
    allow_reset_config: bool = True
    shared: dict[str, Any] | None = None  # run-wide objects (share_pools=True)


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
        overrides = self._check_config(config)
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
        self._episode_id = episode_id
        self._returns = {a: 0.0 for a in env.unwrapped.possible_agents}
        self._flush_dead_steps()
        return self._observation(rewards=dict(self._returns))

    def _check_config(self, config: Any) -> dict[str, Any]:
        if config is None:
            return {}
        if not isinstance(config, dict):
            raise RequestError(f"config must be an object of env options, got {config!r}")
        if config and not self.settings.allow_reset_config:
            raise RequestError("this server does not accept env config at reset")
        refused = sorted(set(config) & SERVER_ONLY_KEYS)
        if refused:
            raise RequestError(
                f"config keys {refused} can only be set when the server starts (--set KEY=VALUE)"
            )
        return dict(config)

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
            reward=rewards.get(agent, 0.0),
        )

    @property
    def state(self) -> MasState:
        raw = self.raw
        if raw is None or raw.instance is None:
            return MasState(env_id=self.settings.env_id, episode_id=self._episode_id)
        return MasState(
            env_id=self.settings.env_id,
            episode_id=self._episode_id,
            step_count=int(raw.num_steps),
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


def create_app(
    env_id: str,
    config: dict[str, Any] | None = None,
    *,
    max_sessions: int = 64,
    session_timeout_s: float | None = None,
    allow_reset_config: bool = True,
    share_pools: bool = False,
) -> Any:
    """The FastAPI app of openenv-core's server for ``env_id`` (config checked now)."""
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.types import ConcurrencyConfig

    import envs

    canonical = envs.spec(env_id).id
    config = dict(config or {})
    probe = envs.make(canonical, **config)  # a bad server config fails here, not per session
    shared = type(probe.unwrapped).create_shared(**config) if share_pools else None
    probe.close()
    settings = ServeSettings(canonical, config, allow_reset_config, shared or None)
    factory = functools.partial(MasEnvironment, settings)
    app = create_fastapi_app(
        factory,
        MasAction,
        MasObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=max_sessions, session_timeout=session_timeout_s
        ),
    )
    app.title = f"mas-rl-envs: {canonical} (OpenEnv)"
    app.state.env_factory = factory  # what each session is made with

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    async def internal(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            status_code=500, content={"detail": f"{type(exc).__name__}: {str(exc)[:500]}"}
        )

    app.add_exception_handler(RequestError, bad_request)
    app.add_exception_handler(Exception, internal)
    return app


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
