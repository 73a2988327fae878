"""Running an ASGI app with uvicorn and reporting the port it listens on (``--port 0``)."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["serve"]


def serve(app: Any, host: str = "127.0.0.1", port: int = 8000, what: str = "app") -> None:
    """Run ``app`` with uvicorn on ``host:port`` (port 0: a free one) until interrupted.

    Prints ``serving WHAT at http://HOST:PORT`` once the server accepts connections: a parent
    process that started the server with ``--port 0`` reads the port from that line.
    """
    import uvicorn

    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", ws_max_size=64 << 20, timeout_keep_alive=30
    )
    server = uvicorn.Server(config)

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                await task  # startup failed: uvicorn has logged why
                raise SystemExit(f"{what}: the server did not start on {host}:{port}")
            await asyncio.sleep(0.02)
        bound = server.servers[0].sockets[0].getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        print(f"serving {what} at http://{shown}:{bound}", flush=True)
        await task

    asyncio.run(run())
