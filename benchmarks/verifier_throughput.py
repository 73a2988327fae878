"""Verifier throughput: math gradings/s and code test executions/s, with ratios.

Usage::

    python benchmarks/verifier_throughput.py            # full run (about a minute)
    python benchmarks/verifier_throughput.py --quick    # toy sizes, once (a smoke run)

Math rows grade ``(prediction, gold)`` pairs: integers (the in-process fast path) and LaTeX
expressions (the math-verify worker pool; every pair is distinct, so the result cache never
hits), one call per pair ("single") vs one ``grade_many`` call ("batched").

Code rows run the tests of correct programs (stdin/stdout problems; HumanEval's canonical
solutions against its ``check`` split into one test per assert, as the code env uses them) two
ways, in the same run and on the same sandbox:

* **legacy**: the harness this project had before the verdict moved out of the program's reach
  (kept here, and only here, as the baseline): each assert test appended to the program, one
  ``compile()`` check per test, "exit code 0" taken as passed;
* **verifier**: :func:`verifiers.code_tests.run_tests_many` (the program's job makes only the
  test's calls, the results come back as plain data, the host evaluates the test).

Legacy and verifier runs alternate and each figure is the best of ``--repeat``; "own overhead" is
the verifier's time outside the sandbox per test. The machine is shared, so expect noise in the
rates (the overhead column is the stable one). Targets: >= 1,000 integer gradings/s batched;
the verifier within 20 % of the legacy harness (ratio >= 0.8).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._quick import parse_args
from verifiers.code_tests import TestCase, check_compiles, outputs_match, run_tests_many
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


def legacy_run_tests_many(items: list, sb) -> list[list[bool]]:
    """The old harness (baseline only): test code appended to the program, ``check(entry)``
    appended when a check function is not called, one compile check per test, passed = exit
    status 0 (asserts) or matching stdout. Forgeable; do not use it to grade anything."""
    import sandboxes

    jobs, slots, verdicts = [], [], []
    for solution, tests in items:
        row: list[bool] = []
        if not check_compiles(solution).ok:
            verdicts.append([False] * len(tests))
            continue
        for t in tests:
            if t.kind == "stdio":
                code = solution
            else:
                code = solution.rstrip("\n") + "\n\n" + t.code.rstrip("\n") + "\n"
                if not check_compiles(code, "<test>").ok:
                    row.append(False)
                    continue
            slots.append((len(verdicts), len(row), t))
            row.append(False)
            jobs.append(sandboxes.Job(code, t.stdin))
        verdicts.append(row)
    for (i, j, t), res in zip(slots, sb.run_many(jobs)):
        ok = res.ok
        if t.kind == "stdio":
            ok = ok and outputs_match(res.stdout, t.expected_stdout)
        verdicts[i][j] = ok
    return verdicts


def code_rows(n_prog: int, repeat: int) -> list[tuple[str, float, float, float]]:
    import sandboxes
    from envs.code import prelude_of
    from envs.data import load_humaneval

    sb = sandboxes.default()
    sb.run_many(["print(1)"] * 8)  # start the workers

    stdio_prog = "a, b = map(int, input().split())\nprint(a + b)\n"
    stdio_items = [
        (stdio_prog, [TestCase.io(f"{i} {k}", str(i + k)) for k in range(5)]) for i in range(n_prog)
    ]
    he = load_humaneval(split_tests=True)
    # the env runs the code after its prelude (imports and helpers of the starter code)
    he_items = [(p.golden_solution, list(p.tests), prelude_of(p)) for p in he]

    class Timed:
        """Passes jobs to the sandbox and adds up the wall time during which at least one
        ``run_many`` call is in progress (the verifier may make two at once)."""

        def __init__(self) -> None:
            self.inside = 0.0
            self.active = 0
            self.since = 0.0
            self.lock = threading.Lock()

        def run_many(self, jobs: list) -> list:
            with self.lock:
                if not self.active:
                    self.since = time.perf_counter()
                self.active += 1
            try:
                return sb.run_many(jobs)
            finally:
                with self.lock:
                    self.active -= 1
                    if not self.active:
                        self.inside += time.perf_counter() - self.since

    def verify(items: list, spy: Timed) -> list:
        return run_tests_many(items, sandbox=spy)

    rows = []
    for label, items in (("stdin/stdout tests", stdio_items), ("HumanEval check()", he_items)):
        legacy_items = [
            (item[2] + "\n\n" + item[0] if len(item) > 2 and item[2] else item[0], item[1])
            for item in items
        ]
        n_tests = sum(len(item[1]) for item in items)
        legacy_best = ver_best = 0.0
        overhead = []
        for _ in range(repeat):  # interleaved, so both see the same background load
            t = time.perf_counter()
            verdicts = legacy_run_tests_many(legacy_items, sb)
            legacy_best = max(legacy_best, n_tests / (time.perf_counter() - t))
            assert all(all(v) for v in verdicts), "oracle programs must pass (legacy)"
            spy = Timed()
            t = time.perf_counter()
            reports = verify(items, spy)
            total = time.perf_counter() - t
            assert all(r.all_passed for r in reports), "oracle programs must pass"
            ver_best = max(ver_best, n_tests / total)
            overhead.append((total - spy.inside) / n_tests)
        rows.append((label, legacy_best, ver_best, min(overhead)))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-code", action="store_true", help="skip the sandbox rows")
    ap.add_argument("--no-math", action="store_true", help="skip the math rows")
    args = parse_args(ap, argv, repeat=1)
    n_int, n_tex, n_prog = (500, 10, 10) if args.quick else (20000, 120, 100)

    print(f"verifier throughput ({os.cpu_count()} cores, best of {args.repeat})\n")
    if not args.no_math:
        print(f"{'math grading':<24}{'single /s':>12}{'batched /s':>12}{'batched/single':>16}")
        for name, single, batched in math_rows(n_int, n_tex, args.repeat):
            print(f"{name:<24}{single:>12,.0f}{batched:>12,.0f}{batched / single:>15.2f}x")
    if args.no_code:
        return
    print()
    head = f"{'code tests':<24}{'legacy /s':>12}{'verifier /s':>12}{'verifier/legacy':>17}"
    print(head + f"{'own overhead/test':>19}")
    for name, legacy, ver, own in code_rows(n_prog, args.repeat):
        print(f"{name:<24}{legacy:>12,.0f}{ver:>12,.0f}{ver / legacy:>16.2f}x{own * 1e6:>16.0f} us")


if __name__ == "__main__":
    main()
