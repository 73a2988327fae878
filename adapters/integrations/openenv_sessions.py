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
  ``max_http_sessions`` (default a quarter of that, at least 1), plus the default session, which
  has a slot of its own. HTTP sessions idle longer than ``http_session_timeout_s`` (default
  :data:`DEFAULT_HTTP_SESSION_TIMEOUT_S`, 120 s; None: never) are closed; WebSocket sessions
  keep openenv's ``session_timeout``. **A session is never ended to make room for another:** at
  the quota a new one (``"new_session": true``, MCP's ``openenv/session/create``) is refused with
  status 429, a ``Retry-After`` header (the seconds until the HTTP session idle longest would be
  closed, at least 1; 60 when sessions never expire) and ``{"detail": ..., "retry_after": N}``,
  so a client that makes sessions in a loop cannot end another client's episode, the default
  session's included.
* **Per-client shares (optional):** a client may name itself with the ``X-Client-Id`` header
  (at most 128 printable ASCII characters) on the request that makes a session. With
  ``max_sessions_per_client`` set, each named client holds at most that many HTTP sessions
  (beyond them: 429 as above, the ``Retry-After`` of its own sessions); clients that send no
  name share the rest of the quota, and the default session counts for nobody. The name is the
  client's word, not an identity: it keeps a well-behaved trainer from taking every slot, while a
  hostile holder of the token can only fill the quota, never end a session.

Errors: an unknown or expired session id, a malformed body, a bad reset option are answered 400
with ``{"detail": ...}``; an action the action model rejects is 422 with the validation errors,
as openenv answers; a new HTTP session at the quota is 429 (above). :class:`SessionServer` takes
``HTTPEnvServer``'s arguments and works with any OpenEnv ``Environment`` (it runs OpenEnv's own
tests unchanged); the settings' server is :func:`adapters.integrations.openenv.create_app`.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import math
import time
from collections import Counter
from typing import Any

from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.types import ConcurrencyConfig, ServerMode, State

__all__ = [
    "CLIENT_ID_HEADER",
    "DEFAULT_HTTP_SESSION_TIMEOUT_S",
    "HttpOrigin",
    "RequestError",
    "SessionServer",
    "SessionsFull",
]

DEFAULT_HTTP_SESSION_TIMEOUT_S = 120.0
CLIENT_ID_HEADER = "X-Client-Id"
"""The header a client names itself with, for its share of the HTTP sessions."""
MAX_CLIENT_ID_CHARS = 128
NO_EXPIRY_RETRY_S = 60
"""The ``Retry-After`` of a refusal on a server whose HTTP sessions never expire."""
_KIND: contextvars.ContextVar[str] = contextvars.ContextVar("mas_session_kind", default="ws")
_CLIENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "mas_http_client", default=None
)
_DEFAULT: contextvars.ContextVar[bool] = contextvars.ContextVar("mas_default", default=False)


class RequestError(ValueError):
    """A request the server cannot honour (sent back to the client as a clear error)."""


class SessionsFull(SessionCapacityError):
    """A new HTTP session refused: the quota (or the client's share) is taken by sessions in
    use. Answered 429 with ``Retry-After: retry_after``; a :class:`SessionCapacityError`, so
    openenv's own ``openenv/session/create`` handler answers it as a capacity error too."""

    def __init__(self, message: str, active: int, cap: int, retry_after: int) -> None:
        super().__init__(active_sessions=active, max_sessions=cap, message=message)
        self.retry_after = retry_after


def client_id(value: str | None) -> str | None:
    """A client's name from its ``X-Client-Id`` header (None: anonymous).

    >>> client_id(None), client_id("  "), client_id(" trainer-7 ")
    (None, None, 'trainer-7')
    >>> client_id("a\\nb")
    Traceback (most recent call last):
    ...
    adapters.integrations.openenv_sessions.RequestError: X-Client-Id must be ...
    """
    if value is None or not value.strip():
        return None
    name = value.strip()
    if len(name) > MAX_CLIENT_ID_CHARS or not (name.isascii() and name.isprintable()):
        raise RequestError(
            f"{CLIENT_ID_HEADER} must be at most {MAX_CLIENT_ID_CHARS} printable ASCII "
            f"characters, got {value[:40]!r}"
        )
    return name


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
        max_sessions_per_client: int | None = None,
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
        if max_sessions_per_client is not None and max_sessions_per_client < 1:
            raise ValueError("max_sessions_per_client must be at least 1 (None: no cap)")
        self.http_session_timeout_s = http_session_timeout_s
        self.max_sessions_per_client = max_sessions_per_client
        self._kinds: dict[str, str] = {}  # session id -> "ws" | "http"
        self._owners: dict[str, str] = {}  # HTTP session id -> the client that named itself
        self._reserved: Counter[str] = Counter()  # creations under way, by kind
        self._reserved_by: Counter[str] = Counter()  # HTTP creations under way, by client
        self._busy: Counter[str] = Counter()  # HTTP requests in progress, by session
        self.default_session: str | None = None
        self._default_lock = asyncio.Lock()  # one default session, however many ask at once
        self._http_reaper: asyncio.Task[None] | None = None
        super().__init__(
            env,
            action_cls,
            observation_cls,
            concurrency_config=ConcurrencyConfig(  # + 1: the default session's own slot
                max_concurrent_envs=self.ws_capacity + self.http_quota + 1,
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
            self._owners.pop(sid, None)
        return [s for s, k in self._kinds.items() if k == kind]

    def quota_sessions(self, client: str | None = None) -> list[str]:
        """The HTTP sessions counted against the quota (every one but the default session), or
        with ``client``, those that client made."""
        sids = [s for s in self.sessions_of("http") if s != self.default_session]
        return sids if client is None else [s for s in sids if self._owners.get(s) == client]

    async def _create_session(self) -> tuple[str, Any]:
        kind = _KIND.get()
        client = _CLIENT.get() if kind == "http" else None
        default = kind == "http" and _DEFAULT.get()
        if kind == "http" and not default:
            self._check_http_room(client)  # checked and reserved in one step of the event loop
        elif kind == "ws":
            active = len(self.sessions_of("ws")) + self._reserved["ws"]
            if active >= self.ws_capacity:
                raise SessionCapacityError(active_sessions=active, max_sessions=self.ws_capacity)
        slot = "default" if default else kind
        self._reserved[slot] += 1
        if client is not None:
            self._reserved_by[client] += 1
        try:
            sid, env = await super()._create_session()
        finally:
            self._reserved[slot] -= 1
            if client is not None:
                self._reserved_by[client] -= 1
                if not self._reserved_by[client]:
                    del self._reserved_by[client]
        self._kinds[sid] = kind
        if client is not None and not default:
            self._owners[sid] = client
        return sid, env

    def _check_http_room(self, client: str | None) -> None:
        """Raise :class:`SessionsFull` when a new HTTP session of ``client`` would exceed the
        quota or that client's share (sessions in use are never ended to make room)."""
        cap = self.max_sessions_per_client
        if client is not None and cap is not None:
            mine = self.quota_sessions(client)
            if len(mine) + self._reserved_by[client] >= cap:
                wait = self._retry_after(mine)
                raise SessionsFull(
                    f"client {client!r} ({CLIENT_ID_HEADER}) holds {_sessions(cap)}, the most "
                    "one client may on this server: close one (POST /close with its session_id) "
                    f"or retry in {wait} s",
                    len(mine) + self._reserved_by[client],
                    cap,
                    wait,
                )
        held = self.quota_sessions()
        if len(held) + self._reserved["http"] >= self.http_quota:
            wait = self._retry_after(held)
            idle = (
                f"none has been idle {self.http_session_timeout_s:g} s"
                if self.http_session_timeout_s is not None
                else "they are closed only by their clients"
            )
            raise SessionsFull(
                f"the HTTP sessions of this server ({self.http_quota} at most) are all in use "
                f"({idle}), and a session in use is never ended to make room for a new one: "
                f"retry in {wait} s, close a session you hold (POST /close), or play over the "
                "WebSocket (/ws)",
                len(held) + self._reserved["http"],
                self.http_quota,
                wait,
            )

    def _retry_after(self, sids: list[str]) -> int:
        """Whole seconds (at least 1) until the first of ``sids`` could be closed as idle."""
        timeout = self.http_session_timeout_s
        if timeout is None:
            return NO_EXPIRY_RETRY_S
        now = time.time()
        idle = set(self._idle())
        expiries = [
            self._session_info[s].last_activity_at + timeout if s in idle else now + timeout
            for s in sids
        ]
        return max(1, math.ceil(min(expiries, default=now + timeout) - now))

    async def _destroy_session(self, session_id: str) -> None:
        self._kinds.pop(session_id, None)
        self._owners.pop(session_id, None)
        if session_id == self.default_session:
            self.default_session = None
        await super()._destroy_session(session_id)

    def _idle(self) -> list[str]:
        """HTTP sessions not in use (no request in progress, no WebSocket attached), least
        recently used first: those the idle timeout may close."""
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
        for sid in self._idle():
            info = self._session_info.get(sid)
            if info is not None and info.last_activity_at < horizon:
                await self._destroy_session(sid)

    async def check_http_room(self, client: str | None) -> None:
        """Close the HTTP sessions past their idle timeout, then raise :class:`SessionsFull` if
        ``client`` still has no room for a new one."""
        await self.close_idle_http_sessions()
        self._check_http_room(client)

    async def new_http_session(
        self, client: str | None = None, *, default: bool = False
    ) -> tuple[str, Any]:
        """A new HTTP session of ``client`` (None: anonymous), or the default session; at the
        quota or the client's share, :class:`SessionsFull` (no session is ended for it)."""
        kind, who, slot = _KIND.set("http"), _CLIENT.set(client), _DEFAULT.set(default)
        try:
            await self.close_idle_http_sessions()
            return await self._create_session()
        finally:
            _KIND.reset(kind)
            _CLIENT.reset(who)
            _DEFAULT.reset(slot)

    def http_session(self, sid: Any) -> Any:
        """The env of the live HTTP session ``sid`` (a clear error for anything else)."""
        if not isinstance(sid, str) or sid not in self.sessions_of("http"):
            closed = ""
            if self.http_session_timeout_s is not None:
                closed = f"; HTTP sessions idle {self.http_session_timeout_s:g} s are closed"
            raise RequestError(
                f"unknown session_id {sid!r}: start a session with POST /reset (the default "
                f'one, or {{"new_session": true}} for one of your own)' + closed
            )
        env = self._sessions.get(sid)
        if env is None:
            raise RequestError(f"session {sid} is still starting: retry shortly")
        self._update_session_activity(sid)
        return env

    async def default_http_session(self) -> tuple[str, Any]:
        """The default HTTP session, made (in its own slot) when there is none."""
        async with self._default_lock:
            sid = self.default_session
            if sid is not None and sid in self.sessions_of("http"):
                return sid, self.http_session(sid)
            sid, env = await self.new_http_session(default=True)
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
            except SessionsFull as exc:
                return refused(exc)

        return route

    async def reset(request: Any) -> JSONResponse:
        body = await body_of(request)
        sid, new = body.pop("session_id", None), body.pop("new_session", False)
        if not isinstance(new, bool):
            raise RequestError(f"new_session must be true or false, got {new!r}")
        if new and sid is not None:
            raise RequestError("send session_id (reset that session) or new_session, not both")
        if new:
            who = client_id(request.headers.get(CLIENT_ID_HEADER))
            sid, env = await server.new_http_session(who)
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


def _sessions(n: int) -> str:
    return f"{n} HTTP session" + ("" if n == 1 else "s")


def _dump(state: Any) -> Any:
    return state.model_dump() if hasattr(state, "model_dump") else state


def refused(exc: SessionsFull) -> Any:
    """The answer to a new HTTP session refused at the quota: 429, ``Retry-After``."""
    from starlette.responses import JSONResponse

    return JSONResponse(
        status_code=429,
        content={"detail": str(exc), "retry_after": exc.retry_after},
        headers={"Retry-After": str(exc.retry_after)},
    )


class HttpOrigin:
    """ASGI wrapper: MCP's ``openenv/session/create`` over ``POST /mcp`` makes an HTTP session
    (of the client its ``X-Client-Id`` names; refused with 429 and ``Retry-After`` at the quota,
    never by ending another session), and ``openenv/session/close`` over HTTP may close only HTTP
    sessions (a WebSocket client's session is its own)."""

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
        client: str | None = None
        status, headers, error = 200, [], None
        try:
            if method == "openenv/session/create":
                client = client_id(_header(scope, CLIENT_ID_HEADER))
            error = await self._refusal(method, request.get("params"), client)
        except RequestError as exc:
            error = {"code": -32000, "message": str(exc)}
        except SessionsFull as exc:
            status = 429
            headers = [(b"retry-after", str(exc.retry_after).encode())]
            error = {
                "code": -32000,
                "message": str(exc),
                "data": {
                    "active_sessions": exc.active_sessions,
                    "max_sessions": exc.max_sessions,
                    "retry_after": exc.retry_after,
                },
            }
        if error is not None:
            payload = {"jsonrpc": "2.0", "id": request.get("id"), "error": error}
            headers.append((b"content-type", b"application/json"))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": json.dumps(payload).encode()})
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        kind = _KIND.set("http" if method == "openenv/session/create" else "ws")
        who = _CLIENT.set(client)
        try:
            await self.app(scope, replay, send)
        finally:
            _KIND.reset(kind)
            _CLIENT.reset(who)

    async def _refusal(self, method: Any, params: Any, client: str | None) -> dict[str, Any] | None:
        """The JSON-RPC error for a session request HTTP may not make (None: pass it on);
        :class:`SessionsFull` for a new session beyond the quota or the client's share."""
        if method == "openenv/session/close":
            sid = params.get("session_id") if isinstance(params, dict) else None
            if sid not in self.server.sessions_of("http"):
                return {"code": -32000, "message": f"unknown HTTP session_id {sid!r}"}
        elif method == "openenv/session/create":
            await self.server.check_http_room(client)
        return None


def _header(scope: dict[str, Any], name: str) -> str | None:
    """The value of the request header ``name`` (case-insensitive), or None."""
    key = name.lower().encode("latin-1")
    for k, v in scope.get("headers", []):
        if k.lower() == key:
            return bytes(v).decode("latin-1")
    return None


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        request = json.loads(body)
    except ValueError:
        return {}
    return request if isinstance(request, dict) else {}
