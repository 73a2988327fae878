"""The services' rows of the red-team table: what a client of an exposed ``serve_env`` /
``serve_sandbox`` tried (issue 24's service findings), by root cause, each against the honest
request it must not beat. In-process (the ASGI apps through Starlette's test client, the guard
with a scripted ``receive``), so the rows run in seconds; the same limits under real load, over
loopback, are in ``tests/integrations/test_service_load.py``.

============================  ==============================  ==================================
root cause                    attack                          defeated when
============================  ==============================  ==================================
client sets the limits        raise ``memory_mb`` at reset    the 900 MB program scores as at
                              so a 900 MB program fits        the server's limit (0.45, not 1.0)
client sets the sizes         ``max_mutants=10000``,          the session runs with the server's
                              ``num_answers=500`` at reset    values
body read before checked      200 MB to ``/run_code``,        refused (413) after at most the
                              150 MB to ``/mcp``              20 MiB cap was read
no authentication             requests without the token      401, the app never sees them
HTTP sessions unbounded       every slot taken over HTTP      HTTP gets its quota, WebSocket
                                                              clients the rest; a new HTTP
                                                              session beyond the quota is
                                                              refused (429), none ended
session ids act as keys       HTTP closes a WebSocket         refused; the WebSocket session
                              client's session                plays on
============================  ==============================  ==================================
"""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.testclient import TestClient

import envs
from adapters.integrations._guard import Guard, GuardConfig
from adapters.integrations.openenv import MasAction, create_app

from .attacks import CLIP, py

BIG = "x = bytearray(900 << 20)\n" + CLIP["solution"]


def _coder_reward(config: dict | None) -> float:
    """The single coder's reward for the correct CLIP solution that first allocates 900 MB,
    in a session whose client sent ``config`` at reset (plus ``mode="single"``)."""
    env = create_app("code").state.env_factory()
    try:
        obs = env.reset(instance=CLIP, config={"mode": "single", **(config or {})})
        obs = env.step(MasAction(completion=py(BIG)))
        return obs.rewards["coder"]
    finally:
        env.close()


def test_client_cannot_raise_sandbox_limits_at_reset():
    honest = _coder_reward(None)
    forged = _coder_reward({"memory_mb": 65536, "wall_s": 3600})
    assert honest < 1.0  # the program does not fit the server's 512 MB
    assert forged <= honest + 1e-9, (forged, honest)
    env = create_app("code").state.env_factory()
    obs = env.reset(instance=CLIP, config={"memory_mb": 65536, "wall_s": 3600})
    assert obs.info["clamped"] == {"memory_mb": 65536, "wall_s": 3600}
    server = envs.make("code").unwrapped.config
    assert (env.raw.config.memory_mb, env.raw.config.wall_s) == (server.memory_mb, server.wall_s)
    # lowering is the client's right
    env.reset(instance=CLIP, config={"memory_mb": 128})
    assert env.raw.config.memory_mb == 128
    env.close()


@pytest.mark.parametrize(
    "env_id, key, asked, server",
    [("code", "max_mutants", 10_000, 16), ("propose_solve_judge", "num_answers", 500, 5)],
)
def test_client_cannot_raise_sizes_at_reset(env_id, key, asked, server):
    env = create_app(env_id).state.env_factory()
    try:
        obs = env.reset(seed=1, config={key: asked})
        assert getattr(env.raw.config, key) == server and obs.info["clamped"] == {key: asked}
    finally:
        env.close()


def test_keys_outside_the_allowlist_are_refused():
    env = create_app("code").state.env_factory()
    with pytest.raises(ValueError, match="cannot be set at reset"):
        env.reset(seed=1, config={"dataset": "mbpp+"})
    with pytest.raises(ValueError, match="only be set when the server starts"):
        env.reset(seed=1, config={"data_path": "/etc/passwd"})
    env.close()


async def _through_guard(path: str, chunks: int, config: GuardConfig) -> tuple[int, int, bool]:
    """Send ``chunks`` MiB (chunked: no Content-Length) through the guard: (status, MiB the
    guard read, whether the app was called)."""
    read = 0
    called = False

    async def receive():
        nonlocal read
        read += 1
        return {"type": "http.request", "body": b"x" * (1 << 20), "more_body": read < chunks}

    async def app(scope, receive, send):
        nonlocal called
        called = True

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": []}
    if config.token:
        scope["headers"] = [(b"authorization", f"Bearer {config.token}".encode())]
    await Guard(app, config)(scope, receive, send)
    return sent[0]["status"] if sent else 0, read, called


@pytest.mark.parametrize("path, mib", [("/run_code", 200), ("/mcp", 150)])
def test_huge_bodies_are_refused_at_the_cap(path, mib):
    status, read, called = asyncio.run(_through_guard(path, mib, GuardConfig()))
    assert status == 413 and not called
    assert read <= 21, f"the guard read {read} MiB of {mib}"
    honest = asyncio.run(_through_guard(path, 2, GuardConfig()))
    assert honest == (0, 2, True)  # a 2 MiB body reaches the app


def test_requests_without_the_token_never_reach_the_app():
    config = GuardConfig(token="s3cret-token")
    seen: list[str] = []

    async def app(scope, receive, send):
        seen.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    client = TestClient(Guard(app, config))
    assert client.post("/run_code", json={}).status_code == 401
    wrong = {"Authorization": "Bearer s3cret-tokeN"}
    assert client.post("/run_code", json={}, headers=wrong).status_code == 401
    assert client.post("/t/other-token/run_code").status_code == 401
    assert seen == []
    ok = {"Authorization": "Bearer s3cret-token"}
    assert client.post("/run_code", json={}, headers=ok).status_code == 200
    assert client.post("/t/s3cret-token/run_code").status_code == 200
    assert seen == ["/run_code", "/run_code"]  # the path form reaches the app without the token


def test_http_cannot_take_every_session_or_close_another_clients():
    """HTTP clients share their own quota (a quarter of ``max_sessions``): a new HTTP session
    beyond it is refused (429, ``Retry-After``), neither taking a WebSocket slot nor ending the
    HTTP session in use, and no HTTP route can close or read a WebSocket client's session."""
    app = create_app("sokoban", max_sessions=4)
    with TestClient(app) as client:
        first = client.post("/reset", json={"seed": 1, "new_session": True})
        assert first.status_code == 200
        mine = first.json()["session_id"]
        second = client.post("/reset", json={"seed": 2, "new_session": True})
        assert second.status_code == 429  # quota 1: refused rather than ending `first`
        assert int(second.headers["Retry-After"]) >= 1
        assert "in use" in second.json()["detail"]
        kept = client.get("/state", params={"session_id": mine})
        assert kept.status_code == 200 and kept.json()["step_count"] == 0
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
        full = client.post("/mcp", json=rpc)
        assert full.status_code == 429 and "Retry-After" in full.headers
        assert full.json()["error"]["data"]["retry_after"] >= 1
        assert client.post("/close", json={"session_id": mine}).json()["closed"] is True
        assert "session_id" in client.post("/mcp", json=rpc).json()["result"]  # room again
        sockets = [client.websocket_connect("/ws") for _ in range(4)]
        for i, ws in enumerate(sockets):
            ws.__enter__()
            ws.send_text(json.dumps({"type": "reset", "data": {"seed": i}}))
            assert json.loads(ws.receive_text())["type"] == "observation"
        server = app.state.env_server
        ws_ids = server.sessions_of("ws")
        assert len(ws_ids) == 4
        close = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "openenv/session/close",
            "params": {"session_id": ws_ids[0]},
        }
        assert (
            "unknown HTTP session_id" in client.post("/mcp", json=close).json()["error"]["message"]
        )
        assert client.post("/close", json={"session_id": ws_ids[0]}).status_code == 400
        assert client.get("/state", params={"session_id": ws_ids[0]}).status_code == 400
        for ws in sockets:
            ws.send_text(json.dumps({"type": "step", "data": {"completion": "x"}}))
            assert json.loads(ws.receive_text())["type"] == "observation"
            ws.__exit__(None, None, None)
