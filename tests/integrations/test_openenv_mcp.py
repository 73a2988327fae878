"""MCP mode of the OpenEnv server (``python -m adapters.serve_env --mcp``) against openenv's own
MCP client (``MCPToolClient``, production mode), its simulation-mode ``CallToolAction`` step,
and a plain JSON-RPC exchange over ``POST /mcp``.

Every episode is replayed in-process on a twin env reset with the same seed, which supplies the
completions (its oracle): each ``answer`` call's rewards must equal the twin's step, and summing
the results' ``reward`` over the episode must give the twin's sum over roles (delayed awards
included: MAE's judge step pays the proposer).
"""

from __future__ import annotations

import httpx
import pytest

import envs
from tests.integrations.conftest import flush

SETTINGS = ("math", "propose_solve_judge")


@pytest.fixture(scope="module")
def servers(server_factory):
    specs = {e: ("adapters.serve_env", "--env", e, "--mcp") for e in SETTINGS}
    specs["plain"] = ("adapters.serve_env", "--env", "math")
    return server_factory(specs)


def twin_step(twin, completion: str) -> dict[str, float]:
    """Step the twin; its rewards for the step (every role's), then take its dead steps."""
    twin.step(completion)
    rewards = {a: float(r) for a, r in twin.rewards.items()}
    flush(twin)
    return rewards


@pytest.mark.parametrize("env_id", SETTINGS)
def test_mcp_tool_client_plays_whole_episodes(servers, env_id):
    from openenv.core.mcp_client import MCPToolClient

    twin = envs.make(env_id).unwrapped
    with MCPToolClient(base_url=servers[env_id].url).sync() as env:
        tools = {t.name: t for t in env.list_tools()}
        assert set(tools) == {"answer", "observe"}
        assert tools["answer"].input_schema["properties"]["completion"]["type"] == "string"
        for seed, split in [(11, "train"), (12, "val")]:
            obs = env.reset(seed=seed, split=split).observation
            twin.reset(seed=seed, options={"split": split})
            flush(twin)
            assert obs.agent == twin.agent_selection
            assert obs.prompt == twin.observe(twin.agent_selection)["prompt"]
            total, returns = 0.0, dict.fromkeys(twin.possible_agents, 0.0)
            done, steps = False, 0
            while not done:
                agent = twin.agent_selection
                completion = twin.oracle(agent)
                expected = twin_step(twin, completion)
                result = env.call_tool("answer", completion=completion, agent=agent)
                got = result["observation"]
                assert got["acted"] == agent and got["rewards"] == expected
                assert result["reward"] == pytest.approx(sum(expected.values()), abs=1e-12)
                total += result["reward"]
                for a, r in expected.items():
                    returns[a] += r
                done, steps = result["done"], steps + 1
                assert done == (not twin.agents)
                if not done:
                    assert got["agent"] == twin.agent_selection
                    assert got["prompt"] == twin.observe(twin.agent_selection)["prompt"]
            assert steps >= 1 and got["success"] is True and got["returns"] == returns
            assert total == pytest.approx(sum(returns.values()), abs=1e-9)
            now = env.call_tool("observe")
            assert now["done"] is True and now["observation"]["returns"] == returns
        # a call the episode cannot take is a tool error with the plain server's message
        with pytest.raises(RuntimeError, match="the episode is over"):
            env.call_tool("answer", completion="x")


def test_simulation_mode_call_tool_steps_carry_reward_and_done(servers):
    """OpenEnv's simulation pattern ``step(CallToolAction(...))`` over ``/ws``: the observation
    carries the step's reward and done; a JSON number as the completion is scored as text; the
    plain ``{"completion": ...}`` step works on the same session."""
    from openenv.core import GenericEnvClient

    twin = envs.make("math").unwrapped
    with GenericEnvClient(base_url=servers["math"].url).sync() as c:
        c.reset(seed=5)
        twin.reset(seed=5)
        flush(twin)
        call = {"type": "call_tool", "tool_name": "answer", "arguments": {"completion": 42}}
        expected = twin_step(twin, "42")
        result = c.step(call)
        assert result.observation["error"] is None
        assert result.reward == pytest.approx(sum(expected.values()))
        assert result.done is False
        while twin.agents:
            completion = twin.oracle(twin.agent_selection)
            expected = twin_step(twin, completion)
            result = c.step({"completion": completion})
            assert result.observation["rewards"] == expected
        assert result.done is True
        listed = c.step({"type": "list_tools"}).observation
        assert sorted(t["name"] for t in listed["tools"]) == ["answer", "observe"]


def test_plain_json_rpc_over_http_sessions(servers):
    """No OpenEnv client: ``POST /reset`` makes an HTTP session, ``tools/call`` with its
    ``session_id`` plays it; errors are JSON-RPC errors, never tracebacks. The server started
    without ``--mcp`` still says it has no MCP."""
    twin = envs.make("math").unwrapped
    with httpx.Client(base_url=servers["math"].url, timeout=60) as http:

        def rpc(method: str, **params):
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            return http.post("/mcp", json=body).json()

        sid = http.post("/reset", json={"seed": 7}).json()["observation"]["session_id"]
        twin.reset(seed=7)
        flush(twin)
        wrong = next(a for a in twin.possible_agents if a != twin.agent_selection)
        error = rpc(
            "tools/call",
            name="answer",
            session_id=sid,
            arguments={"completion": "x", "agent": wrong},
        )
        assert f"it is {twin.agent_selection!r}'s turn" in error["error"]["message"]
        total, twin_total = 0.0, 0.0
        while twin.agents:
            completion = twin.oracle(twin.agent_selection)
            expected = twin_step(twin, completion)
            twin_total += sum(expected.values())
            answer = rpc("tools/call", name="answer", session_id=sid,
                         arguments={"completion": completion})["result"]  # fmt: skip
            data = answer["structured_content"]
            assert data["observation"]["rewards"] == expected
            total += data["reward"]
        assert data["done"] is True and data["observation"]["success"] is True
        assert total == pytest.approx(twin_total, abs=1e-9)
        assert http.post("/close", json={"session_id": sid}).json()["closed"] is True
        fresh = rpc("openenv/session/create")["result"]["session_id"]
        assert (
            "call reset() first"
            in rpc("tools/call", name="observe", session_id=fresh)["error"]["message"]
        )
        assert rpc("openenv/session/close", session_id=fresh)["result"]["closed"] is True
    plain = httpx.post(
        servers["plain"].url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        timeout=60,
    ).json()
    assert plain["error"]["message"] == "Environment does not support MCP"


@pytest.mark.parametrize("name", ["math", "plain"])
def test_openenv_validate_passes_with_and_without_mcp(servers, name):
    """OpenEnv's own runtime validator (``openenv validate --url``): health, metadata, schema,
    the ``/mcp`` endpoint and mode consistency, for a server with and one without ``--mcp``."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "openenv.cli", "validate", "--url", servers[name].url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "Verdict: PASS" in out.stdout, out.stdout + out.stderr
    assert "PASS  mcp_endpoint" in out.stdout
