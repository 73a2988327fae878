"""Shared machinery of all settings: base class, config, rewards, spaces, splits, registry."""

from envs.core.base import TurnBasedEnv, wrap
from envs.core.config import EnvConfig, RewardConfig, build_config
from envs.core.rewards import RewardParts, mix, weighted_sum
from envs.core.spaces import UnicodeText, completion_space, prompt_space
from envs.core.splits import SPLITS, split_of, stable_hash

__all__ = [
    "SPLITS",
    "EnvConfig",
    "RewardConfig",
    "RewardParts",
    "TurnBasedEnv",
    "UnicodeText",
    "build_config",
    "completion_space",
    "mix",
    "prompt_space",
    "split_of",
    "stable_hash",
    "weighted_sum",
    "wrap",
]
