"""Typed, frozen configuration for environments and their reward coefficients.

Every setting declares two frozen dataclasses: an ``EnvConfig`` subclass (size, horizon, mode,
limits, ...) whose ``rewards`` field holds a ``RewardConfig`` subclass (mixing coefficient and the
per-role component weights). ``envs.make(id, **overrides)`` builds them from keyword arguments;
``rewards`` may be given as a dataclass instance or as a dict of field overrides, e.g.
``envs.make("sokoban", num_boxes=3, rewards={"lam": 0.5})``.

Reward-weight fields are named ``<role>_<component>`` (``planner_fmt``, ``tool_exec``, ...);
``RewardConfig.coefficients(role)`` collects them, and the weights of each role must sum to 1
(the papers' convex combinations) unless the class sets ``convex_roles = False``.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, TypeVar

__all__ = ["EnvConfig", "RewardConfig", "build_config", "MIXINGS"]

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


def _apply_overrides(cls: type, base: Any, overrides: dict[str, Any], what: str) -> Any:
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(names), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise TypeError(
            f"unknown {what} option(s) for {cls.__name__}: {', '.join(hints)}; "
            f"valid options: {', '.join(sorted(names))}"
        )
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
