"""Deprecated path: the TRL adapter lives in :mod:`adapters.integrations.trl`.

``from adapters.trl_adapter import make_rollout_func`` keeps working (with a
``DeprecationWarning``); new code imports from ``adapters.integrations.trl``.
"""

from __future__ import annotations

import warnings

from adapters.integrations.trl import *  # noqa: F403
from adapters.integrations.trl import __all__ as __all__

warnings.warn(
    "adapters.trl_adapter moved to adapters.integrations.trl; import from there",
    DeprecationWarning,
    stacklevel=2,
)
