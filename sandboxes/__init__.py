"""Isolated execution of untrusted Python programs.

Two backends share one interface (:class:`Sandbox`):

* :class:`LocalSandbox` (the default): bubblewrap (Debian package ``bubblewrap``) around warm
  fork servers, so a job costs a ``fork()`` instead of an interpreter start.
* :class:`DockerSandbox`: a warm pool of locked-down containers (Docker Engine, ``docker`` SDK;
  the image is built by ``scripts/build_sandbox_image.sh`` from ``sandboxes/Dockerfile``).

Usage::

    import sandboxes

    sb = sandboxes.default()                       # shared LocalSandbox, closed at exit
    r = sb.run("print(sum(map(int, input().split())))", stdin="2 3",
               limits=sandboxes.Limits(wall_s=2))
    assert r.ok and r.stdout == "5\\n"
    results = sb.run_many(["print(1)", ("print(input())", "hi")])   # input order

Every limit violation (wall/CPU time, memory, output size, processes, files) is reported in
:class:`ExecResult` flags; a hostile program never makes ``run`` raise. There is never network
access. Infrastructure failures (a worker died) are recovered from: the worker is replaced and
the result carries ``error``.

The docker SDK is imported only when a :class:`DockerSandbox` is created.
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING

from .base import ExecResult, Job, Limits, Sandbox, SandboxError, as_job
from .local import BubblewrapNotFound, LocalSandbox

if TYPE_CHECKING:
    from .docker_backend import DockerSandbox

__all__ = [
    "BubblewrapNotFound",
    "DockerSandbox",
    "ExecResult",
    "Job",
    "Limits",
    "LocalSandbox",
    "Sandbox",
    "SandboxError",
    "as_job",
    "default",
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
