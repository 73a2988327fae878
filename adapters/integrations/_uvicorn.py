"""Running an ASGI app with uvicorn behind the services' guard (:mod:`._guard`) and reporting
the port it listens on (``--port 0``)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from adapters.integrations._guard import TOKEN_ENV, Guard, GuardConfig, guarded_protocol

__all__ = ["add_guard_flags", "guard_config", "guarded_config", "serve"]


def add_guard_flags(p: argparse.ArgumentParser, websockets: bool = True) -> None:
    """The command-line flags of :class:`GuardConfig` (the token comes from the environment;
    ``websockets=False``: no ``--max-ws-frame-mb``, for a service without WebSockets)."""
    d = GuardConfig()
    g = p.add_argument_group("exposure limits (token: $MAS_SERVICE_TOKEN)")
    g.add_argument("--max-body-mb", type=float, default=d.max_body_bytes / (1 << 20))
    if websockets:
        g.add_argument("--max-ws-frame-mb", type=float, default=d.max_ws_frame_bytes / (1 << 20))
    g.add_argument("--header-timeout", type=float, default=d.header_timeout_s, metavar="S")
    g.add_argument("--body-timeout", type=float, default=d.body_timeout_s, metavar="S")
    g.add_argument("--keep-alive", type=float, default=d.keep_alive_s, metavar="S")
    g.add_argument("--max-connections", type=int, default=d.max_connections)


def guard_config(args: argparse.Namespace) -> GuardConfig:
    ws_frame_mb = getattr(args, "max_ws_frame_mb", None)  # absent: a service without WebSockets
    ws = {} if ws_frame_mb is None else {"max_ws_frame_bytes": int(ws_frame_mb * (1 << 20))}
    return GuardConfig.from_env(
        max_body_bytes=int(args.max_body_mb * (1 << 20)),
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        keep_alive_s=args.keep_alive,
        max_connections=args.max_connections,
        **ws,
    )


def guarded_config(
    app: Any, guard: GuardConfig, host: str = "127.0.0.1", port: int = 0, **options: Any
) -> Any:
    """The ``uvicorn.Config`` that serves ``app`` behind :class:`Guard` and the guard's HTTP
    protocol (header timeout, connection limit); ``options`` add to or override uvicorn's."""
    import uvicorn

    settings: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": "warning",
        "http": guarded_protocol(guard),
        "ws_max_size": guard.max_ws_frame_bytes,
        "timeout_keep_alive": int(max(1, guard.keep_alive_s)),
        "backlog": max(128, guard.max_connections),
    }
    settings.update(options)
    return uvicorn.Config(Guard(app, guard), **settings)


def serve(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    what: str = "app",
    guard: GuardConfig | None = None,
) -> None:
    """Run ``app`` behind :class:`Guard` with uvicorn on ``host:port`` (port 0: a free one) until
    interrupted.

    Prints ``serving WHAT at http://HOST:PORT`` once the server accepts connections: a parent
    process that started the server with ``--port 0`` reads the port from that line.
    """
    import uvicorn

    guard = guard or GuardConfig.from_env()
    server = uvicorn.Server(guarded_config(app, guard, host, port))

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                await task  # startup failed: uvicorn has logged why
                raise SystemExit(f"{what}: the server did not start on {host}:{port}")
            await asyncio.sleep(0.02)
        bound = server.servers[0].sockets[0].getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        if guard.token:
            print(f"{what}: requests need the bearer token of ${TOKEN_ENV}", flush=True)
        print(f"serving {what} at http://{shown}:{bound}", flush=True)
        await task

    asyncio.run(run())
