"""Serve a local policy over an OpenAI-compatible HTTP API: ``python -m adapters.serve``.

    python -m adapters.serve                        # the embedded SmolLM2 model on :8000
    python -m adapters.serve --model PATH --port 0  # any local checkpoint, a free port
    python -m adapters.serve --model tiny           # the tiny random test model
    MAS_SERVICE_TOKEN=... python -m adapters.serve --host 0.0.0.0 --max-tokens 1024

The server (endpoints, request fields, exposure limits, concurrency) is documented in
:mod:`adapters.integrations.openai_server`; this module only parses arguments. It needs the
``serve`` extra (uvicorn) and, for a model, the ``train`` extra; without them the command says so
in one line (:mod:`adapters.cli`). It prints ``serving MODEL at http://HOST:PORT/v1`` once it
listens.
"""

from __future__ import annotations

import argparse
import logging
import sys

from adapters import cli
from adapters.integrations._uvicorn import add_guard_flags

__all__ = ["build_parser", "main"]


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
    from adapters.integrations.openai_server import DEFAULT_MAX_N
    from adapters.policies.base import MAX_NEW_TOKENS

    caps = parser.add_argument_group("request limits (a request over one is refused with 400)")
    caps.add_argument(
        "--max-n",
        type=int,
        default=DEFAULT_MAX_N,
        help="most completions per request (default %(default)s: the generation section's "
        "gen_batch_size)",
    )
    caps.add_argument(
        "--max-tokens",
        type=int,
        default=MAX_NEW_TOKENS,
        help="most tokens per completion (default %(default)s: the generation section's "
        "max_new_tokens)",
    )
    add_guard_flags(parser, websockets=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    return cli.run(build_parser, _serve, argv)


def _serve(args: argparse.Namespace) -> int:
    from adapters.integrations._guard import TOKEN_ENV
    from adapters.integrations._uvicorn import guard_config
    from adapters.integrations.openai_server import RequestLimits, make_server
    from adapters.policies.specs import check_policy_spec, parse_policy_spec

    spec = args.model or "smollm2"
    with cli.bad_input("--model"):
        check_policy_spec(spec)
    with cli.bad_input("--max-n/--max-tokens"):
        limits = RequestLimits(max_n=args.max_n, max_tokens=args.max_tokens)
    with cli.bad_input(""):
        guard = guard_config(args)
    import uvicorn  # noqa: F401  (the serve extra: reported before a model is loaded)

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    policy = parse_policy_spec(
        spec, device=args.device, dtype=args.dtype, batch_size=args.batch_size
    )
    name = args.served_model_name
    if name is None and args.model in (None, "smollm2"):
        name = "smollm2-135m-instruct"
    with cli.bad_input("--host/--port"):  # taken, or not an address of this machine
        server = make_server(policy, args.host, args.port, name, guard=guard, limits=limits)
    if guard.token:
        print(f"{server.model_name}: requests need the bearer token of ${TOKEN_ENV}", flush=True)
    print(f"serving {server.model_name} at {server.url}", flush=True)
    cli.serve_until_interrupted(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
