"""Serve a local policy over an OpenAI-compatible HTTP API: ``python -m adapters.serve``.

    python -m adapters.serve                        # the embedded SmolLM2 model on :8000
    python -m adapters.serve --model PATH --port 0  # any local checkpoint, a free port
    python -m adapters.serve --model tiny           # the tiny random test model

The server (endpoints, request fields, concurrency) is documented in
:mod:`adapters.integrations.openai_server`; this module only parses arguments. It prints
``serving MODEL at http://HOST:PORT/v1`` once it listens.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from adapters import cli

# the server moved to adapters.integrations.openai_server; these names stay importable from here
# (loaded on first use, so that --help answers before anything heavy is imported)
__all__ = ["build_parser", "main"]
_MOVED = ("BadRequest", "PolicyServer", "make_server", "parse_request", "start_in_thread")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        from adapters.integrations import openai_server

        return getattr(openai_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m adapters.serve", description="OpenAI-compatible server for a local policy"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="smollm2 (default), tiny, a checkpoint or LoRA adapter directory",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: auto)")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 ... (default: checkpoint)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    return parser


def main(argv: list[str] | None = None) -> int:
    return cli.run(build_parser, _serve, argv)


def _serve(args: argparse.Namespace) -> int:
    from adapters.policies.specs import check_policy_spec, parse_policy_spec

    spec = args.model or "smollm2"
    with cli.bad_input("--model"):
        check_policy_spec(spec)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from adapters.integrations.openai_server import make_server

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    policy = parse_policy_spec(
        spec, device=args.device, dtype=args.dtype, batch_size=args.batch_size
    )
    name = args.served_model_name
    if name is None and args.model in (None, "smollm2"):
        name = "smollm2-135m-instruct"
    server = make_server(policy, args.host, args.port, name)
    print(f"serving {server.model_name} at {server.url}", flush=True)
    cli.serve_until_interrupted(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
