"""Command-line flags for :class:`~adapters.training.config.TrainConfig` (``python -m adapters.train``).

Every field is a flag (``lora_rank`` -> ``--lora-rank``); only flags given on the command line
count (defaults are suppressed), so flags override a ``--config`` YAML file key by key
(:func:`merge_config`; ``env_config`` is merged per key). ``--mode`` and ``--max-turns`` are
shortcuts for ``--env-config mode=...`` / ``max_turns=...``. Values are parsed as YAML scalars or
JSON (:func:`parse_value`), so ``--instance '{"grid": ...}'`` and ``--lr 1e-4`` both work.
"""

from __future__ import annotations

import typing
from dataclasses import fields
from typing import Any, Literal

from adapters.training.config import (
    ConfigError,
    TrainConfig,
    _strip_optional,
    _type_ok,
    field_types,
)

__all__ = [
    "add_config_arguments",
    "merge_config",
    "overrides_from_args",
    "parse_key_values",
    "parse_value",
]


def parse_value(text: str) -> Any:
    """A CLI value: YAML scalars/JSON (``3``, ``1e-4``, ``true``, ``[1, 2]``, ``{a: 1}``)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_key_values(items: list[str], flag: str) -> dict[str, Any]:
    """``["a=1", "b=x"]`` -> ``{"a": 1, "b": "x"}`` (values parsed with :func:`parse_value`)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = parse_value(value)
    return out


_HELP = {
    "env": "setting id (see envs.list_envs())",
    "recipe": "training recipe (default: the setting's paper recipe); see the list below",
    "env_config": "setting option KEY=VALUE (repeatable), e.g. --env-config mode=single",
    "instance": "explicit instance as JSON for every train/eval episode",
    "system_prompt": "system message prepended to every prompt",
    "prompt_prefix": "few-shot messages as JSON: [{role, content}, ...]",
    "demos": "worked examples per role from the setting's oracle, shown before each prompt",
    "model": "smollm2 (embedded), tiny, a local checkpoint, a hub name, or config:PATH",
    "lora_rank": "LoRA rank; 0 = full fine-tuning",
    "per_role": "one policy per role (default: the recipe's)",
    "role_policies": "role -> policy name as JSON, M policies for N roles, "
    'e.g. \'{"challenger": "a", "planner": "a"}\'',
    "train_roles": "roles whose samples are trained, e.g. solver,judge (default: all)",
    "role_sampling": 'per-role sampling as JSON, e.g. \'{"critic": {"temperature": 0.1}}\'',
    "entropy_coef": "entropy bonus weight (MAE: 0.001)",
    "mpt_mask_tau": "drop positive samples' tokens with probability >= tau from the policy "
    "gradient while the entropy is below --mpt-target-entropy (UloRL Eq. 10); 0 = off",
    "keep_scope": "tree sampling: keep per branch, or per instance across branches (MarsRL)",
    "ppo_minibatches": "optimizer steps per PPO epoch (the batch split evenly)",
    "per_role_models": "per-role policies as LoRA adapters on one base, or separate models",
    "chat_template_kwargs": "JSON for apply_chat_template, e.g. '{\"enable_thinking\": false}' "
    "(Qwen3's no-thinking mode, as in the paper)",
    "algorithm": "at-grpo | grpo | reinforce++ | tr-reinforce++ | tr-reinforce++-token",
    "candidates": "K: candidates per agent-turn (tree) or episodes per instance (parallel)",
    "keep": "tree sampling keep rule: best | random | balanced | adaptive",
    "instances_per_step": "env instances rolled out per training step",
    "minibatch_size": "samples per optimizer step (0 = use --ppo-minibatches)",
    "kl_loss_coef": "weight of the KL loss against the reference model",
    "kl_reward_coef": "REINFORCE++ token-level KL penalty in the reward (beta)",
    "output_dir": "run directory (checkpoints, logs, plots); default runs/<env>-<algo>-<time>",
    "device": "auto | cpu | cuda | cuda:N",
    "backend": "rollout backend: transformers | vllm (needs vllm: scripts/setup_vllm.sh) | "
    "vllm-server (generation on running `vllm serve` processes: --vllm-servers)",
    "dp_mode": "data parallelism under torchrun: auto (DDP with LoRA, FSDP2 for full "
    "fine-tuning) | ddp | fsdp | hsdp (FSDP2 sharded within a node, replicated across nodes)",
    "dist_timeout_s": "seconds a collective may wait for the other ranks before the run fails",
    "vllm_servers": "backend vllm-server: comma-separated base URLs of `vllm serve` replicas "
    "(POLICY=URL for per-role full fine-tuning)",
    "vllm_sync_dir": "backend vllm-server: directory the servers can read, for adapters and "
    "weights pushed after each update (default: <output_dir>/vllm-sync)",
    "env_pool": "where envs step: local (threads) | ray (RayEnvPool actors)",
    "ray_address": "env_pool ray: ray.init(address=...) of a running cluster, e.g. auto",
}


_NOT_FLAGS = {"sources"}  # filled by TrainConfig.resolved(), not a setting
_SHORTCUTS = {"mode": "env_config.mode", "max_turns": "env_config.max_turns"}


_FLAG_ALIASES = {"backend": ("--rollout-backend",)}


def add_config_arguments(parser: Any) -> None:
    """One flag per :class:`TrainConfig` field (defaults suppressed: only given flags count)."""
    import argparse

    for name, tp in field_types().items():
        if name in _NOT_FLAGS:
            continue
        flag = "--" + name.replace("_", "-")
        base, _ = _strip_optional(tp)
        help_text = _HELP.get(name, "")
        if name == "env_config":
            parser.add_argument(
                flag,
                action="append",
                metavar="KEY=VALUE",
                default=argparse.SUPPRESS,
                help=help_text,
            )
        elif base is bool:
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        else:
            choices = typing.get_args(base) if typing.get_origin(base) is Literal else None
            aliases = _FLAG_ALIASES.get(name, ())
            parser.add_argument(
                flag,
                *aliases,
                dest=name,
                default=argparse.SUPPRESS,
                metavar=None if choices else "VALUE",
                choices=choices,
                help=help_text,
            )
    parser.add_argument(
        "--mode", default=argparse.SUPPRESS, help="shortcut for --env-config mode=VALUE"
    )
    parser.add_argument(
        "--max-turns",
        type=int,
        default=argparse.SUPPRESS,
        help="shortcut for --env-config max_turns=VALUE",
    )


def _convert(name: str, text: Any) -> Any:
    tp = field_types()[name]
    base, optional = _strip_optional(tp)
    if not isinstance(text, str):
        return text
    if optional and text.lower() in ("none", "null", "auto"):
        return None
    try:
        if base is int:
            return int(text)
        if base is float:
            return float(text)
    except ValueError:
        raise ConfigError(f"--{name.replace('_', '-')} expects a number, got {text!r}") from None
    if base is str or typing.get_origin(base) is Literal:
        return text
    value = parse_value(text)
    if (base is list or typing.get_origin(base) is list) and isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]  # "a,b" -> ["a", "b"]
    if not _type_ok(value, tp):
        raise ConfigError(f"--{name.replace('_', '-')}: cannot use {text!r} ({tp})")
    return value


def overrides_from_args(args: Any) -> dict[str, Any]:
    """The config values given on the command line (as a dict of field -> value)."""
    given = dict(vars(args))
    out: dict[str, Any] = {}
    names = {f.name for f in fields(TrainConfig)}
    env_cfg: dict[str, Any] = {}
    if "env_config" in given:
        env_cfg.update(parse_key_values(given.pop("env_config") or [], "--env-config"))
    for short in _SHORTCUTS:
        if short in given:
            env_cfg[short] = given.pop(short)
    if env_cfg:
        out["env_config"] = env_cfg
    for name, value in given.items():
        if name in names:
            out[name] = _convert(name, value)
    return out


def merge_config(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """YAML values overridden by CLI values; ``env_config`` is merged key by key."""
    merged = dict(base)
    for key, value in overrides.items():
        if key == "env_config" and isinstance(merged.get("env_config"), dict):
            merged["env_config"] = {**merged["env_config"], **value}
        else:
            merged[key] = value
    return merged
