"""Sandbox throughput: executions per second of tiny programs, per backend.

    python benchmarks/sandbox_throughput.py [--jobs 300] [--naive-jobs 60] [--no-docker]

Two programs: ``print(1)`` ("trivial") and a stdin-reading solution that sums two integers
("stdin"). For each, the table lists executions per second of

* naive: ``subprocess.run([python, file])`` per job, no isolation at all (one at a time, and
  with as many threads as CPUs);
* the local sandbox (bubblewrap + warm fork servers): ``run`` one at a time, and ``run_many``;
* the Docker sandbox (warm container pool): the same two ways (skipped with a note when no
  Docker Engine or image is available);

and the ratio to the naive one-at-a-time rate measured in the same run. Every result is checked
(a wrong answer aborts the benchmark). Numbers are noisy on a shared machine: use the best of
``--repeat`` rounds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sandboxes

PROGRAMS = {
    "trivial": ("print(1)\n", "", "1\n"),
    "stdin": ("a, b = map(int, input().split())\nprint(a + b)\n", "20 22\n", "42\n"),
}


def _rate(fn: Callable[[int], None], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - t0)
    return n / best


def _check(stdout: str, expected: str, what: str) -> None:
    if stdout != expected:
        raise SystemExit(f"{what}: wrong output {stdout!r} (expected {expected!r})")


def naive(code: str, stdin: str, expected: str, threads: int):
    tmp = tempfile.mkdtemp(prefix="naive-bench-")
    path = os.path.join(tmp, "main.py")
    Path(path).write_text(code)

    def one(_: int) -> None:
        out = subprocess.run(
            [sys.executable, path], input=stdin, capture_output=True, text=True, timeout=30
        )
        _check(out.stdout, expected, "naive")

    def run(n: int) -> None:
        if threads == 1:
            for i in range(n):
                one(i)
        else:
            with ThreadPoolExecutor(threads) as ex:
                list(ex.map(one, range(n)))

    return run


def sequential(sb, code: str, stdin: str, expected: str):
    def run(n: int) -> None:
        for _ in range(n):
            _check(sb.run(code, stdin).stdout, expected, type(sb).__name__)

    return run


def batch(sb, code: str, stdin: str, expected: str):
    def run(n: int) -> None:
        for r in sb.run_many([(code, stdin)] * n):
            _check(r.stdout, expected, type(sb).__name__)

    return run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=300, help="jobs per sandbox measurement")
    ap.add_argument("--naive-jobs", type=int, default=60, help="jobs per naive measurement")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the best one counts")
    ap.add_argument("--workers", type=int, default=None, help="sandbox workers (default: CPUs)")
    ap.add_argument("--no-docker", action="store_true", help="skip the Docker backend")
    args = ap.parse_args(argv)
    cpus = os.cpu_count() or 1

    backends: list[tuple[str, object | None, str]] = []
    local = sandboxes.LocalSandbox(workers=args.workers)
    backends.append(("local", local, ""))
    docker_note = ""
    docker = None
    if args.no_docker:
        docker_note = "skipped (--no-docker)"
    else:
        try:
            docker = sandboxes.DockerSandbox(workers=args.workers)
        except sandboxes.SandboxError as exc:
            docker_note = f"skipped: {str(exc).splitlines()[0]}"
    backends.append(("docker", docker, docker_note))

    rows: list[tuple[str, dict[str, float | None]]] = []
    try:
        for sb in (local, docker):  # warm up (imports, first forks, container caches)
            if sb is not None:
                sb.run_many(["print(1)"] * 20)
        measured: dict[str, dict[str, float | None]] = {}
        for prog, (code, stdin, expected) in PROGRAMS.items():
            m: dict[str, float | None] = {}
            m["naive"] = _rate(naive(code, stdin, expected, 1), args.naive_jobs, args.repeat)
            m["naive_par"] = _rate(naive(code, stdin, expected, cpus), args.naive_jobs, args.repeat)
            for name, sb, _ in backends:
                if sb is None:
                    m[f"{name}_run"] = m[f"{name}_many"] = None
                    continue
                m[f"{name}_run"] = _rate(
                    sequential(sb, code, stdin, expected), args.jobs, args.repeat
                )
                m[f"{name}_many"] = _rate(batch(sb, code, stdin, expected), args.jobs, args.repeat)
            measured[prog] = m
        labels = [
            ("naive", "naive subprocess.run([python, file]), one at a time"),
            ("naive_par", f"naive subprocess.run, {cpus} threads"),
            ("local_run", f"LocalSandbox.run, one at a time ({local.workers} workers)"),
            ("local_many", f"LocalSandbox.run_many ({local.workers} workers)"),
            ("docker_run", "DockerSandbox.run, one at a time"),
            ("docker_many", "DockerSandbox.run_many"),
        ]
        for key, label in labels:
            rows.append((label, {p: measured[p][key] for p in PROGRAMS} | {"_key": key}))  # type: ignore[dict-item]
    finally:
        local.close()
        if docker is not None:
            docker.close()

    print(
        f"\nSandbox throughput (executions/s; best of {args.repeat}; {cpus} CPUs; "
        f"python {sys.version.split()[0]})\n"
    )
    head = f"| {'method':<58} |" + "".join(f" {p + ' /s':>11} | {'x naive':>8} |" for p in PROGRAMS)
    print(head)
    print("|" + "-" * 60 + "|" + "-------------|----------|" * len(PROGRAMS))
    for label, vals in rows:
        cells = ""
        for p in PROGRAMS:
            v = vals[p]
            base = next(r for r in rows if r[1]["_key"] == "naive")[1][p]
            if v is None:
                cells += f" {'-':>11} | {'-':>8} |"
            else:
                cells += f" {v:>11.1f} | {v / base:>7.1f}x |"
        print(f"| {label:<58} |{cells}")
    if docker_note:
        print(f"\nDocker: {docker_note}")


if __name__ == "__main__":
    main()
