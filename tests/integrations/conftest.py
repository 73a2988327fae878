"""Starting real server processes (``python -m adapters.serve_env`` / ``serve_sandbox``) on free
ports for the integration tests, and stopping them by PID."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 120.0


class Server:
    """A server subprocess started with ``--port 0``; ``url`` is read from its first line."""

    def __init__(self, module: str, *args: str, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--port", "0", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.url = ""
        self.log: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line)
            if not self.url and line.startswith("serving ") and " at http://" in line:
                self.url = line.rsplit(" at ", 1)[1].strip()
                self._ready.set()
        self._ready.set()  # the process ended

    def wait(self, timeout: float = STARTUP_S) -> Server:
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.2):
            if time.monotonic() > deadline:
                break
        if not self.url:
            self.stop()
            raise RuntimeError("server did not start:\n" + "".join(self.log[-50:]))
        return self

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


def flush(raw) -> None:
    """Take the dead steps of a raw env (done agents) until a live agent acts or none is left,
    as the OpenEnv server does after every step."""
    while raw.agents and (
        raw.terminations[raw.agent_selection] or raw.truncations[raw.agent_selection]
    ):
        raw.step(None)


def start_servers(specs: dict[str, tuple[str, ...]]) -> dict[str, Server]:
    """Start several servers at once (``name -> (module, *args)``) and wait for all of them."""
    started = {name: Server(*spec) for name, spec in specs.items()}
    try:
        for server in started.values():
            server.wait()
    except BaseException:
        for server in started.values():
            server.stop()
        raise
    return started


@pytest.fixture(scope="module")
def server_factory() -> Iterator:
    """``factory(specs) -> {name: Server}``; the servers are stopped when the module is done."""
    made: list[Server] = []

    def factory(specs: dict[str, tuple[str, ...]]) -> dict[str, Server]:
        servers = start_servers(specs)
        made.extend(servers.values())
        return servers

    yield factory
    for server in made:
        server.stop()
