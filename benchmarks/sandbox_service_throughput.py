"""Sandbox service throughput: executions per second through the SandboxFusion-compatible
``/run_code`` service versus calling the sandbox library directly, same programs, same run.

    python benchmarks/sandbox_service_throughput.py [--jobs 400] [--workers 2]
        [--clients 1,4,16] [--backend local|docker] [--repeat 3]
    python benchmarks/sandbox_service_throughput.py --quick   # 20 jobs, 1 and 4 clients, once

The service runs as a real server process (``python -m adapters.serve_sandbox --port 0``) with
``--workers`` sandbox workers; clients are threads, each with its own keep-alive HTTP session,
posting the JSON verl's ``call_sandbox_api`` sends. The direct baseline is a sandbox of the same
backend and worker count in this process: ``run`` one job at a time, and ``run_many`` on the
whole batch (the library's fastest path, which the ratio column compares against). Programs:
``print(1)`` ("trivial") and a stdin-reading sum ("stdin"); every output is checked. The best
of ``--repeat`` rounds counts.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

import sandboxes  # noqa: E402
from benchmarks._quick import parse_args  # noqa: E402

PROGRAMS = {
    "trivial": ("print(1)\n", "", "1\n"),
    "stdin": ("a, b = map(int, input().split())\nprint(a + b)\n", "20 22\n", "42\n"),
}


def _best(fn: Callable[[], None], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def _check(out: str, expected: str, what: str) -> None:
    if out != expected:
        raise SystemExit(f"{what}: wrong output {out!r} (expected {expected!r})")


def start_service(backend: str, workers: int) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "adapters.serve_sandbox", "--port", "0"]
    cmd += ["--backend", backend, "--workers", str(workers)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if " at http://" not in line:
        proc.kill()
        raise SystemExit(f"the service did not start: {line!r}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, line.rsplit(" at ", 1)[1].strip()


def service_rate(url: str, code: str, stdin: str, want: str, n: int, clients: int, repeat: int):
    local = threading.local()
    payload = {
        "compile_timeout": 10,
        "run_timeout": 10,
        "code": code,
        "stdin": stdin,
        "memory_limit_MB": 512,
        "language": "python",
        "files": {},
        "fetch_files": [],
    }

    def one(_: int) -> None:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        r = local.session.post(url + "/run_code", json=payload, timeout=60).json()
        if r["status"] != "Success":
            raise SystemExit(f"service: {r}")
        _check(r["run_result"]["stdout"], want, "service")

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(2 * clients)))  # warm the sessions
        return _best(lambda: list(pool.map(one, range(n))), n, repeat)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=400)
    p.add_argument("--workers", type=int, default=sandboxes.base.default_workers())
    p.add_argument("--clients", default="1,4,16", help="comma-separated client thread counts")
    p.add_argument("--backend", choices=("local", "docker"), default="local")
    p.add_argument("--repeat", type=int, default=3)
    args = parse_args(p, argv, jobs=20, clients="1,4", repeat=1)
    clients = [int(c) for c in args.clients.split(",")]
    limits = sandboxes.Limits(memory_mb=512)

    if args.backend == "docker":
        sb = sandboxes.DockerSandbox(workers=args.workers, limits=limits)
    else:
        sb = sandboxes.LocalSandbox(workers=args.workers, limits=limits)
    proc, url = start_service(args.backend, args.workers)
    rows = []
    try:
        for name, (code, stdin, want) in PROGRAMS.items():
            n = args.jobs

            def direct_run(code=code, stdin=stdin, want=want, n=n) -> None:
                for _ in range(n):
                    _check(sb.run(code, stdin=stdin).stdout, want, "direct run")

            def direct_many(code=code, stdin=stdin, want=want, n=n) -> None:
                for r in sb.run_many([(code, stdin)] * n):
                    _check(r.stdout, want, "direct run_many")

            direct_many()  # warm-up
            base = _best(direct_many, n, args.repeat)
            rows.append((name, "direct run_many (baseline)", base, 1.0))
            rate = _best(direct_run, n, args.repeat)
            rows.append((name, "direct run, one at a time", rate, rate / base))
            for c in clients:
                rate = service_rate(url, code, stdin, want, n, c, args.repeat)
                rows.append((name, f"service, {c} client(s)", rate, rate / base))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        sb.close()

    print(f"\nbackend {args.backend}, {args.workers} sandbox workers, {args.jobs} jobs per row")
    print(f"{'program':<8} {'path':<30} {'exec/s':>8} {'vs run_many':>12}")
    for name, path, rate, ratio in rows:
        print(f"{name:<8} {path:<30} {rate:8.1f} {ratio:11.2f}x")


if __name__ == "__main__":
    main()
