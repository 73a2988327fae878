"""The ``--quick`` convention of the benchmark scripts (a helper module, not a benchmark).

Every script ``benchmarks/NAME.py`` (a file with a ``__main__`` block whose name does not start
with ``_``) accepts ``--quick``: a smoke run of a few seconds on a 2-core CPU that goes through
the same code as the full run (every schedule, mode or backend of its table that needs no GPU,
no network and no downloaded data) at toy sizes, and prints its table. The numbers of a quick
run mean nothing; its point is that the script still runs. ``tests/test_benchmarks.py`` runs
every script with ``--quick`` in a subprocess (working directory: a temporary directory, so
``runs/`` outputs land there; ``HF_HUB_OFFLINE=1``, one OpenMP thread) and fails on a non-zero
exit status or an empty output; all of them together stay under two minutes on a loaded 2-core
machine, so keep a quick run to about ten seconds.

A script joins the smoke test by existing: :func:`parse_args` adds the flag, and with it the
given values become the parser's defaults (flags given explicitly still win)::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository root
    from benchmarks._quick import parse_args

    args = parse_args(build_parser(), argv, episodes=2, repeat=1)

Helper modules of the scripts (``_quick.py``, ``trl_baseline.py``) have no ``__main__`` block.

:func:`parse_args` also applies ``MAS_CPU_BF16`` (:func:`adapters.policies.models.
apply_cpu_bf16_env`) after parsing, before a script imports torch: ``MAS_CPU_BF16=emulated python
benchmarks/NAME.py`` measures the path of a CPU without native bfloat16 on any machine.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

__all__ = ["QUICK_HELP", "parse_args"]

QUICK_HELP = (
    "smoke run of a few seconds at toy sizes (every row, meaningless numbers); "
    "tests/test_benchmarks.py runs every script so"
)


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, **quick: Any
) -> argparse.Namespace:
    """Add ``--quick`` to ``parser`` and parse ``argv``; under ``--quick`` the ``quick`` values
    are the defaults (an explicit flag still wins).

    >>> p = argparse.ArgumentParser()
    >>> _ = p.add_argument("--episodes", type=int, default=48)
    >>> parse_args(p, [], episodes=2).episodes, parse_args(p, ["--quick"], episodes=2).episodes
    (48, 2)
    >>> parse_args(p, ["--quick", "--episodes", "5"], episodes=2).episodes
    5
    """
    if not any("--quick" in a.option_strings for a in parser._actions):
        parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    args = parser.parse_args(argv)
    from adapters.policies.models import apply_cpu_bf16_env

    apply_cpu_bf16_env()  # before the script imports torch
    if not args.quick:
        return args
    unknown = sorted(set(quick) - set(vars(args)))
    if unknown:
        raise ValueError(f"quick values for arguments the parser lacks: {unknown}")
    parser.set_defaults(**quick)
    return parser.parse_args(argv)
