"""Serve the sandbox over SandboxFusion's ``/run_code`` API (see
:mod:`adapters.integrations.sandbox_fusion`).

    python -m adapters.serve_sandbox --port 8080
    python -m adapters.serve_sandbox --backend docker --image mas-sandbox:latest --workers 8
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m adapters.serve_sandbox",
        description="A SandboxFusion-compatible /run_code service on this project's sandboxes.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    p.add_argument("--backend", choices=("local", "docker"), default="local")
    p.add_argument("--workers", type=int, default=None, help="sandbox worker slots (default: CPUs)")
    p.add_argument("--image", default=None, help="Docker image (default: $MAS_SANDBOX_IMAGE)")
    p.add_argument("--max-run-timeout", type=float, default=60.0, help="cap on run_timeout (s)")
    p.add_argument("--memory-mb", type=int, default=1024, help="memory when a request says -1")
    p.add_argument("--max-memory-mb", type=int, default=4096, help="cap on memory_limit_MB")
    p.add_argument("--max-output-mb", type=float, default=8.0, help="stdout/stderr cap, each")
    p.add_argument("--max-procs", type=int, default=64, help="processes/threads per job")
    p.add_argument(
        "--site-packages",
        action="store_true",
        help="let jobs import the server's installed packages (default: standard library only)",
    )
    args = p.parse_args(argv)

    import sandboxes
    from adapters.integrations._server import serve
    from adapters.integrations.sandbox_fusion import ServiceLimits, create_app

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
    serve(create_app(sandbox, bounds), args.host, args.port, what=f"sandbox ({args.backend})")


if __name__ == "__main__":
    main()
