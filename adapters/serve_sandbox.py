"""Serve the sandbox over SandboxFusion's ``/run_code`` API (see
:mod:`adapters.integrations.sandbox_fusion`).

    python -m adapters.serve_sandbox --port 8080
    python -m adapters.serve_sandbox --backend docker --image mas-sandbox:latest --workers 8

It needs the ``serve`` extra (``pip install -e ".[serve]"``, and ``docker`` for the Docker
backend); without it the command says so in one line (:mod:`adapters.cli`).
"""

from __future__ import annotations

import argparse
import sys

from adapters import cli
from adapters.integrations._uvicorn import add_guard_flags


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m adapters.serve_sandbox",
        description="A SandboxFusion-compatible /run_code service on this project's sandboxes.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    p.add_argument("--backend", choices=("local", "docker"), default="local")
    p.add_argument(
        "--workers",
        type=int,
        default=64,
        help="jobs run at once (default 64: verl's default concurrency starts at once)",
    )
    p.add_argument(
        "--queue",
        type=int,
        default=None,
        help="requests that may wait for a worker; more are answered 504, which clients retry "
        "(default: 256, or --workers if larger)",
    )
    p.add_argument(
        "--keepalive",
        type=float,
        default=2.0,
        metavar="S",
        help="a request waiting for a worker gets a space of its answer every S seconds, so "
        "that its client's read timeout counts from its start (default 2; 0: off, see "
        "--queue-timeout)",
    )
    p.add_argument(
        "--queue-timeout",
        type=float,
        default=8.0,
        metavar="S",
        help="with --keepalive 0 only: longest wait for a worker before the answer is 504 "
        "(default 8: below verl's HTTP timeout less run_timeout, compile_timeout + 10 s)",
    )
    p.add_argument("--image", default=None, help="Docker image (default: $MAS_SANDBOX_IMAGE)")
    p.add_argument("--max-run-timeout", type=float, default=60.0, help="cap on run_timeout (s)")
    p.add_argument("--memory-mb", type=int, default=1024, help="memory when a request says -1")
    p.add_argument("--max-memory-mb", type=int, default=4096, help="cap on memory_limit_MB")
    p.add_argument("--max-output-mb", type=float, default=8.0, help="stdout/stderr cap, each")
    p.add_argument(
        "--memory-budget-mb",
        type=int,
        default=None,
        metavar="MB",
        help="jobs run at once only while the sum of their memory limits fits in MB (default: "
        "3/4 of the memory available at start; 0: no budget, --workers alone)",
    )
    p.add_argument("--max-procs", type=int, default=64, help="processes/threads per job")
    p.add_argument(
        "--site-packages",
        action="store_true",
        help="let jobs import the server's installed packages (default: standard library only)",
    )
    add_guard_flags(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return cli.run(build_parser, _serve, argv)


def _serve(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise cli.UsageError("--workers must be at least 1")
    if args.memory_budget_mb is not None and args.memory_budget_mb < 0:
        raise cli.UsageError("--memory-budget-mb must be positive (0: no budget)")
    import sandboxes
    from adapters.integrations._uvicorn import guard_config, serve
    from adapters.integrations.sandbox_fusion import (
        DEFAULT_QUEUE,
        Admission,
        ServiceLimits,
        create_app,
        host_memory_budget_mb,
    )

    admission = Admission(
        slots=args.workers,
        max_queue=max(args.workers, DEFAULT_QUEUE) if args.queue is None else args.queue,
        queue_timeout_s=args.queue_timeout,
        keepalive_s=args.keepalive or None,
        memory_mb=(
            host_memory_budget_mb()
            if args.memory_budget_mb is None
            else args.memory_budget_mb or None
        ),
    )
    guard = guard_config(args)

    bounds = ServiceLimits(
        max_run_timeout_s=args.max_run_timeout,
        memory_mb=args.memory_mb,
        max_memory_mb=args.max_memory_mb,
        max_output_bytes=int(args.max_output_mb * (1 << 20)),
        max_procs=args.max_procs,
    )
    ceiling = bounds.ceiling()  # sizes containers / cgroups for the largest request
    sandbox: sandboxes.Sandbox
    if args.backend == "docker":
        sandbox = sandboxes.DockerSandbox(
            image=args.image, workers=args.workers, limits=ceiling, site_packages=args.site_packages
        )
    else:
        sandbox = sandboxes.LocalSandbox(
            workers=args.workers, limits=ceiling, site_packages=args.site_packages
        )
    # the languages are those whose toolchains the jobs find (the host's /usr for the local
    # backend, the image's for Docker): create_app asks a job of the sandbox
    app = create_app(sandbox, bounds, admission=admission)
    serve(app, args.host, args.port, what=f"sandbox ({args.backend})", guard=guard)
    return 0


if __name__ == "__main__":
    sys.exit(main())
