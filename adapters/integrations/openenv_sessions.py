"""OpenEnv's plain-HTTP simulation flow on a server whose episodes live in sessions.

openenv's own :class:`~openenv.core.env_server.http_server.HTTPEnvServer` answers ``POST
/reset``, ``POST /step`` and ``GET /state`` statelessly: each request builds a fresh env, so a
``/step`` never continues a ``/reset``. :class:`SessionServer` is that server with stateful HTTP
(everything else, ``/ws``, ``/mcp``, ``/health``, ``/schema``, ``/metadata``, is openenv's):

* **Requests without a session id act on the server's default HTTP session.** ``POST /reset``
  resets it in place (creating it when there is none), ``POST /step`` steps it (creating it
  first when there is none, as openenv's fresh env would be), ``GET /state`` reads its state
  (``step_count``, the steps since the reset, and ``episode_id``; with no default session, a
  fresh env's state, as openenv answers), ``POST /close`` ends it. This is the flow of OpenEnv's
  simulation-mode tests (``tests/integrations/peers/openenv``), for one client at a time.
* **Session-keyed requests** are for concurrent HTTP clients: ``POST /reset`` with
  ``"new_session": true`` starts a session of its own (``"session_id": ID`` resets an existing
  one); every answer carries ``session_id`` (top level, and in the observation where its model
  has the field), which ``/step`` (body), ``/state`` (query) and ``/close`` (body) take. MCP's
  ``openenv/session/create`` over ``POST /mcp`` makes one too.
* **Accounting:** HTTP sessions are counted apart from WebSocket ones. WebSocket clients get
  ``max_concurrent_envs`` sessions whatever HTTP clients do; HTTP sessions are at most
  ``max_http_sessions`` (default a quarter of that, at least 1), and a new one beyond that
  evicts the least recently used HTTP session instead of being refused (a session in the middle
  of a request, or with a WebSocket attached, is never evicted). HTTP sessions idle longer than
  ``http_session_timeout_s`` (default :data:`DEFAULT_HTTP_SESSION_TIMEOUT_S`, 120 s; None:
  never) are closed; WebSocket sessions keep openenv's ``session_timeout``.

Errors: an unknown or evicted session id, a malformed body, a bad reset option are answered 400
with ``{"detail": ...}``; an action the action model rejects is 422 with the validation errors,
as openenv answers. :class:`SessionServer` takes ``HTTPEnvServer``'s arguments and works with
any OpenEnv ``Environment`` (it runs OpenEnv's own tests unchanged); the settings' server is
:func:`adapters.integrations.openenv.create_app`.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import time
from collections import Counter
from typing import Any

from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.types import ConcurrencyConfig, ServerMode, State

__all__ = [
    "DEFAULT_HTTP_SESSION_TIMEOUT_S",
    "HttpOrigin",
    "RequestError",
    "SessionServer",
]

DEFAULT_HTTP_SESSION_TIMEOUT_S = 120.0
_KIND: contextvars.ContextVar[str] = contextvars.ContextVar("mas_session_kind", default="ws")
_MAX_EVICTIONS = 16


class RequestError(ValueError):
    """A request the server cannot honour (sent back to the client as a clear error)."""


class SessionServer(HTTPEnvServer):
    """openenv's server with HTTP sessions (see the module docstring)."""

    def __init__(
        self,
        env: Any,
        action_cls: Any,
        observation_cls: Any,
        max_concurrent_envs: int | None = None,
        concurrency_config: ConcurrencyConfig | None = None,
        env_name: str | None = None,
        state_cls: type[State] = State,
        *,
        reset_observation_cls: Any = None,
        max_http_sessions: int | None = None,
        http_session_timeout_s: float | None = DEFAULT_HTTP_SESSION_TIMEOUT_S,
    ) -> None:
        if max_concurrent_envs is not None and concurrency_config is not None:
            raise ValueError("give max_concurrent_envs or concurrency_config, not both")
        config = concurrency_config or ConcurrencyConfig(
            max_concurrent_envs=max_concurrent_envs or 1, session_timeout=None
        )
        self.ws_capacity = config.max_concurrent_envs
        self.http_quota = max_http_sessions or max(1, self.ws_capacity // 4)
        if self.http_quota < 1:
            raise ValueError("max_http_sessions must be at least 1")
        if http_session_timeout_s is not None and not http_session_timeout_s > 0:
            raise ValueError("http_session_timeout_s must be positive (None: never)")
        self.http_session_timeout_s = http_session_timeout_s
        self._kinds: dict[str, str] = {}  # session id -> "ws" | "http"
        self._reserved: Counter[str] = Counter()  # creations under way, by kind
        self._busy: Counter[str] = Counter()  # HTTP requests in progress, by session
        self.default_session: str | None = None
        self._http_reaper: asyncio.Task[None] | None = None
        super().__init__(
            env,
            action_cls,
            observation_cls,
            concurrency_config=ConcurrencyConfig(
                max_concurrent_envs=self.ws_capacity + self.http_quota,
                session_timeout=config.session_timeout,
            ),
            env_name=env_name,
            state_cls=state_cls,
            reset_observation_cls=reset_observation_cls,
        )

    # -- accounting ------------------------------------------------------------------------------
    def sessions_of(self, kind: str) -> list[str]:
        """The live (or starting) sessions of ``kind`` ("ws" or "http")."""
        for sid in [s for s in self._kinds if s not in self._sessions]:
            del self._kinds[sid]  # closed by a path that bypasses _destroy_session
        return [s for s, k in self._kinds.items() if k == kind]

    async def _create_session(self) -> tuple[str, Any]:
        kind = _KIND.get()
        cap = self.http_quota if kind == "http" else self.ws_capacity
        active = len(self.sessions_of(kind)) + self._reserved[kind]
        if active >= cap:  # checked and reserved in one step of the event loop
            raise SessionCapacityError(active_sessions=active, max_sessions=cap)
        self._reserved[kind] += 1
        try:
            sid, env = await super()._create_session()
        finally:
            self._reserved[kind] -= 1
        self._kinds[sid] = kind
        return sid, env

    async def _destroy_session(self, session_id: str) -> None:
        self._kinds.pop(session_id, None)
        if session_id == self.default_session:
            self.default_session = None
        await super()._destroy_session(session_id)

    def _evictable(self) -> list[str]:
        """HTTP sessions that may be evicted, least recently used first."""
        attached = self._session_websocket_attachments
        candidates = [
            s
            for s in self.sessions_of("http")
            if s in self._session_info and not self._busy[s] and s not in attached
        ]
        return sorted(candidates, key=lambda s: self._session_info[s].last_activity_at)

    async def close_idle_http_sessions(self) -> None:
        """Close the HTTP sessions idle longer than ``http_session_timeout_s``."""
        if self.http_session_timeout_s is None:
            return
        horizon = time.time() - self.http_session_timeout_s
        for sid in self._evictable():
            if self._session_info[sid].last_activity_at < horizon:
                await self._destroy_session(sid)

    async def make_http_room(self) -> None:
        """Close idle HTTP sessions, then the least recently used ones while at the quota."""
        await self.close_idle_http_sessions()
        while len(self.sessions_of("http")) + self._reserved["http"] >= self.http_quota:
            victims = self._evictable()
            if not victims:
                raise RequestError(
                    f"all {self.http_quota} HTTP sessions of this server are in use: retry "
                    "shortly, or play over the WebSocket (/ws)"
                )
            await self._destroy_session(victims[0])

    async def new_http_session(self) -> tuple[str, Any]:
        """A new HTTP session, evicting the least recently used one at the quota."""
        token = _KIND.set("http")
        try:
            for _ in range(_MAX_EVICTIONS):
                await self.make_http_room()
                try:
                    return await self._create_session()
                except SessionCapacityError:
                    continue  # another request took the freed slot first
            raise RequestError("could not start an HTTP session: retry shortly")
        finally:
            _KIND.reset(token)

    def http_session(self, sid: Any) -> Any:
        """The env of the live HTTP session ``sid`` (a clear error for anything else)."""
        if not isinstance(sid, str) or sid not in self.sessions_of("http"):
            closed = f"the {self.http_quota} least recently used are kept"
            if self.http_session_timeout_s is not None:
                closed += f", and those idle {self.http_session_timeout_s:g} s are closed"
            raise RequestError(
                f"unknown session_id {sid!r}: start a session with POST /reset (the default "
                f'one, or {{"new_session": true}} for one of your own); of the HTTP sessions, '
                + closed
            )
        env = self._sessions.get(sid)
        if env is None:
            raise RequestError(f"session {sid} is still starting: retry shortly")
        self._update_session_activity(sid)
        return env

    async def default_http_session(self) -> tuple[str, Any]:
        """The default HTTP session, made when there is none."""
        sid = self.default_session
        if sid is not None and sid in self.sessions_of("http"):
            return sid, self.http_session(sid)
        sid, env = await self.new_http_session()
        self.default_session = sid
        return sid, env

    # -- running a session's env -----------------------------------------------------------------
    async def call(self, sid: str, env: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        """``env.reset`` / ``env.step`` as openenv runs them: the async variant if the env
        overrides it, else the sync one in the session's executor; unknown keyword arguments
        dropped unless the method takes ``**kwargs``."""
        from openenv.core.env_server._utils import overrides_method
        from openenv.core.env_server.interfaces import Environment

        is_async = overrides_method(
            getattr(env, f"{method}_async"), getattr(Environment, f"{method}_async")
        )
        fn = getattr(env, f"{method}_async" if is_async else method)
        skip = {"action"} if method == "step" else set()
        kwargs = self._get_valid_kwargs(inspect.signature(fn), kwargs, skip_params=skip)
        self._busy[sid] += 1
        try:
            if is_async:
                return await fn(*args, **kwargs)
            return await self._run_in_session_executor(sid, fn, *args, **kwargs)
        finally:
            self._busy[sid] -= 1
            if not self._busy[sid]:
                del self._busy[sid]

    # -- routes -----------------------------------------------------------------------------------
    def register_routes(self, app: Any, mode: ServerMode | str = ServerMode.SIMULATION) -> None:
        """openenv's routes, with session-aware ``/reset`` ``/step`` ``/state`` and ``/close``
        in simulation mode, and the HTTP sessions' idle reaper."""
        super().register_routes(app, mode)
        app.router.on_startup.append(self._start_http_reaper)
        app.router.on_shutdown.append(self._stop_http_reaper)
        if ServerMode(mode.lower() if isinstance(mode, str) else mode) is ServerMode.SIMULATION:
            _session_routes(app, self)

    async def _start_http_reaper(self) -> None:
        timeout = self.http_session_timeout_s
        if timeout is None or self._http_reaper is not None:
            return

        async def reap() -> None:
            while True:
                await asyncio.sleep(max(1.0, min(timeout / 4, 5.0)))
                await self.close_idle_http_sessions()

        self._http_reaper = asyncio.create_task(reap())

    async def _stop_http_reaper(self) -> None:
        if self._http_reaper is not None:
            self._http_reaper.cancel()
            self._http_reaper = None


def _session_routes(app: Any, server: SessionServer) -> None:
    """Replace openenv's stateless ``/reset`` ``/step`` ``/state`` and add ``/close``."""
    from openenv.core.env_server.serialization import deserialize_action, serialize_observation
    from pydantic import ValidationError
    from starlette.responses import JSONResponse

    replaced = {"/reset", "/step", "/state", "/close"}
    app.router.routes[:] = [
        r for r in app.router.routes if getattr(r, "path", None) not in replaced
    ]

    async def body_of(request: Any) -> dict[str, Any]:
        raw = await request.body()
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise RequestError(f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object")
        return body

    def answer(sid: str, obs: Any) -> JSONResponse:
        if "session_id" in type(obs).model_fields:
            obs.session_id = sid
        return JSONResponse({**serialize_observation(obs), "session_id": sid})

    def guarded(handler: Any) -> Any:
        async def route(request: Any) -> JSONResponse:
            try:
                return await handler(request)
            except RequestError as exc:
                return JSONResponse(status_code=400, content={"detail": str(exc)})

        return route

    async def reset(request: Any) -> JSONResponse:
        body = await body_of(request)
        sid, new = body.pop("session_id", None), body.pop("new_session", False)
        if not isinstance(new, bool):
            raise RequestError(f"new_session must be true or false, got {new!r}")
        if new and sid is not None:
            raise RequestError("send session_id (reset that session) or new_session, not both")
        if new:
            sid, env = await server.new_http_session()
        elif sid is None:
            sid, env = await server.default_http_session()
        else:
            env = server.http_session(sid)
        return answer(sid, await server.call(sid, env, "reset", **body))

    async def step(request: Any) -> JSONResponse:
        body = await body_of(request)
        data = body.pop("action", None)
        if not isinstance(data, dict):
            raise RequestError('the step body must be {"action": {...}} (and "session_id")')
        try:
            action = deserialize_action(data, server.action_cls)
        except ValidationError as exc:
            errors = json.loads(exc.json(include_url=False))
            return JSONResponse(status_code=422, content={"detail": errors})
        sid = body.pop("session_id", None)
        if sid is None:
            sid, env = await server.default_http_session()
        else:
            env = server.http_session(sid)
        obs = await server.call(sid, env, "step", action, **body)
        server._update_session_activity(sid, increment_step=True)
        return answer(sid, obs)

    async def state(request: Any) -> JSONResponse:
        sid = request.query_params.get("session_id")
        if sid is None and server.default_session in server.sessions_of("http"):
            sid = server.default_session
        if sid is None:  # no session: a fresh env's state, as openenv answers
            env = server._env_factory()
            try:
                return JSONResponse(_dump(env.state))
            finally:
                env.close()
        env = server.http_session(sid)
        return JSONResponse(_dump(await server._run_in_session_executor(sid, lambda: env.state)))

    async def close(request: Any) -> JSONResponse:
        sid = (await body_of(request)).get("session_id", server.default_session)
        server.http_session(sid)  # a live HTTP session's id, or a clear error
        await server._destroy_session(str(sid))
        return JSONResponse({"session_id": sid, "closed": True})

    app.add_route("/reset", guarded(reset), methods=["POST"])
    app.add_route("/step", guarded(step), methods=["POST"])
    app.add_route("/state", guarded(state), methods=["GET"])
    app.add_route("/close", guarded(close), methods=["POST"])


def _dump(state: Any) -> Any:
    return state.model_dump() if hasattr(state, "model_dump") else state


class HttpOrigin:
    """ASGI wrapper: MCP's ``openenv/session/create`` over ``POST /mcp`` makes an HTTP session
    (evicting the least recently used one at the quota), and ``openenv/session/close`` over HTTP
    may close only HTTP sessions (a WebSocket client's session is its own)."""

    def __init__(self, app: Any, server: SessionServer) -> None:
        self.app, self.server = app, server
        self.state = app.state  # callers reach the FastAPI app's state

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") != "/mcp" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        request = _json_object(body)
        method = request.get("method")
        error = await self._refusal(method, request.get("params"))
        if error is not None:
            payload = {"jsonrpc": "2.0", "id": request.get("id"), "error": error}
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": json.dumps(payload).encode()})
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        token = _KIND.set("http" if method == "openenv/session/create" else "ws")
        try:
            await self.app(scope, replay, send)
        finally:
            _KIND.reset(token)

    async def _refusal(self, method: Any, params: Any) -> dict[str, Any] | None:
        """The JSON-RPC error for a session request HTTP may not make (None: pass it on)."""
        message = None
        if method == "openenv/session/close":
            sid = params.get("session_id") if isinstance(params, dict) else None
            if sid not in self.server.sessions_of("http"):
                message = f"unknown HTTP session_id {sid!r}"
        elif method == "openenv/session/create":
            try:
                await self.server.make_http_room()
            except RequestError as exc:
                message = str(exc)
        return None if message is None else {"code": -32000, "message": message}


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        request = json.loads(body)
    except ValueError:
        return {}
    return request if isinstance(request, dict) else {}
