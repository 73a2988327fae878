"""Round 5: the OpenAI-compatible policy server (``python -m adapters.serve``,
:mod:`adapters.integrations.openai_server`) exposed to clients it does not control. Before this
round it was a bare ``ThreadingHTTPServer``: no token, no bounds on ``n`` or ``max_tokens``, no
header or body timeout, no connection limit. It now runs behind the guard of the other services
(:mod:`adapters.integrations._guard`) and caps what one request may ask for.

The server runs in-process on a free loopback port with a scripted policy (no model), each test
with small limits so it runs in seconds; the last test starts the command itself with a constant
policy.

============================  ================================  ================================
root cause                    attack                            defeated when
============================  ================================  ================================
no authentication             requests without the token of     401 (a header or ``/t/TOKEN``
                              ``$MAS_SERVICE_TOKEN``            lets the honest client in); the
                                                                policy never sees them
``n`` unbounded               a 101-byte request with           400 naming ``--max-n``; nothing
                              ``n=50000`` (before: all 50,000   generated, under 2 MiB allocated
                              generated and sent, 5.6 MB of
                              reply for a two-letter answer)
``max_tokens`` unbounded      ``max_tokens=1000000``            400 naming ``--max-tokens``;
                                                                nothing generated
body read without a deadline  connections announce a 16 MB      408 and closed after the body
                              body and send one byte            timeout; an honest request is
                                                                served meanwhile
headers without a deadline    connections that never finish     closed after the header timeout
                              their headers
connections unbounded         more connections than             the extra ones closed on accept;
                              ``--max-connections``             an honest request served after
============================  ================================  ================================

A body over the cap was refused before as well (400, by a check of the server's own); it is now
the guard's cap, answered 413 before the body is read like on the other services.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
import tracemalloc
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from adapters.policies import OpenAIAPIError, OpenAIPolicy, SamplingParams, ScriptedPolicy

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "round5-policy-token"
CHAT = [{"role": "user", "content": "hi"}]


class CountingPolicy(ScriptedPolicy):
    """Answers ``ok``; records the sampling parameters of every ``generate`` call."""

    def __init__(self) -> None:
        super().__init__(lambda _text: "ok", name="const")
        self.calls: list[SamplingParams] = []

    def generate(self, prompts, params=None):
        self.calls.append(params or SamplingParams())
        return super().generate(prompts, params)


@pytest.fixture
def serve():
    """``serve(**kwargs)``: a server of a fresh :class:`CountingPolicy` started in a thread
    (``kwargs`` go to ``start_in_thread``); stopped after the test."""
    from adapters.integrations.openai_server import start_in_thread

    started = []

    def start(**kwargs):
        server = start_in_thread(CountingPolicy(), model_name="const", **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def _guard(**kwargs):
    from adapters.integrations._guard import GuardConfig

    return GuardConfig(**kwargs)


def _post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict, int]:
    """(status, JSON reply, reply size in bytes) of a chat completion request."""
    req = urllib.request.Request(
        url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            raw = r.read()
            return r.status, json.loads(raw), len(raw)
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw), len(raw)


def _addr(server) -> tuple[str, int]:
    return server.server_address[0], server.server_address[1]


def _closed(sock: socket.socket, within: float) -> tuple[bool, bytes]:
    """Whether the server closed ``sock`` within ``within`` seconds, and what it sent."""
    sock.settimeout(max(0.05, within))
    got = b""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True, got
            got += data
    except (ConnectionResetError, BrokenPipeError):
        return True, got
    except TimeoutError:
        return False, got


# --------------------------------------------------------------------------- no authentication


def test_requests_without_the_token_are_refused(serve, monkeypatch):
    monkeypatch.setenv("MAS_SERVICE_TOKEN", TOKEN)
    server = serve()
    url = server.url
    body = {"model": "const", "messages": CHAT}
    assert _post(url, body)[0] == 401
    assert _post(url, body, {"Authorization": "Bearer not-the-token"})[0] == 401
    assert _post(url.replace("/v1", "/t/wrong-token-0/v1"), body)[0] == 401
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url + "/models", timeout=10)
    assert info.value.code == 401
    assert server.policy.calls == []  # the policy never saw them
    # the honest client: the token as its API key, or in the base URL
    ok = _post(url, body, {"Authorization": f"Bearer {TOKEN}"})
    assert ok[0] == 200 and ok[1]["choices"][0]["message"]["content"] == "ok"
    assert OpenAIPolicy(url, "const", api_key=TOKEN).generate(["x"])[0][0].text == "ok"
    in_path = url.replace("/v1", f"/t/{TOKEN}/v1")
    assert OpenAIPolicy(in_path, "const").generate(["x"])[0][0].text == "ok"
    with urllib.request.urlopen(url.replace("/v1", "/health"), timeout=10) as r:
        assert json.loads(r.read()) == {"status": "ok"}  # the liveness probe stays open


def test_refusals_are_read_whole_by_clients_that_are_closed_on(serve, monkeypatch):
    """A refusal closes the connection; with its length declared, the client reads all of it
    before the close (sent chunked, about one refusal in ten was cut by a reset on 2 cores)."""
    monkeypatch.setenv("MAS_SERVICE_TOKEN", TOKEN)
    url = serve().url.replace("/v1", "/t/wrong-token-0/v1")
    for _ in range(100):
        req = urllib.request.Request(url + "/chat/completions", data=b'{"model": "const"}')
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=20)
        raw = info.value.read()
        assert info.value.headers["Content-Length"] == str(len(raw))
        assert json.loads(raw) == {"detail": "missing or wrong bearer token"}


def test_the_openai_client_sends_the_token_as_its_api_key(serve, monkeypatch):
    openai = pytest.importorskip("openai")
    monkeypatch.setenv("MAS_SERVICE_TOKEN", TOKEN)
    url = serve().url
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key="not-the-token", max_retries=0).models.list()
    client = openai.OpenAI(base_url=url, api_key=TOKEN, max_retries=0)
    assert [m.id for m in client.models.list()] == ["const"]
    reply = client.chat.completions.create(model="const", messages=CHAT, n=2, max_tokens=8)
    assert [c.message.content for c in reply.choices] == ["ok", "ok"]
    with pytest.raises(openai.BadRequestError, match="--max-n"):
        client.chat.completions.create(model="const", messages=CHAT, n=50_000)


# -------------------------------------------------------------------- what one request asks for


def test_n_50000_is_refused_with_bounded_memory(serve):
    server = serve()
    raw = json.dumps({"model": "const", "messages": CHAT, "n": 50_000})
    assert len(raw) < 110  # the issue's 101-byte request
    tracemalloc.start()
    try:
        status, reply, size = _post(server.url, json.loads(raw))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 400, (status, size)
    error = reply["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "n"
    assert "n=50000" in error["message"] and "--max-n" in error["message"]
    assert server.policy.calls == []  # nothing generated
    assert size < 1024 and peak < 2 << 20, (size, peak)  # was a 5.6 MB reply
    # the honest request, and the cap itself, are served
    assert _post(server.url, {"messages": CHAT, "n": 3})[0] == 200
    cap = server.limits.max_n
    status, reply, _ = _post(server.url, {"messages": CHAT, "n": cap})
    assert status == 200 and len(reply["choices"]) == cap
    with pytest.raises(OpenAIAPIError, match="--max-n") as info:
        OpenAIPolicy(server.url, "const").generate(["x"], SamplingParams(n=cap + 1))
    assert info.value.status == 400


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_over_the_cap_is_refused(serve, field):
    from adapters.policies.base import MAX_NEW_TOKENS

    server = serve()
    status, reply, _ = _post(server.url, {"messages": CHAT, field: 1_000_000})
    assert status == 400 and reply["error"]["param"] == field
    assert "--max-tokens" in reply["error"]["message"]
    assert server.policy.calls == []
    # the generation section's budget is the default cap; within it the request is served
    assert _post(server.url, {"messages": CHAT, field: MAX_NEW_TOKENS})[0] == 200
    assert _post(server.url, {"messages": CHAT, field: MAX_NEW_TOKENS + 1})[0] == 400
    assert [p.max_new_tokens for p in server.policy.calls] == [MAX_NEW_TOKENS]


def test_the_operator_sets_the_caps(serve):
    from adapters.integrations.openai_server import RequestLimits

    server = serve(limits=RequestLimits(max_n=2, max_tokens=16))
    assert _post(server.url, {"messages": CHAT, "n": 3})[0] == 400
    assert _post(server.url, {"messages": CHAT, "max_tokens": 17})[0] == 400
    assert _post(server.url, {"messages": CHAT, "n": 2, "max_tokens": 16})[0] == 200
    assert _post(server.url, {"messages": CHAT})[0] == 200  # no max_tokens: the cap, not 256
    assert [(p.n, p.max_new_tokens) for p in server.policy.calls] == [(2, 16), (1, 16)]


# ----------------------------------------------------------------------------- slow clients


def test_a_slow_body_is_cut_at_the_body_timeout(serve):
    """20 connections announce a 16 MB body and send one byte: each gets 408 and is closed
    about ``body_timeout_s`` after its headers; an honest request is served meanwhile (before,
    each held a server thread for as long as its client liked)."""
    timeout_s = 1.0
    server = serve(guard=_guard(body_timeout_s=timeout_s))
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {16 << 20}\r\n\r\n{{"
    ).encode()
    socks = [socket.create_connection(_addr(server)) for _ in range(20)]
    t0 = time.monotonic()
    try:
        for s in socks:
            s.sendall(head)
        status = _post(server.url, {"messages": CHAT})[0]
        assert status == 200 and time.monotonic() - t0 < timeout_s
        results = [_closed(s, t0 + timeout_s + 3 - time.monotonic()) for s in socks]
        elapsed = time.monotonic() - t0
    finally:
        for s in socks:
            s.close()
    assert all(closed for closed, _ in results), sum(not c for c, _ in results)
    assert all(got.startswith(b"HTTP/1.1 408") for _, got in results), results[0][1][:80]
    assert timeout_s - 0.2 < elapsed < timeout_s + 3
    assert len(server.policy.calls) == 1  # the honest request only


def test_slow_headers_are_cut_at_the_header_timeout(serve):
    timeout_s = 1.0
    server = serve(guard=_guard(header_timeout_s=timeout_s))
    socks = [socket.create_connection(_addr(server)) for _ in range(10)]
    t0 = time.monotonic()
    try:
        for s in socks:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        closed = [_closed(s, t0 + timeout_s + 3 - time.monotonic())[0] for s in socks]
        elapsed = time.monotonic() - t0
    finally:
        for s in socks:
            s.close()
    assert all(closed) and elapsed < timeout_s + 3, (closed, elapsed)
    assert _post(server.url, {"messages": CHAT})[0] == 200


def test_connections_past_the_limit_are_refused(serve):
    limit = 8
    server = serve(guard=_guard(max_connections=limit, header_timeout_s=10.0))
    socks = []
    try:
        for _ in range(limit + 4):
            socks.append(socket.create_connection(_addr(server)))
        time.sleep(0.5)
        readable, _, _ = select.select(socks, [], [], 0.2)
        closed = sum(_closed(s, 0.05)[0] for s in readable)
    finally:
        for s in socks:
            s.close()
    assert closed == 4, closed
    time.sleep(0.3)
    assert _post(server.url, {"messages": CHAT})[0] == 200


def test_a_huge_body_is_refused_before_it_is_read(serve):
    server = serve()
    with socket.create_connection(_addr(server)) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (200 << 20)
        )
        closed, got = _closed(s, 5)
    assert closed and got.startswith(b"HTTP/1.1 413"), got[:80]


# ----------------------------------------------------------------------------- the command


def test_the_command_line_sets_the_limits():
    """``python -m adapters.serve`` with a constant policy: the token of the environment, the
    caps and the guard's flags reach the server."""
    env = dict(os.environ, MAS_SERVICE_TOKEN=TOKEN, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "adapters.serve", "--model", "constant:ok", "--port", "0"]
    cmd += ["--max-n", "2", "--max-tokens", "16", "--max-connections", "8"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if line.startswith("serving") or not line:
                break
        assert lines[-1].startswith("serving constant:ok at http://127.0.0.1:"), lines
        url = lines[-1].split(" at ")[1].strip()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert _post(url, {"messages": CHAT})[0] == 401
        assert _post(url, {"messages": CHAT, "n": 2, "max_tokens": 16}, auth)[0] == 200
        status, reply, _ = _post(url, {"messages": CHAT, "n": 3}, auth)
        assert status == 400 and "--max-n" in reply["error"]["message"]
        assert _post(url, {"messages": CHAT, "max_tokens": 17}, auth)[0] == 400
    finally:
        proc.terminate()
        proc.wait(timeout=30)
