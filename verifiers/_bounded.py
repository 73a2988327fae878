"""Host-side checks that may be expensive, run out of the host process with limits.

Planning and deciding a test (:mod:`verifiers.assert_plans`) and compiling a long program
(:mod:`verifiers.source_checks`) evaluate model-written input on the host, and checking an
explicit puzzle a client sent (:func:`verifiers.sokoban.solve_bounded`,
:func:`verifiers.sudoku.check_unique_bounded`) searches it. The cheap common case stays
in-process under a small budget (``INLINE_STEPS`` / ``INLINE_WORK`` of
:mod:`verifiers.host_eval`, ``INLINE_COMPILE_CHARS``, the puzzles' ``INLINE_NODES``); whatever
goes past it is redone here, in a worker process (``verifiers/_bounded_worker.py``) with a
memory limit (``WORKER_MB``) and a wall-clock deadline per request (``DEADLINE_S``; the worker
is killed and replaced when it overruns, and the request's answer is an error). So the host
process spends a bounded, small amount of CPU and memory on any input, and one hostile test
never holds the host's GIL for long: other threads (a server's other sessions) keep running
while a worker computes.

Workers are started lazily, shared by every thread (a caller checks one out), talk JSON lines
over pipes with a deadline on every write and read, and die with this process (their stdin
closes); the pool (``VERIFIERS_CHECK_WORKERS`` workers, default min(2, CPUs)) is
:mod:`verifiers._worker_pool`'s. Workers import only this project's ``verifiers`` and
``sandboxes.plain`` / ``sandboxes.calls``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from verifiers._worker_pool import PipeWorker, SharedPool, WorkerPool

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


class _Worker(PipeWorker):
    def __init__(self) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
        }
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-c", _BOOT, _ROOT, str(WORKER_MB)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        super().__init__(proc)
        self._next = 0
        self.ready = False

    def ask(self, fn: str, args: list, timeout_s: float) -> dict:
        """One request's answer (``ok`` and ``r``, or ``e``); BoundedError (the worker's stream
        is then out of step: drop it) on a deadline, a dead worker or a garbled answer."""
        if not self.ready:
            hello = self.recv(STARTUP_S)
            if hello is None or not hello.get("ready"):
                raise self._lost(STARTUP_S, starting=True)
            self.ready = True
        self._next += 1
        line = json.dumps({"i": self._next, "f": fn, "a": args}) + "\n"
        deadline = time.monotonic() + timeout_s
        if not self.write(line.encode("utf-8"), timeout_s):
            self.failure = "deadline" if self.alive() else "exited"
            raise self._lost(timeout_s)
        msg = self.recv(deadline - time.monotonic())
        if msg is None:
            raise self._lost(timeout_s)
        if msg.get("i") != self._next:
            raise BoundedError("the checking process answered out of turn")
        return msg

    def _lost(self, timeout_s: float, starting: bool = False) -> BoundedError:
        if self.failure == "deadline":
            if starting:
                return BoundedError(f"the checking process took more than {timeout_s:g} s to start")
            return BoundedError(f"checking took more than {timeout_s:g} s")
        if self.failure == "garbled":
            return BoundedError("the checking process answered nonsense")
        return BoundedError("the checking process died (out of memory?)")


def _call(pool: WorkerPool[_Worker], fn: str, args: list, timeout_s: float) -> Any:
    with pool.checkout() as lease:  # (a BoundedError here drops the worker)
        msg = lease.get().ask(fn, args, timeout_s)
    if not msg.get("ok"):  # the worker's own error: it stays in the pool
        raise BoundedError(str(msg.get("e", "failed"))[:300], reported=True)
    return msg.get("r")


_POOL = SharedPool(lambda n: WorkerPool(n, _Worker), "VERIFIERS_CHECK_WORKERS")


IN_WORKER = False
"""True inside a worker: there, ``call`` runs the function directly (from ``LOCAL``, which the
worker fills; this module does not import the worker's)."""
LOCAL: dict[str, Any] = {}


def call(fn: str, *args: Any, timeout_s: float = DEADLINE_S) -> Any:
    """``fn(*args)`` of ``verifiers/_bounded_worker.py`` in a worker (JSON in, JSON out);
    BoundedError when it overran its deadline or memory limit or raised."""
    if IN_WORKER:
        return LOCAL[fn](*args)
    return _call(_POOL.get(), fn, list(args), timeout_s)
