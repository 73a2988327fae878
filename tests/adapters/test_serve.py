"""The OpenAI-compatible server and OpenAIPolicy, tested against each other for real."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from adapters.integrations.openai_server import BadRequest, parse_request, start_in_thread
from adapters.policies import OpenAIAPIError, OpenAIPolicy, SamplingParams, ScriptedPolicy

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def scripted_server():
    policy = ScriptedPolicy(lambda text: f"echo: {text}. END more", name="echo")
    server = start_in_thread(policy)
    yield server
    server.shutdown()
    server.server_close()


def post(url, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_models_and_health(scripted_server):
    policy = OpenAIPolicy(scripted_server.url, "echo")
    assert policy.list_models() == ["echo"]
    with urllib.request.urlopen(scripted_server.url.replace("/v1", "/health"), timeout=5) as r:
        assert json.loads(r.read()) == {"status": "ok"}


def test_scripted_round_trip_n_stop_and_missing_ids(scripted_server):
    policy = OpenAIPolicy(scripted_server.url, "echo")
    out = policy.generate(
        ["hi", [{"role": "user", "content": "yo"}]], SamplingParams(n=3, stop=(" END",))
    )
    assert [[c.text for c in cs] for cs in out] == [["echo: hi."] * 3, ["echo: yo."] * 3]
    c = out[0][0]
    # a scripted policy has no tokens: benchmarking only
    assert c.token_ids == [] and c.logprobs == [] and c.prompt_ids == [] and not c.trainable
    assert c.finish_reason == "stop"


def test_server_rejects_bad_requests(scripted_server):
    url = scripted_server.url + "/chat/completions"
    assert post(url, {"messages": []})[0] == 400
    assert post(url, {"messages": [{"role": "user", "content": "x"}], "stream": True})[0] == 400
    status, body = post(url, {"messages": [{"role": "user", "content": "x"}], "temperature": -1})
    assert status == 400 and "temperature" in body["error"]["message"]
    assert post(url, None, raw=b"{not json")[0] == 400
    assert post(scripted_server.url + "/nope", {"x": 1})[0] == 404


def test_openai_policy_raises_clear_error_on_4xx(scripted_server):
    policy = OpenAIPolicy(scripted_server.url, "echo", max_retries=3, backoff_s=0.01)
    with pytest.raises(OpenAIAPIError, match="HTTP 400") as info:
        # top_logprobs is unsupported by this server -> 400, not retried
        OpenAIPolicy(
            scripted_server.url, "echo", extra_body={"top_logprobs": 2}, max_retries=3
        ).generate(["x"])
    assert info.value.status == 400 and "top_logprobs" in str(info.value)
    assert policy.generate(["x"])[0][0].text.startswith("echo")


def test_parse_request_fields():
    messages, params, want_lp = parse_request(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                }
            ],
            "n": 2,
            "temperature": 0,
            "max_completion_tokens": 7,
            "stop": "\n",
            "seed": 3,
            "top_k": 5,
            "logprobs": True,
        }
    )
    assert messages == [{"role": "user", "content": "ab"}]
    assert (
        params.n,
        params.temperature,
        params.max_new_tokens,
        params.stop,
        params.seed,
        params.top_k,
    ) == (
        2,
        0.0,
        7,
        ("\n",),
        3,
        5,
    )
    assert want_lp
    with pytest.raises(BadRequest):
        parse_request({"messages": [{"role": "user", "content": "x"}], "stop": 5})


# ------------------------------------------------------------------------------------------
# retries against a flaky fake server


class _Flaky(BaseHTTPRequestHandler):
    plan: list[int] = []
    calls = 0

    def log_message(self, *args):
        pass

    def do_POST(self):
        type(self).calls += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        status = self.plan.pop(0) if self.plan else 200
        if status == 200:
            body = {
                "choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "length"}]
            }
        else:
            body = {"error": {"message": f"status {status}"}}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def flaky():
    _Flaky.plan, _Flaky.calls = [], 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_retries_5xx_and_429_then_succeeds(flaky):
    _, base = flaky
    _Flaky.plan = [503, 429, 500]
    policy = OpenAIPolicy(base, "m", max_retries=3, backoff_s=0.01)
    c = policy.generate(["x"])[0][0]
    assert c.text == "ok" and c.finish_reason == "length"
    assert _Flaky.calls == 4


def test_gives_up_after_max_retries(flaky):
    _, base = flaky
    _Flaky.plan = [502, 502, 502]
    with pytest.raises(OpenAIAPIError, match="after 3 attempts"):
        OpenAIPolicy(base, "m", max_retries=2, backoff_s=0.01).generate(["x"])
    assert _Flaky.calls == 3


def test_server_ignoring_n_is_asked_again(flaky):
    _, base = flaky  # the fake always returns one choice
    out = OpenAIPolicy(base, "m", backoff_s=0.01).generate(["x", "y"], SamplingParams(n=3))
    assert [len(cs) for cs in out] == [3, 3] and _Flaky.calls == 6


def test_connection_refused_is_retried_then_reported():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff_s=0.01)
    with pytest.raises(OpenAIAPIError, match="after 2 attempts"):
        policy.generate(["x"])


def test_base_url_validation():
    assert OpenAIPolicy("http://h:1", "m").base_url == "http://h:1/v1"
    assert OpenAIPolicy("http://h:1/v1/", "m").base_url == "http://h:1/v1"
    with pytest.raises(ValueError):
        OpenAIPolicy("localhost:8000", "m")


# ------------------------------------------------------------------------------------------
# a real model behind the server


def _round_trip(local_policy):
    """Server answers must equal the local policy's own completions for the same seed."""
    server = start_in_thread(local_policy, model_name="local")
    try:
        remote = OpenAIPolicy(server.url, "local")
        prompts = [
            "hello there",
            [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        ]
        params = SamplingParams(n=3, max_new_tokens=9, seed=11, temperature=0.9)
        got = remote.generate(prompts, params)
        # one request per prompt, prompt i with seed + i: prompt 0 of a call with that seed
        want = [
            local_policy.generate([p], dataclasses.replace(params, seed=params.seed + i))[0]
            for i, p in enumerate(prompts)
        ]
        for gs, ws in zip(got, want):
            assert len(gs) == 3
            for g, w in zip(gs, ws):
                assert g.text == w.text and g.finish_reason == w.finish_reason
                assert g.token_ids == w.token_ids and g.prompt_ids == w.prompt_ids
                assert g.logprobs == pytest.approx(w.logprobs, abs=1e-6)
                assert len(g.token_ids) <= 9
                if g.finish_reason == "length":
                    assert len(g.token_ids) == 9
        # stop strings are applied server side
        text = got[0][0].text
        if len(text) > 3:
            stop = text[2:4]
            cut = remote.generate(
                prompts[:1],
                SamplingParams(max_new_tokens=9, seed=11, temperature=0.9, stop=(stop,)),
            )
            assert cut[0][0].text == text[: text.index(stop)] and cut[0][0].finish_reason == "stop"
        # without logprobs requested the server sends none
        bare = OpenAIPolicy(server.url, "local", request_logprobs=False).generate(
            ["x"], SamplingParams(max_new_tokens=3)
        )
        assert bare[0][0].logprobs == [] and len(bare[0][0].token_ids) >= 1
    finally:
        server.shutdown()
        server.server_close()


def test_round_trip_with_char_model(char_policy):
    _round_trip(char_policy)


@pytest.mark.slow
def test_round_trip_with_tiny_model():
    from adapters.policies import TransformersPolicy
    from adapters.policies.models import tiny_model

    model, tok = tiny_model(seed=0)
    _round_trip(TransformersPolicy(model, tok, device="cpu", name="tiny"))


@pytest.mark.slow
def test_cli_serves_the_tiny_model_on_a_free_port():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "adapters.serve",
            "--model",
            "tiny",
            "--port",
            "0",
            "--threads",
            "1",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.time() + 120
        line = ""
        while time.time() < deadline:
            line = proc.stdout.readline()
            if line.startswith("serving") or not line:
                break
        assert line.startswith("serving tiny at http://127.0.0.1:"), line
        url = line.split(" at ")[1].strip()
        out = OpenAIPolicy(url, "tiny").generate(
            ["hi"], SamplingParams(n=2, max_new_tokens=5, seed=1)
        )
        assert [len(c.token_ids) for c in out[0]] == [5, 5]
        assert all(len(c.logprobs) == 5 for c in out[0])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
