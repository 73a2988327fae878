"""Running an ASGI app with uvicorn on a socket bound first, so ``--port 0`` can be reported."""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["serve"]


def serve(app: Any, host: str = "127.0.0.1", port: int = 8000, what: str = "app") -> None:
    """Run ``app`` with uvicorn on ``host:port`` (port 0: a free one) until interrupted.

    Prints ``serving WHAT at http://HOST:PORT`` once the socket is bound: a parent process that
    started the server with ``--port 0`` reads the port from that line.
    """
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"serving {what} at http://{shown}:{bound}", flush=True)
    config = uvicorn.Config(app, log_level="warning", ws_max_size=64 << 20, timeout_keep_alive=30)
    uvicorn.Server(config).run(sockets=[sock])


def parse_settings(items: list[str], flag: str) -> dict[str, Any]:
    """``["num_boxes=2", "mode=single"]`` -> ``{"num_boxes": 2, "mode": "single"}``: each value
    is read as JSON when it parses, else kept as a string.

    >>> parse_settings(["num_boxes=2", "mode=single", "x=[1, 2]"], "--env-config")
    {'num_boxes': 2, 'mode': 'single', 'x': [1, 2]}
    """
    import json

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"{flag} expects KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out
