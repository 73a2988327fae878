"""MCP mode of the OpenEnv server: the acting role's turn as the tool ``answer(completion)``.

``python -m adapters.serve_env --env math --mcp`` serves each session as an OpenEnv
:class:`~openenv.core.env_server.mcp_environment.MCPEnvironment` (openenv's base class for
tool-calling environments, RFC 003) whose FastMCP server has two tools (in a program:
:func:`create_mcp_app`, which takes :func:`~adapters.integrations.openenv.create_app`'s options):

* ``answer(completion, agent=None)``: submits ``completion`` as the acting role's turn (``agent``,
  when given, must name that role) and returns the step result as a JSON object,
  ``{"observation": {...}, "reward": r, "done": d}``: exactly what ``/step`` answers without MCP
  (:class:`~adapters.integrations.openenv.MasObservation`'s fields: the next acting role and its
  prompt, every role's rewards, reward parts, awards, returns, success), and ``reward`` as chosen
  by ``--reward`` (default: the step's sum over roles, so summing it over an episode gives the
  team's return). A completion sent as any JSON value is scored as its text.
* ``observe()``: the current turn (whose turn, its prompt, returns so far, ``done``) without
  acting, for a client that lost the last result.

``reset``, ``step``, ``state`` and ``close`` are names OpenEnv reserves for the control plane, so
starting an episode is not a tool: the client resets over the WebSocket (or ``POST /reset``) with
the same options as without MCP (``seed``, ``split``, ``instance``, ``config``, ``episode_id``).
That is openenv's own client flow (:class:`~openenv.core.mcp_client.MCPToolClient`, production
mode: it opens an HTTP MCP session with ``openenv/session/create``, attaches its WebSocket to it
for ``reset``, and calls tools over ``POST /mcp``)::

    from openenv.core.mcp_client import MCPToolClient

    with MCPToolClient(base_url="http://127.0.0.1:8000").sync() as env:
        prompt = env.reset(seed=0, split="val").observation.prompt
        while True:
            result = env.call_tool("answer", completion=my_llm(prompt))
            if result["done"]:                    # result["reward"]: the step's reward
                break
            prompt = result["observation"]["prompt"]  # the next acting role's

The other ways in, all on one server: ``tools/list`` and ``tools/call`` over ``POST /mcp`` with
``params.session_id`` (an HTTP session from ``POST /reset`` or ``openenv/session/create``), or
over the ``/mcp`` WebSocket (a session of its own, which cannot be reset: use the others);
OpenEnv's simulation-mode pattern ``step(CallToolAction(tool_name="answer", arguments={...}))``
over ``/ws`` (e.g. :class:`~openenv.core.GenericEnvClient` with ``{"type": "call_tool", ...}``),
whose observation then carries the step's ``reward`` and ``done`` as well as the tool's result;
and the plain ``{"completion": ...}`` step of the server without MCP, unchanged
(:class:`~adapters.integrations.openenv.MasEnvClient` works against an MCP server too).

A bad completion is scored, never an error; a bad call (no episode yet, the episode is over, the
wrong ``agent``) is a tool error with the same message as without MCP. A session's calls are
taken one at a time. A step through ``step(CallToolAction)`` that outlasts
:data:`STEP_TIMEOUT_S` (openenv's default of 30 s, raised here) answers with a timeout error,
but the step still completes in the background and changes the episode. Costs: each session also
holds a FastMCP server and its in-memory client session (started with the session). Tested
against openenv 0.10.0 (``tests/integrations/test_openenv_mcp.py``).
"""

from __future__ import annotations

import threading
from typing import Annotated, Any

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
)
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation
from pydantic import BeforeValidator, Field

from adapters.integrations.openenv import (
    MasAction,
    MasEnvironment,
    MasObservation,
    MasState,
    RequestError,
    ServeSettings,
    completion_text,
    create_app,
)

__all__ = ["STEP_TIMEOUT_S", "TOOLS", "MasToolAction", "MasToolEnvironment", "create_mcp_app"]

STEP_TIMEOUT_S = 600.0
"""How long ``step(CallToolAction(...))`` waits for a tool (openenv's own default is 30 s)."""
TOOLS = ("answer", "observe")
_MCP_ACTIONS: dict[str, type[Action]] = {"call_tool": CallToolAction, "list_tools": ListToolsAction}

Completion = Annotated[
    str,
    BeforeValidator(completion_text),
    Field(description="the acting role's complete answer (raw text)"),
]


class MasToolAction(MasAction):
    """The action type of an MCP server: a :class:`MasAction` (``{"completion": ...}``), or one of
    OpenEnv's MCP actions, told apart by their ``type`` (``{"type": "call_tool", "tool_name":
    ..., "arguments": {...}}`` or ``{"type": "list_tools"}``), so that both the plain step and
    OpenEnv's simulation-mode tool calls reach the session over ``/ws``."""

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        kind = obj.get("type") if isinstance(obj, dict) else None
        if isinstance(kind, str) and kind in _MCP_ACTIONS:
            return _MCP_ACTIONS[kind].model_validate(obj, *args, **kwargs)
        return super().model_validate(obj, *args, **kwargs)


class MasToolEnvironment(MCPEnvironment):
    """One session of an MCP server: a :class:`MasEnvironment` (``self.game``) with the tools
    ``answer`` and ``observe`` on a FastMCP server of its own."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, settings: ServeSettings) -> None:
        self.game = MasEnvironment(settings)
        self._lock = threading.Lock()  # tools run in FastMCP's threads, reset in the session's
        mcp = FastMCP(f"mas-rl-envs {settings.env_id}")

        @mcp.tool(name="answer")
        def answer(completion: Completion, agent: str | None = None) -> dict[str, Any]:
            """Submit your complete answer as the acting role's turn. Returns the next acting
            role and its prompt (observation.agent, observation.prompt), this step's reward and
            whether the episode is done."""
            with self._lock:
                return _result(self.game.step(MasAction(completion=completion, agent=agent)))

        @mcp.tool(name="observe")
        def observe() -> dict[str, Any]:
            """The current turn without acting: the acting role, its prompt, returns so far."""
            with self._lock:
                return _result(self.game.current())

        super().__init__(mcp)

    @property
    def raw(self) -> Any:
        return self.game.raw

    @property
    def settings(self) -> ServeSettings:
        return self.game.settings

    def reset(self, **kwargs: Any) -> MasObservation:  # the options of MasEnvironment.reset
        with self._lock:
            return self.game.reset(**kwargs)

    def _step_impl(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        if not isinstance(action, MasAction):
            raise RequestError(f"expected a MasAction or an MCP action, got {type(action)}")
        with self._lock:
            return self.game.step(action)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        obs = super().step(action, timeout_s=timeout_s or STEP_TIMEOUT_S, **kwargs)
        return _scored(obs)

    async def step_async(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        obs = await super().step_async(action, timeout_s=timeout_s or STEP_TIMEOUT_S, **kwargs)
        return _scored(obs)

    @property
    def state(self) -> MasState:
        return self.game.state

    def get_metadata(self) -> EnvironmentMetadata:
        return self.game.get_metadata()

    def close(self) -> None:
        self.game.close()
        super().close()


def create_mcp_app(env_id: str, config: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """:func:`~adapters.integrations.openenv.create_app` (same options) with MCP sessions."""
    return create_app(
        env_id, config, session_cls=MasToolEnvironment, action_cls=MasToolAction, **kwargs
    )


def _result(obs: MasObservation) -> dict[str, Any]:
    from openenv.core.env_server.serialization import serialize_observation

    return serialize_observation(obs)


def _scored(obs: Observation) -> Observation:
    """An ``answer`` call's observation with the step's ``reward`` and ``done`` (OpenEnv's
    simulation-mode contract: rewards travel with the step that earned them)."""
    if isinstance(obs, CallToolObservation) and obs.tool_name == "answer" and obs.error is None:
        result = getattr(obs.result, "structured_content", None)
        if isinstance(result, dict) and "done" in result:
            obs.reward, obs.done = result.get("reward"), bool(result["done"])
    return obs
