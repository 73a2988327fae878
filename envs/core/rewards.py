"""Reward parts: every component score, its weight, the team reward, mask and mixing.

``RewardParts.to_dict()`` goes into ``infos[agent]["reward_parts"]``; the scalar reward can be
re-derived from it with ``mix(team, local, mask, lam=..., mixing=..., alpha=...)`` where
``local = sum(coefficients[k] * components[k])``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envs.core.config import RewardConfig

__all__ = ["RewardParts", "mix", "weighted_sum"]


def weighted_sum(components: Mapping[str, float], coefficients: Mapping[str, float]) -> float:
    """``sum(c_k * s_k)`` over the coefficient keys (a missing component counts as 0).

    >>> weighted_sum({"fmt": 1.0, "legal": 0.0}, {"fmt": 0.15, "legal": 0.55, "prog": 0.30})
    0.15
    """
    return float(sum(coefficients[k] * float(components.get(k, 0.0)) for k in coefficients))


def mix(
    team: float,
    local: float,
    mask: float,
    *,
    lam: float,
    mixing: str = "convex",
    alpha: float = 1.0,
) -> float:
    """Combine team and local rewards.

    >>> mix(1.0, 0.5, 1.0, lam=0.6)          # 0.6 * 1 + 0.4 * 1 * 0.5
    0.8
    >>> mix(1.0, 0.5, 0.0, lam=0.6)          # masked local part
    0.6
    >>> mix(1.0, 0.5, 1.0, lam=0.6, mixing="additive", alpha=1.0)
    1.5
    >>> mix(0.0, 0.25, 1.0, lam=0.0, mixing="none")
    0.25
    """
    if mixing == "convex":
        return float(lam * team + (1.0 - lam) * mask * local)
    if mixing == "additive":
        return float(alpha * team + local)
    if mixing == "none":
        return float(local)
    raise ValueError(f"unknown mixing {mixing!r}")


@dataclass(frozen=True)
class RewardParts:
    """Everything that went into one agent's reward for one step."""

    role: str
    components: Mapping[str, float]
    coefficients: Mapping[str, float]
    team: float = 0.0
    mask: float = 1.0
    lam: float = 0.0
    mixing: str = "convex"
    alpha: float = 1.0
    reasons: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        role: str,
        components: Mapping[str, float],
        rewards: RewardConfig,
        *,
        team: float = 0.0,
        mask: float = 1.0,
        reasons: Mapping[str, str] | None = None,
        coefficients: Mapping[str, float] | None = None,
    ) -> RewardParts:
        """Parts for ``role`` using the weights and mixing of ``rewards``."""
        coefs = dict(coefficients) if coefficients is not None else rewards.coefficients(role)
        unknown = set(components) - set(coefs)
        if unknown:
            raise ValueError(f"components {sorted(unknown)} have no weight for role {role!r}")
        return cls(
            role=role,
            components={k: float(components.get(k, 0.0)) for k in coefs},
            coefficients=coefs,
            team=float(team),
            mask=float(mask),
            lam=float(rewards.lam),
            mixing=rewards.mixing,
            alpha=float(rewards.alpha),
            reasons=dict(reasons or {}),
        )

    @property
    def local(self) -> float:
        return weighted_sum(self.components, self.coefficients)

    @property
    def reward(self) -> float:
        return mix(
            self.team, self.local, self.mask, lam=self.lam, mixing=self.mixing, alpha=self.alpha
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "components": dict(self.components),
            "coefficients": dict(self.coefficients),
            "team": self.team,
            "local": self.local,
            "mask": self.mask,
            "lam": self.lam,
            "alpha": self.alpha,
            "mixing": self.mixing,
            "reward": self.reward,
            "reasons": dict(self.reasons),
        }
