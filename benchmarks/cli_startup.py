"""How fast the command lines answer: ``--help`` and argument errors, wall time per command.

    python benchmarks/cli_startup.py [--repeats 5] [--baseline-tree DIR] [--quick]

Each row runs one command line in a fresh interpreter (``python -m ...``, this tree on
``PYTHONPATH``) ``--repeats`` times and reports the median wall time, its exit status, and its
ratio to two baselines measured in the same run: ``python -c pass`` (the interpreter alone) and
``python -c "import torch"`` (the heavy import a command must not need to answer). With
``--baseline-tree DIR`` (another checkout, e.g. the commit before a change) every command is
also timed with that tree on ``PYTHONPATH``, in the same run, and ``x tree`` is this tree's time
over that one's. Commands that fail there the same way are still comparable (both answer);
timings on a loaded machine move, so compare only columns of one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# python -m adapters.<first word> <the rest>
COMMANDS = [
    "train --help",
    "train --env nosuch",
    "train --model /nonexistent",
    "evaluate --help",
    "evaluate --env sokoban --policy nosuch:thing",
    "evaluate --env sokoban --policy oracle --instance garbage",
    "view --help",
    "serve --help",
    "serve_env --help",
    "serve_env --env nosuch",
    "serve_sandbox --help",
]
BASELINES = [
    ("python -c pass", ["-c", "pass"]),
    ("python -c 'import torch'", ["-c", "import torch"]),
]


def timed(args: list[str], tree: Path, repeats: int) -> tuple[float, int]:
    """Median wall seconds of ``python ARGS`` with ``tree`` on PYTHONPATH, and its exit status."""
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    times, rc = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, *args], cwd=tree, env=env, capture_output=True, timeout=600
        )
        times.append(time.perf_counter() - t0)
        rc = out.returncode
    return statistics.median(times), rc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--baseline-tree", default=None, help="another checkout to time the same way")
    p.add_argument("--quick", action="store_true", help="one repeat, three commands")
    args = p.parse_args(argv)
    repeats = 1 if args.quick else max(1, args.repeats)
    commands = COMMANDS[:1] + COMMANDS[3:5] if args.quick else COMMANDS
    width = max(map(len, commands)) + 2
    other = Path(args.baseline_tree).resolve() if args.baseline_tree else None
    base = {name: timed(a, ROOT, repeats)[0] for name, a in BASELINES}
    interp, torch_s = base[BASELINES[0][0]], base[BASELINES[1][0]]
    print(f"median of {repeats} runs; baselines: {BASELINES[0][0]} {interp:.2f} s, "
          f"{BASELINES[1][0]} {torch_s:.2f} s")  # fmt: skip
    head = (
        f"{'python -m adapters.':<{width}}{'exit':>5}{'seconds':>9}{'x python':>10}{'x torch':>9}"
    )
    if other is not None:
        head += f"{'tree s':>9}{'exit':>6}{'x tree':>8}"
    print(head)
    for name in commands:
        a = ["-m", "adapters." + name.split()[0], *name.split()[1:]]
        secs, rc = timed(a, ROOT, repeats)
        row = f"{name:<{width}}{rc:>5}{secs:>9.2f}{secs / interp:>10.1f}{secs / torch_s:>9.2f}"
        if other is not None:
            then, rc_then = timed(a, other, repeats)
            row += f"{then:>9.2f}{rc_then:>6}{secs / then:>8.2f}"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
