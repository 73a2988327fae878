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

from adapters.integrations.openai_server import (
    BadRequest,
    PolicyServer,
    make_server,
    parse_request,
    start_in_thread,
)
from adapters.policies.specs import parse_policy_spec

# the server moved to adapters.integrations.openai_server; these names stay importable from here
__all__ = ["BadRequest", "PolicyServer", "main", "make_server", "parse_request", "start_in_thread"]


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    policy = parse_policy_spec(
        args.model or "smollm2", device=args.device, dtype=args.dtype, batch_size=args.batch_size
    )
    name = args.served_model_name
    if name is None and args.model in (None, "smollm2"):
        name = "smollm2-135m-instruct"
    server = make_server(policy, args.host, args.port, name)
    print(f"serving {server.model_name} at {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
