"""Helpers for processes inside an isolation boundary: giving up root, dying with the parent,
ending a job right after its results.

Used by the sandbox's fork server (which receives this source as the module ``_mas_inside``, so
jobs can import it too) and by helper processes such as the math grader
(:mod:`verifiers._math_pool`), which get it with their own source. Standard library only
(``ctypes`` for ``prctl(2)``).

* :func:`drop_privileges` empties the capability bounding set while ``CAP_SETPCAP`` is still
  effective, then switches to ``uid``/``gid`` with no supplementary groups (leaving uid 0 clears
  the permitted and effective capabilities);
* :func:`die_with_parent` sets the parent-death signal to SIGKILL. Any change of credentials
  clears it, so it is called *after* the drop; then, if the parent is already gone (the process
  was re-parented meanwhile), it exits at once;
* :func:`write_results` writes to a job's results channel (fd 3) and :func:`finish` ends the job
  process at once (``os._exit(0)``, after flushing the standard streams): nothing the program
  registered (``atexit``, threads, ``__del__``) runs after its results.
"""
# ruff: noqa: SIM105  (plain try/except: importing contextlib costs every job that ends here)

import os
import signal
import sys

_PRCTL: list = []

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36


def prctl(option, arg2=0):
    """``prctl(option, arg2, 0, 0, 0)``; -1 on failure (the library is loaded once)."""
    try:
        if not _PRCTL:
            import ctypes

            _PRCTL.append(ctypes.CDLL(None, use_errno=True).prctl)
        return _PRCTL[0](option, arg2, 0, 0, 0)
    except Exception:
        return -1


def drop_privileges(uid, gid):
    """Give up root for good: no capabilities, no groups, ``uid``/``gid`` everywhere."""
    for cap in range(64):
        if prctl(PR_CAPBSET_DROP, cap) != 0:  # fails past the last valid capability
            break
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("failed to drop privileges")


def die_with_parent(parent=None):
    """SIGKILL this process when its parent dies; exit now if ``parent`` (the pid it had
    before) is gone already."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent is not None and parent > 0 and os.getppid() != parent:
        os._exit(1)


def write_results(data):
    """Write ``data`` (bytes) to the results channel, fd 3 (silently: a closed one loses it)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(3, view) :]
        except InterruptedError:
            continue
        except OSError:
            return


def finish():
    """End the job process now: flush stdout/stderr, then ``os._exit(0)``."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(0)
