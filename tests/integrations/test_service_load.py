"""The services' exposure limits under load (loopback only, bounded in time and memory): idle
sessions expire, a huge body is refused without being read, slow-header connections are cut,
the connection limit holds, the bearer token is required, and one client's heavy reset does not
stall another's ``/health``. The limits are those of :mod:`adapters.integrations._guard` and the
servers' session options; each test starts its server with small values so it runs in seconds.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import psutil
import pytest

from adapters.integrations.openenv import MasEnvClient
from tests.integrations.conftest import Server

TOKEN = "load-test-token-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HEADER_TIMEOUT_S = 2.0
HTTP_SESSION_TIMEOUT_S = 2.0
REAPER_S = 1.0  # the HTTP reaper checks every max(1, min(timeout / 4, 5)) s


def _start(*args: str, env: dict[str, str] | None = None) -> Server:
    return Server(*args, env=env).wait()


@pytest.fixture(scope="module")
def sandbox_server():
    server = _start(
        "adapters.serve_sandbox",
        "--workers",
        "2",
        "--header-timeout",
        str(HEADER_TIMEOUT_S),
        "--max-connections",
        "48",
        env={"MAS_SERVICE_TOKEN": TOKEN},
    )
    yield server
    server.stop()


def _addr(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _closed(sock: socket.socket, within: float) -> bool:
    """Whether the server closed ``sock`` within ``within`` seconds (EOF or reset)."""
    sock.settimeout(within)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


class PeakRss:
    """Samples a process's RSS every 10 ms in a thread; ``growth`` is peak minus start."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.start = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def growth_mb(self) -> float:
        self._stop.set()
        self._thread.join()
        return (self.peak - self.start) / (1 << 20)


def test_token_is_required_in_a_header_or_the_path(sandbox_server):
    url = sandbox_server.url
    body = {"code": "print(6 * 7)", "language": "python"}
    assert httpx.post(url + "/run_code", json=body).status_code == 401
    wrong = {"Authorization": "Bearer not-the-token"}
    assert httpx.post(url + "/run_code", json=body, headers=wrong).status_code == 401
    ok = httpx.post(url + "/run_code", json=body, headers=AUTH, timeout=30)
    assert ok.status_code == 200 and ok.json()["run_result"]["stdout"] == "42\n"
    # clients that cannot set headers (the sandbox-fusion client, OpenEnv's) put it in the path
    via_path = httpx.post(f"{url}/t/{TOKEN}/run_code", json=body, timeout=30)
    assert via_path.status_code == 200 and via_path.json()["run_result"]["stdout"] == "42\n"
    assert httpx.post(f"{url}/t/wrong-token-123/run_code", json=body).status_code == 401
    assert httpx.get(url + "/v1/ping").json() == "pong"  # the liveness probe stays open


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_200_mb_body_is_refused_without_being_read(sandbox_server, framing):
    """Declared or chunked, 200 MB is refused (413) at the 20 MiB cap; the server's RSS grows
    by less than 50 MB (it grew by ~1 GB before the cap)."""
    rss = PeakRss(sandbox_server.proc.pid)
    sock = socket.create_connection(_addr(sandbox_server))
    head = f"POST /run_code HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
    head += "Content-Type: application/json\r\n"
    size = 200 << 20
    chunk = b"x" * (1 << 20)
    if framing == "content-length":
        sock.sendall(f"{head}Content-Length: {size}\r\n\r\n".encode())
    else:
        sock.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    sent = 0
    try:
        while sent < size:
            sock.sendall(chunk)
            sent += 1 << 20
    except (BrokenPipeError, ConnectionResetError):
        pass
    sock.settimeout(10)
    try:
        reply = sock.recv(65536)
    except ConnectionResetError:
        reply = b""  # the server may reset a connection whose unread body it dropped
    sock.close()
    growth = rss.growth_mb()
    print(f"[load] {framing}: sent {sent >> 20} MiB of 200, RSS +{growth:.1f} MB, {reply[:12]!r}")
    assert sent < size, "the server read the whole 200 MB body"
    assert reply == b"" or reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert growth < 50, f"RSS grew by {growth:.0f} MB"
    follow = httpx.post(
        sandbox_server.url + "/run_code",
        json={"code": "print(1)", "language": "python"},
        headers=AUTH,
        timeout=30,
    )
    assert follow.status_code == 200


def test_slow_header_connections_are_closed_within_the_timeout(sandbox_server):
    """40 connections that dribble a header line every 0.5 s and never finish (slowloris) are
    closed within the header timeout; a normal request meanwhile is served."""
    socks = [socket.create_connection(_addr(sandbox_server)) for _ in range(40)]
    t0 = time.monotonic()
    for s in socks:
        s.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\n")
    open_socks = list(socks)
    while open_socks and time.monotonic() - t0 < HEADER_TIMEOUT_S + 3:
        time.sleep(0.5)
        still = []
        for s in open_socks:
            try:
                s.sendall(b"X-Slow: 1\r\n")
                still.append(s)
            except OSError:
                pass
        open_socks = still
    served = httpx.get(sandbox_server.url + "/v1/ping", timeout=10)
    closed = [
        s
        for s in socks
        if _closed(s, within=max(0.1, t0 + HEADER_TIMEOUT_S + 3 - time.monotonic()))
    ]
    elapsed = time.monotonic() - t0
    for s in socks:
        s.close()
    print(f"[load] slow headers: {len(closed)}/40 closed, {elapsed:.2f} s after opening")
    assert served.json() == "pong"
    assert len(closed) == 40, f"{40 - len(closed)} of 40 slow connections still open"
    assert elapsed < HEADER_TIMEOUT_S + 3.5


def test_connection_limit(sandbox_server):
    """Past ``--max-connections`` (48) new connections are closed at once (well before the
    header timeout closes the others)."""
    import select

    socks = []
    try:
        for _ in range(60):
            socks.append(socket.create_connection(_addr(sandbox_server)))
        time.sleep(0.5)
        readable, _, _ = select.select(socks, [], [], 0.2)
        closed = sum(_closed(s, within=0.05) for s in readable)
    finally:
        for s in socks:
            s.close()
    assert closed == 12, closed
    time.sleep(0.5)
    assert httpx.get(sandbox_server.url + "/v1/ping", timeout=10).json() == "pong"


# ---------------------------------------------------------------- the OpenEnv server


@pytest.fixture(scope="module")
def env_servers():
    heavy = (
        "height=10",
        "width=10",
        "num_boxes=3",
        "min_optimal_moves=30",
        "max_optimal_moves=80",
        "solver_max_nodes=1000000",
    )
    specs = {
        "expiring": (
            "adapters.serve_env",
            "--env",
            "sokoban",
            "--max-http-sessions",
            "8",
            "--http-session-timeout",
            str(HTTP_SESSION_TIMEOUT_S),
        ),
        "small": (
            "adapters.serve_env",
            "--env",
            "sokoban",
            "--max-sessions",
            "4",
            "--max-http-sessions",
            "2",
            "--max-sessions-per-client",
            "1",
        ),
        "heavy": (
            "adapters.serve_env",
            "--env",
            "sokoban",
            *[a for kv in heavy for a in ("--env-config", kv)],
        ),
    }
    servers = {name: Server(*spec) for name, spec in specs.items()}
    try:
        for s in servers.values():
            s.wait()
        yield servers
    finally:
        for s in servers.values():
            s.stop()


def _ws_frame(url: str) -> dict:
    from websockets.sync.client import connect

    with connect(url.replace("http://", "ws://") + "/ws", open_timeout=30) as ws:
        try:  # a full server sends its error frame at once and closes
            return json.loads(ws.recv(timeout=1))
        except TimeoutError:
            pass
        ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        return json.loads(ws.recv(timeout=30))


def _new_session(http: httpx.Client, seed: int) -> str:
    r = http.post("/reset", json={"seed": seed, "new_session": True})
    assert r.status_code == 200, r.text
    return r.json()["session_id"]


def test_http_sessions_expire_by_their_timeout(env_servers):
    """HTTP sessions left idle are closed after ``--http-session-timeout`` (2 s here), while a
    WebSocket session idle as long (its own timeout is openenv's, 600 s) keeps playing."""
    url = env_servers["expiring"].url
    with httpx.Client(base_url=url, timeout=30) as http, MasEnvClient(base_url=url).sync() as ws:
        assert ws.reset(seed=3).observation.agent is not None
        sids = [_new_session(http, i) for i in range(6)]
        assert len(set(sids)) == 6
        # a request to a session counts as its use, so look only once they should be gone
        time.sleep(HTTP_SESSION_TIMEOUT_S + REAPER_S + 2)
        codes = [http.get("/state", params={"session_id": s}).status_code for s in sids]
        assert codes == [400] * 6, codes
        gone = http.get("/state", params={"session_id": sids[0]})
        assert gone.status_code == 400 and "unknown session_id" in gone.json()["detail"]
        assert ws.step("").observation.acted is not None  # the WebSocket session still plays


def test_http_sessions_neither_take_websocket_slots_nor_end_each_other(env_servers):
    """``--max-sessions 4 --max-http-sessions 2 --max-sessions-per-client 1``: with two HTTP
    sessions open, all four WebSocket clients get in (the fifth is refused); a third HTTP
    session is refused (429, ``Retry-After``) and both sessions in use keep working, as does
    MCP's ``openenv/session/create``; a client naming itself (``X-Client-Id``) gets one session
    while anonymous clients take the slot left; HTTP cannot close a WebSocket client's
    session."""
    url = env_servers["small"].url
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
    with httpx.Client(base_url=url, timeout=30) as http:
        first, second = _new_session(http, 1), _new_session(http, 2)
        clients = [MasEnvClient(base_url=url).sync() for _ in range(4)]
        try:
            for i, c in enumerate(clients):
                assert c.reset(seed=10 + i).observation.agent is not None
            frame = _ws_frame(url)
            assert frame["type"] == "error" and frame["data"]["code"] == "CAPACITY_REACHED"
            close = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "openenv/session/close",
                "params": {"session_id": "00000000-0000-4000-8000-000000000000"},
            }
            assert (
                "unknown HTTP session_id"
                in http.post("/mcp", json=close).json()["error"]["message"]
            )
        finally:
            for c in clients:
                c.close()
        assert http.get("/state", params={"session_id": second}).status_code == 200  # used
        third = http.post("/reset", json={"seed": 3, "new_session": True})
        assert third.status_code == 429, third.text
        assert 1 <= int(third.headers["Retry-After"]) <= 120  # when `first` would idle out
        assert third.json()["retry_after"] == int(third.headers["Retry-After"])
        made = http.post("/mcp", json=rpc)
        assert made.status_code == 429 and int(made.headers["Retry-After"]) >= 1
        for sid in (first, second):
            assert http.get("/state", params={"session_id": sid}).status_code == 200
        assert http.post("/close", json={"session_id": first}).json()["closed"] is True
        named = {"X-Client-Id": "trainer-a"}
        own = http.post("/reset", json={"seed": 4, "new_session": True}, headers=named)
        assert own.status_code == 200, own.text
        assert http.post("/close", json={"session_id": second}).json()["closed"] is True
        again = http.post("/reset", json={"seed": 5, "new_session": True}, headers=named)
        assert again.status_code == 429 and "'trainer-a'" in again.json()["detail"]
        assert http.post("/mcp", json=rpc, headers=named).status_code == 429
        anon = http.post("/mcp", json=rpc).json()["result"]["session_id"]  # the slot left
        for sid in (own.json()["session_id"], anon):
            assert http.get("/state", params={"session_id": sid}).status_code == 200
            assert http.post("/close", json={"session_id": sid}).json()["closed"] is True


def test_ws_frames_and_mcp_bodies_are_capped(env_servers):
    """A 2 MiB WebSocket frame closes the connection (1009); a 30 MiB ``/mcp`` body is 413."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    url = env_servers["small"].url
    with connect(url.replace("http://", "ws://") + "/ws", open_timeout=30, max_size=None) as ws:
        with pytest.raises(ConnectionClosed) as info:
            ws.send(json.dumps({"type": "step", "data": {"completion": "x" * (2 << 20)}}))
            ws.recv(timeout=30)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009
    r = httpx.post(url + "/mcp", content=b"{" + b" " * (30 << 20) + b"}", timeout=60)
    assert r.status_code == 413


@pytest.mark.serial  # a 0.5 s latency bound while the server's reset takes a core
def test_a_heavy_reset_does_not_stall_another_clients_health(env_servers):
    """One client's reset generates a large Sokoban level (seconds of CPU); another client's
    ``/health`` answers within 0.5 s throughout."""
    url = env_servers["heavy"].url
    done = threading.Event()
    took: list[float] = []

    def heavy() -> None:
        t0 = time.monotonic()
        try:
            with MasEnvClient(base_url=url, message_timeout_s=300).sync() as c:
                c.reset(seed=0)
        finally:
            took.append(time.monotonic() - t0)
            done.set()

    latencies = []
    thread = threading.Thread(target=heavy)
    with httpx.Client(base_url=url, timeout=30) as http:
        http.get("/health")
        thread.start()
        while not done.is_set():
            t0 = time.monotonic()
            assert http.get("/health").status_code == 200
            latencies.append(time.monotonic() - t0)
            time.sleep(0.05)
    thread.join()
    print(f"[load] heavy reset {took[0]:.2f} s; /health max {max(latencies) * 1000:.0f} ms")
    assert took[0] > 1.0, f"the reset took {took[0]:.2f} s: not heavy enough to test"
    assert len(latencies) >= 10 and max(latencies) < 0.5, max(latencies)
