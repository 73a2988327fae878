"""The fork server that runs *inside* an isolation boundary (bubblewrap or a container).

The host starts ``python -I -S -B -c BOOTSTRAP <size> <config-json>`` (see
``sandboxes.base.server_command``) and writes this file's source on the process's stdin, where
the bootstrap reads and executes it (in a namespace of its own) and calls :func:`main`; it must
therefore depend on the standard library only (Python >= 3.8, Linux). It is never imported on
the host except by tools that read it.

Lifecycle
---------
1. Start as PID 1 of a fresh PID namespace (bubblewrap ``--as-pid-1`` or a container without
   an init). The control channel is
   fds 0 (requests) and 1 (responses); they are moved to private descriptors and 0/1 are
   pointed at /dev/null. When started as root (bubblewrap run by root), it drops the
   capability bounding set and switches to the unprivileged uid named in the config, then
   sets its parent-death signal again (a uid change clears it). That signal takes an
   unisolated server with the host; PID 1 of a namespace does not get it, so the server also
   watches its control channel: when the host goes away, the channel hangs up, and the server
   kills its job and exits (at once, even in the middle of a job; then the kernel kills every
   process left in the namespace).
2. Before that drop it reads one more frame, the helper modules (JSON ``{name: source}``: the
   host sends ``sandboxes/plain.py`` as ``_mas_plain`` and ``sandboxes/inside.py`` as
   ``_mas_inside``) and installs them in ``sys.modules``. It marks
   itself non-dumpable (so jobs running under the same uid cannot ptrace it or open its
   /proc/<pid>/fd entries), pre-imports common modules, freezes the GC and sends ``ready``.
3. For every request it forks one child. The child starts a new session, puts stdin (a memfd),
   stdout and stderr (pipes) on fds 0-2 and, when the request asks for it, the *results* pipe
   on fd 3, closes every other descriptor, applies the rlimits, installs the per-job seccomp
   filter of the config (``job_filter``; not for jobs whose limits say ``ipc``: see
   ``sandboxes/_seccomp.py``) and enters the private work directory. Then it returns out of every
   server function to the bootstrap, which drops its references to the server and calls the job
   runner: the program runs in a fresh ``__main__`` module whose only caller frames are the runner's
   (its globals hold nothing of the server) and the emptied bootstrap's, so ``sys._getframe(n)``
   shows the job nothing of the server. With ``calls`` in the request, the runner then calls the
   named functions of the program with the given (plain, :mod:`sandboxes.plain`) arguments, writes
   each result as one ``<nonce> <index> <json>`` line to fd 3 and ends the process with
   ``os._exit(0)``: the program's ``atexit`` handlers, threads and ``sys.exit`` tricks never run
   after its results.
4. The server reads the pipes (keeping at most ``max_output_bytes`` of stdout and stderr and
   ``results_cap`` of the results, discarding the rest), and waits for the child to exit or the
   wall-clock deadline, watching its control input: if the host goes away (end of stream), it
   kills the job and exits at once. Then it kills every other process of the job. As PID 1 it
   uses ``kill(-1, SIGKILL)``, which atomically reaches every process in the namespace except
   itself (daemons that called ``setsid`` included); PID 1 of a namespace also ignores
   signals sent from inside it, so a job cannot kill the server. Without a PID namespace
   (explicitly unisolated mode) it is a child subreaper and kills the descendant tree found in
   /proc instead.
5. It reaps everything, removes every System V IPC object (shared memory, semaphores, message
   queues) and POSIX message queue the job left, wipes the writable directories and answers
   with a JSON header followed by the captured stdout, stderr and results. A job's bytes (code,
   stdin, output) only ever live in the server's reusable buffers (``_Buf``), which are zeroed
   after each job: a later job, forked from the server, cannot find an earlier job's data in its
   own memory. If cleaning up failed (or would take too long), the server exits after
   answering; the host starts a fresh one.

Wire format (both directions): 4-byte big-endian length, then that many bytes.
Request:  header JSON {"limits": {...}, "results": bool, "calls": {...}}, then the code, then
          stdin (three frames).
Response: header JSON, then stdout, stderr and results bytes (four frames).
"""
# ruff: noqa: SIM105, UP031, SIM905  (plain try/except and %-formatting: lean, 3.8-compatible)

import gc
import json
import os
import select
import signal
import struct
import sys
import time

_LEN = struct.Struct(">I")
_MAX_REQUEST = 1 << 30
# Imported once by the server, so jobs find them in sys.modules. Each module makes every fork
# a little slower (page tables, copy-on-write faults), so this is the set short programs use
# most; more with the ``preload`` option. Modules that register fork handlers are left out on
# purpose: ``threading`` (its after-fork hook alone costs ~0.5 ms of CPU per job) and
# ``random`` (reseeds after every fork); a job that imports them pays their import instead.
_PRELOAD = (
    "array bisect collections copy functools heapq io itertools json math mmap operator "
    "atexit fcntl re resource site string typing"
).split()
_MEM_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGKILL}

CTRL_IN = -1
CTRL_OUT = -1
NULL_FD = -1
CONFIG: dict = {}


# ----------------------------------------------------------------------------------------------
# control channel
# ----------------------------------------------------------------------------------------------


def _read_exact(fd, n):
    chunks = []
    while n > 0:
        try:
            data = os.read(fd, min(n, 1 << 20))
        except InterruptedError:
            continue
        if not data:
            return None
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def _read_frame(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (n,) = _LEN.unpack(head)
    if n > _MAX_REQUEST:
        raise ValueError("request too large")
    return _read_exact(fd, n) if n else b""


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            k = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[k:]


def _send(*frames):
    """Send frames with one writev and without joining them (no copies of job data)."""
    parts = []
    for f in frames:
        parts.append(_LEN.pack(len(f)))
        parts.append(f)
    parts = [memoryview(p).cast("B") for p in parts]
    while parts:
        try:
            k = os.writev(CTRL_OUT, parts[:1024])
        except InterruptedError:
            continue
        while k and parts:
            if k >= len(parts[0]):
                k -= len(parts.pop(0))
            else:
                parts[0] = parts[0][k:]
                k = 0
        while parts and not len(parts[0]):
            parts.pop(0)


class _Buf:
    """A reusable byte buffer that is wiped after each job.

    Every byte of a job (code, stdin, output) passes through these and nothing else, so no
    freed heap memory of the server holds another job's data when the next job is forked from
    it (a forked job can read all of its own address space).
    """

    def __init__(self, size=1 << 16):
        self.data = bytearray(size)
        self.n = 0
        self.high = 0  # the most bytes written since the last wipe (all of them get zeroed)

    def reserve(self, n):
        """Room for ``n`` bytes; the ``self.n`` bytes held so far stay (and stay counted)."""
        if n > len(self.data):
            bigger = bytearray(max(n, 2 * len(self.data)))
            kept = self.n
            # view to view: a bytearray's slice assignment from anything but a bytearray
            # copies the source into a temporary first, freed unwiped into the heap
            with memoryview(self.data) as old, memoryview(bigger) as new:
                new[:kept] = old[:kept]
            self.wipe()  # the old buffer is zeroed before it is dropped
            self.data = bigger
            self.n = self.high = kept

    def view(self):
        return memoryview(self.data)[: self.n]

    def read_from(self, fd, n):
        """Fill with exactly n bytes from fd; False at end of input."""
        self.reserve(n)
        self.n = 0
        mv = memoryview(self.data)
        try:
            while self.n < n:
                try:
                    k = os.readv(fd, [mv[self.n : n]])
                except InterruptedError:
                    continue
                if k == 0:
                    return False
                self.n += k
                self.high = max(self.high, self.n)
        finally:
            mv.release()
        return True

    def append(self, chunk, limit):
        """Append as much of ``chunk`` as fits under ``limit`` bytes; True if some was cut."""
        room = limit - self.n
        take = min(room, len(chunk)) if room > 0 else 0
        if take:
            self.reserve(self.n + take)
            with memoryview(self.data) as mv:  # (no temporary copy, see reserve)
                mv[self.n : self.n + take] = chunk[:take]
            self.n += take
            self.high = max(self.high, self.n)
        return take < len(chunk)

    def wipe(self):
        """Zero every byte written since the last wipe (not only the ``n`` now counted)."""
        end = max(self.n, self.high)
        if end:
            with memoryview(self.data) as mv:
                mv[:end] = bytes(end)
        self.n = self.high = 0


CODE, STDIN, OUT, ERR, RES, SCRATCH = _Buf(), _Buf(), _Buf(), _Buf(), _Buf(), _Buf(1 << 16)


# ----------------------------------------------------------------------------------------------
# privileges
# ----------------------------------------------------------------------------------------------


def _prctl(option, arg2=0):
    """prctl(2), through the ``_mas_inside`` helper module (``sandboxes/inside.py``)."""
    return sys.modules["_mas_inside"].prctl(option, arg2)


# ----------------------------------------------------------------------------------------------
# cleanup helpers
# ----------------------------------------------------------------------------------------------


def _other_pids():
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            out.append(int(name))
    return out


def _descendants():
    """Processes whose parent chain reaches this server (tree mode)."""
    me = os.getpid()
    parent = {}
    for pid in _other_pids():
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                data = f.read()
            parent[pid] = int(data[data.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out = []
    for pid in parent:
        seen = 0
        p = parent.get(pid)
        while p is not None and seen < 4096:
            if p == me:
                out.append(pid)
                break
            p = parent.get(p)
            seen += 1
    return out


def _kill_everything():
    """Kill every process of the job; return once none is left (bounded)."""
    mode = CONFIG.get("kill_mode", "pidns")
    for _ in range(200):
        if mode == "pidns":
            # PID 1 of a namespace: kill(-1) reaches every other process in it, atomically
            # with respect to fork(). ESRCH means there was no other process at all.
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                _reap_all()
                return True
            _reap_all()
            if not _other_pids():
                return True
        else:
            victims = _descendants()
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            _reap_all()
            if not victims and not _descendants():
                return True
        time.sleep(0.001)
    return False


def _reap_all():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if pid == 0:
            # children still exiting: wait for them (they are all being killed)
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return
            except InterruptedError:
                pass


def _remove(path, is_dir):
    """Remove one entry; on EACCES make the parent writable and retry. True on success."""
    for attempt in (0, 1):
        try:
            if is_dir:
                os.rmdir(path)
            else:
                os.unlink(path)
            return True
        except FileNotFoundError:
            return True
        except PermissionError:
            if attempt:
                return False
            try:
                os.chmod(os.path.dirname(path), 0o700)
            except OSError:
                return False
        except OSError:
            return False
    return False


_WIPE_BUDGET = 4096


def _wipe(path, budget=None):
    """Remove everything below ``path`` (not ``path`` itself). True on success.

    Gives up (False) after ``budget[0]`` entries: a job that made a huge number of files is
    cheaper to clean by replacing the whole worker (a fresh tmpfs) than file by file.
    """
    if budget is None:
        budget = [_WIPE_BUDGET]
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return True
    except PermissionError:
        try:
            os.chmod(path, 0o700)
            entries = list(os.scandir(path))
        except OSError:
            return False
    except OSError:
        return False
    budget[0] -= len(entries)
    if budget[0] < 0:
        return False
    ok = True
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir and not _wipe(entry.path, budget):
            return False
        ok = _remove(entry.path, is_dir) and ok
    return ok


# ----------------------------------------------------------------------------------------------
# System V IPC and POSIX message queues a job left behind
# ----------------------------------------------------------------------------------------------

_LIBC: list = []
_MQUEUE_DIR = "/dev/mqueue"


def _libc():
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def _ipc_ids(kind):
    """Ids of the System V IPC objects of one kind ("shm", "sem", "msg") in this namespace."""
    try:
        with open("/proc/sysvipc/" + kind, "rb") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) > 1:
            try:
                out.append(int(parts[1]))
            except ValueError:
                pass
    return out


def _clean_ipc():
    """Remove every System V IPC object and POSIX message queue (the job's, since the server
    makes none). False if one is left. Done after every job unless the config says
    ``clean_ipc: false`` (the local backend, whose seccomp filter refuses to make them at
    all); containers allow them, and nothing else would remove them between jobs."""
    ok = True
    for kind, fn, args in (("shm", "shmctl", (0, None)), ("msg", "msgctl", (0, None))):
        for ident in _ipc_ids(kind):
            if getattr(_libc(), fn)(ident, *args) != 0:  # IPC_RMID = 0
                ok = False
    for ident in _ipc_ids("sem"):
        if _libc().semctl(ident, 0, 0) != 0:
            ok = False
    if CONFIG.get("mqueue_dir"):
        try:
            names = os.listdir(CONFIG["mqueue_dir"])
        except OSError:
            names = []
        for name in names:
            try:
                os.unlink(os.path.join(CONFIG["mqueue_dir"], name))
            except OSError:
                ok = False
    return ok and not (_ipc_ids("shm") or _ipc_ids("msg") or _ipc_ids("sem"))


# ----------------------------------------------------------------------------------------------
# the job child
# ----------------------------------------------------------------------------------------------


class _ChildJob:
    """What ``_run_job`` returns in the forked child: the job runner, to be called by the
    bootstrap once every server frame is gone."""

    def __init__(self, runner):
        self.runner = runner


def _child(job_dir, limits, fds):
    """Runs in the forked child: descriptors, rlimits, work directory. Exits on failure."""
    import resource

    try:
        os.setsid()
        stdin_fd, out_w, err_w, res_w = fds
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        if res_w is not None:
            os.dup2(res_w, 3)
            os.closerange(4, 1 << 16)
        else:
            os.closerange(3, 1 << 16)
        _prctl(4, 1)  # PR_SET_DUMPABLE: back to normal for the job's own processes
        try:  # be the OOM killer's first choice, before the server
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, b"1000")
            os.close(fd)
        except OSError:
            pass
        mib = 1 << 20
        cpu = max(1, int(-(-limits["cpu_s"] // 1)))
        rl = [
            (resource.RLIMIT_CPU, cpu, cpu + 1),
            (resource.RLIMIT_AS, limits["memory_mb"] * mib, limits["memory_mb"] * mib),
            (resource.RLIMIT_FSIZE, limits["max_file_mb"] * mib, limits["max_file_mb"] * mib),
            (resource.RLIMIT_NOFILE, limits["max_open_files"], limits["max_open_files"]),
            (resource.RLIMIT_CORE, 0, 0),
        ]
        if CONFIG.get("nproc", True):
            n = limits["max_procs"] + 1  # the server runs under the same uid
            rl.append((resource.RLIMIT_NPROC, n, n))
        for what, soft, hard in rl:
            try:
                resource.setrlimit(what, (soft, hard))
            except (ValueError, OSError):
                # cannot raise a hard limit that is already lower: lower the soft one only
                cur = resource.getrlimit(what)[1]
                resource.setrlimit(what, (min(soft, cur), cur))
        if CONFIG.get("job_nice"):
            try:
                os.nice(int(CONFIG["job_nice"]))
            except OSError:
                pass
        if _JOB_FILTER and not limits.get("ipc", False):
            _install_job_filter()
        os.chdir(job_dir)
        os.umask(0o022)
    except BaseException:
        os._exit(125)


_JOB_FILTER: list = []  # [sock_fprog, its buffer]: the per-job seccomp filter (config job_filter)


def _prepare_job_filter(program):
    """Build, once, the ``struct sock_fprog`` of the per-job filter (``sandboxes._seccomp``
    ``build_job_filter``: no pipes, sockets, memfds, shared anonymous memory, System V IPC or
    pidfds, whose numbers come from counters shared by the whole host)."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    _JOB_FILTER[:] = [SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p)), buf]


def _install_job_filter():
    """In a job child: install the per-job filter (raises if the kernel refuses it: the job
    must not run without it)."""
    import ctypes

    libc = _libc()
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(22, 2, ctypes.byref(_JOB_FILTER[0]), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


# The job runner and its helpers are rebuilt over a namespace of their own (``_RUNNER_NS``), so
# that the frames a job can walk up to hold nothing of the server (see ``_clean_function``).


def _run_main(code, job_dir, calls):
    """Run the program as ``__main__`` (then its calls); returns the exit status. Never returns
    when ``calls`` is given: the process ends right after the last result."""
    import builtins
    import types

    # The standard streams were made by the server (_make_std_streams) on fds 0-2, which are
    # now the job's stdin/stdout/stderr: creating them here would cost ~0.3 ms per job.
    sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__
    path = os.path.join(job_dir, "main.py")
    sys.argv = [path]
    sys.path[0:0] = [job_dir]
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None
    if "linecache" in sys.modules:  # not imported here: it pulls in tokenize (~2 ms a job)
        sys.modules["linecache"].clearcache()
    module = types.ModuleType("__main__")
    module.__dict__.update(
        {"__file__": path, "__builtins__": builtins, "__cached__": None, "__loader__": None}
    )
    sys.modules["__main__"] = module
    exit_code = 0
    try:
        exec(compile(code, path, "exec", dont_inherit=True), module.__dict__)
        if calls is not None:
            _run_calls(module.__dict__, calls)
    except SystemExit as exc:
        exit_code = _exit_status(exc)
    except BaseException as exc:
        if isinstance(exc, MemoryError) or isinstance(exc.__context__, MemoryError):
            try:
                os.write(2, b"\nMemoryError\n")
            except OSError:
                pass
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        try:
            sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        except BaseException:
            pass
        exit_code = 1
        if isinstance(exc, KeyboardInterrupt):
            exit_code = -signal.SIGINT
    if "threading" in sys.modules:
        try:
            sys.modules["threading"]._shutdown()  # wait for non-daemon threads, like CPython
        except BaseException:
            pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:
        sys.stdout.flush()
    except BaseException:
        if exit_code == 0:
            exit_code = 120  # what CPython returns when stdout cannot be flushed at exit
    try:
        sys.stderr.flush()
    except BaseException:
        pass
    if exit_code < 0:
        signal.signal(-exit_code, signal.SIG_DFL)
        os.kill(os.getpid(), -exit_code)
    return exit_code & 0xFF


def _run_calls(namespace, calls):
    """Call each requested function of the program; write one result line per call to fd 3.

    A call is ``[path, args, kwargs]``: ``path`` a name of the program, optionally followed by
    "()" (call with no arguments) and attribute names (``["Solution", "()", "twoSum"]``); the
    arguments in the plain encoding. A line is ``<nonce> <index> <json>`` with ``["ok",
    value]``, ``["exc", type name, message]`` or ``["big", reason]`` (no plain encoding).
    """
    import _mas_inside as inside
    import _mas_plain as plain

    nonce = calls["nonce"]
    cap = int(calls.get("max_items", plain.MAX_ITEMS))
    for index, call in enumerate(calls["calls"]):
        try:
            path, args, kwargs = call
            target = None
            for k, step in enumerate(path):
                if step[:1] == "_":  # public names only: no __builtins__, dunders, helpers
                    raise NameError("name %r is not callable by a test" % step)
                if k == 0:
                    # a name the program bound itself (the module's own dict, never builtins)
                    if step not in namespace:
                        raise NameError("name %r is not defined" % step)
                    target = namespace[step]
                elif step == "()":
                    target = target()
                else:
                    target = getattr(target, step)
            pos = plain.decode(args)
            named = plain.decode(kwargs)
            value = target(*pos, **named)
            try:
                record = ["ok", plain.encode(value, cap)]
            except (plain.PlainError, RecursionError) as exc:
                record = ["big", str(exc)[:200]]
        except BaseException as exc:  # the program's exception: a result, not a crash
            try:
                message = str(exc)[:1000]
            except BaseException:
                message = ""
            record = ["exc", _exc_name(exc), message]
        line = "%s %d %s\n" % (nonce, index, plain.dumps(record))
        inside.write_results(line.encode("utf-8", "replace"))
    inside.write_results(("%s end\n" % nonce).encode())
    inside.finish()


def _exc_name(exc):
    for klass in type(exc).__mro__:
        if klass.__module__ == "builtins":
            return klass.__name__
    return "Exception"


def _exit_status(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, bool) or not isinstance(code, int):
        try:
            sys.stderr.write(str(code) + "\n")
        except BaseException:
            pass
        return 1
    return code & 0xFF


_RUNNER_NS: dict = {}


def _clean_function(fn, namespace):
    import types

    return types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__)


def _make_runner():
    """``_run_main`` and its helpers over a namespace holding only modules."""
    import builtins

    _RUNNER_NS.update({"__builtins__": builtins, "os": os, "sys": sys, "signal": signal})
    for fn in (_run_main, _run_calls, _exc_name, _exit_status):
        _RUNNER_NS[fn.__name__] = _clean_function(fn, _RUNNER_NS)
    return _RUNNER_NS["_run_main"]


# ----------------------------------------------------------------------------------------------
# one job in the server
# ----------------------------------------------------------------------------------------------


def _run_job(header):
    """Run the job whose code and stdin are in CODE and STDIN; output lands in OUT, ERR, RES.
    Returns the result header, or (in the forked child) a ``_ChildJob``."""
    import functools

    limits = header["limits"]
    cap = int(limits["max_output_bytes"])
    wall = float(limits["wall_s"])
    mem_bytes = int(limits["memory_mb"]) << 20
    calls = header.get("calls")
    want_results = bool(header.get("results")) or calls is not None
    res_cap = int(header.get("results_cap", 1 << 20))
    work_root = CONFIG["work_root"]
    job_dir = os.path.join(work_root, "job")
    isolated = CONFIG.get("kill_mode", "pidns") == "pidns"
    probes = {p: _last_probe(p) for p in CONFIG["wipe"] if p != work_root and isolated}
    os.mkdir(job_dir, 0o700)
    fd = os.open(os.path.join(job_dir, "main.py"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    _write_all(fd, CODE.view())
    probes[work_root] = os.fstat(fd).st_ino
    os.close(fd)

    if STDIN.n:
        stdin_fd = os.memfd_create("stdin")
        _write_all(stdin_fd, STDIN.view())
        os.lseek(stdin_fd, 0, os.SEEK_SET)
    else:
        stdin_fd = os.dup(NULL_FD)
    out_r, out_w = _big_pipe(cap)
    err_r, err_w = _big_pipe(cap)
    res_r, res_w = _big_pipe(0) if want_results else (None, None)  # (results are small)

    sys.stderr.flush()  # nothing of the server's may linger in the buffers jobs inherit
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(job_dir, limits, (stdin_fd, out_w, err_w, res_w))
        code = bytes(CODE.view()).decode("utf-8", "surrogateescape")
        return _ChildJob(functools.partial(_RUNNER_NS["_run_main"], code, job_dir, calls))
    t_forked = time.monotonic()
    for fd in (stdin_fd, out_w, err_w, res_w):
        if fd is not None:
            os.close(fd)

    deadline = start + wall
    bufs = {out_r: OUT, err_r: ERR}
    caps = {out_r: cap, err_r: cap}
    if res_r is not None:
        bufs[res_r], caps[res_r] = RES, res_cap
    truncated = dict.fromkeys(bufs, False)
    open_fds = set(bufs)
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pass

    scratch = memoryview(SCRATCH.data)

    def drain(fd):
        """Read what the pipe holds now (non-blocking); False once at end of file."""
        while True:
            try:
                k = os.readv(fd, [scratch])
            except BlockingIOError:
                return True
            except OSError:
                k = 0
            if not k:
                open_fds.discard(fd)
                return False
            SCRATCH.n = max(SCRATCH.n, k)
            SCRATCH.high = max(SCRATCH.high, k)
            if bufs[fd].append(scratch[:k], caps[fd]):
                truncated[fd] = True

    # The pipes are large (see _big_pipe) and read lazily: while a job is quiet the server
    # sleeps on the pidfd alone and looks at the pipes every _TICK_S, or when the job ends.
    # Waking up for every write would cost more than a short job itself (each wake-up touches
    # pages the fork made shared). A job that does write gets its pipes watched from then on.
    # The control input is watched for a hang-up only (a queued next request is no event): if
    # the host goes away, the job is killed and the server exits.
    poller = select.poll()
    poller.register(CTRL_IN, 0)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    exited = False
    wait_status = None
    rusage = None
    timed_out = False
    watched = set()
    while True:
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            break
        timeout = min(deadline - now, _TICK_S if pidfd is not None else 0.005)
        try:
            events = poller.poll(max(1, int(timeout * 1000 + 0.999)))
        except InterruptedError:
            continue
        for fd, ev in events:
            if fd == CTRL_IN and ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                _host_gone()
            if fd == pidfd:
                exited = True
        if pidfd is None:
            got, st, ru = os.wait4(pid, os.WNOHANG)
            if got == pid:
                exited, wait_status, rusage = True, st, ru
        if exited:
            break
        got_data = False
        for fd in list(open_fds):
            n0 = bufs[fd].n
            drain(fd)
            got_data = got_data or bufs[fd].n > n0 or truncated[fd]
        want = set(open_fds) if got_data or watched else set()
        for fd in watched - want:
            poller.unregister(fd)
        for fd in want - watched:
            poller.register(fd, select.POLLIN)
        watched = want
    end = time.monotonic()

    if not exited:
        try:
            # As PID 1 kill the whole namespace at once: the main process and all it started
            # die together instead of one after the other.
            os.kill(-1 if CONFIG.get("kill_mode", "pidns") == "pidns" else pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if wait_status is None:
        try:
            _, wait_status, rusage = os.wait4(pid, 0)
        except ChildProcessError:
            wait_status = None
    t_reaped = time.monotonic()
    clean = _kill_everything()
    t_killed = time.monotonic()
    # Every writer is gone now (unless cleanup failed): take what is left in the pipes.
    for fd in list(open_fds):
        drain(fd)
    for fd in bufs:
        os.close(fd)
    if pidfd is not None:
        os.close(pidfd)

    exit_code = None
    sig = None
    if wait_status is not None:
        if os.WIFEXITED(wait_status):
            exit_code = os.WEXITSTATUS(wait_status)
        elif os.WIFSIGNALED(wait_status):
            sig = os.WTERMSIG(wait_status)
    if timed_out:
        exit_code = None
        sig = signal.SIGKILL
    cpu_used = (rusage.ru_utime + rusage.ru_stime) if rusage is not None else 0.0
    maxrss = (rusage.ru_maxrss * 1024) if rusage is not None else 0
    cpu_exceeded = sig == signal.SIGXCPU or (
        sig == signal.SIGKILL and cpu_used >= float(limits["cpu_s"]) - 0.05
    )
    memory_exceeded = (
        not timed_out and sig in _MEM_SIGNALS and maxrss >= 0.7 * mem_bytes
    ) or _memory_error_reported(ERR)
    ipc_clean = _clean_ipc() if CONFIG.get("clean_ipc", True) else True
    budget = [_WIPE_BUDGET]
    wiped = all(_wipe(p, budget) for p in CONFIG["wipe"])
    moved = _counters_moved(pid, probes)
    healthy = clean and ipc_clean and wiped and not moved and _tmp_ok(work_root)
    result = {
        "exit_code": exit_code,
        "signal": sig,
        "timed_out": timed_out,
        "cpu_exceeded": bool(cpu_exceeded),
        "memory_exceeded": memory_exceeded,
        "stdout_truncated": truncated[out_r],
        "stderr_truncated": truncated[err_r],
        "results_truncated": bool(res_r is not None and truncated[res_r]),
        "duration_s": end - start,
        "cpu_s": cpu_used,
        "maxrss_bytes": maxrss,
        "healthy": healthy,
        "counters_moved": moved,
        "phases_ms": [
            round(1000 * (t - start), 3)
            for t in (t_forked, end, t_reaped, t_killed, time.monotonic())
        ],
    }
    scratch.release()
    return result


def _host_gone():
    """The control input hung up: the host is gone. Kill the job and exit."""
    try:
        if CONFIG.get("kill_mode", "pidns") == "pidns":
            os.kill(-1, signal.SIGKILL)
        else:
            for pid in _descendants():
                os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    os._exit(0)


_TICK_S = 0.01


def _big_pipe(cap):
    """A pipe (read end non-blocking) whose buffer holds the whole kept output if it can
    (``cap`` 0: the default size)."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    if not cap:
        return r, w
    try:
        import fcntl

        fcntl.fcntl(r, 1031, min(1 << 20, max(1 << 16, cap + 4096)))  # F_SETPIPE_SZ
    except (ImportError, OSError):
        pass
    return r, w


def _memory_error_reported(err):
    """An uncaught MemoryError in some thread or child process: Python's report ends with it.
    (Looked up in place: no copy of the job's stderr is made.)"""
    data, end = err.data, err.n
    while end > 0 and data[end - 1] in b" \t\r\n":
        end -= 1
    start = data.rfind(b"\n", 0, end) + 1
    if not data.startswith(b"MemoryError", start, end):
        return False
    return end - start == 11 or data[start + 11] == 58  # "MemoryError" or "MemoryError: ..."


def _probe_inode(path):
    """The inode number a new file in ``path`` gets now (the probe file is removed again), or
    None. tmpfs numbers its inodes in sequence, per mount."""
    probe = os.path.join(path, ".mas-probe")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)
        try:
            os.unlink(probe)
        except OSError:
            pass


_PROBED: dict = {}  # directory -> the inode its last probe file got


def _last_probe(path):
    """The inode of the last probe file in ``path`` (made after the previous job), or a new
    probe's: one probe per job and directory is enough."""
    if path not in _PROBED:
        _PROBED[path] = _probe_inode(path)
    return _PROBED[path]


def _last_pid():
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _counters_moved(job_pid, probes):
    """Did the job move a counter the next job could read? The PID namespace's last pid
    (anything the job started) and each writable tmpfs's next inode number (any file the job
    made, even one it removed again) must be where the server's own work left them: the job's
    pid, one past the inodes the server made (``probes``: the last one per directory). A job
    that moved one gets no successor on this worker: the server exits after answering and the
    host starts a fresh one (a fresh tmpfs and PID namespace). So nothing a job does there
    reaches the next job, beyond the job count every job sees.
    """
    if CONFIG.get("kill_mode", "pidns") != "pidns":
        return False  # unisolated (opted in): no namespace and no private tmpfs to keep fresh
    last = _last_pid()
    if last is not None and last != job_pid:
        return True
    for path, before in probes.items():
        if before is None:
            continue
        now = _PROBED[path] = _probe_inode(path)
        if now is not None and now != before + 1:
            return True
    return False


def _tmp_ok(path):
    try:
        st = os.statvfs(path)
        return st.f_bfree * 4 >= st.f_blocks
    except OSError:
        return False


# ----------------------------------------------------------------------------------------------
# main loop
# ----------------------------------------------------------------------------------------------


def _make_std_streams():
    """UTF-8 text streams on fds 0-2, made like CPython makes its own (names included); the
    server never uses them, the forked jobs inherit them with fds 0-2 pointing at their pipes."""
    import io

    def stream(fd, mode, errors, line_buffering):
        raw = io.FileIO(fd, mode, closefd=False)
        raw.name = "<%s>" % ("stdin", "stdout", "stderr")[fd]
        buf = (io.BufferedReader if mode == "r" else io.BufferedWriter)(raw)
        return io.TextIOWrapper(buf, encoding="utf-8", errors=errors, line_buffering=line_buffering)

    sys.stdin = sys.__stdin__ = stream(0, "r", "strict", False)  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = stream(1, "w", "strict", False)  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = stream(2, "w", "backslashreplace", True)  # type: ignore[misc]


def _warm_up():
    """Run the lazy one-time initialisations (compiler, codecs, io) once, here, so that forked
    jobs inherit them instead of redoing them; the first compile() alone costs ~1 ms."""
    import io

    code = "import sys\nx = [str(i) for i in range(3)]\ny = {'a': 1.5, 'b': (1, 2)}\n"
    exec(compile(code, "warm-up.py", "exec", dont_inherit=True), {"__name__": "__warm__"})
    plain = sys.modules.get("_mas_plain")
    if plain is not None:  # what a job with calls runs, once
        plain.dumps(["ok", plain.encode(plain.decode(["t", [1, "a", 2.5, ["l", []]]]))])
    fd = os.open("/dev/null", os.O_WRONLY)
    for encoding, errors in (("utf-8", "strict"), ("utf-8", "backslashreplace")):
        w = io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(fd, "w", closefd=False)), encoding=encoding, errors=errors
        )
        print("warm", 1, 2.5, file=w)
        w.flush()
    os.close(fd)


def _install_modules(frame):
    """Install the helper modules the host sent (``{name: source}``) in ``sys.modules``."""
    import types

    for name, source in json.loads(frame.decode()).items():
        module = types.ModuleType(name)
        module.__file__ = "<%s>" % name
        sys.modules[name] = module
        exec(compile(source, module.__file__, "exec", dont_inherit=True), module.__dict__)


def main():
    """Serve requests; returns the job runner in a forked job child, exits otherwise."""
    global CTRL_IN, CTRL_OUT, CONFIG, NULL_FD
    CONFIG = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    CONFIG.setdefault("work_root", "/tmp")
    CONFIG.setdefault("wipe", [CONFIG["work_root"]])
    CTRL_IN = os.dup(0)
    CTRL_OUT = os.dup(1)
    NULL_FD = os.open("/dev/null", os.O_RDWR)
    os.dup2(NULL_FD, 0)
    os.dup2(NULL_FD, 1)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    modules = _read_frame(CTRL_IN)
    if modules is None:
        sys.exit(0)
    _install_modules(modules)
    privileges = sys.modules["_mas_inside"]
    if CONFIG.get("drop_uid") is not None:
        privileges.drop_privileges(int(CONFIG["drop_uid"]), int(CONFIG["drop_gid"]))
    # Die with the parent (the host when unisolated). A uid change clears the parent-death
    # signal, so it is set here, after the drop. As PID 1 of a namespace (bubblewrap, Docker)
    # the kernel does not deliver it: there the control channel's hang-up is what ends us.
    privileges.die_with_parent()
    if os.getpid() != 1:
        CONFIG["kill_mode"] = "tree"  # kill(-1) is only safe as PID 1 of a namespace
    if CONFIG.get("kill_mode") == "tree":
        _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans of a job come back to us
    _prctl(4, 0)  # PR_SET_DUMPABLE = 0: no ptrace / /proc/<pid>/fd access from jobs
    os.umask(0o077)
    if os.path.isdir(_MQUEUE_DIR):
        CONFIG["mqueue_dir"] = _MQUEUE_DIR
    import site

    try:  # -S skips these; programs expect exit()/quit() to exist
        site.setquit()
        site.setcopyright()
        site.sethelper()
    except Exception:
        pass
    for name in list(_PRELOAD) + list(CONFIG.get("preload", [])):
        try:
            __import__(name)
        except Exception:
            pass
    _make_runner()
    _libc()
    if CONFIG.get("job_filter"):
        _prepare_job_filter(bytes.fromhex(CONFIG["job_filter"]))
    _warm_up()
    _make_std_streams()
    job_dir = os.path.join(CONFIG["work_root"], "job")
    for key in ("HOME", "TMPDIR", "PWD"):
        os.environ[key] = job_dir
    _wipe(CONFIG["work_root"])
    if CONFIG.get("clean_ipc", True):
        _clean_ipc()
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()
    ready = {
        "ready": True,
        "pid": os.getpid(),
        "uid": os.getuid(),
        "python": sys.version.split()[0],
    }
    _send(json.dumps(ready).encode())
    while True:
        try:
            frame = _read_frame(CTRL_IN)
        except ValueError:
            sys.exit(2)
        if frame is None:
            sys.exit(0)
        header = json.loads(frame.decode())
        for buf in (CODE, STDIN):
            head = _read_exact(CTRL_IN, 4)
            if head is None or not buf.read_from(CTRL_IN, _LEN.unpack(head)[0]):
                sys.exit(0)
        try:
            result = _run_job(header)
        except Exception as exc:  # infrastructure failure: report, and ask for a restart
            _kill_everything()
            result = {"error": "sandbox server: %s: %s" % (type(exc).__name__, exc)}
            result["healthy"] = False
            OUT.wipe()
            ERR.wipe()
            RES.wipe()
        if isinstance(result, _ChildJob):
            return result.runner
        _send(json.dumps(result).encode(), OUT.view(), ERR.view(), RES.view())
        for buf in (CODE, STDIN, OUT, ERR, RES, SCRATCH):
            buf.wipe()
        if not result.get("healthy"):
            sys.exit(0)  # never run another job here: the host starts a fresh server
