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
SESSION_TIMEOUT_S = 2.0
REAPER_S = 5.0  # openenv-core checks idle sessions every max(timeout / 4, 5) s


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
            "--max-sessions",
            "64",
            "--max-http-sessions",
            "64",
            "--session-timeout",
            str(SESSION_TIMEOUT_S),
        ),
        "small": ("adapters.serve_env", "--env", "sokoban", "--max-sessions", "4"),
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


def test_idle_sessions_expire_by_the_timeout(env_servers):
    """64 sessions opened over HTTP and left idle fill the server (a WebSocket client is
    refused) and are closed by the session timeout, after which WebSocket clients play."""
    url = env_servers["expiring"].url
    with httpx.Client(base_url=url, timeout=30) as http:
        sids = [
            http.post("/reset", json={"seed": i}).json()["observation"]["session_id"]
            for i in range(64)
        ]
        assert len(set(sids)) == 64
        t0 = time.monotonic()
        frame = _ws_frame(url)
        assert frame["type"] == "error" and frame["data"]["code"] == "CAPACITY_REACHED"
        deadline = t0 + SESSION_TIMEOUT_S + REAPER_S + 5
        # poll with WebSocket resets (a /state request would count as the session's activity)
        while frame["type"] == "error":
            assert frame["data"]["code"] == "CAPACITY_REACHED", frame
            assert time.monotonic() < deadline, "idle sessions were not closed"
            time.sleep(0.5)
            frame = _ws_frame(url)
        assert frame["type"] == "observation", frame
        print(f"[load] 64 idle sessions expired {time.monotonic() - t0:.1f} s after the last use")
        assert all(http.get("/state", params={"session_id": s}).status_code == 400 for s in sids)
    with MasEnvClient(base_url=url).sync() as client:
        assert client.reset(seed=3).observation.agent is not None


def test_http_sessions_are_quota_d(env_servers):
    """With ``--max-sessions 4`` plain HTTP (and MCP) clients get one session between them; the
    WebSocket clients keep the other three. HTTP cannot close a WebSocket client's session."""
    url = env_servers["small"].url
    with httpx.Client(base_url=url, timeout=30) as http:
        first = http.post("/reset", json={"seed": 1})
        assert first.status_code == 200
        second = http.post("/reset", json={"seed": 2})
        assert second.status_code == 400 and "quota" in second.json()["detail"]
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
        assert "quota" in http.post("/mcp", json=rpc).json()["error"]["message"]
        clients = [MasEnvClient(base_url=url).sync() for _ in range(3)]
        try:
            for i, c in enumerate(clients):
                assert c.reset(seed=10 + i).observation.agent is not None
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
        sid = first.json()["observation"]["session_id"]
        assert http.post("/close", json={"session_id": sid}).json()["closed"] is True
        assert http.post("/reset", json={"seed": 3}).status_code == 200


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
