"""OpenEnv's simulation-mode tests (``upstream/``, unchanged; see ``ORIGIN``) run against this
project's server: in each copied test module, ``HTTPEnvServer`` (openenv's server class, which
the tests' fixtures construct) is replaced by
:class:`adapters.integrations.openenv_sessions.SessionServer`, so every request the tests make
reaches our HTTP session layer, WebSocket accounting and routes."""

from __future__ import annotations

import pytest

from adapters.integrations.openenv_sessions import SessionServer


@pytest.fixture(autouse=True)
def _our_server(request, monkeypatch):
    assert hasattr(request.module, "HTTPEnvServer"), "the copied test no longer names the server"
    monkeypatch.setattr(request.module, "HTTPEnvServer", SessionServer)
