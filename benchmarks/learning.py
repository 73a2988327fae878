"""A small-scale replica of AT-GRPO's main table (Table 2) with the embedded model.

    python benchmarks/learning.py --budget-min 60                 # the three grid settings
    python benchmarks/learning.py --budget-min 20 --envs plan_path --episodes 32
    python benchmarks/learning.py --device cuda --envs sokoban --methods shared \
        --set instances_per_step=32 --set max_new_tokens=128      # paper-sized levels on a GPU

For Sokoban, Plan-Path and Sudoku (the settings' default CPU recipes: instances shrunk for CPU,
the paper's protocol and rewards) it evaluates, on the same validation instances, the rows of
AT-GRPO's Table 2 at small scale (``--methods`` picks the trained ones):

1. **Single agent (untrained)**: ``mode="single"``, the planner alone, the base model;
2. **MAS (untrained)**: tool + planner, one role-sharing base model;
3. **MAS, cold start only**: the recipe's ``init`` (the oracle's turns as a first fine-tune,
   ``adapters/training/coldstart.py``) and no RL;
4. **cold start + AT-GRPO (shared policy)**: the default recipe;
5. **cold start + AT-GRPO (per-role policies)**: ``at-grpo-per-role`` (one LoRA per role);
6. **Single agent, cold start + GRPO**: the paper's single-agent baseline trained the same way;

and, on the same instances, the scripted references (:mod:`adapters.evaluation.references`):
the no-op (every role answers nothing), a constant (a training level's oracle answers, what a
policy that ignores the instance can score), the demonstration's answer where a prompt shows one,
the oracle, and each trained row's open loop. For each setting it prints one block, methods as
rows, with the task's measures first: success rate, the setting's own progress measure at the end
of the episode (``env.progress()``: boxes on goals, distance closed, cells solved) and the final
team reward, then the shaped mean per-step reward, each a mean with its 95% interval; then the
paired differences (95% intervals) of each trained row against the untrained MAS, the cold start
and the references on the task's measures. A trained team has learned the task only where those
intervals lie above zero; a shaped-reward gain alone is no evidence. ``--budget-min`` is the
total training wall time, split evenly over the trained runs (each trains until its share is
spent, at least one step); evaluations are not counted. Every trained run is evaluated every
``--eval-every`` steps too, and ``learning_curves.png`` draws the progress measure at those
validation points. Everything (tables, curves, the raw reports with replayable episode records)
goes to ``--out``; the table and raw reports are rewritten after each setting, so a run stopped
early keeps the settings it finished.

``--device cuda`` resolves the recipes' CUDA values (the paper's instance sizes and protocol,
full fine-tuning at the paper's learning rate, no demonstration); ``--set KEY=VALUE`` changes a
TrainConfig value for every run of the benchmark (e.g. the CPU recipe's demonstration and LoRA
step on a GPU: ``--set demos=1 --set lora_rank=8 --set lr=1e-3``), and ``--methods`` picks the
rows to run besides MAS (prompt-only) and the references. The one GPU run so far (an H200,
paper-sized Sokoban, 32 instances per step, two steps in its five minutes) and what it showed
(the demonstration's answer learned, no task learning) are in ``docs/learning.md``.

Measurements. This table has not been regenerated since the cold start and the split by
symmetry class (``envs/core/splits.py``); its rows for ``swapped``, trajectory-level GRPO groups
and single-agent training are not written yet. What stands for it is the default Sokoban run
(rows "MAS, cold start only" and "cold start + AT-GRPO (shared policy)" on 64 unseen 8 x 8
levels, with the no-op, constant, oracle and open-loop references), committed as replayable
records with its table and failure breakdown in ``benchmarks/results/learning/sokoban/``
(``benchmarks/record_run.py``; ``docs/learning.md`` reads them). The earlier table of this
benchmark (no cold start; a one-line demonstration in every prompt; 16 levels per setting) found
every trained row equal to the untrained team and to the demonstration's answer on success,
progress and team reward in all three settings; ``docs/learning.md`` keeps those measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._quick import parse_args

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SETTINGS = ("sokoban", "plan_path", "sudoku")
# rows: key -> (label, mode, init: None = the recipe's, "none" = the base model, trained)
ROWS = (
    ("single", "Single agent (untrained)"),
    ("mas", "MAS (untrained)"),
    ("cold", "MAS, cold start only"),
    ("shared", "cold start + AT-GRPO (shared policy)"),
    ("per_role", "cold start + AT-GRPO (per-role policies)"),
    ("single_grpo", "Single agent, cold start + GRPO"),
)
# scripted references on the same instances (adapters.evaluation.references), no model
REFERENCES = (
    ("ref:no-op", "no-op (answers nothing)"),
    ("ref:constant", "constant: a train level's oracle answers"),
    ("ref:demo answer", "constant: the demo's answer"),
    ("ref:oracle", "oracle"),
    ("ref:open loop", "open loop of the shared row"),
)
TRAINED = tuple(r for r in ROWS if r[0] in ("shared", "per_role", "single_grpo"))
METHODS = ("single", "shared", "per_role", "single_grpo")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget-min", type=float, default=60.0, help="total training minutes")
    p.add_argument("--envs", default=",".join(SETTINGS), help="comma-separated setting ids")
    p.add_argument("--episodes", type=int, default=32, help="validation instances")
    p.add_argument(
        "--eval-every", type=int, default=4, help="steps between curve points (0: ends only)"
    )
    p.add_argument("--max-steps", type=int, default=1000, help="cap on steps per run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--model", default="smollm2")
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu (the settings' CPU recipes: shrunk instances) | cuda | cuda:N (the recipes' "
        "CUDA values: the paper's instance sizes and protocol)",
    )
    p.add_argument(
        "--methods",
        default=",".join(METHODS),
        help="comma-separated rows to run besides MAS (untrained), the cold start and the "
        "references: " + ", ".join(METHODS),
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a TrainConfig value for every run (repeatable), e.g. --set max_new_tokens=256 "
        "--set instances_per_step=32; the table's header lists them",
    )
    p.add_argument("--out", default="runs/learning-benchmark")
    return p


def _evaluate(trainer: Any, env_config: dict[str, Any], tag: str) -> Any:
    from adapters.evaluation import evaluate

    cfg = trainer.cfg
    return evaluate(
        cfg.env,
        trainer.run.policies,
        episodes=cfg.eval.eval_episodes,
        env_config=env_config,
        role_policy=trainer.run.role_policy,
        split=cfg.eval.eval_split,
        seed=cfg.seed,
        temperature=trainer.run.cfg.eval.eval_temperature,
        max_new_tokens=trainer.run.engine.generation.max_new_tokens,
    )


def _point(step: int, rep: Any) -> tuple[int, float, float, float]:
    """A curve point: (step, progress measure, success rate, shaped mean reward)."""
    return (step, rep.progress, rep.success_rate, rep.mean_reward)


def _config(env_id: str, args: argparse.Namespace, out: Path, row: str, **kw: Any) -> Any:
    from adapters.training.config import TrainConfig

    values = {
        "env": env_id,
        "model": args.model,
        "steps": args.max_steps,
        "eval_episodes": args.episodes,
        "seed": args.seed,
        "threads": args.threads,
        "device": args.device,
        "progress": False,
        "plot_every": 0,
        "save_final": False,
        "save_every": 10_000,
        "output_dir": str(out / f"{env_id}-{row}"),
        **args.overrides,
        **kw,
    }
    return TrainConfig(**values)


def _train(trainer: Any, env_config: dict[str, Any], args: argparse.Namespace, share_s: float):
    """Train until the budget share is spent (at least one step); the curve of evaluations."""
    curve = []
    train_s = 0.0
    while trainer.step < args.max_steps and (trainer.step == 0 or train_s < share_s):
        t = time.perf_counter()
        trainer.train_step()
        train_s += time.perf_counter() - t
        if args.eval_every and trainer.step % args.eval_every == 0:
            curve.append(_point(trainer.step, _evaluate(trainer, env_config, "curve")))
    return curve, train_s


def run_setting(env_id: str, args: argparse.Namespace, share_s: float, out: Path) -> dict:
    """The rows of one setting (module docstring): reports and learning curves."""
    from adapters.evaluation.references import (
        evaluate_references,
        open_loop_reference,
        oracle_constants,
    )
    from adapters.training.trainer import Trainer

    methods = args.methods  # parsed once by main()
    result: dict[str, Any] = {"reports": {}, "curves": {}, "steps": {}, "train_s": {}}
    reps = result["reports"]
    # the untrained team and the references
    base = Trainer(_config(env_id, args, out, "mas", init="none", steps=0), log=lambda s: None)
    env_config = dict(base.run.env_config)
    t_eval = time.perf_counter()
    reps["mas"] = _evaluate(base, env_config, "mas")
    refs = evaluate_references(
        env_id,
        base.run.roles,
        base.run.demos,
        oracle_constants(env_id, env_config, args.seed),
        episodes=args.episodes,
        env_config=env_config,
        split=base.cfg.eval.eval_split,
        seed=args.seed,
        max_new_tokens=base.cfg.generation.max_new_tokens,
    )
    reps.update({f"ref:{k}": r for k, r in refs.items()})
    base.close()
    print(f"  {env_id}: untrained MAS and references in {time.perf_counter() - t_eval:.0f} s")
    if "single" in methods or "single_grpo" in methods:
        single_cfg = {**env_config, "mode": "single"}
        cfg = _config(env_id, args, out, "single", init="none", steps=0, env_config=single_cfg)
        single = Trainer(cfg, log=lambda s: None)
        reps["single"] = _evaluate(single, single_cfg, "single")
        single.close()
    runs = [
        ("shared", {}),
        ("per_role", {"recipe": "at-grpo-per-role"}),
        ("single_grpo", {"algorithm": "grpo", "init": "cold-start"}),
    ]
    for row, kw in runs:
        if row not in methods:
            continue
        if row == "single_grpo":
            kw = {**kw, "env_config": {**env_config, "mode": "single"}}
        trainer = Trainer(_config(env_id, args, out, row, **kw), log=lambda s: None)
        row_env = dict(trainer.run.env_config)
        t0 = time.perf_counter()
        before = _evaluate(trainer, row_env, "before")
        if row == "shared" or ("cold" not in reps and row == "per_role"):
            reps["cold"] = before  # every MAS row starts from the same cold-started team
        curve, train_s = _train(trainer, row_env, args, share_s)
        after = _evaluate(trainer, row_env, "after")
        curve = [_point(0, before), *curve]
        if curve[-1][0] != trainer.step:
            curve.append(_point(trainer.step, after))
        reps[row] = after
        if row == "shared":
            reps["ref:open loop"] = open_loop_reference(after)
        result["curves"][row] = curve
        result["steps"][row] = trainer.step
        result["train_s"][row] = train_s
        print(
            f"  {env_id} {row}: {trainer.step} steps in {train_s:.0f} s of training "
            f"({time.perf_counter() - t0:.0f} s with evaluations), init {trainer.cfg.policy.init}",
            flush=True,
        )
        trainer.close()
    return result


def _metrics(rep: Any) -> list[tuple[str, str]]:
    """(label, per-episode key): the task's measures first, the shaped reward last."""
    rows = [("success", "success")]
    if rep.progress_label != "solved":
        rows.append((rep.progress_label, "progress"))
    return [*rows, ("team reward", "team"), ("mean reward (shaped)", "reward")]


def table(results: dict[str, dict]) -> str:
    """One block per setting: methods and scripted references as rows, the task's measures
    (success, the setting's progress measure, final team reward) then the shaped mean reward as
    columns, each a mean with its 95% interval; then the paired differences of each trained row
    against MAS (prompt-only) and the references on the task's measures."""
    from adapters.evaluation.stats import mean_interval, paired_difference

    lines: list[str] = []
    for e, res in results.items():
        reps = res["reports"]
        metrics = _metrics(reps["mas"])
        rows = [(k, label) for k, label in (*ROWS, *REFERENCES) if k in reps]
        n = reps["mas"].episodes
        lines += [
            f"{e}: {n} validation instances, mean [95% interval]",
            f"{'method':<36}" + "".join(f"{label:>22}" for label, _ in metrics),
        ]
        for key, label in rows:
            cells = []
            for _m, field in metrics:
                iv = mean_interval(reps[key].values(field))
                cells.append(f"{iv.mean:.3f} [{iv.low:.2f},{iv.high:.2f}]")
            lines.append(f"{label:<36}" + "".join(f"{c:>22}" for c in cells))
        task = metrics[:-1]
        lines.append(
            "paired difference, trained row - other row ("
            + " / ".join(label for label, _ in task)
            + "), 95% interval; * excludes zero:"
        )
        for key, label in TRAINED:
            if key not in reps:
                continue
            others = [("cold", "the cold start"), ("mas", "MAS (untrained)"), *REFERENCES]
            for other, other_label in others:
                if other not in reps or other == "ref:oracle":
                    continue
                parts = []
                for _m, field in task:
                    d = paired_difference(reps[other].values(field), reps[key].values(field))
                    mark = "*" if d.excludes_zero else " "
                    parts.append(f"{d.mean_diff:+.3f} [{d.low:+.3f},{d.high:+.3f}]{mark}")
                lines.append(f"  {label} - {other_label}: " + "  ".join(parts))
        lines.append("")
    return "\n".join(lines).rstrip()


def plot(results: dict[str, dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.2), squeeze=False)
    for ax, (env_id, res) in zip(axes[0], results.items()):
        for key, label in TRAINED:
            pts = res["curves"].get(key, [])
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        reps = res["reports"]
        lines = [("mas", "MAS (untrained)", "--"), ("single", "single agent", ":")]
        lines += [("ref:no-op", "no-op", "-."), ("ref:constant", "constant", (0, (1, 3)))]
        lines += [("ref:open loop", "open loop", (0, (3, 1, 1, 1)))]
        for key, label, style in lines:
            if key in reps:
                ax.axhline(reps[key].progress, color="gray", linestyle=style, label=label)
        ax.set_title(f"{env_id}: validation {reps['mas'].progress_label}", fontsize=9)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    quick = dict(envs="sokoban", model="tiny", episodes=2, eval_every=0, max_steps=1, threads=1)
    quick["methods"] = "shared"
    args = parse_args(build_parser(), argv, budget_min=0.05, **quick)
    from adapters.training.flags import parse_key_values

    args.methods = {m.strip() for m in args.methods.split(",") if m.strip()}
    unknown = args.methods - set(METHODS)
    if unknown:
        raise SystemExit(f"--methods: unknown rows {sorted(unknown)} ({', '.join(METHODS)})")
    set_text = " ".join(args.overrides)
    args.overrides = parse_key_values(args.overrides, "--set")
    import torch

    torch.set_num_threads(args.threads)
    envs_ = [e.strip() for e in args.envs.split(",") if e.strip()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trained = args.methods & {"shared", "per_role", "single_grpo"}
    share_s = args.budget_min * 60.0 / max(1, len(trained) * len(envs_))
    print(
        f"learning benchmark: {envs_}, {args.episodes} validation instances, "
        f"{args.budget_min:g} min of training in all ({share_s / 60:.1f} min per trained run), "
        f"model {args.model} on {args.device}, {args.threads} torch threads"
        + (f", overrides {set_text}" if set_text else ""),
        flush=True,
    )
    t0 = time.perf_counter()
    results: dict[str, dict] = {}
    for e in envs_:  # the table and raw reports are rewritten after each setting
        results[e] = run_setting(e, args, share_s, out)
        text = table(results)
        (out / "table.txt").write_text(text + "\n")
        raw = {
            e: {
                "reports": {k: v.to_dict() for k, v in r["reports"].items()},
                "curves": r["curves"],
                "steps": r["steps"],
                "train_s": r["train_s"],
            }
            for e, r in results.items()
        }
        (out / "results.json").write_text(json.dumps(raw, indent=2))
    print()
    print(text)
    plot(results, out / "learning_curves.png")
    print(f"\nwall time {time.perf_counter() - t0:.0f} s; table, curves and reports in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
