"""Giving up root and dying with the parent, for processes started inside an isolation boundary.

Used by the sandbox's fork server (which receives this source as the module ``_mas_privileges``)
and by helper processes such as the math grader (:mod:`verifiers._math_pool`), which get it with
their own source. Standard library only (``ctypes`` for ``prctl(2)``).

* :func:`drop_privileges` empties the capability bounding set while ``CAP_SETPCAP`` is still
  effective, then switches to ``uid``/``gid`` with no supplementary groups (leaving uid 0 clears
  the permitted and effective capabilities);
* :func:`die_with_parent` sets the parent-death signal to SIGKILL. Any change of credentials
  clears it, so it is called *after* the drop; then, if the parent is already gone (the process
  was re-parented meanwhile), it exits at once.
"""

import os
import signal

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
