"""Train policies on a setting: ``python -m adapters.train --env sokoban``.

Examples::

    python -m adapters.train --env sokoban                  # CPU demo, embedded SmolLM2, LoRA
    python -m adapters.train --env plan_path --mode single --steps 20 --candidates 4
    python -m adapters.train --env sudoku --per-role --algorithm at-grpo --keep best
    python -m adapters.train --env mae --algorithm tr-reinforce++ --candidates 1
    python -m adapters.train --config run.yaml --lr 5e-5     # flags override the YAML file
    python -m adapters.train --resume runs/sokoban-at-grpo-20250101-120000 [--steps 20]
    python -m adapters.train --print-config                  # the resolved configuration
    python -m adapters.train --env sokoban --model Qwen/Qwen3-1.7B \
        --chat-template-kwargs '{"enable_thinking": false}' --lora-rank 0   # paper setup, CUDA
    torchrun --nproc-per-node 8 -m adapters.train --env sokoban --model Qwen/Qwen3-1.7B \
        --lora-rank 0                                        # 8 ranks, FSDP2 (training.distributed)
    torchrun --nproc-per-node 2 -m adapters.train --env sokoban --model tiny --steps 2  # CPU

Every :class:`~adapters.training.config.TrainConfig` field is a flag (``--lora-rank 0`` = full
fine-tuning, ``--env-config KEY=VALUE`` for setting options; ``--mode`` and ``--max-turns`` are
shortcuts for two of them; :mod:`adapters.training.flags`). Unknown YAML keys are an error. With no
flags the run uses the defaults for the device (:mod:`adapters.training.recipes`): on a CPU-only
machine a few-minute demonstration, on CUDA the paper-sized settings. See
:mod:`adapters.training.trainer` for what a run writes and how resuming works. Started by
``torchrun`` or ``accelerate launch``, every process is one rank of a data-parallel run
(:mod:`adapters.training.distributed`; ``instances_per_step`` is then the global batch); only rank
0 prints. This module only parses arguments, checks them and starts the trainer.

``--steps 0`` evaluates the initial policies once (``eval_before.json``, the references and the
episode viewer ``episodes.html``), says that it trained nothing, and stops. The setting, its
options, an explicit instance and ``--model`` are checked before torch is imported and before the
run directory is made, and so is what the run needs from the machine (:mod:`adapters.preflight`:
bubblewrap when the setting's agents run programs, the model's files, 1 GiB free on the run
directory's disk); a mistake ends in one ``error:`` line and exit status 2
(:mod:`adapters.cli`; ``--debug`` shows the traceback). Once the model is loaded, the run header
ends with a rough estimate of the wall time, from forward passes timed on this machine
(:mod:`adapters.training.estimate`), and the progress bars count agent steps, so they move
within an evaluation's first minutes (:mod:`adapters.rollout.progress`).

**A file never names code.** ``--env package.module:id`` imports ``package.module`` (a setting
registered outside this repository), because a person typed it. The env id of a file, the
``config.yaml`` that ``--resume DIR`` reads or a ``--config`` file, imports nothing
(:func:`envs.registered_spec`): an id whose module is not loaded is refused before anything is
imported or read further, with one line naming the flag that loads it::

    python -m adapters.train --resume runs/my-toy-run --import toy_pkg.echo

(``--import MODULE``, repeatable, imports a module first; only for a module you trust.)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import envs
from adapters import cli
from adapters.training.config import ConfigError, TrainConfig, config_from_dict, load_yaml
from adapters.training.flags import add_config_arguments, merge_config, overrides_from_args

__all__ = ["build_parser", "config_from_argv", "main"]


def build_parser() -> argparse.ArgumentParser:
    from adapters.training.recipes import describe_recipes

    p = argparse.ArgumentParser(
        prog="python -m adapters.train",
        description="RL training (AT-GRPO, GRPO, REINFORCE++, Task-Relative REINFORCE++) of LLM "
        "policies on a multi-agent setting. Every setting trains with its paper's recipe by "
        "default (scaled down on a CPU-only machine); --recipe NAME picks another, and any flag "
        "overrides one value of it.",
        epilog="recipes (--recipe NAME):\n  " + describe_recipes().replace("\n", "\n  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--config", default=None, help="YAML file with TrainConfig fields")
    p.add_argument("--resume", default=None, metavar="DIR", help="continue the run in DIR")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    cli.add_import_flag(p)
    add_config_arguments(p)
    return p


def config_from_argv(argv: Sequence[str] | None = None) -> tuple[TrainConfig, argparse.Namespace]:
    """The :class:`TrainConfig` described by the command line (YAML file, then flags)."""
    return _config_from_args(build_parser().parse_args(argv))


def _config_from_args(args: argparse.Namespace) -> tuple[TrainConfig, argparse.Namespace]:
    args = argparse.Namespace(**vars(args))
    control = {
        k: getattr(args, k, None) for k in ("config", "resume", "print_config", "debug", "imports")
    }
    for k in control:
        if hasattr(args, k):
            delattr(args, k)
    overrides = overrides_from_args(args)
    base = load_yaml(control["config"]) if control["config"] else {}
    where = f"config file {control['config']}" if control["config"] else "the configuration"
    cfg = config_from_dict(merge_config(base, overrides), where=where)
    return cfg, argparse.Namespace(**control, overrides=overrides)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return cli.run(build_parser, _train, argv)


def _check_inputs(cfg: TrainConfig) -> None:
    """What can be checked before anything heavy is imported or a run directory is made."""
    with cli.bad_input("--env"):
        envs.spec(cfg.env)
    with cli.bad_input("--env-config"):
        env = envs.make(cfg.env, **cfg.env_config)
    if cfg.instance is not None:
        with cli.bad_input("--instance"):
            env.reset(options={"instance": cfg.instance})
    if cfg.compute.backend == "vllm-server":  # every replica must answer before a run is made
        from adapters.policies.openai_compat import OpenAIPolicy
        from adapters.policies.vllm_server import server_root

        for url in cfg.compute.vllm_servers:
            with cli.bad_input("--vllm-servers"):
                OpenAIPolicy(server_root(url) + "/v1", model="?").check_reachable()


def _check_file_env(env_id: str, what: str) -> None:
    """An env id read from a file resolves without importing anything (module docstring)."""
    try:
        envs.registered_spec(env_id)
    except envs.ModuleNotLoadedError as exc:
        raise cli.module_not_loaded(what, exc) from None
    except ValueError as exc:
        raise cli.UsageError(f"{what}: {exc}") from None


def _check_resume(ctl: argparse.Namespace) -> TrainConfig:
    """What ``--resume DIR`` can check before anything heavy is imported: DIR holds a run, and
    the setting its ``config.yaml`` names is registered (no import: module docstring). Returns
    the saved configuration."""
    if ctl.config:
        raise cli.UsageError("--resume reads DIR/config.yaml; do not pass --config")
    saved = Path(ctl.resume) / "config.yaml"
    if not saved.is_file():
        raise cli.UsageError(
            f"--resume: {ctl.resume} holds no run (no config.yaml): give the directory a "
            "training run wrote (its first output line names it)"
        )
    try:
        saved_cfg = TrainConfig.load(saved)
    except ConfigError as exc:
        raise cli.UsageError(str(exc)) from exc
    _check_file_env(saved_cfg.env, str(saved))
    return saved_cfg


def _preflight(cfg: TrainConfig, output_dir: str | None) -> None:
    """What the run needs from this machine (the sandbox, the model, disk space), checked before
    the model loads: one line for everything missing (:mod:`adapters.preflight`)."""
    from adapters.preflight import train_problems

    problems = train_problems(cfg, output_dir)
    if problems:
        raise cli.UsageError("; ".join(problems))


def _train(args: argparse.Namespace) -> int:
    cli.import_modules(getattr(args, "imports", None) or [])
    try:
        cfg, ctl = _config_from_args(args)
        if ctl.config and "env" not in ctl.overrides:  # the id comes from the file
            _check_file_env(cfg.env, f"config file {ctl.config}")
        if ctl.print_config:
            print(cfg.resolved().described(), end="")
            return 0
    except ConfigError as exc:
        raise cli.UsageError(str(exc)) from exc
    if ctl.resume:
        _preflight(_check_resume(ctl), ctl.resume)
    else:
        _check_inputs(cfg)
        _preflight(cfg, cfg.output.output_dir)
    from adapters.training.trainer import Trainer  # torch & co.: after the inputs are checked

    t0 = time.perf_counter()
    if ctl.resume:
        try:
            trainer = Trainer.resume(ctl.resume, **ctl.overrides)
        except (ValueError, FileNotFoundError) as exc:
            raise cli.UsageError(str(exc)) from exc
        if trainer.run.dist.is_main:
            print(f"resuming {ctl.resume} at step {trainer.step}", flush=True)
    else:
        try:
            trainer = Trainer(cfg)
        except (ConfigError, OSError) as exc:  # a taken run directory, a model not found
            raise cli.UsageError(str(exc)) from exc
    c = trainer.cfg
    ranks = f", {trainer.run.dist.world_size} ranks" if trainer.run.dist.enabled else ""
    if trainer.run.dist.is_main:
        print(
            f"run {trainer.out}: env {c.env} {c.env_config}, recipe {c.recipe}, "
            f"model {c.policy.model} "
            f"({'LoRA r=' + str(c.policy.lora_rank) if c.policy.lora_rank else 'full fine-tuning'}"
            f", {'per-role' if (c.policy.per_role or c.policy.role_policies) else 'shared'}), "
            f"{c.update.algorithm} "
            f"K={c.rollout.candidates} ({c.rollout.sampling}, "
            f"keep {c.rollout.keep} x{c.rollout.keep_n}), "
            f"{c.schedule.instances_per_step} instances/step, {c.schedule.steps} steps, "
            f"device {trainer.run.device}"
            f"{ranks}{_generation_note(trainer)}",
            flush=True,
        )
        scaled = ", ".join(f"{k}={v!r}" for k, v in c.cpu_scale_down().items())
        if scaled:
            print(
                "CPU scale-down (no CUDA; agents, turns and rewards are the paper's): "
                f"{scaled}; --print-config shows every value's source",
                flush=True,
            )
            note = envs.spec(c.env).cpu_note
            if note:
                print(f"What this CPU run can show: {note}", flush=True)
        _print_estimate(trainer)
    try:
        trainer.train()
    except Exception as exc:
        if trainer.run.dist.enabled:
            print(
                f"error on rank {trainer.run.dist.rank} of {trainer.run.dist.world_size}: "
                f"{type(exc).__name__}: {exc}\n(collectives fail like this when another rank "
                f"died, or hung for more than dist_timeout_s = {c.compute.dist_timeout_s:g} s; the "
                f"launcher's summary names the rank that failed first; continue the run with "
                f"--resume {trainer.out})",
                file=sys.stderr,
                flush=True,
            )
        raise
    finally:
        trainer.close()
    if trainer.run.dist.is_main and trainer.comparison is None:  # else its last lines are the table
        print(f"done in {time.perf_counter() - t0:.0f} s; outputs in {trainer.out}", flush=True)
    return 0


def _generation_note(trainer: Any) -> str:
    """``", generation DTYPE[ + fp16|int8]"`` of the run's local models (``""`` if none)."""
    from adapters.evaluation import generation_kind

    seen = {generation_kind(p) for p in trainer.run.policies.values()} - {""}
    return f", generation {' / '.join(sorted(seen))}" if seen else ""


def _print_estimate(trainer: Any) -> None:
    """The header's rough estimate of the run's wall time (:mod:`adapters.training.estimate`);
    a failure to make it is one line, never the end of the run."""
    from adapters.training.estimate import estimate_line

    try:
        line = estimate_line(trainer)
    except Exception as exc:  # the estimate is a courtesy: the run goes on without it
        line = f"no wall-time estimate ({type(exc).__name__}: {exc})"
    if line:
        print(line, flush=True)


def _launched_main(argv: Sequence[str] | None = None) -> int:
    """``main`` under torchrun records a failing rank's traceback for the launcher's summary."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        from torch.distributed.elastic.multiprocessing.errors import record

        return int(record(main)(argv) or 0)
    return main(argv)


if __name__ == "__main__":
    sys.exit(_launched_main())
