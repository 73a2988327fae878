"""Typed, frozen configuration for environments and their reward coefficients.

Every setting declares two frozen dataclasses: an ``EnvConfig`` subclass (size, horizon, mode,
limits, ...) whose ``rewards`` field holds a ``RewardConfig`` subclass (mixing coefficient and the
per-role component weights). ``envs.make(id, **overrides)`` builds them from keyword arguments;
``rewards`` may be given as a dataclass instance or as a dict of field overrides, e.g.
``envs.make("sokoban", num_boxes=3, rewards={"lam": 0.5})``.

Reward-weight fields are named ``<role>_<component>`` (``planner_fmt``, ``tool_exec``, ...);
``RewardConfig.coefficients(role)`` collects them, and the weights of each role must sum to 1
(the papers' convex combinations) unless the class sets ``convex_roles = False``.

A config read from data (an evaluation record's ``env_config``, a request) goes through
:func:`check_config_data` first: only the class's own options, each of its annotated type, with
values its ``__post_init__`` accepts; constructor keywords that are not options (``sandbox``,
``render_mode``, ``config``, shared objects) are refused there.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, TypeVar

__all__ = ["EnvConfig", "RewardConfig", "build_config", "check_config_data", "MIXINGS"]

MIXINGS = ("convex", "additive", "none")
Mixing = Literal["convex", "additive", "none"]


@dataclass(frozen=True)
class RewardConfig:
    """Team/local mixing (AT-GRPO Appendix A.1 and Eq. 4).

    - ``convex`` (default, Appendix A.1): ``r = lam * team + (1 - lam) * mask * local``
    - ``additive`` (main text, Eq. 4): ``r = alpha * team + local``
    - ``none``: ``r = local`` (settings whose papers define the reward directly)
    """

    lam: float = 0.5
    mixing: Mixing = "convex"
    alpha: float = 1.0
    roles: ClassVar[tuple[str, ...]] = ()
    convex_roles: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.mixing not in MIXINGS:
            raise ValueError(f"mixing must be one of {MIXINGS}, got {self.mixing!r}")
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lam must lie in [0, 1], got {self.lam}")
        if self.convex_roles:
            for role in self.roles:
                total = sum(self.coefficients(role).values())
                if abs(total - 1.0) > 1e-6:
                    raise ValueError(
                        f"{type(self).__name__}: the {role} weights must sum to 1, got {total:.6g} "
                        f"({self.coefficients(role)})"
                    )

    def coefficients(self, role: str) -> dict[str, float]:
        """The component weights of ``role``: fields named ``<role>_<component>``."""
        prefix = role + "_"
        return {
            f.name[len(prefix) :]: float(getattr(self, f.name))
            for f in fields(self)
            if f.name.startswith(prefix)
        }


@dataclass(frozen=True)
class EnvConfig:
    """Options shared by every setting.

    mode: ``"multi"`` (the paper's team) or ``"single"`` (one agent answers alone).
    max_turns: horizon T in turns (one turn = every agent acts once); the paper uses 4.
    split: default split for ``reset()`` when ``options`` names none.
    max_prompt_chars / max_completion_chars: bounds of the observation and action spaces.
    prompt_style: ``"full"`` (default) or ``"compact"``: the same content with the fixed
        instructions (rules, role, answer format) shortened, for small models and CPU runs, where
        prefill of the shared text is most of the generation time. Settings without a compact
        form (their module page says) ignore it.
    """

    mode: Literal["multi", "single"] = "multi"
    max_turns: int = 4
    split: str = "train"
    max_prompt_chars: int = 200_000
    max_completion_chars: int = 200_000
    prompt_style: Literal["full", "compact"] = "full"
    rewards: RewardConfig = field(default_factory=RewardConfig)

    def __post_init__(self) -> None:
        if self.mode not in ("multi", "single"):
            raise ValueError(f"mode must be 'multi' or 'single', got {self.mode!r}")
        if self.prompt_style not in ("full", "compact"):
            raise ValueError(f"prompt_style must be 'full' or 'compact', got {self.prompt_style!r}")
        if not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {self.max_turns!r}")
        from envs.core.splits import check_split

        check_split(self.split)


C = TypeVar("C", bound=EnvConfig)


def _unknown_options(cls: type, keys: Any, what: str) -> str | None:
    """The message for the keys of ``keys`` that are not fields of ``cls`` (``None``: none)."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(keys) - names)
    if not unknown:
        return None
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(names), n=1)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (
        f"unknown {what + ' ' if what else ''}option(s) for {cls.__name__}: {', '.join(hints)}; "
        f"valid options: {', '.join(sorted(names))}"
    )


def _apply_overrides(cls: type, base: Any, overrides: dict[str, Any], what: str) -> Any:
    message = _unknown_options(cls, overrides, what)
    if message:
        raise TypeError(message)
    return dataclasses.replace(base, **overrides) if base is not None else cls(**overrides)


def build_config(
    cls: type[C], config: C | None = None, overrides: dict[str, Any] | None = None
) -> C:
    """Build ``cls`` from an optional base instance plus keyword overrides (with clear errors)."""
    if config is not None and not isinstance(config, cls):
        raise TypeError(f"config must be a {cls.__name__}, got {type(config).__name__}")
    overrides = dict(overrides or {})
    rewards = overrides.pop("rewards", None)
    cfg = _apply_overrides(cls, config, overrides, "config")
    if rewards is not None:
        reward_cls = type(cfg.rewards)
        if isinstance(rewards, RewardConfig):
            if not isinstance(rewards, reward_cls):
                raise TypeError(
                    f"rewards must be a {reward_cls.__name__}, got {type(rewards).__name__}"
                )
            new_rewards = rewards
        elif isinstance(rewards, dict):
            new_rewards = _apply_overrides(reward_cls, cfg.rewards, rewards, "rewards")
        else:
            raise TypeError(
                f"rewards must be a {reward_cls.__name__} or a dict, got {type(rewards).__name__}"
            )
        cfg = dataclasses.replace(cfg, rewards=new_rewards)
    return cfg


def _is_data(value: Any) -> bool:
    """Whether ``value`` is plain JSON data (None, bool, numbers, str, lists, str-keyed dicts)."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list | tuple):
        return all(_is_data(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_data(v) for k, v in value.items())
    return False


def _fits(value: Any, tp: Any) -> bool:
    """Whether the data ``value`` fits the annotation ``tp`` (a list stands for a tuple)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if tp is type(None):
        return value is None
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if tp in (tuple, list) or origin in (tuple, list):
        if not isinstance(value, list | tuple):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(map(_fits, value, args))
        return all(_fits(v, args[0]) for v in value) if args else _is_data(value)
    if tp is dict or origin in (dict, Mapping):
        if not isinstance(value, dict):
            return False
        kt, vt = args or (str, Any)
        return all(_fits(k, kt) and _fits(v, vt) for k, v in value.items())
    return _is_data(value)  # Any, or an annotation data cannot name more precisely


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def check_config_data(cls: type, data: Any, what: str = "env_config") -> dict[str, Any]:
    """Check ``data``, config overrides read from a file or a request, against the config
    dataclass ``cls``: a mapping of its field names to values of the fields' types (``rewards``:
    a mapping of the reward class's fields), which then build a valid ``cls`` (its
    ``__post_init__`` checks). Returns a copy to pass as keyword arguments; raises
    ``ValueError`` naming ``what`` and the offending option otherwise.

    >>> from envs.sokoban import SokobanConfig
    >>> check_config_data(SokobanConfig, {"num_boxes": 2, "rewards": {"lam": 1}})
    {'num_boxes': 2, 'rewards': {'lam': 1}}
    >>> check_config_data(SokobanConfig, {"num_boxes": "2"})
    Traceback (most recent call last):
    ...
    ValueError: env_config: num_boxes must be int, got '2' (str)
    >>> check_config_data(SokobanConfig, {"mode": "solo"})
    Traceback (most recent call last):
    ...
    ValueError: env_config: mode must be Literal['multi', 'single'], got 'solo' (str)
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a mapping of options, got {type(data).__name__}")
    if not all(isinstance(k, str) for k in data):
        raise ValueError(f"{what}: option names must be strings, got {sorted(map(repr, data))}")
    message = _unknown_options(cls, data, "")
    if message:
        raise ValueError(f"{what}: {message}")
    try:
        default = cls()
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{what}: {cls.__name__} has no defaults to check options against: {exc}"
        ) from None
    hints = typing.get_type_hints(cls)
    for name, value in data.items():
        tp = hints.get(name, Any)
        current = getattr(default, name)
        if dataclasses.is_dataclass(current):
            if name != "rewards":
                raise ValueError(f"{what}: {name} is a {type(current).__name__}, not data")
            if not isinstance(value, Mapping):
                raise ValueError(
                    f"{what}: rewards must be a mapping of {type(current).__name__} options, "
                    f"got {type(value).__name__}"
                )
            check_config_data(type(current), value, f"{what}.rewards")
        elif not _fits(value, tp):
            raise ValueError(
                f"{what}: {name} must be {_type_name(tp)}, got {value!r:.80} "
                f"({type(value).__name__})"
            )
    try:  # the values the class itself checks (ranges, splits, reward weights summing to 1)
        if isinstance(default, EnvConfig):
            build_config(cls, None, dict(data))
        else:
            cls(**data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: {exc}") from None
    return copy.deepcopy(dict(data))
