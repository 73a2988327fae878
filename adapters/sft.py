"""Cold start from a setting's oracle: ``python -m adapters.sft --env sokoban``.

Plays the setting's oracle on train-split instances and fine-tunes the model on every role's
turns (the exact prompt the trained policy would see -> the oracle's completion; loss on the
completion only) with TRL's ``SFTTrainer``, then saves a LoRA adapter directory
(:mod:`adapters.training.coldstart`). The prompts are those of a training run with the same
flags (``--env``, ``--env-config``, ``--recipe``, ``--model``, ``--system-prompt``, ...: the
setting's CPU options apply on a machine without CUDA, as in ``adapters.train``).

Examples::

    python -m adapters.sft --env sokoban                      # into the cache --init uses
    python -m adapters.sft --env plan_path --episodes 64 --output runs/cold-plan-path
    python -m adapters.sft --env sokoban --export sokoban-oracle.jsonl --episodes 256 --no-train
    python -m adapters.train --env sokoban --init runs/cold-plan-path    # start RL from it
    python -m adapters.evaluate --env sokoban --policy runs/cold-plan-path

Without ``--output`` the adapter goes where ``adapters.train --init cold-start`` looks for it
(``$MAS_CACHE_DIR/coldstart/<env>-<hash of everything that shapes it>``). A second call with the
same ``--output`` resumes from the last checkpoint. ``--export PATH`` writes the examples as JSON
lines in TRL's prompt-completion format (``datasets.load_dataset("json", data_files=PATH)``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from adapters import cli
from adapters.training.flags import add_config_arguments, overrides_from_args

if TYPE_CHECKING:  # pragma: no cover
    from adapters.training.coldstart import ColdStartConfig
    from adapters.training.config import TrainConfig

__all__ = ["build_parser", "configs_from_args", "main"]

# the TrainConfig fields that shape a cold start's prompts and model
_RUN_FIELDS = (
    "env",
    "recipe",
    "env_config",
    "model",
    "device",
    "system_prompt",
    "prompt_prefix",
    "chat_template_kwargs",
)


def build_parser() -> argparse.ArgumentParser:
    from adapters.training.coldstart import ColdStartConfig

    p = argparse.ArgumentParser(
        prog="python -m adapters.sft",
        description="Fine-tune a model on a setting's oracle turns (a cold start for RL).",
        allow_abbrev=False,
    )
    add_config_arguments(p, only=_RUN_FIELDS)
    defaults = ColdStartConfig()
    for f in dataclasses.fields(ColdStartConfig):
        flag = "--" + f.name.replace("_", "-")
        value = getattr(defaults, f.name)
        if f.name == "roles":
            p.add_argument(
                flag,
                default=None,
                help="comma-separated roles, ROLE=N for the first N episodes only (default: all)",
            )
        elif isinstance(value, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=value)
        else:
            p.add_argument(flag, type=type(value), default=value, help=f"default {value}")
    p.add_argument("--output", default=None, help="adapter directory (default: the cache)")
    p.add_argument("--export", default=None, metavar="PATH", help="write the examples (JSONL)")
    p.add_argument("--no-train", action="store_true", help="only write --export")
    p.add_argument("--max-steps", type=int, default=-1, help="stop after N optimizer steps")
    return p


def configs_from_args(args: argparse.Namespace) -> tuple[TrainConfig, ColdStartConfig]:
    """The resolved training config whose prompts the cold start learns, and the cold start's
    own config, from parsed arguments (also what a shipped cold start's recorded command
    means: ``configs_from_args(build_parser().parse_args(shlex.split(cmd)[3:]))``)."""
    from adapters.training.coldstart import ColdStartConfig
    from adapters.training.config import ConfigError, config_from_dict

    given = {k: v for k, v in vars(args).items() if k in _RUN_FIELDS or k in ("mode", "max_turns")}
    try:
        train_cfg = config_from_dict(overrides_from_args(argparse.Namespace(**given))).resolved()
        names = [f.name for f in dataclasses.fields(ColdStartConfig)]
        values = {n: getattr(args, n) for n in names}
        if values["roles"]:
            values["roles"] = tuple(r.strip() for r in values["roles"].split(",") if r.strip())
        cfg = ColdStartConfig(**values)
    except (ConfigError, ValueError) as exc:
        raise cli.UsageError(str(exc)) from None
    return train_cfg, cfg


def _main(args: argparse.Namespace) -> int:
    from adapters.training.coldstart import (
        cold_start_dir,
        make_cold_start,
        oracle_examples,
        write_examples,
    )

    train_cfg, cfg = configs_from_args(args)
    import envs

    with cli.bad_input("--env-config"):
        roles = envs.make(train_cfg.env, **train_cfg.env_config).unwrapped.possible_agents
    unknown = sorted(set(cfg.role_episodes() or ()) - set(roles))
    if unknown:
        raise cli.UsageError(f"--roles: {unknown} not among the setting's roles {list(roles)}")
    if args.no_train:
        if not args.export:
            raise cli.UsageError("--no-train writes --export PATH only; give one")
        from adapters.training.backends import prompt_prefix

        examples = oracle_examples(
            train_cfg.env,
            dict(train_cfg.env_config),
            cfg.episodes,
            cfg.seed,
            prefix=prompt_prefix(train_cfg),
            roles=cfg.role_episodes(),
        )
        digest = write_examples(examples, args.export)
        print(f"{len(examples)} examples -> {args.export} (sha256 {digest[:16]})")
        return 0
    if args.max_steps > 0 and not args.output:
        raise cli.UsageError("--max-steps makes a partial cold start: give --output")
    from adapters.policies.models import check_model_source

    with cli.bad_input("--model"):
        check_model_source(train_cfg.policy.model)
    out = args.output or str(cold_start_dir(train_cfg, cfg))
    print(
        f"cold start: {train_cfg.policy.model} on {cfg.episodes} oracle episodes of "
        f"{train_cfg.env} {dict(train_cfg.env_config)}, roles {list(cfg.roles or roles)} -> {out}",
        flush=True,
    )
    made = make_cold_start(train_cfg, cfg, out, export=args.export, max_steps=args.max_steps)
    print(f"done: {made} (use it with --init {made}, or --policy {made} to evaluate)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return cli.run(build_parser, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
