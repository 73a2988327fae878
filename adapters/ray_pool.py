"""Deprecated path: the Ray env pool lives in :mod:`adapters.rollout.ray_pool`.

``from adapters.ray_pool import RayEnvPool`` keeps working (with a ``DeprecationWarning``); new
code imports ``from adapters.rollout import RayEnvPool``.
"""

from __future__ import annotations

import warnings

from adapters.rollout.ray_pool import RayEnvPool

__all__ = ["RayEnvPool"]

warnings.warn(
    "adapters.ray_pool moved to adapters.rollout.ray_pool; use `from adapters.rollout import "
    "RayEnvPool`",
    DeprecationWarning,
    stacklevel=2,
)
