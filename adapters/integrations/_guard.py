"""What the services (``serve``, ``serve_env``, ``serve_sandbox``) do before the app sees a request.

Threat model: the services bind 127.0.0.1 by default; an operator who exposes one (``--host
0.0.0.0``, a container port) serves clients it does not control. Such a client may send huge or
endless bodies, open connections and never finish their headers, flood the server with
connections or sessions, or ask for more resources than the operator meant to give. The guard
bounds each of these, so one client costs the server a bounded amount of memory, sockets and
time, and cannot lock the others out:

==========================  ====================================================================
bearer token                when ``$MAS_SERVICE_TOKEN`` is set, every request and WebSocket
                            handshake must carry ``Authorization: Bearer TOKEN``, or start its
                            path with ``/t/TOKEN`` (for clients that cannot set headers:
                            ``base_url="http://host:8000/t/TOKEN"``); others get 401 (HTTP) or a
                            refused handshake. ``/health`` and ``/v1/ping`` stay open.
request body                at most ``max_body_bytes`` (20 MiB): a larger ``Content-Length`` is
                            refused with 413 before any of the body is read; a chunked body is
                            counted as it arrives and refused at the cap. The whole body must
                            arrive within ``body_timeout_s``, else 408.
WebSocket frames            at most ``max_ws_frame_bytes`` (1 MiB); a larger frame closes the
                            connection (code 1009).
headers                     a connection must send its request's headers within
                            ``header_timeout_s`` of opening (or of its previous response plus the
                            keep-alive time); else it is closed.
connections                 at most ``max_connections`` open at once; more are closed on accept.
==========================  ====================================================================

What each service adds (session limits, clamped resource limits, admission, caps on ``n`` and
``max_tokens``) is in its own page: :mod:`adapters.integrations.openenv`,
:mod:`adapters.integrations.sandbox_fusion`, :mod:`adapters.integrations.openai_server`. What the
guard does not do: TLS (put a TLS-terminating proxy in front), rate limits per client, or
accounting of CPU time per client.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["TOKEN_ENV", "Guard", "GuardConfig", "guarded_protocol"]

TOKEN_ENV = "MAS_SERVICE_TOKEN"
OPEN_PATHS = frozenset({"/health", "/v1/ping"})


@dataclass(frozen=True)
class GuardConfig:
    """Bounds every request of a service (see the module docstring)."""

    token: str | None = None
    max_body_bytes: int = 20 << 20
    body_timeout_s: float = 30.0
    max_ws_frame_bytes: int = 1 << 20
    header_timeout_s: float = 10.0
    keep_alive_s: float = 30.0
    max_connections: int = 256

    def __post_init__(self) -> None:
        if self.token is not None and (len(self.token) < 8 or "/" in self.token):
            raise ValueError("the service token must have at least 8 characters and no '/'")
        for name in ("max_body_bytes", "max_ws_frame_bytes", "max_connections"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be positive")
        for name in ("body_timeout_s", "header_timeout_s", "keep_alive_s"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"{name} must be positive")

    @classmethod
    def from_env(cls, **kwargs: Any) -> GuardConfig:
        """The config with the token from ``$MAS_SERVICE_TOKEN`` (unset or empty: no token)."""
        return cls(token=os.environ.get(TOKEN_ENV) or None, **kwargs)


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


async def _respond(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware: the bearer token, the body cap and the body-read timeout."""

    def __init__(self, app: Any, config: GuardConfig) -> None:
        self.app, self.config = app, config
        self._prefix = f"/t/{config.token}" if config.token else None

    def _authorized(self, scope: dict[str, Any]) -> bool:
        token = self.config.token
        if token is None:
            return True
        path = scope.get("path", "")
        assert self._prefix is not None
        if path == self._prefix or path.startswith(self._prefix + "/"):
            rest = path[len(self._prefix) :] or "/"
            scope["path"] = rest
            scope["raw_path"] = rest.encode()
            return True
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer" and hmac.compare_digest(
                    given.strip().encode(), token.encode()
                ):
                    return True
        return path in OPEN_PATHS

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        scope = dict(scope)
        if not self._authorized(scope):
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
            else:
                await _respond(send, 401, "missing or wrong bearer token")
            return
        if kind == "websocket":
            await self.app(scope, receive, send)
            return
        try:
            body = await self._read_body(scope, receive)
        except _Refused as exc:
            await _respond(send, exc.status, exc.detail)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read_body(self, scope: dict[str, Any], receive: Any) -> list[bytes]:
        """The whole request body (chunks), within the cap and the body-read timeout."""
        cap = self.config.max_body_bytes
        too_large = f"request body larger than {cap} bytes"
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise _Refused(400, "bad Content-Length") from None
                if declared > cap:
                    raise _Refused(413, too_large)
        chunks: list[bytes] = []
        size = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.body_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise _Refused(408, "request body not received in time") from None
            if message["type"] != "http.request":
                return chunks  # the client went away: the app sees the disconnect
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > cap:
                raise _Refused(413, too_large)
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks


def _replay(chunks: list[bytes], receive: Any) -> Any:
    """A ``receive`` that hands the app the body already read, then the connection's events."""
    pending = [b"".join(chunks)]
    chunks.clear()

    async def replay() -> dict[str, Any]:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": False}
        return await receive()

    return replay


def guarded_protocol(config: GuardConfig) -> type:
    """uvicorn's h11 HTTP protocol with the header-read timeout and the connection limit."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > config.max_connections:
                transport.close()
                return
            self._arm(config.header_timeout_s)

        def _arm(self, delay: float) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(delay, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _waiting_for_headers(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self._waiting_for_headers() and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self._waiting_for_headers():
                self._disarm()

        def handle_websocket_upgrade(self, event: Any) -> None:
            self._disarm()
            super().handle_websocket_upgrade(event)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm(config.keep_alive_s + config.header_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedH11Protocol
