"""AT-GRPO's comparisons (Tables 1 and 3) at small scale, with replayable records per row.

    python benchmarks/learning.py --envs sokoban                    # every row, CPU defaults
    python benchmarks/learning.py --envs plan_path --methods at-grpo,per-role --steps 4
    python benchmarks/learning.py --device cuda --envs sokoban --methods at-grpo \
        --set instances_per_step=32 --set max_new_tokens=128      # paper-sized levels on a GPU

For each grid setting (Sokoban, Plan-Path, Sudoku at the settings' CPU training defaults: the
sizes, cold start and prompts of ``python -m adapters.train --env ID``) it evaluates these rows
on the same ``--episodes`` unseen validation instances (distinct, split by symmetry class):

=====================  ==========================================================================
``single``             the planner alone (``mode="single"``), no RL (AT-GRPO's "Single agent")
``single-grpo``        the planner alone, trained with GRPO (parallel sampling, K episodes)
``cold-start``         the team (tool + planner, one shared policy), no RL ("MAS")
``at-grpo``            the team trained with AT-GRPO, shared policy (tree sampling, agent- and
                       turn-wise groups; the setting's default run)
``per-role``           the team trained with AT-GRPO, one policy per role
``swapped``            ``per-role``'s two policies exchanged between the roles (Table 3)
``sa-tool``            the tool alone (``single_agent="tool"``: its program's output is the
                       answer), trained with GRPO and evaluated alone (Table 3)
``sa-train-mas-eval``  the team made of ``sa-tool``'s tool and ``single-grpo``'s planner: each
                       role trained in its single-agent setting, evaluated together (Table 3)
``mas-grpo``           the team trained with GRPO on trajectory-level groups (parallel sampling,
                       one group per instance over its K episodes, every sample rewarded with its
                       episode's team reward: ``group_by="trajectory"``); isolates the algorithm
``noop``, ``constant``, ``oracle``   scripted references (:mod:`adapters.evaluation.references`)
``open-loop``          the open loop of ``at-grpo`` (its most frequent completion per role and
                       turn, replayed: what a fixed plan scores)
=====================  ==========================================================================

Every row starts from the same weights: the setting's cold start (the oracle's team turns as a
first fine-tune; ``single`` and ``cold-start`` are those weights untrained), so a row's difference
from another is the training alone. Every trained row gets the same budget, ``--steps`` steps of
``instances_per_step`` instances with ``K`` samples each (tree sampling: K candidates per agent
turn; parallel: K episodes per instance), the setting's defaults unless ``--set`` changes them;
``sa-train-mas-eval`` is made of two such runs, one per role.

Output, per setting, in ``--out/SETTING/``: ``ROW.json.gz`` for every row (the evaluation report:
every episode's record replays on a fresh env; ``python -m adapters.view DIR`` renders them) and
``table.md``: the command, each row's success, progress measure and final team reward (means with
95% intervals), the paired differences of every row against ``cold-start``, ``single-grpo``,
``mas-grpo`` and ``open-loop`` (95% intervals; * where zero is outside), whether the paper's
ordering holds, and the failure breakdown of every team row (:mod:`adapters.evaluation.failures`).
The table is rewritten after every row, so a stopped run keeps the rows it finished, and
``--resume`` continues it: a row whose ``ROW.json.gz`` is already in ``--out/SETTING/`` (and plays
the cold start's instances) is read instead of trained and evaluated again, and a row with a
checkpoint in ``--out/SETTING/runs/ROW-TIME/checkpoints/`` continues from it (a row stopped
part-way resumes at its last step; a trained row whose evaluation was lost is evaluated again
without training; ``sa-train-mas-eval`` added to a run that recorded ``single-grpo`` takes its
planner from that row's last checkpoint without evaluating it again). Sizes and
learning rates are chosen on training or test splits, never on the validation instances reported
here. ``docs/learning.md`` holds the measured tables.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._quick import parse_args
from benchmarks.record_run import write_report

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SETTINGS = ("sokoban", "plan_path", "sudoku")
LABELS = {
    "single": "planner alone, no RL",
    "single-grpo": "planner alone + GRPO",
    "cold-start": "team, no RL",
    "at-grpo": "team + AT-GRPO (shared)",
    "per-role": "team + AT-GRPO (per-role)",
    "swapped": "per-role, policies swapped",
    "sa-tool": "tool alone + GRPO",
    "sa-train-mas-eval": "trained alone, eval as team",
    "mas-grpo": "team + GRPO (trajectory groups)",
    "noop": "no-op",
    "constant": "constant (a train answer)",
    "demo-answer": "constant (the demo's answer)",
    "oracle": "oracle",
    "open-loop": "open loop of at-grpo",
}
# the rows --methods picks (cold-start and the references always run); what each brings along
METHODS = {
    "single": ("single",),
    "single-grpo": ("single-grpo",),
    "at-grpo": ("at-grpo", "open-loop"),
    "per-role": ("per-role", "swapped"),
    "sa-train-mas-eval": ("sa-tool", "single-grpo", "sa-train-mas-eval"),
    "mas-grpo": ("mas-grpo",),
}
BASELINES = ("cold-start", "single-grpo", "mas-grpo", "open-loop")
TRAINED = ("at-grpo", "per-role", "mas-grpo", "single-grpo", "sa-tool")
MODEL_ROWS = tuple(r for r in LABELS if r not in ("noop", "constant", "demo-answer", "oracle"))
TEAM_ROWS = ("cold-start", "at-grpo", "per-role", "swapped", "sa-train-mas-eval", "mas-grpo")
REFERENCE_ROWS = {"no-op": "noop", "open loop": "open-loop", "demo answer": "demo-answer"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", default=",".join(SETTINGS), help="comma-separated setting ids")
    p.add_argument(
        "--methods",
        default=",".join(METHODS),
        help="comma-separated rows to train besides cold-start and the references: "
        + ", ".join(METHODS),
    )
    p.add_argument(
        "--episodes", type=int, default=None, help="validation instances (default: the setting's)"
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps per trained row (default: the setting's)",
    )
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
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a TrainConfig value for every row (repeatable), e.g. --set instances_per_step=8",
    )
    p.add_argument(
        "--env-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting option for every row (repeatable), e.g. --env-config height=10",
    )
    p.add_argument("--out", default="runs/learning-benchmark")
    p.add_argument(
        "--resume",
        action="store_true",
        help="read the rows already recorded in --out instead of running them again",
    )
    return p


class Setting:
    """The rows of one setting: trainers built on the same cold start, reports kept as dicts."""

    def __init__(self, env_id: str, args: argparse.Namespace, out: Path, command: str) -> None:
        self.env_id = env_id
        self.args = args
        self.out = out
        self.command = command
        self.reports: dict[str, dict[str, Any]] = {}
        self.budget: dict[str, str] = {}
        self.failures: dict[str, dict[str, Any]] = {}  # row -> its failure breakdown
        self.init: str | None = None  # the cold start every row starts from
        self.started = time.strftime("%Y%m%d-%H%M%S")  # the trainers' scratch directories

    def config(self, row: str, env_config: Mapping[str, Any] | None = None, **kw: Any) -> Any:
        from adapters.training.config import TrainConfig

        a = self.args
        values: dict[str, Any] = {
            "env": self.env_id,
            "model": a.model,
            "seed": a.seed,
            "threads": a.threads,
            "device": a.device,
            "progress": False,
            "plot_every": 0,
            "save_final": False,
            # a checkpoint after every step (LoRA weights and optimizer state, tens of MB), so a
            # row stopped part-way continues at its last step with --resume
            "save_every": 1,
            "keep_checkpoints": 1,
            "output_dir": str(self.out / "runs" / f"{row}-{self.started}"),
            **({"steps": a.steps} if a.steps is not None else {}),
            **({"eval_episodes": a.episodes} if a.episodes is not None else {}),
            **({"init": self.init} if self.init is not None else {}),
            **a.overrides,
            **kw,
        }
        options = {**a.env_config, **(env_config or {})}
        if options:
            values["env_config"] = options
        return TrainConfig(**values)

    def trainer(
        self,
        row: str,
        env_config: Mapping[str, Any] | None = None,
        resumable: bool = True,
        **kw: Any,
    ) -> Any:
        """The row's trainer; with ``--resume`` (and ``resumable``), continued from the newest
        checkpoint an earlier run of this row left in ``--out/SETTING/runs/``."""
        from adapters.training.checkpoints import latest_checkpoint
        from adapters.training.trainer import Trainer

        if self.args.resume and resumable:
            for run in sorted((self.out / "runs").glob(f"{row}-*"), reverse=True):
                if latest_checkpoint(run) is not None:
                    cfg = self.config(row, env_config, **kw, output_dir=str(run))
                    print(f"  {self.env_id} {row}: resumed from {run}", flush=True)
                    return Trainer(cfg, log=lambda s: None, resume=True)
        return Trainer(self.config(row, env_config, **kw), log=lambda s: None)

    def recorded(self, *rows: str) -> bool:
        """``--resume``: whether every one of ``rows`` is recorded already (then read it)."""
        if not self.args.resume:
            return False
        paths = [self.out / f"{row}.json.gz" for row in rows]
        if not all(p.is_file() for p in paths):
            return False
        for row, path in zip(rows, paths):
            rep = json.loads(gzip.decompress(path.read_bytes()))
            base = self.reports.get("cold-start", rep)
            if not _same_instances(rep, base):
                raise SystemExit(f"--resume: {path} did not play the cold start's instances")
            self.reports[row] = rep
            if row in TRAINED:
                self.budget.setdefault(row, "(recorded by an earlier run, read by --resume)")
            print(f"  {self.env_id} {row}: read from {path}", flush=True)
        return True

    def record(self, row: str, report: Any) -> None:
        rep = report.to_dict() if hasattr(report, "to_dict") else dict(report)
        self.reports[row] = rep
        where = self.out / f"{row}.json.gz"
        write_report(rep, where)
        print(
            f"  {self.env_id} {row}: success {rep['success_rate']:.3f}, {rep['progress_label']} "
            f"{rep['progress']:.3f}, team {rep['team_reward']:.3f} ({rep['seconds']:.0f} s)",
            flush=True,
        )
        (self.out / "table.md").write_text(table(self) + "\n")

    def train_and_record(self, row: str, trainer: Any) -> None:
        """Train ``row`` to its last step and record its evaluation; a row that ``--resume``
        found both trained to its last step and recorded is read, not evaluated again (the
        record is of these weights), so a pass that adds rows built on it costs no evaluation."""
        done = trainer.step >= trainer.cfg.schedule.steps and self.recorded(row)
        self.train(row, trainer)
        if not done:
            self.record(row, _evaluate(trainer))

    def train(self, row: str, trainer: Any) -> None:
        cfg = trainer.cfg
        if trainer.step >= cfg.schedule.steps and row in self.budget:
            return  # resumed after its last step: the recorded budget stands
        t0 = time.perf_counter()
        while trainer.step < cfg.schedule.steps:
            trainer.train_step()
        k = cfg.rollout.candidates
        self.budget[row] = (
            f"{trainer.step} steps x {cfg.schedule.instances_per_step} instances x K={k} "
            f"({cfg.rollout.sampling}, {cfg.update.algorithm}"
            + (", trajectory groups" if cfg.rollout.group_by == "trajectory" else "")
            + f"; {time.perf_counter() - t0:.0f} s)"
        )


def _evaluate(
    trainer: Any,
    env_config: Mapping[str, Any] | None = None,
    policies: Mapping[str, Any] | None = None,
    role_policy: Mapping[str, str] | None = None,
) -> Any:
    """The greedy evaluation a run does (``Trainer.evaluate``), optionally of other policies or
    another role mapping on the trainer's instances."""
    from adapters.evaluation import evaluate

    cfg = trainer.run.cfg
    return evaluate(
        cfg.env,
        policies or trainer.run.policies,
        episodes=cfg.eval.eval_episodes,
        env_config=env_config or trainer.run.env_config,
        role_policy=role_policy or trainer.run.role_policy,
        split=cfg.eval.eval_split,
        seed=cfg.seed,
        temperature=cfg.eval.eval_temperature,
        max_new_tokens=trainer.run.engine.generation.max_new_tokens,
        role_max_new_tokens=trainer.eval_token_limits(),
    )


def _policy_of(trainer: Any, role: str) -> Any:
    pid = trainer.run.role_policy.get(role) or next(iter(trainer.run.policies))
    return trainer.run.policies[pid]


def run_setting(s: Setting, rows: set[str]) -> None:
    """Every row of ``rows`` for one setting (module docstring)."""
    from adapters.evaluation.references import open_loop_reference

    # the team after the cold start, and the references on its instances
    # the cold start is evaluated with this trainer's weights: resumed only once it is recorded
    with s.trainer("at-grpo", resumable=(s.out / "cold-start.json.gz").is_file()) as team:
        s.init = team.run.init_dir
        team_config = dict(team.run.env_config)
        if not s.recorded("cold-start"):
            s.record("cold-start", _evaluate(team))
        for name, rep in team.references().items():
            row = REFERENCE_ROWS.get(name, name.replace(" ", "-"))
            if not s.recorded(row):
                s.record(row, rep)
        if "at-grpo" in rows and not s.recorded("at-grpo", "open-loop"):
            s.train("at-grpo", team)
            after = _evaluate(team)
            s.record("at-grpo", after)
            s.record("open-loop", open_loop_reference(after))
    single = {**team_config, "mode": "single"}
    if "per-role" in rows and not s.recorded("per-role", "swapped"):
        with s.trainer("per-role", recipe="at-grpo-per-role") as t:
            s.train_and_record("per-role", t)
            mapping = t.run.role_policy
            swapped = {"tool": mapping["planner"], "planner": mapping["tool"]}
            s.record("swapped", _evaluate(t, role_policy=swapped))
    if "mas-grpo" in rows and not s.recorded("mas-grpo"):
        with s.trainer("mas-grpo", algorithm="grpo", group_by="trajectory") as t:
            s.train_and_record("mas-grpo", t)
    if "single" in rows and not s.recorded("single"):
        with s.trainer("single", single, steps=0) as t:
            s.record("single", _evaluate(t))
    sa_rows = ("sa-tool", "sa-train-mas-eval") if "sa-train-mas-eval" in rows else ()
    if "single-grpo" in rows and not s.recorded("single-grpo", *sa_rows):
        with s.trainer("single-grpo", single, algorithm="grpo") as planner:
            s.train_and_record("single-grpo", planner)
            if "sa-train-mas-eval" in rows:
                tool_alone = {**single, "single_agent": "tool"}
                with s.trainer("sa-tool", tool_alone, algorithm="grpo") as tool:
                    s.train_and_record("sa-tool", tool)
                    policies = {
                        "tool": _policy_of(tool, "tool"),
                        "planner": _policy_of(planner, "planner"),
                    }
                    mapping = {"tool": "tool", "planner": "planner"}
                    s.record(
                        "sa-train-mas-eval",
                        _evaluate(tool, team_config, policies=policies, role_policy=mapping),
                    )


# ---------------------------------------------------------------------------- the table
def _same_instances(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    ids = [e["instance_id"] for e in a["per_episode"]]
    return ids == [e["instance_id"] for e in b["per_episode"]]


def _row_cells(rep: Mapping[str, Any], measures: list[tuple[str, str]]) -> list[str]:
    from adapters.evaluation.runner import episode_values
    from adapters.evaluation.stats import mean_interval

    cells = []
    for _label, key in measures:
        iv = mean_interval(episode_values(rep, key))
        cells.append(f"{iv.mean:.3f} [{iv.low:.3f}, {iv.high:.3f}]")
    return cells


def _difference(reps: Mapping[str, Mapping[str, Any]], row: str, other: str, key: str) -> Any:
    from adapters.evaluation.runner import episode_values
    from adapters.evaluation.stats import paired_difference

    return paired_difference(episode_values(reps[other], key), episode_values(reps[row], key))


def ordering(reps: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The paper's ordering on success, checked: the better of at-grpo and per-role above
    single-grpo, cold-start and open-loop (95% intervals above 0), swapped below per-role."""
    lines = []
    trained = [r for r in ("at-grpo", "per-role") if r in reps]
    if trained:
        best = max(trained, key=lambda r: reps[r]["success_rate"])
        for other in ("single-grpo", "cold-start", "open-loop"):
            if other in reps:
                d = _difference(reps, best, other, "success")
                verdict = "holds" if d.low > 0 else "does not hold"
                lines.append(
                    f"- {best} above {other}: {d.mean_diff:+.3f} [{d.low:+.3f}, {d.high:+.3f}]: "
                    f"{verdict}"
                )
    if "swapped" in reps and "per-role" in reps:
        d = _difference(reps, "swapped", "per-role", "success")
        verdict = "holds" if d.high < 0 else "does not hold"
        lines.append(
            f"- swapped below per-role: {d.mean_diff:+.3f} [{d.low:+.3f}, {d.high:+.3f}]: {verdict}"
        )
    return lines


def table(s: Setting) -> str:
    """``table.md`` of one setting (module docstring)."""
    from adapters.evaluation.failures import breakdown, classified, format_breakdown
    from adapters.evaluation.runner import task_measures

    reps = s.reports
    first = next(iter(reps.values()))
    measures = task_measures(first, shaped=False)
    order = [r for r in LABELS if r in reps] + [r for r in reps if r not in LABELS]
    n = len(first["per_episode"])
    out = [
        f"# {s.env_id}: AT-GRPO's comparisons at small scale",
        "",
        f"Command: `{s.command}`. {n} unseen {first['split']} instances, the same for every row "
        "(each row's records: `ROW.json.gz`; `python -m adapters.view` on this directory "
        "renders them). Every row starts from the same cold start.",
        "",
        "| row | what | " + " | ".join(f"{m} [95%]" for m, _ in measures) + " |",
        "|---|---|" + "---|" * len(measures),
    ]
    for row in order:
        cells = _row_cells(reps[row], measures)
        out.append(f"| `{row}` | {LABELS.get(row, row)} | " + " | ".join(cells) + " |")
    if s.budget:
        out += ["", "Training budget per trained row:", ""]
        out += [f"- `{row}`: {b}" for row, b in s.budget.items()]
    bases = [b for b in BASELINES if b in reps]
    for m, key in measures:
        out += [
            "",
            f"Paired differences of {m}, row minus baseline, mean [95% interval]; * the "
            "interval excludes 0:",
            "",
            "| row | " + " | ".join(f"- `{b}`" for b in bases) + " |",
            "|---|" + "---|" * len(bases),
        ]
        for row in order:
            if row not in MODEL_ROWS:
                continue
            cells = []
            for base in bases:
                if row == base or not _same_instances(reps[row], reps[base]):
                    cells.append("")
                    continue
                d = _difference(reps, row, base, key)
                star = "*" if d.excludes_zero else ""
                cells.append(f"{d.mean_diff:+.3f} [{d.low:+.3f}, {d.high:+.3f}]{star}")
            out.append(f"| `{row}` | " + " | ".join(cells) + " |")
    checks = ordering(reps)
    if checks:
        out += ["", "The paper's ordering (success):", "", *checks]
    meta = first["per_episode"][0]
    if classified(meta["env"], meta.get("env_config")):
        new = {r: reps[r] for r in TEAM_ROWS if r in reps and r not in s.failures}
        s.failures.update(breakdown(new))  # each row's records are replayed once
        team = {r: s.failures[r] for r in TEAM_ROWS if r in s.failures}
        out += [
            "",
            "What each team gets wrong (`python -m adapters.view DIR --failures`):",
            "",
            "```",
            format_breakdown(team),
            "```",
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    quick: dict[str, Any] = dict(envs="plan_path", model="tiny", episodes=2, steps=1, threads=1)
    quick["overrides"] = ["instances_per_step=1", "candidates=2", "max_new_tokens=8"]
    quick["env_config"] = ["height=4", "width=4", "min_distance=2", "wall_density=0.3"]
    args = parse_args(build_parser(), argv, **quick)
    from adapters.training.flags import parse_key_values

    picked = {m.strip() for m in args.methods.split(",") if m.strip()}
    unknown = picked - set(METHODS)
    if unknown:
        raise SystemExit(f"--methods: unknown rows {sorted(unknown)} ({', '.join(METHODS)})")
    rows = {r for m in picked for r in METHODS[m]}
    args.overrides = parse_key_values(args.overrides, "--set")
    args.env_config = parse_key_values(args.env_config, "--env-config")
    import torch

    torch.set_num_threads(args.threads)
    command = "python benchmarks/learning.py " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    envs_ = [e.strip() for e in args.envs.split(",") if e.strip()]
    root = Path(args.out)
    print(
        f"learning benchmark: {envs_}, rows {sorted(rows)}, model {args.model} on {args.device}",
        flush=True,
    )
    t0 = time.perf_counter()
    for e in envs_:
        out = root / e
        out.mkdir(parents=True, exist_ok=True)
        s = Setting(e, args, out, command)
        run_setting(s, rows)
        text = table(s)
        (out / "table.md").write_text(text + "\n")
        print()
        print(text)
    print(f"\nwall time {time.perf_counter() - t0:.0f} s; tables and records in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
