"""Command-line flags for :class:`~adapters.training.config.TrainConfig`
(``python -m adapters.train``).

Every knob, whatever its section, is a flag (``lora_rank`` -> ``--lora-rank``); only flags given on
the command line count (defaults are suppressed), so flags override a ``--config`` YAML file key by
key (:func:`merge_config`; ``env_config`` is merged per key). ``--mode`` and ``--max-turns`` are
shortcuts for ``--env-config mode=...`` / ``max_turns=...``. Values are parsed as YAML scalars or
JSON (:func:`parse_value`), so ``--instance '{"grid": ...}'`` and ``--lr 1e-4`` both work.
"""

from __future__ import annotations

import typing
from collections.abc import Collection
from typing import Any, Literal

from adapters.training.advantages import ESTIMATORS
from adapters.training.config import (
    ConfigError,
    TrainConfig,
    flatten,
    knob_fields,
    knob_types,
    strip_optional,
    type_ok,
)

__all__ = [
    "add_config_arguments",
    "merge_config",
    "overrides_from_args",
    "parse_key_values",
    "parse_mapping_items",
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


def parse_mapping_items(items: list[str], flag: str) -> dict[str, Any]:
    """Repeated ``KEY=VALUE`` items, or mappings as JSON / YAML, merged left to right (the
    form of ``--chat-template-kwargs``).

    >>> parse_mapping_items(["enable_thinking=false"], "--x")
    {'enable_thinking': False}
    >>> parse_mapping_items(['{"enable_thinking": false}', "a=1"], "--x")
    {'enable_thinking': False, 'a': 1}
    """
    out: dict[str, Any] = {}
    for item in items:
        value = parse_value(item) if item.lstrip().startswith("{") else None
        if isinstance(value, dict):
            out.update({str(k): v for k, v in value.items()})
        else:
            out.update(parse_key_values([item], flag))
    return out


_NOT_FLAGS = {"sources"}  # filled by TrainConfig.resolved(), not a setting
_MAPPING_FLAGS = {"env_config", "chat_template_kwargs"}  # repeatable KEY=VALUE
_SHORTCUTS = {
    "mode": "env_config.mode",
    "max_turns": "env_config.max_turns",
    "dataset": "env_config.dataset",
    "data_path": "env_config.data_path",
}


_FLAG_ALIASES = {"backend": ("--rollout-backend",)}


def add_config_arguments(parser: Any, only: Collection[str] | None = None) -> None:
    """One flag per :class:`TrainConfig` knob (defaults suppressed: only given flags count);
    ``only``: just these knobs (and the shortcuts into ``env_config`` when it is among them)."""
    import argparse

    types = knob_types()
    for name, f in knob_fields().items():
        tp = types[name]
        if name in _NOT_FLAGS or (only is not None and name not in only):
            continue
        flag = "--" + name.replace("_", "-")
        base, _ = strip_optional(tp)
        help_text = f.metadata.get("help", "")  # the knob's one line (in its section)
        if name == "algorithm":  # the estimator table's names (advantages.ESTIMATORS)
            help_text = "; ".join(f"{k}: {e.summary}" for k, e in ESTIMATORS.items())
        if name in _MAPPING_FLAGS:
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
            if name == "algorithm":
                choices = tuple(ESTIMATORS)
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
    if only is not None and "env_config" not in only:
        return
    parser.add_argument(
        "--mode", default=argparse.SUPPRESS, help="shortcut for --env-config mode=VALUE"
    )
    parser.add_argument(
        "--dataset",
        default=argparse.SUPPRESS,
        help="shortcut for --env-config dataset=NAME (envs.data.catalog names)",
    )
    parser.add_argument(
        "--data-path",
        default=argparse.SUPPRESS,
        help="shortcut for --env-config data_path=PATH (the dataset's released file or directory)",
    )
    parser.add_argument(
        "--max-turns",
        type=int,
        default=argparse.SUPPRESS,
        help="shortcut for --env-config max_turns=VALUE",
    )


def _convert(name: str, text: Any) -> Any:
    tp = knob_types()[name]
    base, optional = strip_optional(tp)
    if not isinstance(text, str):
        return text
    if name == "init" and text.lower() == "none":
        return "none"  # a value of its own (the model as it is), not auto
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
    if not type_ok(value, tp):
        raise ConfigError(f"--{name.replace('_', '-')}: cannot use {text!r} ({tp})")
    return value


def overrides_from_args(args: Any) -> dict[str, Any]:
    """The config values given on the command line (as a dict of field -> value)."""
    given = dict(vars(args))
    out: dict[str, Any] = {}
    names = set(TrainConfig.knob_names())
    env_cfg: dict[str, Any] = {}
    if "env_config" in given:
        env_cfg.update(parse_key_values(given.pop("env_config") or [], "--env-config"))
    for short in _SHORTCUTS:
        if short in given:
            env_cfg[short] = given.pop(short)
    if env_cfg:
        out["env_config"] = env_cfg
    if "chat_template_kwargs" in given:
        items = given.pop("chat_template_kwargs") or []
        out["chat_template_kwargs"] = parse_mapping_items(items, "--chat-template-kwargs")
    for name, value in given.items():
        if name in names:
            out[name] = _convert(name, value)
    return out


def merge_config(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """YAML values (by section or flat) overridden by CLI values, as knob name -> value;
    ``env_config`` is merged key by key."""
    merged = flatten(base)
    for key, value in overrides.items():
        if key == "env_config" and isinstance(merged.get("env_config"), dict):
            merged["env_config"] = {**merged["env_config"], **value}
        else:
            merged[key] = value
    return merged
