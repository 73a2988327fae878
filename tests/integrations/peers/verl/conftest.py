"""verl's sandbox-fusion tests (``upstream/``, unchanged; see ``ORIGIN``) with verl's own scorer,
``verl.utils.reward_score.sandbox_fusion.utils``, importable from ``upstream/``.

The copied test reads the service's URL from ``$SANDBOX_FUSION_URL`` when it is imported, so it
is collected only when that is set: ``tests/integrations/test_verl_replay.py`` starts
``serve_sandbox`` and runs the file against it in a pytest of its own.
"""

from __future__ import annotations

import os

from tests.integrations.peers.verl import verl_scorer

verl_scorer()  # puts the copy on sys.path for the copied test's imports

collect_ignore_glob = ["upstream/verl/*"]
if not os.environ.get("SANDBOX_FUSION_URL"):
    collect_ignore_glob.append("upstream/test_*.py")
