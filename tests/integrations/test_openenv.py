"""The OpenEnv server (``python -m adapters.serve_env``) against openenv-core's own clients.

One real server process per setting; every episode is replayed in-process on a twin env reset
with the same seed, which also supplies the completions (its oracle, or garbage): the server's
prompts, agents, rewards and reward parts must equal the twin's at every step.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

import envs
from adapters.integrations.openenv import REWARD_MODES, MasAction, MasEnvClient, _jsonable
from tests.envs.contract import fuzz_completions
from tests.integrations.conftest import flush

ALL = envs.list_envs()


@pytest.fixture(scope="module")
def servers(server_factory):
    specs = {e: ("adapters.serve_env", "--env", e) for e in ALL}
    specs["sokoban_small"] = ("adapters.serve_env", "--env", "sokoban", "--max-sessions", "2")
    return server_factory(specs)


class Episode:
    """A client session and its in-process twin, stepped in lockstep."""

    def __init__(self, url: str, env_id: str, **config) -> None:
        self.client = MasEnvClient(base_url=url).sync()
        self.client.connect()
        self.twin = envs.make(env_id, **config).unwrapped
        self.config = config

    def reset(self, seed: int, split: str = "train"):
        result = self.client.reset(seed=seed, split=split, config=self.config or None)
        self.twin.reset(seed=seed, options={"split": split})
        flush(self.twin)
        self.returns = dict.fromkeys(self.twin.possible_agents, 0.0)
        self.reward_sum = 0.0  # what a generic client that sums ``reward`` gets
        self.check(result)
        return result

    def check(self, result) -> None:
        obs, twin = result.observation, self.twin
        assert result.done == (not twin.agents)
        assert obs.agents == list(twin.possible_agents)
        assert obs.instance_id == twin.instance_id and obs.turn == twin.turn
        if twin.agents:
            assert obs.agent == twin.agent_selection
            assert obs.prompt == twin.observe(twin.agent_selection)["prompt"]
        else:
            assert obs.agent is None and obs.prompt == ""

    def step(self, completion: str):
        twin = self.twin
        agent = twin.agent_selection
        twin.step(completion)
        expected = {a: float(r) for a, r in twin.rewards.items()}
        parts = _jsonable(twin.infos[agent]["reward_parts"])
        awards = _jsonable(list(twin.last_awards))
        flush(twin)
        result = self.client.step(MasAction(completion=completion, agent=agent))
        obs = result.observation
        assert obs.acted == agent
        assert obs.rewards == expected  # exact: floats survive the JSON round trip
        # the default reward (step-sum): every role's reward of the step, delayed awards included
        assert result.reward == sum(expected.values())
        self.reward_sum += result.reward
        assert obs.reward_parts[agent] == parts
        assert obs.awards == awards
        for a, r in expected.items():
            self.returns[a] += r
        assert obs.returns == self.returns
        assert obs.success == bool(twin.success)
        self.check(result)
        return result

    def close(self) -> None:
        self.client.close()
        self.twin.close()


@pytest.mark.parametrize("env_id", ALL)
def test_whole_episodes_match_the_in_process_replay(servers, env_id):
    ep = Episode(servers[env_id].url, env_id)
    try:
        # the oracle plays two episodes (train and val): every setting succeeds
        for seed, split in [(11, "train"), (12, "val")]:
            result = ep.reset(seed, split)
            steps = 0
            while not result.done:
                result = ep.step(ep.twin.oracle(ep.twin.agent_selection))
                steps += 1
            assert steps >= 1 and result.observation.success, (env_id, seed)
            assert result.observation.terminated or result.observation.truncated
            # summing reward over the episode gives the in-process sum over roles
            assert ep.reward_sum == pytest.approx(sum(ep.returns.values()), abs=1e-9)
        # then one where every other completion is garbage: format failures score alike
        garbage = fuzz_completions(seed=7, n=1000)
        result = ep.reset(13)
        k = 0
        while not result.done:
            text = next(garbage) if k % 2 else ep.twin.oracle(ep.twin.agent_selection)
            result = ep.step(text)
            k += 1
        state = ep.client.state()
        assert state.done and state.returns == ep.returns and state.env_id == env_id
    finally:
        ep.close()


def test_concurrent_sessions_are_isolated(servers):
    """Four sessions interleaved step by step in one thread, then four in parallel threads;
    MAE's question pool (per session) would show any cross-talk in prompts or rewards."""
    url = servers["propose_solve_judge"].url
    eps = [Episode(url, "propose_solve_judge") for _ in range(4)]
    try:
        results = [ep.reset(100 + i) for i, ep in enumerate(eps)]
        while not all(r.done for r in results):
            for i, ep in enumerate(eps):
                if not results[i].done:
                    results[i] = ep.step(ep.twin.oracle(ep.twin.agent_selection))
        assert len({ep.twin.instance_id for ep in eps}) > 1
    finally:
        for ep in eps:
            ep.close()

    errors: list[BaseException] = []

    def play(seed: int) -> None:
        ep = Episode(url, "propose_solve_judge")
        try:
            for s in (seed, seed + 1):
                result = ep.reset(s)
                while not result.done:
                    result = ep.step(ep.twin.oracle(ep.twin.agent_selection))
        except BaseException as exc:
            errors.append(exc)
        finally:
            ep.close()

    threads = [threading.Thread(target=play, args=(200 + 10 * i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[0]


def _error(client, fn, *args, **kwargs) -> str:
    with pytest.raises(RuntimeError) as info:
        getattr(client, fn)(*args, **kwargs)
    return str(info.value)


def test_bad_requests_get_clear_errors(servers):
    server = servers["plan_path"]
    with MasEnvClient(base_url=server.url).sync() as c:
        assert "call reset() before step()" in _error(c, "step", MasAction(completion="x"))
        assert "seed must be a non-negative int" in _error(c, "reset", seed=-1)
        assert "seed must be a non-negative int" in _error(c, "reset", seed="abc")
        assert "split must be" in _error(c, "reset", seed=1, split="dev")
        msg = _error(c, "reset", seed=1, options={"split": "val"})
        assert "unknown reset option(s) ['options']" in msg and "known: seed" in msg
        assert "Plan-Path instance is" in _error(c, "reset", instance={"grid": 3})
        assert "only be set when the server starts" in _error(
            c, "reset", seed=1, config={"data_path": "/etc/passwd"}
        )
        assert "cannot be set at reset" in _error(c, "reset", seed=1, config={"max_turn": 2})
        result = c.reset(seed=3)
        agent = result.observation.agent
        other = next(a for a in result.observation.agents if a != agent)
        msg = _error(c, "step", MasAction(completion="x", agent=other))
        assert f"it is {agent!r}'s turn" in msg
        # a malformed action is a validation error; the session survives all of the above
        assert "VALIDATION_ERROR" in _error(c, "step", {"text": "x"})
        # a completion sent as JSON (a number) is text, scored as a bad completion, no error
        result = c.step({"completion": 3, "agent": agent})
        assert result.observation.acted == agent and isinstance(result.reward, float)
        while not result.done:
            result = c.step("")
        assert "the episode is over" in _error(c, "step", "")
    # the HTTP endpoints answer 400/422 with a message, never a traceback
    http = httpx.Client(base_url=server.url, timeout=30)
    r = http.post("/step", json={"action": {"completion": "x"}})  # the default session: new
    assert r.status_code == 400 and "call reset() before step()" in r.json()["detail"]
    r = http.post("/step", json={"session_id": "nope", "action": {"completion": "x"}})
    assert r.status_code == 400 and "unknown session_id 'nope'" in r.json()["detail"]
    r = http.post("/reset", json={"seed": 1, "split": "nope"})
    assert r.status_code == 400 and "split must be" in r.json()["detail"]
    r = http.post("/reset", json={"seed": 2})
    assert r.status_code == 200 and r.json()["observation"]["agent"] == "tool"
    sid = r.json()["observation"]["session_id"]
    r = http.post("/step", json={"session_id": sid, "action": {"text": "x"}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["completion"]
    r = http.post("/reset", json={"new_session": "yes"})
    assert r.status_code == 400 and "new_session must be" in r.json()["detail"]
    assert http.post("/close", json={"session_id": sid}).json()["closed"] is True
    assert http.get("/health").json() == {"status": "healthy"}
    assert "completion" in http.get("/schema").json()["action"]["properties"]
    assert server.alive


def test_instance_and_config_at_reset(servers):
    with MasEnvClient(base_url=servers["plan_path"].url).sync() as c:
        grid = ["....", ".##.", "...."]
        result = c.reset(instance={"grid": grid, "start": [0, 0], "goal": [2, 3]})
        assert "##" in result.observation.prompt and result.observation.agent == "tool"
        result = c.reset(seed=4, config={"mode": "single", "max_turns": 2})
        assert result.observation.agents == ["planner"]
        twin = envs.make("plan_path", mode="single", max_turns=2).unwrapped
        twin.reset(seed=4)
        assert result.observation.prompt == twin.observe("planner")["prompt"]
        result = c.reset(seed=4)  # back to the server's config
        assert result.observation.agents == ["tool", "planner"]


def test_capacity_is_reported(servers):
    """A session beyond ``--max-sessions`` gets OpenEnv's CAPACITY_REACHED frame."""
    import json

    from websockets.sync.client import connect

    url = servers["sokoban_small"].url
    a, b = MasEnvClient(base_url=url).sync(), MasEnvClient(base_url=url).sync()
    a.reset(seed=1)
    b.reset(seed=2)
    try:
        with connect(url.replace("http://", "ws://") + "/ws", open_timeout=30) as ws:
            frame = json.loads(ws.recv(timeout=30))
        assert frame["type"] == "error" and frame["data"]["code"] == "CAPACITY_REACHED"
    finally:
        a.close()
        b.close()
    deadline = time.monotonic() + 30  # the server frees a closed session's slot shortly after
    while True:
        try:
            with MasEnvClient(base_url=url).sync() as c:
                assert c.reset(seed=3).observation.agent == "tool"
            break
        except (RuntimeError, ConnectionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_generic_client_plays_with_plain_dicts(servers):
    """openenv's GenericEnvClient, as ``AutoEnv.from_env`` gives it for a server's URL."""
    from openenv import AutoEnv
    from openenv.core import GenericEnvClient

    twin = envs.make("sokoban").unwrapped
    twin.reset(seed=21)
    client = AutoEnv.from_env("mas-rl-envs", base_url=servers["sokoban"].url, skip_install=True)
    assert isinstance(client, GenericEnvClient)
    with client.sync() as c:
        result = c.reset(seed=21)
        while not result.done:
            agent = result.observation["agent"]
            completion = twin.oracle(agent)
            twin.step(completion)
            result = c.step({"completion": completion})
            assert result.observation["rewards"] == twin.rewards
            flush(twin)
        assert result.observation["success"] is True


def test_pools_are_per_session_unless_shared():
    """In-process: sessions of one app get their own MAE question pool, or with
    ``share_pools=True`` the run-wide one (the pool a trainer checkpoints)."""
    from adapters.integrations.openenv import create_app

    for share in (False, True):
        app = create_app("mae", share_pools=share)
        a, b = app.state.env_factory(), app.state.env_factory()
        a.reset(seed=1)
        b.reset(seed=2)
        assert (a.raw.pool is b.raw.pool) == share
        a.close()
        b.close()
    strict = create_app("plan_path", allow_reset_config=False).state.env_factory()
    with pytest.raises(ValueError, match="does not accept env config"):
        strict.reset(seed=1, config={"max_turns": 2})
    assert strict.reset(seed=1).agent == "tool"


def test_a_setting_registered_outside_is_served_by_module_id(tmp_path, monkeypatch):
    """``--env package.module:id`` imports the module that registers the setting first."""
    from adapters.integrations.openenv import create_app

    (tmp_path / "outside_serve.py").write_text(
        "import envs\nenvs.register('outside_plan_path', 'envs.plan_path:env')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        app = create_app("outside_serve:outside_plan_path", {"height": 4, "width": 4})
        env = app.state.env_factory()
        meta = env.get_metadata()
        assert meta.name == "outside_plan_path" and meta.documentation_url.startswith("envs/plan")
        assert env.reset(seed=1).agent == "tool" and env.raw.config.height == 4
        env.close()
    finally:
        envs.core.registry._REGISTRY.pop("outside_plan_path", None)


def test_http_sessions_play_whole_episodes(servers):
    """OpenEnv's HTTP simulation flow, keyed by the session id ``/reset`` returns: an oracle
    episode over ``/reset`` ``/step`` ``/state`` matches the in-process twin; a JSON number as
    the completion is text; ``episode_id`` is a fresh uuid; ``/schema`` declares our state."""
    import uuid

    url = servers["plan_path"].url
    twin = envs.make("plan_path").unwrapped
    with httpx.Client(base_url=url, timeout=60) as http:
        r = http.post("/reset", json={"seed": 5}).json()
        sid, obs = r["observation"]["session_id"], r["observation"]
        uuid.UUID(obs["info"]["episode_id"])
        twin.reset(seed=5)
        flush(twin)
        total, twin_total = 0.0, 0.0
        while not r["done"]:
            agent = twin.agent_selection
            completion = twin.oracle(agent)
            twin.step(completion)
            twin_total += sum(twin.rewards.values())
            flush(twin)
            r = http.post("/step", json={"session_id": sid, "action": {"completion": completion}})
            r = r.json()
            assert r["observation"]["acted"] == agent and r["observation"]["session_id"] == sid
            total += r["reward"]
        assert r["observation"]["success"] is True and total == pytest.approx(twin_total)
        state = http.get("/state", params={"session_id": sid}).json()
        assert state["done"] is True and state["episode_id"] == obs["info"]["episode_id"]
        again = http.post("/reset", json={"seed": 5, "session_id": sid}).json()["observation"]
        assert again["info"]["episode_id"] != obs["info"]["episode_id"]
        step = http.post("/step", json={"session_id": sid, "action": {"completion": 42}})
        assert step.status_code == 200 and step.json()["observation"]["acted"] == "tool"
        schema = http.get("/schema").json()
        assert {"returns", "env_id", "agent", "done"} <= set(schema["state"]["properties"])
        assert http.post("/close", json={"session_id": sid}).json()["closed"] is True


def test_reward_modes():
    """``acting``: the acting role's reward; ``step-sum``: every role's (MAE's judge step also
    pays the proposer its delayed award); ``team``: their mean. In lockstep with a twin."""
    from adapters.integrations.openenv import create_app

    envs_by_mode = {m: create_app("mae", reward=m).state.env_factory() for m in REWARD_MODES}
    twin = envs.make("mae").unwrapped
    for env in envs_by_mode.values():
        env.reset(seed=9)
    twin.reset(seed=9)
    flush(twin)
    differs = 0
    while twin.agents:
        agent = twin.agent_selection
        completion = twin.oracle(agent)
        twin.step(completion)
        rewards = dict(twin.rewards)
        flush(twin)
        got = {m: e.step(MasAction(completion=completion)).reward for m, e in envs_by_mode.items()}
        assert got["acting"] == rewards[agent]
        assert got["step-sum"] == pytest.approx(sum(rewards.values()))
        assert got["team"] == pytest.approx(sum(rewards.values()) / len(rewards))
        differs += got["step-sum"] != got["acting"]
    assert differs >= 1  # a delayed award reached a role other than the acting one
    for env in envs_by_mode.values():
        env.close()


def test_openenv_simulation_flow_without_session_ids(servers):
    """OpenEnv's plain-HTTP flow on a setting: ``/reset``, ``/step``, ``/step``, ``/state`` with
    no session id act on the default session (the steps continue the reset's episode, in
    lockstep with a twin; ``step_count`` and ``episode_id`` as in openenv's state contract); a
    second reset replaces its episode in the same session; a client's own session (``new_session``)
    is untouched by the default one."""
    url = servers["plan_path"].url
    twin = envs.make("plan_path").unwrapped
    with httpx.Client(base_url=url, timeout=60) as http:
        first = http.post("/reset", json={"seed": 8, "episode_id": "ep-1"}).json()
        own = http.post("/reset", json={"seed": 9, "new_session": True}).json()
        assert own["session_id"] != first["session_id"]
        twin.reset(seed=8)
        flush(twin)
        for _ in range(2):
            completion = twin.oracle(twin.agent_selection)
            twin.step(completion)
            expected = {a: float(r) for a, r in twin.rewards.items()}
            flush(twin)
            r = http.post("/step", json={"action": {"completion": completion}}).json()
            assert r["session_id"] == first["session_id"]
            assert r["observation"]["rewards"] == expected
            if twin.agents:
                assert r["observation"]["prompt"] == twin.observe(twin.agent_selection)["prompt"]
            assert r["done"] == (not twin.agents)
        state = http.get("/state").json()
        assert state["step_count"] == 2 and state["episode_id"] == "ep-1"
        again = http.post("/reset", json={"seed": 8}).json()
        assert again["session_id"] == first["session_id"]
        assert http.get("/state").json()["step_count"] == 0
        mine = http.get("/state", params={"session_id": own["session_id"]}).json()
        assert mine["step_count"] == 0 and mine["instance_id"] != state["instance_id"]
        assert http.post("/close", json={}).json()["session_id"] == first["session_id"]
        assert http.get("/state").json()["episode_id"] is None  # no default session: a fresh env
