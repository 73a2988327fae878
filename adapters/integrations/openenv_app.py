"""The OpenEnv app named by ``openenv.yaml`` (``app: adapters.integrations.openenv_app:app``),
for runners that start a module-level ASGI app themselves (``uvicorn
adapters.integrations.openenv_app:app``): the setting ``$MAS_ENV`` (default ``sokoban``) with the
env config ``$MAS_ENV_CONFIG`` (a JSON object), behind the services' guard (token from
``$MAS_SERVICE_TOKEN``). ``python -m adapters.serve_env`` is the full-featured way (header
timeouts and the connection limit need its server)."""

from __future__ import annotations

import json
import os

from adapters.integrations._guard import Guard, GuardConfig
from adapters.integrations.openenv import create_app

app = Guard(
    create_app(
        os.environ.get("MAS_ENV", "sokoban"), json.loads(os.environ.get("MAS_ENV_CONFIG") or "{}")
    ),
    GuardConfig.from_env(),
)
