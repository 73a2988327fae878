"""Verifier throughput: math gradings/s and code test executions/s, with ratios.

Usage::

    python benchmarks/verifier_throughput.py            # full run (about a minute)
    python benchmarks/verifier_throughput.py --quick    # smaller sizes

Math rows grade ``(prediction, gold)`` pairs: integers (the in-process fast path) and LaTeX
expressions (the math-verify worker pool; every pair is distinct, so the result cache never
hits), one call per pair ("single") vs one ``grade_many`` call ("batched").

Code rows run tests through :func:`verifiers.code_tests.run_tests_many` and compare with the same
jobs handed straight to the sandbox's ``run_many`` (the verifier's overhead is building programs,
``compile()`` checks and output comparison; "own overhead" is the verifier's time outside the
sandbox per test). Raw and verifier runs alternate and each figure is the best of ``--repeat``;
the machine is shared, so expect noise in the rates (the overhead column is the stable one). Targets: >= 1,000 integer gradings/s batched; code tests
within 20 % of raw sandbox throughput (ratio >= 0.8).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verifiers.code_tests import TestCase, build_program, run_tests_many
from verifiers.math_answer import grade, grade_many


def best_rate(fn: Callable[[int], int], repeat: int) -> float:
    """Items/s of the fastest of ``repeat`` calls; ``fn(round)`` returns the item count."""
    best = 0.0
    for r in range(repeat):
        t = time.perf_counter()
        n = fn(r)
        dt = time.perf_counter() - t
        best = max(best, n / dt)
    return best


def math_rows(n_int: int, n_tex: int, repeat: int) -> list[tuple[str, float, float]]:
    from verifiers._math_pool import default_pool

    default_pool().warmup()
    ints = [(f"so the answer is\n#### {i}", str(i + (i % 2))) for i in range(n_int)]

    def int_single(_: int) -> int:
        for p, g in ints:
            grade(p, g)
        return len(ints)

    def int_batched(_: int) -> int:
        return len(grade_many(ints))

    def tex_pairs(r: int, offset: int) -> list[tuple[str, str]]:
        base = (r + 1) * 100_000 + offset
        return [
            (
                rf"\boxed{{\sqrt{{{base + i}}} + \frac{{x}}{{2}}}}",
                rf"\frac{{x}}{{2}} + \sqrt{{{base + i}}}",
            )
            for i in range(n_tex)
        ]

    def tex_single(r: int) -> int:
        pairs = tex_pairs(r, 0)
        for p, g in pairs:
            grade(p, g)
        return len(pairs)

    def tex_batched(r: int) -> int:
        return len(grade_many(tex_pairs(r, 50_000)))

    return [
        ("integers", best_rate(int_single, repeat), best_rate(int_batched, repeat)),
        ("LaTeX (math-verify)", best_rate(tex_single, repeat), best_rate(tex_batched, repeat)),
    ]


def code_rows(n_prog: int, repeat: int) -> list[tuple[str, float, float, float]]:
    import sandboxes
    from envs.data import load_humaneval

    sb = sandboxes.default()
    sb.run_many(["print(1)"] * 8)  # start the workers

    stdio_prog = "a, b = map(int, input().split())\nprint(a + b)\n"
    stdio_items = [
        (stdio_prog, [TestCase.io(f"{i} {k}", str(i + k)) for k in range(5)]) for i in range(n_prog)
    ]
    he = load_humaneval()
    he_items = [(p.golden_solution, list(p.tests)) for p in he]

    class Timed:
        """Passes jobs to the sandbox and adds up the time spent inside ``run_many``."""

        def __init__(self) -> None:
            self.inside = 0.0

        def run_many(self, jobs: list) -> list:
            t = time.perf_counter()
            out = sb.run_many(jobs)
            self.inside += time.perf_counter() - t
            return out

    rows = []
    for label, items in (("stdin/stdout tests", stdio_items), ("HumanEval check()", he_items)):
        jobs = []
        for sol, tests in items:
            for t in tests:
                code, stdin = build_program(sol, t)
                jobs.append(sandboxes.Job(code, stdin))
        n_tests = sum(len(t) for _, t in items)
        raw_best = ver_best = 0.0
        overhead = []
        for _ in range(repeat):  # interleaved, so both see the same background load
            t = time.perf_counter()
            sb.run_many(jobs)
            raw_best = max(raw_best, len(jobs) / (time.perf_counter() - t))
            spy = Timed()
            t = time.perf_counter()
            reports = run_tests_many(items, sandbox=spy)
            total = time.perf_counter() - t
            assert all(r.all_passed for r in reports), "oracle programs must pass"
            ver_best = max(ver_best, n_tests / total)
            overhead.append((total - spy.inside) / n_tests)
        rows.append((label, raw_best, ver_best, min(overhead)))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller workloads")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-code", action="store_true", help="skip the sandbox rows")
    args = ap.parse_args(argv)
    n_int, n_tex, n_prog = (5000, 40, 40) if args.quick else (20000, 120, 100)

    print(f"verifier throughput ({os.cpu_count()} cores, best of {args.repeat})\n")
    print(f"{'math grading':<24}{'single /s':>12}{'batched /s':>12}{'batched/single':>16}")
    for name, single, batched in math_rows(n_int, n_tex, args.repeat):
        print(f"{name:<24}{single:>12,.0f}{batched:>12,.0f}{batched / single:>15.2f}x")
    if args.no_code:
        return
    print()
    head = f"{'code tests':<24}{'sandbox /s':>12}{'verifier /s':>12}{'verifier/sandbox':>18}"
    print(head + f"{'own overhead/test':>19}")
    for name, raw, ver, own in code_rows(n_prog, args.repeat):
        print(f"{name:<24}{raw:>12,.0f}{ver:>12,.0f}{ver / raw:>17.2f}x{own * 1e6:>16.0f} us")


if __name__ == "__main__":
    main()
