"""Round 5: OpenEnv HTTP sessions that another holder of the token could end.

Up to 0a29a88, ``serve_env`` made room for a new HTTP session by evicting the least recently
used one, with no minimum idle time: a client that sent quota-many ``"new_session": true``
resets (16 by default, a fraction of a second) ended every other client's HTTP session,
the default one included, and the victims' next ``/step`` and ``/state`` answered 400 "unknown
session_id" (or, for the default session, silently started a fresh episode). Now a session is
closed only by its client or by its idle timeout; at the quota a new one is refused.

============================  ==============================  ==================================
root cause                    attack                          defeated when
============================  ==============================  ==================================
eviction without idle time    quota-many ``new_session``      the victims (a keyed session and
                              resets (and MCP                 the default one) step and read
                              ``openenv/session/create``)     their episodes; the attacker gets
                              right after the victims         429 with ``Retry-After``
                              played
one client takes every slot   a client naming itself          it gets its share
                              (``X-Client-Id``) resets in a   (``max_sessions_per_client``),
                              loop                            other clients still get sessions
idle sessions (still) reaped  a new session once the victim   the idle session is closed and the
                              idled past its timeout          slot reused; before, 429
============================  ==============================  ==================================

In-process (Starlette's test client against :func:`adapters.integrations.openenv.create_app`),
so each row runs in seconds.
"""

from __future__ import annotations

import time

from starlette.testclient import TestClient

from adapters.integrations.openenv import create_app

RPC = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
STEP = {"action": {"completion": "no idea"}}  # a bad completion is scored, never refused


def _refused(r) -> bool:
    """A new session refused as it should be: 429 with a usable ``Retry-After``."""
    return r.status_code == 429 and int(r.headers.get("Retry-After", "0")) >= 1


def test_new_sessions_at_the_quota_never_end_a_victims_session():
    app = create_app("sokoban")  # the defaults: 64 WebSocket sessions, an HTTP quota of 16
    quota = app.state.env_server.http_quota
    assert quota == 16
    with TestClient(app) as client:
        own = client.post("/reset", json={"seed": 1, "new_session": True})
        assert own.status_code == 200
        sid = own.json()["session_id"]
        default = client.post("/reset", json={"seed": 2, "episode_id": "victim-default"})
        assert default.status_code == 200
        default_sid = default.json()["session_id"]
        for body in ({**STEP, "session_id": sid}, STEP):
            assert client.post("/step", json=body).status_code == 200

        start = time.monotonic()
        answers = [
            client.post("/reset", json={"seed": 100 + i, "new_session": True})
            for i in range(quota + 4)
        ]
        answers.append(client.post("/mcp", json=RPC))
        took = time.monotonic() - start

        # the keyed victim plays on: its episode, one more step
        step = client.post("/step", json={**STEP, "session_id": sid})
        assert step.status_code == 200, step.text
        state = client.get("/state", params={"session_id": sid})
        assert state.status_code == 200 and state.json()["step_count"] == 2
        # and so does the default-session victim, in the same episode (not a fresh one)
        step = client.post("/step", json=STEP)
        assert step.status_code == 200 and step.json()["session_id"] == default_sid
        state = client.get("/state")
        assert state.status_code == 200
        assert state.json()["step_count"] == 2
        assert state.json()["episode_id"] == "victim-default"

        # the attacker got the slots left, then refusals
        got = [r.status_code for r in answers]
        assert got.count(200) == quota - 1, got  # the victim's session holds one slot
        assert all(r.status_code == 200 or _refused(r) for r in answers), got
        assert _refused(answers[-1]), answers[-1].text  # MCP's create is refused the same way
        assert "in use" in answers[-2].json()["detail"]
        assert took < 60


def test_a_named_client_gets_its_share_and_no_more():
    app = create_app("sokoban", max_http_sessions=4, max_sessions_per_client=2)
    greedy = {"X-Client-Id": "greedy-trainer"}
    with TestClient(app) as client:
        answers = [
            client.post("/reset", json={"seed": i, "new_session": True}, headers=greedy)
            for i in range(6)
        ]
        answers.append(client.post("/mcp", json=RPC, headers=greedy))
        got = [r.status_code for r in answers]
        assert got.count(200) == 2, got
        refused = [r for r in answers if r.status_code != 200]
        assert all(_refused(r) for r in refused), got
        assert "'greedy-trainer'" in refused[0].json()["detail"]
        other = client.post(
            "/reset", json={"seed": 9, "new_session": True}, headers={"X-Client-Id": "other"}
        )
        assert other.status_code == 200, other.text
        anonymous = client.post("/reset", json={"seed": 10, "new_session": True})
        assert anonymous.status_code == 200, anonymous.text
        for r in [*answers[:2], other, anonymous]:
            if r.status_code == 200:
                params = {"session_id": r.json()["session_id"]}
                assert client.get("/state", params=params).status_code == 200


def test_only_sessions_idle_past_their_timeout_make_room():
    app = create_app("sokoban", max_http_sessions=1, http_session_timeout_s=1.0)
    with TestClient(app) as client:
        victim = client.post("/reset", json={"seed": 1, "new_session": True}).json()["session_id"]
        early = client.post("/reset", json={"seed": 2, "new_session": True})
        assert _refused(early) and int(early.headers["Retry-After"]) == 1, early.text
        assert client.get("/state", params={"session_id": victim}).status_code == 200
        time.sleep(1.3)  # the victim idles past its timeout: its slot may be reused
        late = client.post("/reset", json={"seed": 3, "new_session": True})
        assert late.status_code == 200, late.text
        gone = client.get("/state", params={"session_id": victim})
        assert gone.status_code == 400 and "unknown session_id" in gone.json()["detail"]
