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
one worker serves one caller at a time, and waiting uses ``select`` on the pipes, never signals
(the pipes and the pool are :mod:`verifiers._worker_pool`'s, shared with :mod:`verifiers._bounded`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from verifiers._worker_pool import PipeWorker, SharedPool, WorkerPool

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
    op: str = "grade"  # or "form": how ``gold`` reads (see verifiers/_math_worker.py)

    def request(self, i: int, inner: int) -> str:
        msg = {"i": i, "p": self.pred, "g": self.gold, "d": self.delta, "t": inner}
        if self.op != "grade":
            msg["o"] = self.op
        return json.dumps(msg) + "\n"


#: reads the worker's source (argv[1] bytes) from stdin and runs it; the rest is requests
_BOOT = "import sys;n=int(sys.argv[1]);exec(compile(sys.stdin.buffer.read(n),'math-worker','exec'))"


def _worker_source() -> str:
    from sandboxes import inside

    here = os.path.dirname(os.path.abspath(__file__))
    with open(inside.__file__, encoding="utf-8") as f:
        head = f.read()
    with open(os.path.join(here, "_math_worker.py"), encoding="utf-8") as f:
        return head + "\n\n" + f.read()


class _Worker(PipeWorker):
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
        proc, self.uid = spawn_isolated(
            [sys.executable, "-I", "-B", "-c", _BOOT, str(len(source))],
            extra_ro=[sys.prefix] if sys.prefix != sys.base_prefix else [],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        super().__init__(proc)
        self.ready = False
        self._boot = source

    def send(self, lines: list[str], timeout_s: float) -> bool:
        """Write the requests; False if the worker is gone or does not take them in time."""
        return self.write("".join(lines).encode("utf-8"), timeout_s)

    def wait_ready(self) -> bool:
        if not self.ready:
            if self._boot:
                boot, self._boot = self._boot, b""
                if not self.write(boot, STARTUP_TIMEOUT_S):
                    return False
            msg = self.recv(STARTUP_TIMEOUT_S)
            self.ready = bool(msg and msg.get("ready"))
        return self.ready

    def kill(self) -> None:
        from sandboxes.base import release_uid

        super().kill()  # bubblewrap takes the worker with it (--die-with-parent)
        if self.proc.poll() is not None:
            release_uid(self.uid)


def _failed(reason: str) -> dict:
    """A grading the grader could not finish: wrong for now, never cached."""
    return {"c": False, "r": reason, "transient": True}


class MathPool(WorkerPool[_Worker]):
    """``n_workers`` grading processes shared by all threads of this process."""

    def __init__(self, n_workers: int = 2) -> None:
        super().__init__(n_workers, _Worker)

    def warmup(self) -> None:
        """Start every worker now and wait until each has imported math-verify."""
        with contextlib.ExitStack() as stack:
            leases = [stack.enter_context(self.checkout()) for _ in range(self.n_workers)]
            workers = [lease.get() for lease in leases]  # (they start side by side)
            for worker in workers:
                worker.wait_ready()

    def _run_chunk(self, tasks: list[Task], timeout_s: float, inner: int) -> list[dict]:
        """Grade ``tasks`` on one checked-out worker, restarting it after a timeout or crash."""
        results: list[dict] = []
        with self.checkout() as lease:
            pending = list(tasks)
            while pending:
                w = lease.get()
                if not w.wait_ready():
                    lease.drop()
                    results.append(_failed("grader process failed to start"))
                    pending.pop(0)
                    continue
                batch = pending[:CHUNK]
                lines = [t.request(k, inner) for k, t in enumerate(batch)]
                if not w.send(lines, timeout_s):
                    why = "grading timed out" if w.alive() else "grader process died"
                    lease.drop()
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
                        lease.drop()
                        pending = pending[k + 1 :]
                        break
                    results.append(msg)
                else:
                    pending = pending[len(batch) :]
        return results

    def grade(self, tasks: list[Task], timeout_s: float = 3.0) -> list[dict]:
        """Grade tasks (in order); each may take at most ``timeout_s`` seconds."""
        if self.closed:
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


_DEFAULT = SharedPool(MathPool, "VERIFIERS_MATH_WORKERS")


def default_pool() -> MathPool:
    """The process-wide pool (``VERIFIERS_MATH_WORKERS`` workers, default min(2, CPUs))."""
    return _DEFAULT.get()
