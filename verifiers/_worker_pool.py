"""Worker processes that talk JSON lines over pipes, and the pool that shares them.

Two host-side users run model-written input out of the host process: the math grader
(:mod:`verifiers._math_pool`) and the bounded host-side checks (:mod:`verifiers._bounded`). Both
keep a few long-lived worker processes, hand one to one caller at a time, and kill and replace a
worker as soon as a request overruns its deadline or the worker dies. This module is those
mechanics, once:

- :class:`PipeWorker` is one worker: every write and every read is deadline-driven (``select``
  on the pipes, never signals), so a stuck or dead worker costs the caller at most the deadline.
- :class:`WorkerPool` holds ``n_workers`` slots in a queue; :meth:`WorkerPool.checkout` takes a
  slot (blocking while every worker is busy), starts its worker lazily, and puts it back at the
  end. An exception that escapes a checkout drops the worker (its stream may be out of step).
  Any thread may check out; the set of live workers is guarded by a lock, and :meth:`close`
  kills them all.
- :class:`SharedPool` is the process-wide pool of one user: started on first use, sized by an
  environment variable (default ``min(2, CPUs)``), started afresh in a forked child (a pool's
  pipes belong to the process that made it) or after a close, and closed at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import select
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Generic, Literal, TypeVar

__all__ = ["Lease", "PipeWorker", "SharedPool", "WorkerPool", "workers_from_env"]


class PipeWorker:
    """A worker process with a JSON-lines protocol on its stdin and stdout."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        os.set_blocking(proc.stdin.fileno(), False)
        self._buf = b""
        self.failure: Literal["", "deadline", "exited", "garbled"] = ""
        """Why the last :meth:`recv` returned None (or ``""``)."""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def write(self, raw: bytes, timeout_s: float) -> bool:
        """Write ``raw``; False if the worker is gone or does not take it within the deadline."""
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
        """The next message, or None (see :attr:`failure`) on the deadline, the worker's exit,
        or a line that is not a JSON object."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        self.failure = ""
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.failure = "deadline"
                return None
            try:
                readable, _, _ = select.select([fd], [], [], left)
                chunk = os.read(fd, 65536) if readable else None
            except (OSError, ValueError):
                self.failure = "exited"
                return None
            if chunk == b"":
                self.failure = "exited"
                return None
            if chunk:
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            self.failure = "garbled"
            return None
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


W = TypeVar("W", bound=PipeWorker)


class Lease(Generic[W]):
    """One checked-out slot of a :class:`WorkerPool`: its worker, started on demand."""

    def __init__(self, pool: WorkerPool[W], worker: W | None) -> None:
        self._pool = pool
        self.worker = worker

    def get(self) -> W:
        """The slot's worker; a fresh one if it has none or its worker has exited."""
        if self.worker is not None and not self.worker.alive():
            self.drop()
        if self.worker is None:
            self.worker = self._pool._spawn()
        return self.worker

    def drop(self) -> None:
        """Kill the slot's worker (counted in ``restarts``); the next :meth:`get` starts one."""
        if self.worker is not None:
            self._pool._discard(self.worker)
            self.worker = None


class WorkerPool(Generic[W]):
    """``n_workers`` slots, each holding at most one worker made by ``spawn``."""

    def __init__(self, n_workers: int, spawn: Callable[[], W]) -> None:
        if n_workers < 1:
            raise ValueError("n_workers must be >= 1")
        self.n_workers = n_workers
        self._make = spawn
        self._slots: queue.Queue[W | None] = queue.Queue()
        for _ in range(n_workers):
            self._slots.put(None)  # started on first use
        self._all: set[W] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.pid = os.getpid()
        self.restarts = 0

    @property
    def closed(self) -> bool:
        return self._closed

    @contextlib.contextmanager
    def checkout(self) -> Iterator[Lease[W]]:
        """Hold one slot (waiting for a free one) for the block; an exception that escapes the
        block drops the slot's worker (a deadline or an interruption leaves its stream out of
        step)."""
        lease = Lease(self, self._slots.get())
        try:
            yield lease
        except BaseException:
            lease.drop()
            raise
        finally:
            self._slots.put(lease.worker)

    def _spawn(self) -> W:
        w = self._make()
        with self._lock:
            self._all.add(w)
        return w

    def _discard(self, w: W) -> None:
        w.kill()
        with self._lock:
            self._all.discard(w)
            self.restarts += 1

    def close(self) -> None:
        """Kill every worker."""
        self._closed = True
        with self._lock:
            workers = list(self._all)
            self._all.clear()
        for w in workers:
            w.kill()


def workers_from_env(var: str) -> int:
    """Workers a process-wide pool gets: ``$var`` if set and non-zero, else min(2, CPUs)."""
    return int(os.environ.get(var, "0")) or min(2, os.cpu_count() or 1)


P = TypeVar("P", bound=WorkerPool)


class SharedPool(Generic[P]):
    """The process-wide pool made by ``make(workers_from_env(env_var))``, made on first use."""

    def __init__(self, make: Callable[[int], P], env_var: str) -> None:
        self._make = make
        self.env_var = env_var
        self._pool: P | None = None
        self._lock = threading.Lock()

    def get(self) -> P:
        with self._lock:
            pool = self._pool
            if pool is None or pool.closed or pool.pid != os.getpid():
                pool = self._pool = self._make(workers_from_env(self.env_var))
                atexit.register(pool.close)
            return pool
