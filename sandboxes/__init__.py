"""Isolated execution of untrusted Python programs.

Two backends share one interface (:class:`Sandbox`: ``run``, ``run_many``, ``close``, context
manager, thread-safe):

* :class:`LocalSandbox` (the default): bubblewrap (Debian package ``bubblewrap``) around warm
  fork servers, so a job costs a ``fork()`` (about 1-2 ms of CPU) instead of an interpreter
  start (10-35 ms). See :mod:`sandboxes.local` for the isolation it sets up.
* :class:`DockerSandbox`: a warm pool of locked-down containers running the same fork server
  (Docker Engine through the ``docker`` SDK; the image is built by
  ``scripts/build_sandbox_image.sh`` from ``sandboxes/Dockerfile``). See
  :mod:`sandboxes.docker_backend`.

Usage::

    import sandboxes

    sb = sandboxes.default()                       # shared LocalSandbox, closed at exit
    r = sb.run("print(sum(map(int, input().split())))", stdin="2 3",
               limits=sandboxes.Limits(wall_s=2))
    assert r.ok and r.stdout == "5\n"
    results = sb.run_many(["print(1)", ("print(input())", "hi"),
                           sandboxes.Job("import time; time.sleep(9)",
                                         limits=sandboxes.Limits(wall_s=1))])
    assert results[2].timed_out                   # results come back in input order

    with sandboxes.DockerSandbox() as dsb:         # image: $MAS_SANDBOX_IMAGE or mas-sandbox:latest
        print(dsb.run("print('hello')").stdout)

A job can also *call* functions of its program after the program ran, and get their results
back as plain data (:mod:`sandboxes.calls`, :mod:`sandboxes.plain`), on a results channel of its
own (fd 3) in lines tagged with a per-job nonce; this is how :mod:`verifiers.code_tests` keeps a
test's verdict out of the program's reach::

    from sandboxes.calls import Call
    r = sb.run_many([sandboxes.Job("def sq(x):\n    return x * x\n",
                                   calls=(Call.make("sq", (3,)),))])[0]
    assert r.calls[0].value == 9                   # a plain int, decoded on the host

A job runs as ``python main.py`` would: ``__name__ == "__main__"``, ``sys.argv[0]`` is
``main.py`` in the job's private, writable working directory (also ``$HOME`` and ``$TMPDIR``),
stdin is the given text, stdout/stderr are captured (each up to ``max_output_bytes``; invalid
UTF-8 is replaced), only the standard library is importable by default, and the environment
holds nothing of the caller's. Everything the job started is killed when its main process exits
or a limit is hit, and its files, System V IPC objects and message queues are removed; the
frames above the program belong to a bare runner, not to the server. A job cannot create the
objects the kernel numbers from host-wide counters (pipes, sockets, memfds, shared anonymous
memory, pidfds) or read the host's event counters in ``/proc``, so nothing one job does moves a
number a later job reads; ``Limits(ipc=True)`` allows them (``subprocess`` needs a pipe). Jobs die
with the host process (the servers exit when their control channel hangs up), and a worker's uid is
never shared with another live worker.

Every limit violation (wall/CPU time, memory, output size, processes, file size) is reported in
:class:`ExecResult` flags; a hostile program never makes ``run`` raise. There is never network
access. Infrastructure failures (a worker died) are recovered from: the worker is replaced and,
if the job may have run, its result carries ``error``. Calling the API wrongly (non-str code,
bad limits) raises TypeError/ValueError; a backend that cannot work at all (no bubblewrap, no
Docker Engine, no image) raises :class:`SandboxError` with what to do about it.
:func:`find_bwrap` says, without starting anything, whether :class:`LocalSandbox` would find
bubblewrap (the command lines check it before a long run, :mod:`adapters.preflight`).

Residual channels between jobs. Jobs share the host's kernel, so some state still passes from
one job to a later one; what the filters refuse (:mod:`sandboxes._seccomp`) are the exact,
cheap readings of it: the host-wide numbering of pipes and sockets, the host's counters in
``/proc``, and the page cache of the files bound from the host (which pages are cached can no
longer be asked, ``mincore``, ``cachestat``, ``preadv2(RWF_NOWAIT)``, nor pages evicted on
purpose, ``posix_fadvise``, ``readahead``, ``madvise(MADV_PAGEOUT)``). What remains is timing:
a read takes longer when its page is not cached, the CPU's caches and the scheduler keep traces
of the previous job, and ``sysinfo`` reports free memory. A later job can measure these only
noisily and slowly, and no verdict needs to resist them, because no reward depends on what a
job keeps secret from a later one: a program's verdict is decided on the host over its plain
results, and code a policy wrote never runs in a job that holds what that policy must not learn
(a tester's test runs with no program and no result, :mod:`verifiers.assert_plans`; the golden
program's results never leave the host), so there is nothing in a job worth signalling.

The docker SDK is imported only when a :class:`DockerSandbox` is created.
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING

from .base import ExecResult, Job, Limits, Sandbox, SandboxError, as_job
from .local import (
    BWRAP_INSTALL,
    BubblewrapNotFound,
    LocalSandbox,
    SandboxDegradedWarning,
    find_bwrap,
)

if TYPE_CHECKING:
    from .docker_backend import DockerSandbox

__all__ = [
    "BWRAP_INSTALL",
    "BubblewrapNotFound",
    "DockerSandbox",
    "ExecResult",
    "Job",
    "Limits",
    "LocalSandbox",
    "Sandbox",
    "SandboxDegradedWarning",
    "SandboxError",
    "as_job",
    "default",
    "find_bwrap",
]

_default: LocalSandbox | None = None
_default_lock = threading.Lock()


def default() -> LocalSandbox:
    """The process-wide shared :class:`LocalSandbox` (created on first use, closed at exit)."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = LocalSandbox()
            atexit.register(_default.close)
        return _default


def __getattr__(name: str):
    if name == "DockerSandbox":
        from .docker_backend import DockerSandbox

        return DockerSandbox
    raise AttributeError(f"module 'sandboxes' has no attribute {name!r}")
