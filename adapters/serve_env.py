"""Serve a setting as an OpenEnv environment (see :mod:`adapters.integrations.openenv`).

python -m adapters.serve_env --env sokoban                       # 127.0.0.1:8000
python -m adapters.serve_env --env code --port 0 --env-config dataset=mbpp+ --share-pools
python -m adapters.serve_env --env math --mcp          # also the MCP tool answer(completion)

It needs the ``serve`` extra (``pip install -e ".[serve]"``); without it the command says so in
one line (:mod:`adapters.cli`).
"""

from __future__ import annotations

import argparse
import sys

from adapters import cli
from adapters.integrations._uvicorn import add_guard_flags


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m adapters.serve_env", description="Serve a setting over OpenEnv."
    )
    p.add_argument(
        "--env", required=True, help="setting id (envs.list_envs()) or package.module:id"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument(
        "--env-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="setting option for every session (repeatable; VALUE is JSON or a string)",
    )
    p.add_argument("--max-sessions", type=int, default=64, help="concurrent WebSocket sessions")
    p.add_argument(
        "--max-http-sessions",
        type=int,
        default=None,
        help="sessions made over plain HTTP or MCP, counted apart from --max-sessions; a new "
        "one beyond them is refused (429, Retry-After), none in use is ended for it (default: a "
        "quarter of --max-sessions; the default session has a slot of its own)",
    )
    p.add_argument(
        "--max-sessions-per-client",
        type=int,
        default=None,
        metavar="N",
        help="HTTP sessions each client naming itself with the X-Client-Id header may hold "
        "(default: no cap but --max-http-sessions; clients without the header share the rest)",
    )
    p.add_argument(
        "--session-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="close sessions idle this many seconds (default 600; 0: never)",
    )
    p.add_argument(
        "--http-session-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="close HTTP sessions idle this many seconds (default 120; 0: never)",
    )
    p.add_argument(
        "--reward",
        choices=("step-sum", "acting", "team"),
        default="step-sum",
        help="what a step result's reward carries (default: the sum over roles of the step)",
    )
    p.add_argument(
        "--no-reset-config",
        action="store_true",
        help="refuse env config sent with reset (clients get exactly the server's config)",
    )
    p.add_argument(
        "--share-pools",
        action="store_true",
        help="one run-wide question pool (MAE/SAGE) for all sessions instead of one per session",
    )
    p.add_argument(
        "--mcp",
        action="store_true",
        help="MCP mode: the acting role's turn is also the MCP tool answer(completion) "
        "(adapters/integrations/openenv_mcp.py)",
    )
    add_guard_flags(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return cli.run(build_parser, _serve, argv)


def _serve(args: argparse.Namespace) -> int:
    import envs
    from adapters.training.flags import parse_key_values

    with cli.bad_input("--env"):
        envs.spec(args.env)
    with cli.bad_input("--env-config"):
        env_config = parse_key_values(args.env_config, "--env-config")
        envs.make(args.env, **env_config)  # the options every session will use
    if args.max_sessions_per_client is not None and args.max_sessions_per_client < 1:
        raise cli.UsageError("--max-sessions-per-client: must be at least 1")
    from adapters.integrations._uvicorn import guard_config, serve
    from adapters.integrations.openenv import create_app
    from adapters.integrations.openenv_mcp import create_mcp_app

    app = (create_mcp_app if args.mcp else create_app)(
        args.env,
        env_config,
        max_sessions=args.max_sessions,
        max_http_sessions=args.max_http_sessions,
        session_timeout_s=args.session_timeout or None,
        http_session_timeout_s=args.http_session_timeout or None,
        max_sessions_per_client=args.max_sessions_per_client,
        allow_reset_config=not args.no_reset_config,
        share_pools=args.share_pools,
        reward=args.reward,
    )
    serve(app, args.host, args.port, what=f"OpenEnv {args.env}", guard=guard_config(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
