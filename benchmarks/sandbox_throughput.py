"""Sandbox throughput: executions per second of tiny programs, per backend.

    python benchmarks/sandbox_throughput.py [--jobs 300] [--naive-jobs 60] [--no-docker]
    python benchmarks/sandbox_throughput.py --quick   # 20 jobs, once, local backend only

Two programs: ``print(1)`` ("trivial") and a stdin-reading solution that sums two integers
("stdin"). For each, the table lists executions per second of

* naive: ``subprocess.run([python, file])`` per job, no isolation at all (one at a time, and
  with as many threads as CPUs);
* the local sandbox (bubblewrap + warm fork servers): ``run`` one at a time, and ``run_many``;
* the Docker sandbox (warm container pool): the same two ways (skipped with a note when no
  Docker Engine or image is available);

the ratio to the naive one-at-a-time rate measured in the same run, and the CPU time one
execution costs (this process, plus the interpreters it started / the sandbox's fork servers
and their jobs; not measured for Docker, whose stream relaying happens in the daemon). Every
result is checked (a wrong answer aborts the benchmark). Rates are noisy on a shared machine
(the best of ``--repeat`` rounds counts); the CPU cost per execution much less so.

A second table times one code test (a function and one call of it) the two ways a verifier can
ask for it, per backend with ``run_many``: the legacy harness (the test appended to the program,
"exit code 0" is the verdict; forgeable, kept here as the baseline only) and a job with
``calls`` (the program, then the call, the result back as plain data on the results channel;
what :mod:`verifiers.code_tests` does), and the ratio calls / legacy.

Targets on a 2-core machine: local >= 300 trivial executions/s and >= 10x naive; Docker >= 50/s;
calls within 20 % of legacy (ratio >= 0.8). The rates are noisy on a shared machine (best of
``--repeat`` alternating rounds); the CPU ms per code test (local: the fork servers and their
jobs, best round) is the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sandboxes
from benchmarks._quick import parse_args
from sandboxes.calls import Call

PROGRAMS = {
    "trivial": ("print(1)\n", "", "1\n"),
    "stdin": ("a, b = map(int, input().split())\nprint(a + b)\n", "20 22\n", "42\n"),
}
CpuProbe = Callable[[], float]


def _check(stdout: str, expected: str, what: str) -> None:
    if stdout != expected:
        raise SystemExit(f"{what}: wrong output {stdout!r} (expected {expected!r})")


def _measure(
    fn: Callable[[int], None], n: int, repeat: int, cpu: CpuProbe | None
) -> tuple[float, float | None]:
    """(best executions/s, CPU ms per execution over all rounds)."""
    best = float("inf")
    c0 = cpu() if cpu else 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - t0)
    cost = (cpu() - c0) / (n * repeat) * 1000 if cpu else None
    return n / best, cost


def naive_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ru.ru_utime + ru.ru_stime


def local_cpu(sb: sandboxes.LocalSandbox) -> CpuProbe:
    """This process plus every fork server of ``sb`` and the jobs they reaped."""
    tick = os.sysconf("SC_CLK_TCK")

    def probe() -> float:
        total = time.process_time()
        for top in sb.processes():
            try:
                kids = Path(f"/proc/{top}/task/{top}/children").read_text().split()
            except OSError:
                continue
            for pid in [top, *map(int, kids)]:
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                total += sum(int(x) for x in fields[11:15]) / tick
        return total

    return probe


def naive(code: str, stdin: str, expected: str, threads: int) -> Callable[[int], None]:
    path = os.path.join(tempfile.mkdtemp(prefix="naive-bench-"), "main.py")
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


def sequential(sb, code: str, stdin: str, expected: str) -> Callable[[int], None]:
    def run(n: int) -> None:
        for _ in range(n):
            _check(sb.run(code, stdin).stdout, expected, type(sb).__name__)

    return run


def batch(sb, code: str, stdin: str, expected: str) -> Callable[[int], None]:
    def run(n: int) -> None:
        for r in sb.run_many([(code, stdin)] * n):
            _check(r.stdout, expected, type(sb).__name__)

    return run


FUNCTION = "def add(a, b):\n    return a + b\n"


def code_test(sb, how: str) -> Callable[[int], None]:
    """``n`` code tests of FUNCTION through ``run_many``: ``legacy`` or ``calls``."""

    def run(n: int) -> None:
        if how == "legacy":
            job = sandboxes.Job(FUNCTION + "\nassert add(20, 22) == 42\n")
            for r in sb.run_many([job] * n):
                if not r.ok:
                    raise SystemExit(f"legacy code test failed: {r}")
        else:
            job = sandboxes.Job(FUNCTION, calls=(Call.make("add", (20, 22)),))
            for r in sb.run_many([job] * n):
                if not (r.calls and r.calls[0] is not None and r.calls[0].value == 42):
                    raise SystemExit(f"code test with calls failed: {r}")

    return run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=300, help="jobs per sandbox measurement")
    ap.add_argument("--naive-jobs", type=int, default=60, help="jobs per naive measurement")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the best one counts")
    ap.add_argument("--workers", type=int, default=None, help="sandbox workers (default: CPUs)")
    ap.add_argument("--no-docker", action="store_true", help="skip the Docker backend")
    args = parse_args(ap, argv, jobs=20, naive_jobs=5, repeat=1, no_docker=True)
    cpus = os.cpu_count() or 1

    local = sandboxes.LocalSandbox(workers=args.workers)
    docker, docker_note = None, ""
    if args.no_docker:
        docker_note = "skipped (--no-docker)"
    else:
        try:
            docker = sandboxes.DockerSandbox(workers=args.workers)
        except sandboxes.SandboxError as exc:
            docker_note = f"skipped: {str(exc).splitlines()[0]}"

    rows = [
        ("naive", "naive subprocess.run([python, file]), one at a time"),
        ("naive_par", f"naive subprocess.run, {cpus} threads"),
        ("local_run", f"LocalSandbox.run, one at a time ({local.workers} workers)"),
        ("local_many", f"LocalSandbox.run_many ({local.workers} workers)"),
        ("docker_run", "DockerSandbox.run, one at a time"),
        ("docker_many", "DockerSandbox.run_many"),
    ]
    measured: dict[tuple[str, str], tuple[float, float | None] | None] = {}
    try:
        for sb in (local, docker):  # warm up (first forks, container caches)
            if sb is not None:
                sb.run_many(["print(1)"] * 20)
        for prog, (code, stdin, expected) in PROGRAMS.items():
            n, r = args.naive_jobs, args.repeat
            measured["naive", prog] = _measure(naive(code, stdin, expected, 1), n, r, naive_cpu)
            measured["naive_par", prog] = _measure(
                naive(code, stdin, expected, cpus), n, r, naive_cpu
            )
            for name, sb, probe in (
                ("local", local, local_cpu(local)),
                ("docker", docker, None),
            ):
                if sb is None:
                    measured[f"{name}_run", prog] = measured[f"{name}_many", prog] = None
                    continue
                job = (code, stdin, expected)
                measured[f"{name}_run", prog] = _measure(sequential(sb, *job), args.jobs, r, probe)
                measured[f"{name}_many", prog] = _measure(batch(sb, *job), args.jobs, r, probe)
        code_tests: dict[tuple[str, str], tuple[float, float | None]] = {}
        for name, sb, probe in (("local", local, local_cpu(local)), ("docker", docker, None)):
            if sb is None:
                continue
            for _ in range(args.repeat):  # alternate, so both see the same background load
                for how in ("legacy", "calls"):
                    rate, cost = _measure(code_test(sb, how), args.jobs, 1, probe)
                    best_rate, best_cost = code_tests.get((name, how), (0.0, None))
                    if cost is not None and best_cost is not None:
                        cost = min(cost, best_cost)
                    code_tests[name, how] = (max(best_rate, rate), cost)
    finally:
        local.close()
        if docker is not None:
            docker.close()

    print(
        f"\nSandbox throughput: executions/s (best of {args.repeat}), ratio to naive one at a "
        f"time, CPU ms per execution; {cpus} CPUs, python {sys.version.split()[0]}\n"
    )
    head = f"| {'method':<56} |"
    rule = "|" + "-" * 58 + "|"
    for p in PROGRAMS:
        head += f" {p + ' /s':>10} | {'x naive':>7} | {'CPU ms':>6} |"
        rule += "-" * 12 + "|" + "-" * 9 + "|" + "-" * 8 + "|"
    print(head)
    print(rule)
    for key, label in rows:
        cells = ""
        for p in PROGRAMS:
            m, base = measured[key, p], measured["naive", p]
            if m is None or base is None:
                cells += f" {'-':>10} | {'-':>7} | {'-':>6} |"
                continue
            cost = f"{m[1]:.2f}" if m[1] is not None else "-"
            cells += f" {m[0]:>10.1f} | {m[0] / base[0]:>6.1f}x | {cost:>6} |"
        print(f"| {label:<56} |{cells}")
    print(
        "\nOne code test per job (run_many): legacy harness (assert appended, exit code) vs "
        "calls (plain result on the results channel)\n"
    )
    print(
        f"| {'backend':<8} | {'legacy /s':>10} | {'calls /s':>10} | {'calls/legacy':>12} "
        f"| {'CPU ms legacy':>13} | {'CPU ms calls':>12} |"
    )
    print(f"|{'-' * 10}|{'-' * 12}|{'-' * 12}|{'-' * 14}|{'-' * 15}|{'-' * 14}|")
    for name in ("local", "docker"):
        if (name, "legacy") in code_tests:
            (old, old_cpu), (new, new_cpu) = code_tests[name, "legacy"], code_tests[name, "calls"]
            cpu = [f"{c:.2f}" if c is not None else "-" for c in (old_cpu, new_cpu)]
            print(
                f"| {name:<8} | {old:>10.1f} | {new:>10.1f} | {new / old:>11.2f}x "
                f"| {cpu[0]:>13} | {cpu[1]:>12} |"
            )
    if docker_note:
        print(f"\nDocker: {docker_note}")


if __name__ == "__main__":
    main()
