"""A small seccomp filter for the local backend (handed to bubblewrap with ``--seccomp FD``).

Jobs already run without capabilities, with ``no_new_privs`` and in their own namespaces; the
filter removes kernel attack surface that ordinary Python programs never need, the way Docker's
default profile does for the container backend:

* new namespaces (``unshare``, ``setns``, ``clone`` with any ``CLONE_NEW*`` flag) - in
  particular unprivileged user namespaces, which would give a job a private "root";
* ``clone3`` answers ENOSYS, so the C library falls back to ``clone``, whose flags can be
  checked (glibc does this by itself);
* mounting, ``pivot_root``, ``chroot``, kernel modules, ``kexec``, ``reboot``, swap, ``acct``,
  keyrings, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring``, ``ptrace``,
  ``process_vm_readv/writev``, ``open_by_handle_at``, ``name_to_handle_at``;
* System V IPC (shared memory, semaphores, message queues) and POSIX message queues: objects
  that outlive the process that made them, shared by every job of a worker's IPC namespace, so
  one job could hand data to the next (or fill the memory); Python's own shared memory and
  semaphores use files in ``/dev/shm``, which is wiped after every job;
* every syscall of a foreign ABI (32-bit ``int 0x80`` or x32 on x86-64), which would otherwise
  slip past a filter written for the native numbers.

Denied calls fail with EPERM (ENOSYS for ``clone3``). The filter is a classic BPF program
built here by hand (no libseccomp needed) for x86-64 and aarch64; elsewhere the local backend
runs without it.

:func:`build_job_filter` is a second filter, which the fork server of either backend installs
in each job's process (on top of the one above, or of Docker's profile) unless the job's limits
say ``ipc=True``. It refuses the objects the kernel numbers from counters shared by the whole
host, which any later job could read back: pipes and sockets (``pipe``, ``pipe2``, ``socket``,
``socketpair``: inode numbers from one host-wide counter, readable with ``fstat`` of any pipe,
the job's own stdout included), memfds, shared anonymous memory and System V segments (inode
numbers of the kernel's internal shmem mount: ``memfd_create``, ``memfd_secret``, ``mmap`` with
``MAP_SHARED | MAP_ANONYMOUS``, ``shmget``, ``msgget``, ``semget``, ``mq_open``), pidfds
(``pidfd_open``, ``clone`` with ``CLONE_PIDFD``: their inode number counts every process the host
ever started), and the anonymous inodes of ``userfaultfd`` and ``io_uring`` (numbered like
pipes). A job that made 37,000 pipes moved what the next job's ``fstat`` read by 37,000; now it
can make none, and what it reads moves with the host's own activity only.

The same filter refuses what reads or clears the state of the host's page cache, which every job
shares for the files bound from the host (the interpreter, the standard library): ``preadv2``
with ``RWF_NOWAIT`` (a read that fails when the page is not cached), ``mincore`` and
``cachestat`` (which pages are cached), ``fadvise64`` (``posix_fadvise``, e.g. ``DONTNEED``),
``readahead``, and ``madvise`` with ``MADV_COLD`` or ``MADV_PAGEOUT``. Reading a file still
caches it and the time a read takes still depends on the cache: that residual timing channel, and
why no reward depends on it, is on the :mod:`sandboxes` page.

>>> len(build_filter("x86_64")) % 8 == 0
True
>>> build_filter("sparc") is None
True
"""

from __future__ import annotations

import errno
import platform
import struct

# BPF instruction classes / modes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000

_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LO = 16  # little-endian low 32 bits of args[0]

# every CLONE_NEW* flag: NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
_CLONE_NEW_MASK = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000
_CLONE_NEW_MASK |= 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080

_ARCHES = {
    # machine: (AUDIT_ARCH, clone, clone3, {name: nr})
    "x86_64": (
        0xC000003E,
        56,
        435,
        {
            "unshare": 272,
            "setns": 308,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "swapon": 167,
            "swapoff": 168,
            "reboot": 169,
            "acct": 163,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "bpf": 321,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "open_by_handle_at": 304,
            "name_to_handle_at": 303,
            "fsopen": 430,
            "fsmount": 432,
            "move_mount": 429,
            "open_tree": 428,
            "mount_setattr": 442,
            "shmget": 29,
            "shmat": 30,
            "shmctl": 31,
            "shmdt": 67,
            "semget": 64,
            "semop": 65,
            "semctl": 66,
            "semtimedop": 220,
            "msgget": 68,
            "msgsnd": 69,
            "msgrcv": 70,
            "msgctl": 71,
            "mq_open": 240,
            "mq_unlink": 241,
            "mq_timedsend": 242,
            "mq_timedreceive": 243,
            "mq_notify": 244,
            "mq_getsetattr": 245,
        },
    ),
    "aarch64": (
        0xC00000B7,
        220,
        435,
        {
            "unshare": 97,
            "setns": 268,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "swapon": 224,
            "swapoff": 225,
            "reboot": 142,
            "acct": 89,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "bpf": 280,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "open_by_handle_at": 265,
            "name_to_handle_at": 264,
            "fsopen": 430,
            "fsmount": 432,
            "move_mount": 429,
            "open_tree": 428,
            "mount_setattr": 442,
            "shmget": 194,
            "shmctl": 195,
            "shmat": 196,
            "shmdt": 197,
            "semget": 190,
            "semctl": 191,
            "semtimedop": 192,
            "semop": 193,
            "msgget": 186,
            "msgctl": 187,
            "msgrcv": 188,
            "msgsnd": 189,
            "mq_open": 180,
            "mq_unlink": 181,
            "mq_timedsend": 182,
            "mq_timedreceive": 183,
            "mq_notify": 184,
            "mq_getsetattr": 185,
        },
    ),
}


# machine: {name: nr} of the calls build_job_filter refuses, and (clone, mmap) numbers
_JOB_ARCHES = {
    "x86_64": (
        {
            "pipe": 22, "pipe2": 293, "socket": 41, "socketpair": 53, "memfd_create": 319,
            "memfd_secret": 447, "pidfd_open": 434, "pidfd_getfd": 438, "shmget": 29,
            "msgget": 68, "semget": 64, "mq_open": 240, "userfaultfd": 323,
            "io_uring_setup": 425, "fadvise64": 221, "readahead": 187, "mincore": 27,
            "cachestat": 451,
        },
        9,
        (327, 28),  # preadv2, madvise
    ),
    "aarch64": (
        {
            "pipe2": 59, "socket": 198, "socketpair": 199, "memfd_create": 279,
            "memfd_secret": 447, "pidfd_open": 434, "pidfd_getfd": 438, "shmget": 194,
            "msgget": 186, "semget": 190, "mq_open": 180, "userfaultfd": 282,
            "io_uring_setup": 425, "fadvise64": 223, "readahead": 213, "mincore": 232,
            "cachestat": 451,
        },
        222,
        (286, 233),  # preadv2, madvise
    ),
}  # fmt: skip
_ALU_AND_K = 0x54
_OFF_ARG3_LO = 40
_OFF_ARG2_LO = 32
_OFF_ARG5_LO = 56
_CLONE_PIDFD = 0x00001000
_MAP_SHARED_ANONYMOUS = 0x01 | 0x20  # MAP_SHARED (also in MAP_SHARED_VALIDATE), MAP_ANONYMOUS
_RWF_NOWAIT = 0x08
_MADV_COLD, _MADV_PAGEOUT = 20, 21


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _prologue(machine: str) -> list[bytes]:
    """Kill a foreign ABI, refuse x32 numbers and ``clone3``; leaves the syscall number in A."""
    audit_arch, _, clone3_nr, _ = _ARCHES[machine]
    prog = [
        _ins(_LD_W_ABS, 0, 0, _OFF_ARCH),
        _ins(_JEQ_K, 1, 0, audit_arch),
        _ins(_RET_K, 0, 0, _RET_KILL_PROCESS),  # foreign ABI
        _ins(_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if machine == "x86_64":
        prog += [_ins(_JGE_K, 0, 1, 0x40000000), _ins(_RET_K, 0, 0, _RET_ERRNO | errno.EPERM)]
    return [*prog, _ins(_JEQ_K, 0, 1, clone3_nr), _ins(_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]


def _deny_flags(nr: int, offset: int, mask: int) -> list[bytes]:
    """Refuse syscall ``nr`` when any bit of ``mask`` is set in its argument at ``offset``,
    allow it otherwise (A holds the syscall number on entry)."""
    return [
        _ins(_JEQ_K, 0, 4, nr),
        _ins(_LD_W_ABS, 0, 0, offset),
        _ins(_JSET_K, 0, 1, mask),
        _ins(_RET_K, 0, 0, _RET_ERRNO | errno.EPERM),
        _ins(_RET_K, 0, 0, _RET_ALLOW),
    ]


def _deny_all(numbers: set[int]) -> list[bytes]:
    prog = []
    for nr in sorted(numbers):
        prog += [_ins(_JEQ_K, 0, 1, nr), _ins(_RET_K, 0, 0, _RET_ERRNO | errno.EPERM)]
    return prog


def build_job_filter(machine: str | None = None) -> bytes | None:
    """The compiled per-job filter (see the module docstring) for ``machine`` (default: this
    one), or None where it is not built.

    >>> len(build_job_filter("x86_64")) % 8 == 0, build_job_filter("sparc") is None
    (True, True)
    """
    machine = machine or platform.machine()
    if machine not in _JOB_ARCHES:
        return None
    denied, mmap_nr, (preadv2_nr, madvise_nr) = _JOB_ARCHES[machine]
    clone_nr = _ARCHES[machine][1]
    deny = _RET_ERRNO | errno.EPERM
    prog = _prologue(machine) + _deny_all(set(denied.values()))
    prog += _deny_flags(clone_nr, _OFF_ARG0_LO, _CLONE_PIDFD)  # clone asking for a pidfd
    prog += _deny_flags(preadv2_nr, _OFF_ARG5_LO, _RWF_NOWAIT)  # a read that fails if uncached
    prog += [  # madvise(addr, len, advice) evicting pages (of a file mapping: the page cache)
        _ins(_JEQ_K, 0, 5, madvise_nr),
        _ins(_LD_W_ABS, 0, 0, _OFF_ARG2_LO),
        _ins(_JEQ_K, 2, 0, _MADV_COLD),
        _ins(_JEQ_K, 1, 0, _MADV_PAGEOUT),
        _ins(_RET_K, 0, 0, _RET_ALLOW),
        _ins(_RET_K, 0, 0, deny),
    ]
    prog += [  # mmap(addr, len, prot, flags, ...) of shared anonymous memory
        _ins(_JEQ_K, 0, 5, mmap_nr),
        _ins(_LD_W_ABS, 0, 0, _OFF_ARG3_LO),
        _ins(_ALU_AND_K, 0, 0, _MAP_SHARED_ANONYMOUS),
        _ins(_JEQ_K, 0, 1, _MAP_SHARED_ANONYMOUS),
        _ins(_RET_K, 0, 0, deny),
        _ins(_RET_K, 0, 0, _RET_ALLOW),
    ]
    return b"".join([*prog, _ins(_RET_K, 0, 0, _RET_ALLOW)])


def build_filter(machine: str | None = None) -> bytes | None:
    """The compiled filter (``struct sock_filter[]``) for ``machine`` (default: this one)."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        return None
    _, clone_nr, _, blocked = _ARCHES[machine]
    prog = _prologue(machine) + _deny_all(set(blocked.values()))
    # clone(flags, ...): deny any CLONE_NEW* flag (x86-64 and arm64 both pass flags first)
    prog += _deny_flags(clone_nr, _OFF_ARG0_LO, _CLONE_NEW_MASK)
    return b"".join([*prog, _ins(_RET_K, 0, 0, _RET_ALLOW)])
