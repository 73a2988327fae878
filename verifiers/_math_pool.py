"""A small persistent pool of math-grading worker processes with per-grading deadlines.

Each worker runs ``verifiers/_math_worker.py`` (with :mod:`sandboxes.inside`), talking JSON
lines over pipes. It parses model-written LaTeX with sympy, so it is isolated like a sandbox
server (:func:`sandboxes.local.spawn_isolated`: bubblewrap, no network, a read-only view of the
interpreter and its packages only, a clean environment, a uid of its own when the host is root,
killed with this process). Workers start lazily (the first slow-path grading), are reused across
gradings, and are killed and replaced when a grading overruns its deadline or the worker dies.
Both directions are deadline-driven: a request that the worker does not take in within the
deadline (it is stuck on an earlier one) counts as timed out too. Results that say the grader
failed rather than the answer (timeouts, crashes) carry ``"transient": True`` and are never
cached. Any thread may call :meth:`MathPool.grade`: a caller checks a worker out of a queue, so
one worker serves one caller at a time, and waiting uses ``select`` on the pipes, never signals.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

__all__ = ["MathPool", "Task", "default_pool"]

STARTUP_TIMEOUT_S = 60.0
"""How long a fresh worker may take to import math-verify before it counts as failed."""
CHUNK = 16
"""Requests written to a worker before its answers are read back (keeps pipes from filling)."""


@dataclass(frozen=True)
class Task:
    pred: str
    gold: str
    delta: float = 1e-6


#: reads the worker's source (argv[1] bytes) from stdin and runs it; the rest is requests
_BOOT = "import sys;n=int(sys.argv[1]);exec(compile(sys.stdin.buffer.read(n),'math-worker','exec'))"


def _worker_source() -> str:
    from sandboxes import inside

    here = os.path.dirname(os.path.abspath(__file__))
    with open(inside.__file__, encoding="utf-8") as f:
        head = f.read()
    with open(os.path.join(here, "_math_worker.py"), encoding="utf-8") as f:
        return head + "\n\n" + f.read()


class _Worker:
    def __init__(self) -> None:
        from sandboxes.local import spawn_isolated

        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "VERIFIERS_MATH_WORKER_MB": os.environ.get("VERIFIERS_MATH_WORKER_MB", "1536"),
        }
        source = _worker_source().encode("utf-8")
        self.proc, self.uid = spawn_isolated(
            [sys.executable, "-I", "-B", "-c", _BOOT, str(len(source))],
            extra_ro=[sys.prefix] if sys.prefix != sys.base_prefix else [],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.proc.stdin is not None
        os.set_blocking(self.proc.stdin.fileno(), False)
        self._buf = b""
        self.ready = False
        self._boot = source

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, lines: list[str], timeout_s: float) -> bool:
        """Write the requests; False if the worker is gone or does not take them in time."""
        return self._write("".join(lines).encode("utf-8"), timeout_s)

    def _write(self, raw: bytes, timeout_s: float) -> bool:
        assert self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        data = memoryview(raw)
        deadline = time.monotonic() + timeout_s
        while data:
            try:
                data = data[os.write(fd, data) :]
                continue
            except BlockingIOError:
                pass
            except (OSError, ValueError):
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                select.select([], [fd], [], left)
            except (OSError, ValueError):
                return False
        return True

    def recv(self, timeout_s: float) -> dict | None:
        """Next message, or None on deadline / worker exit."""
        deadline = time.monotonic() + timeout_s
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                readable, _, _ = select.select([fd], [], [], left)
            except (OSError, ValueError):
                return None
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return None

    def wait_ready(self) -> bool:
        if not self.ready:
            if self._boot:
                boot, self._boot = self._boot, b""
                if not self._write(boot, STARTUP_TIMEOUT_S):
                    return False
            msg = self.recv(STARTUP_TIMEOUT_S)
            self.ready = bool(msg and msg.get("ready"))
        return self.ready

    def kill(self) -> None:
        from sandboxes.base import release_uid

        with contextlib.suppress(OSError):
            self.proc.kill()  # bubblewrap takes the worker with it (--die-with-parent)
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.proc.wait(timeout=5)
        if self.proc.poll() is not None:
            release_uid(self.uid)


def _failed(reason: str) -> dict:
    """A grading the grader could not finish: wrong for now, never cached."""
    return {"c": False, "r": reason, "transient": True}


class MathPool:
    """``n_workers`` grading processes shared by all threads of this process."""

    def __init__(self, n_workers: int = 2) -> None:
        if n_workers < 1:
            raise ValueError("n_workers must be >= 1")
        self.n_workers = n_workers
        self._slots: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(n_workers):
            self._slots.put(None)  # started on first use
        self._closed = False
        self._pid = os.getpid()
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self.restarts = 0

    def _spawn(self) -> _Worker:
        w = _Worker()
        with self._lock:
            self._all.add(w)
        return w

    def _discard(self, w: _Worker) -> None:
        w.kill()
        with self._lock:
            self._all.discard(w)
            self.restarts += 1

    def warmup(self) -> None:
        """Start every worker now and wait until each has imported math-verify."""
        held = [self._slots.get() for _ in range(self.n_workers)]
        try:
            ready = [w if w is not None and w.alive() else self._spawn() for w in held]
            held[:] = ready
            for worker in ready:
                worker.wait_ready()
        finally:
            for w in held:
                self._slots.put(w)

    def _run_chunk(self, tasks: list[Task], timeout_s: float, inner: int) -> list[dict]:
        """Grade ``tasks`` on one checked-out worker, restarting it after a timeout or crash."""
        results: list[dict] = []
        w = self._slots.get()
        try:
            pending = list(tasks)
            while pending:
                if w is None or not w.alive():
                    if w is not None:
                        self._discard(w)
                    w = self._spawn()
                if not w.wait_ready():
                    self._discard(w)
                    w = None
                    results.append(_failed("grader process failed to start"))
                    pending.pop(0)
                    continue
                batch = pending[:CHUNK]
                lines = [
                    json.dumps({"i": k, "p": t.pred, "g": t.gold, "d": t.delta, "t": inner}) + "\n"
                    for k, t in enumerate(batch)
                ]
                if not w.send(lines, timeout_s):
                    why = "grading timed out" if w.alive() else "grader process died"
                    self._discard(w)
                    w = None
                    results.append(_failed(f"{why} after {timeout_s:g} s"))
                    pending.pop(0)
                    continue
                for k in range(len(batch)):
                    msg = w.recv(timeout_s)
                    if msg is None or msg.get("i") != k:
                        why = (
                            "grading timed out"
                            if w.alive()
                            else "grader process died (e.g. out of memory)"
                        )
                        results.append(_failed(f"{why} after {timeout_s:g} s"))
                        self._discard(w)
                        w = None
                        pending = pending[k + 1 :]
                        break
                    results.append(msg)
                else:
                    pending = pending[len(batch) :]
        finally:
            self._slots.put(w)
        return results

    def grade(self, tasks: list[Task], timeout_s: float = 3.0) -> list[dict]:
        """Grade tasks (in order); each may take at most ``timeout_s`` seconds."""
        if self._closed:
            raise RuntimeError("this MathPool has been closed")
        if not tasks:
            return []
        inner = max(1, int(timeout_s * 0.5))
        if len(tasks) <= CHUNK or self.n_workers == 1:
            return self._run_chunk(tasks, timeout_s, inner)
        size = max(1, min(CHUNK, -(-len(tasks) // self.n_workers)))
        chunks = [tasks[i : i + size] for i in range(0, len(tasks), size)]
        with ThreadPoolExecutor(self.n_workers) as ex:
            parts = list(ex.map(lambda c: self._run_chunk(c, timeout_s, inner), chunks))
        return [r for part in parts for r in part]

    def close(self) -> None:
        self._closed = True
        with self._lock:
            workers = list(self._all)
            self._all.clear()
        for w in workers:
            w.kill()


_DEFAULT: MathPool | None = None
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> MathPool:
    """The process-wide pool (``VERIFIERS_MATH_WORKERS`` workers, default min(2, CPUs))."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT._closed or _DEFAULT._pid != os.getpid():
            n = int(os.environ.get("VERIFIERS_MATH_WORKERS", "0")) or min(2, os.cpu_count() or 1)
            _DEFAULT = MathPool(n)
            atexit.register(_DEFAULT.close)
        return _DEFAULT
