"""Evaluate policies on a setting: ``python -m adapters.evaluate --env ID --policy SPEC``.

Examples::

    python -m adapters.evaluate --env plan_path --policy oracle --episodes 20
    python -m adapters.evaluate --env sokoban --policy smollm2 --episodes 8 --mode single
    python -m adapters.evaluate --env sudoku --policy tool=oracle --policy planner=smollm2
    python -m adapters.evaluate --env math --policy openai:http://127.0.0.1:8000/v1#qwen3 \\
        --json results.json
    python -m adapters.evaluate --env sokoban --policy runs/my-run/final/shared   # a LoRA adapter

Policy specs (:mod:`adapters.policies.specs`): ``oracle`` (the env's scripted correct answer),
``smollm2`` (the embedded model), ``tiny`` (random tiny model, for smoke tests), a local checkpoint
directory or a LoRA adapter directory written by the trainer, ``openai:BASE_URL[#MODEL]`` (any
OpenAI-compatible server). ``ROLE=SPEC`` assigns a policy to one role; a spec without ``ROLE=``
serves every role that has no explicit one.

Decoding is greedy by default (``--temperature 0``, the AT-GRPO validation setting), one episode
per instance (parallel sampling with K = 1). Instances come from ``--split`` (default ``val``)
with seeds derived from ``--seed``, so two evaluations with the same seed see the same
instances. The table reports the success rate, the mean final team reward, mean turns and steps,
and per agent the mean per-step reward and the mean episode return; ``--json`` writes the same
numbers plus one record per episode. This module only parses arguments; the work is done by
:mod:`adapters.evaluation` (``evaluate``, ``EvalReport``; importing them from here still works but
is deprecated).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from adapters.evaluation import EvalReport, evaluate, with_prompt_prefixes
from adapters.policies.specs import build_policies, parse_policy_spec
from adapters.rollout import env_roles
from adapters.training.flags import parse_key_values, parse_value

# EvalReport, evaluate, build_policies and parse_policy_spec moved to adapters.evaluation and
# adapters.policies.specs; they stay importable from here for existing code (deprecated).
__all__ = ["EvalReport", "build_parser", "build_policies", "evaluate", "main", "parse_policy_spec"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m adapters.evaluate",
        description="Evaluate policies on a multi-agent setting (greedy, one episode/instance).",
    )
    p.add_argument("--env", required=True, help="setting id (see envs.list_envs())")
    p.add_argument(
        "--policy",
        action="append",
        required=True,
        help="SPEC or ROLE=SPEC (repeatable): oracle | smollm2 | tiny | PATH | "
        "openai:BASE_URL[#MODEL]",
    )
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--split", default="val", choices=("train", "val", "test"))
    p.add_argument("--mode", default=None, help="multi | single (the setting's default: multi)")
    p.add_argument("--max-turns", type=int, default=None)
    p.add_argument("--env-config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--instance", default=None, help="explicit instance as JSON")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--system-prompt", default=None, help="system message for model policies")
    p.add_argument(
        "--demos",
        type=int,
        default=0,
        help="oracle demonstrations per role before each prompt (as the trainer's --demos; "
        "answers longer than --max-new-tokens are left out)",
    )
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: auto)")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: checkpoint's)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--json", default=None, help="write the report as JSON here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    env_config = parse_key_values(args.env_config, "--env-config")
    if args.mode:
        env_config["mode"] = args.mode
    if args.max_turns:
        env_config["max_turns"] = args.max_turns
    instance = parse_value(args.instance) if args.instance else None
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    roles = env_roles(args.env, env_config)
    policies, role_policy = build_policies(
        args.policy, roles, device=args.device, dtype=args.dtype, batch_size=args.batch_size
    )
    if args.system_prompt or args.demos:
        policies, role_policy = with_prompt_prefixes(
            args.env,
            env_config,
            policies,
            role_policy,
            system_prompt=args.system_prompt,
            demos=args.demos,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
        )
    report = evaluate(
        args.env,
        policies,
        episodes=args.episodes,
        env_config=env_config,
        role_policy=role_policy,
        split=args.split,
        seed=args.seed,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        instance=instance,
    )
    print(report.table())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
