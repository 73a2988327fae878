"""Commit a training run's evaluations as checkable records: one report per row.

    python benchmarks/record_run.py runs/sokoban-... benchmarks/results/learning/sokoban \
        --command "python -m adapters.train --env sokoban"

Reads a run directory's ``eval_before.json`` (the row ``cold-start`` by default, ``--before``),
``eval_after.json`` (``at-grpo``, ``--after``), ``eval_references.json`` (``noop``, ``constant``,
``oracle``, ...) and ``eval_open_loop.json`` (``open-loop``) and writes each as
``OUT/ROW.json.gz`` (gzip with a fixed timestamp, so the same run gives the same bytes), then
``OUT/table.md``: the command, the before -> after comparison with the references (paired per
instance, 95% intervals) and the failure breakdown of each row
(:mod:`adapters.evaluation.failures`). Every record keeps what replays its episode on a fresh env;
``python -m adapters.view OUT`` renders the rows and ``tests/test_committed_records.py`` replays a
sample of them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# reference names of eval_references.json / the open loop -> row file names
_REFERENCE_ROWS = {"no-op": "noop", "open loop": "open-loop"}


def _row_name(name: str) -> str:
    return _REFERENCE_ROWS.get(name, name.replace(" ", "-"))


def write_report(report: dict[str, Any], path: Path) -> None:
    """``report`` as compact JSON, gzip-compressed with a fixed timestamp."""
    data = json.dumps(report, separators=(",", ":"), sort_keys=True).encode()
    path.write_bytes(gzip.compress(data, mtime=0))


def rows_of_run(run: Path, before: str, after: str) -> dict[str, dict[str, Any]]:
    """Row name -> report of a training run's evaluations (module docstring)."""
    rows = {
        before: json.loads((run / "eval_before.json").read_text()),
        after: json.loads((run / "eval_after.json").read_text()),
    }
    refs_path = run / "eval_references.json"
    if refs_path.is_file():
        for name, rep in json.loads(refs_path.read_text()).items():
            rows[_row_name(name)] = rep
    open_loop = run / "eval_open_loop.json"
    if open_loop.is_file():
        rows["open-loop"] = json.loads(open_loop.read_text())
    return rows


def scripted_run(run: Path) -> None:
    """A run directory of scripted Plan-Path evaluations (``--quick``): a tool that writes no
    program before, the oracle after, the no-op as a reference."""
    from adapters.evaluation import evaluate
    from adapters.policies.specs import build_policies

    small = {"height": 5, "width": 5, "min_distance": 3, "wall_density": 0.1}
    run.mkdir(parents=True, exist_ok=True)

    def ev(specs: list[str]) -> dict[str, Any]:
        policies, mapping = build_policies(specs, ["tool", "planner"])
        rep = evaluate("plan_path", policies, role_policy=mapping, episodes=2, env_config=small)
        return rep.to_dict()

    (run / "eval_before.json").write_text(json.dumps(ev(["tool=constant:", "planner=oracle"])))
    (run / "eval_after.json").write_text(json.dumps(ev(["tool=oracle", "planner=oracle"])))
    noop = ev(["tool=constant:", "planner=constant:"])
    (run / "eval_references.json").write_text(json.dumps({"no-op": noop}))


def main(argv: list[str] | None = None) -> int:
    from benchmarks._quick import parse_args

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, nargs="?", help="a training run directory")
    p.add_argument("out", type=Path, nargs="?", help="where the rows go")
    p.add_argument("--command", default=None, help="the command that made the run (required)")
    p.add_argument("--before", default="cold-start", help="row name of the evaluation before")
    p.add_argument("--after", default="at-grpo", help="row name of the evaluation after")
    args = parse_args(p, argv)  # --quick: a scripted Plan-Path run, recorded under runs/
    if args.quick:
        args.run, args.out = Path("runs/record-quick/run"), Path("runs/record-quick/rows")
        args.command = args.command or "(scripted evaluations)"
        scripted_run(args.run)
    if args.run is None or args.out is None or args.command is None:
        p.error("RUN, OUT and --command are required")
    from adapters.evaluation.failures import breakdown, classified, format_breakdown
    from adapters.evaluation.runner import compare_reports

    rows = rows_of_run(args.run, args.before, args.after)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rep in rows.items():
        write_report(rep, args.out / f"{name}.json.gz")
    labels = {row: name for name, row in _REFERENCE_ROWS.items()}
    refs = {labels.get(k, k): v for k, v in rows.items() if k not in (args.before, args.after)}
    text = [
        f"# {rows[args.after]['env']}: {args.before} -> {args.after}",
        "",
        f"Command: `{args.command}`. Each row's records: `ROW.json.gz` (every episode replays; "
        "`python -m adapters.view` on this directory renders them).",
        "",
        "```",
        compare_reports(rows[args.before], rows[args.after], references=refs),
        "```",
    ]
    first = rows[args.after]["per_episode"][0]
    if classified(first["env"], first.get("env_config")):
        order = [args.before, args.after, "open-loop"]
        table = breakdown({k: rows[k] for k in order if k in rows})
        text += [
            "",
            "What the team gets wrong (`python -m adapters.view DIR --failures`):",
            "",
            "```",
            format_breakdown(table),
            "```",
        ]
    (args.out / "table.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
