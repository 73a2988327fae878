"""Host-side checks that may be expensive, run out of the host process with limits.

Planning and deciding a test (:mod:`verifiers.assert_plans`) and compiling a long program
(:mod:`verifiers.source_checks`) evaluate model-written input on the host. The cheap common case
stays in-process under a small budget (``INLINE_STEPS`` / ``INLINE_WORK`` of
:mod:`verifiers.host_eval`, ``INLINE_COMPILE_CHARS``); whatever goes past it is redone here, in
a worker process (``verifiers/_bounded_worker.py``) with a memory limit (``WORKER_MB``) and a
wall-clock deadline per request (``DEADLINE_S``; the worker is killed and replaced when it
overruns, and the request's answer is an error). So the host process spends a bounded, small
amount of CPU and memory on any input, and one hostile test never holds the host's GIL for
long: other threads (a server's other sessions) keep running while a worker computes.

Workers are started lazily, shared by every thread (a caller checks one out), talk JSON lines
over pipes, and die with this process (their stdin closes). They import only this project's
``verifiers`` and ``sandboxes.plain`` / ``sandboxes.calls``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["DEADLINE_S", "WORKER_MB", "BoundedError", "call"]

DEADLINE_S = 5.0
"""Wall-clock seconds one request may take in a worker (its start-up not counted)."""
STARTUP_S = 60.0
"""How long a fresh worker may take to import its modules."""
WORKER_MB = 768
"""Address-space limit of a worker process."""
_ROOT = str(Path(__file__).resolve().parents[1])
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from verifiers._bounded_worker import main; main(int(sys.argv[2]))"
)


class BoundedError(Exception):
    """A request failed in the worker: it overran its deadline or memory (the worker is then
    replaced), or raised (``reported``: the worker's own message)."""

    def __init__(self, message: str, reported: bool = False) -> None:
        super().__init__(message)
        self.reported = reported


class _Worker:
    def __init__(self) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-c", _BOOT, _ROOT, str(WORKER_MB)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        self._buf = b""
        self._next = 0
        self.ready = False

    def ask(self, fn: str, args: list, timeout_s: float) -> Any:
        """One request; raises BoundedError (the worker is then unusable) on a deadline or a
        dead worker, or with the worker's own error message."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if not self.ready:
            self.ready = bool(self._read(STARTUP_S).get("ready"))
        self._next += 1
        line = json.dumps({"i": self._next, "f": fn, "a": args}) + "\n"
        deadline = time.monotonic() + timeout_s
        try:
            self.proc.stdin.write(line.encode("utf-8"))
            self.proc.stdin.flush()
        except (OSError, ValueError):
            raise BoundedError("the checking process died") from None
        msg = self._read(deadline - time.monotonic())
        if msg.get("i") != self._next:
            raise BoundedError("the checking process answered out of turn")
        if not msg.get("ok"):
            raise BoundedError(str(msg.get("e", "failed"))[:300], reported=True)
        return msg.get("r")

    def _read(self, timeout_s: float) -> dict:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BoundedError(f"checking took more than {timeout_s:g} s")
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise BoundedError("the checking process died (out of memory?)")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\n", 1)
        msg = json.loads(raw)
        if not isinstance(msg, dict):
            raise BoundedError("the checking process answered nonsense")
        return msg

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.proc.wait(timeout=5)


class _Pool:
    def __init__(self, n: int) -> None:
        self._slots: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(n):
            self._slots.put(None)
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self.pid = os.getpid()
        self.restarts = 0

    def call(self, fn: str, args: list, timeout_s: float) -> Any:
        w = self._slots.get()
        try:
            if w is None or w.proc.poll() is not None:
                if w is not None:
                    self._drop(w)
                w = _Worker()
                with self._lock:
                    self._all.add(w)
            return w.ask(fn, args, timeout_s)
        except BaseException as exc:
            # a deadline, a death or an interruption leaves the stream out of step: replace
            # the worker (an error the worker reported leaves it usable)
            if w is not None and not (isinstance(exc, BoundedError) and exc.reported):
                self._drop(w)
                w = None
            raise
        finally:
            self._slots.put(w)

    def _drop(self, w: _Worker) -> None:
        w.kill()
        with self._lock:
            self._all.discard(w)
            self.restarts += 1

    def close(self) -> None:
        with self._lock:
            workers = list(self._all)
            self._all.clear()
        for w in workers:
            w.kill()


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():
            n = int(os.environ.get("VERIFIERS_CHECK_WORKERS", "0")) or min(2, os.cpu_count() or 1)
            _POOL = _Pool(n)
            atexit.register(_POOL.close)
        return _POOL


IN_WORKER = False
"""True inside a worker: there, ``call`` runs the function directly (from ``LOCAL``, which the
worker fills; this module does not import the worker's)."""
LOCAL: dict[str, Any] = {}


def call(fn: str, *args: Any, timeout_s: float = DEADLINE_S) -> Any:
    """``fn(*args)`` of ``verifiers/_bounded_worker.py`` in a worker (JSON in, JSON out);
    BoundedError when it overran its deadline or memory limit or raised."""
    if IN_WORKER:
        return LOCAL[fn](*args)
    return _pool().call(fn, list(args), timeout_s)
