"""Training recipes: where the default value of every auto (``None``) config field comes from.

:meth:`TrainConfig.resolved() <adapters.training.config.TrainConfig.resolved>` fills each field
left at ``None`` from the table below, by device:

==================  ===========================  ==========================================
field               CPU (no CUDA)                CUDA
==================  ===========================  ==========================================
steps               6                            150 (AT-GRPO A.2.1)
instances_per_step  1                            32
candidates (K)      4                            4 (AT-GRPO A.2.1)
max_new_tokens      48                           1024
temperature         0.7                          1.0 (AT-GRPO A.2.1)
demos               1                            0
eval_episodes       2                            64
gen_batch_size      16                           128
micro_batch_size    8                            16
micro_batch_tokens  2048                         32768
env max_turns       1 (unless env_config sets)   the setting's default (AT-GRPO T = 4)
==================  ===========================  ==========================================

Fields derived from others (``lr``: 1e-4 with LoRA, 1e-6 full fine-tuning, AT-GRPO A.2.1;
``dtype``: bfloat16 with LoRA on CUDA, else float32; ``sampling``: tree for ``at-grpo``, else
parallel) are resolved in :mod:`adapters.training.config`.

The CPU column is sized so that ``python -m adapters.train --env sokoban`` (embedded
SmolLM2-135M, LoRA rank 8) finishes in a few minutes on a 2-core machine; see
:mod:`adapters.training.trainer` for measured times. This module is plain data (no import of the
config class), so it is the one place to read and change a default.

>>> DEVICE_DEFAULTS["steps"]  # (CPU, CUDA)
(6, 150)
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEVICE_DEFAULTS", "DEVICE_ENV_DEFAULTS"]

# field -> (CPU value, CUDA value)
DEVICE_DEFAULTS: dict[str, tuple[Any, Any]] = {
    "steps": (6, 150),
    "instances_per_step": (1, 32),
    "candidates": (4, 4),
    "max_new_tokens": (48, 1024),
    "eval_episodes": (2, 64),
    "gen_batch_size": (16, 128),
    "micro_batch_size": (8, 16),
    "micro_batch_tokens": (2048, 32768),
    "demos": (1, 0),
    "temperature": (0.7, 1.0),
}

# env_config key -> (CPU value, CUDA value); None = the setting's own default
DEVICE_ENV_DEFAULTS: dict[str, tuple[Any, Any]] = {"max_turns": (1, None)}
