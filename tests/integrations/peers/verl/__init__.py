"""verl's sandbox-fusion tests and scorer, copied unchanged into ``upstream/`` (see ``ORIGIN``)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

UPSTREAM = Path(__file__).resolve().parent / "upstream"


def verl_scorer() -> ModuleType:
    """verl's ``verl.utils.reward_score.sandbox_fusion.utils`` (``check_correctness``,
    ``call_sandbox_api``), imported from the copy."""
    if str(UPSTREAM) not in sys.path:
        sys.path.insert(0, str(UPSTREAM))
    from verl.utils.reward_score.sandbox_fusion import utils

    return utils
