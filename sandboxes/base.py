"""Shared types of the sandbox backends: limits, results, jobs, and the worker pool.

Every backend runs programs through a small *fork server* (``sandboxes/_server.py``) that
lives inside the isolation boundary: a warm Python interpreter that forks one child per job.
The host side of that design is here: :class:`PooledSandbox` keeps one server per worker slot,
hands jobs to idle servers (so several threads and ``run_many`` use every slot at once),
enforces a host-side deadline in case a server stops answering, and replaces servers that
died or report that a job left them unclean.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import queue
import secrets
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

from . import plain
from .calls import Call, CallResult, parse_results, request

log = logging.getLogger("sandboxes")

_LEN = struct.Struct(">I")
_MAX_HEADER = 1 << 16


class SandboxError(RuntimeError):
    """The sandbox backend cannot be used (missing tool, engine or image, failed start)."""


# ----------------------------------------------------------------------------------------------
# limits, results, jobs
# ----------------------------------------------------------------------------------------------


def _check_number(name: str, value: object, lo: float, hi: float, integer: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"Limits.{name} must be a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ValueError(f"Limits.{name} must be an integer, got {value!r}")
    if not math.isfinite(value) or not lo <= value <= hi:
        raise ValueError(f"Limits.{name} must be in [{lo}, {hi}], got {value!r}")


@dataclass(frozen=True)
class Limits:
    """Resource limits of one execution. There is no network, ever (not a flag).

    Attributes:
        wall_s: wall-clock limit in seconds; the whole process tree is killed when it passes.
        cpu_s: CPU-time limit (RLIMIT_CPU) of each process, in seconds.
        memory_mb: memory limit (address space of each process, plus the container or cgroup
            limit where the backend has one), in MiB.
        max_output_bytes: bytes of stdout and of stderr kept; the rest is discarded.
        max_procs: processes and threads the job may run at once (RLIMIT_NPROC).
        max_file_mb: largest file the job may write (RLIMIT_FSIZE), in MiB.
        max_open_files: open file descriptors per process (RLIMIT_NOFILE).
        ipc: the job may make pipes, sockets, memfds, shared anonymous memory, System V IPC
            objects and pidfds (``subprocess``, ``multiprocessing`` and ``asyncio`` need some
            of them). Off by default: the kernel numbers each of these from a counter shared by
            the whole host, so one job could move it and a later job read it (a covert channel
            between runs that must not be told apart, e.g. a golden program's and its mutants';
            see :mod:`sandboxes._seccomp`). Jobs that do not compare runs (the sandbox
            service's, a compiler's) turn it on.

    >>> Limits(wall_s=2).wall_s
    2
    >>> Limits(memory_mb=-1)
    Traceback (most recent call last):
    ...
    ValueError: Limits.memory_mb must be in [32, 65536], got -1
    """

    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 512
    max_output_bytes: int = 1 << 20
    max_procs: int = 64
    max_file_mb: int = 16
    max_open_files: int = 256
    ipc: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.ipc, bool):
            raise ValueError(f"Limits.ipc must be a bool, got {self.ipc!r}")
        _check_number("wall_s", self.wall_s, 0.01, 24 * 3600, False)
        _check_number("cpu_s", self.cpu_s, 0.01, 24 * 3600, False)
        _check_number("memory_mb", self.memory_mb, 32, 1 << 16, True)
        _check_number("max_output_bytes", self.max_output_bytes, 0, 1 << 30, True)
        _check_number("max_procs", self.max_procs, 1, 1 << 15, True)
        _check_number("max_file_mb", self.max_file_mb, 0, 1 << 20, True)
        _check_number("max_open_files", self.max_open_files, 16, 1 << 20, True)


@dataclass
class ExecResult:
    """What happened to one execution. Limit violations are flags, never exceptions.

    ``exit_code`` is None when the program did not exit by itself (killed by a signal, by the
    wall-clock limit, or an infrastructure ``error``); ``signal`` then names the signal.
    ``cpu_time_s`` and ``peak_memory_bytes`` (max RSS) are those of the main process.
    ``timed_out`` covers both the wall-clock and the CPU-time limit (``cpu_exceeded`` says
    which). ``error`` is set only for infrastructure failures (the sandbox worker died or
    stopped answering); the sandbox recovers by itself and stays usable.

    For a job with ``calls`` (:mod:`sandboxes.calls`), ``calls`` holds one
    :class:`~sandboxes.calls.CallResult` per call, ``None`` where none came back, and
    ``calls_done`` says whether the job got past its last call; for a job with ``results=True``,
    ``results`` is the text the program wrote to file descriptor 3 (at most
    :func:`results_cap` bytes; more sets ``output_truncated``).
    """

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    memory_exceeded: bool = False
    output_truncated: bool = False
    duration_s: float = 0.0
    signal: int | None = None
    cpu_exceeded: bool = False
    error: str | None = None
    cpu_time_s: float = 0.0
    peak_memory_bytes: int = 0
    calls: tuple[CallResult | None, ...] = ()
    calls_done: bool = False
    results: str = ""

    @property
    def ok(self) -> bool:
        """Exit status 0, no limit hit, no infrastructure error."""
        return (
            self.exit_code == 0
            and not self.timed_out
            and not self.memory_exceeded
            and not self.output_truncated
            and self.error is None
        )


RESULTS_CAP = 1 << 20
"""Most bytes of a job's results channel (fd 3) that are kept: the job's ``max_output_bytes``,
at least 64 KiB, at most this (results are decoded on the host; their size bounds the work)."""


def results_cap(limits: Limits) -> int:
    """Bytes of the results channel kept for a job with these limits."""
    return min(RESULTS_CAP, max(1 << 16, limits.max_output_bytes))


@dataclass(frozen=True)
class Job:
    """One program to run: Python source, its stdin, and optional limits.

    ``calls``: functions of the program to call after it ran (see :mod:`sandboxes.calls`);
    ``results``: give the program a results channel on fd 3 (implied by ``calls``).
    """

    code: str
    stdin: str | bytes = ""
    limits: Limits | None = None
    calls: tuple[Call, ...] | None = None
    results: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.code, str):
            raise TypeError(f"Job.code must be a str, got {type(self.code).__name__}")
        if not isinstance(self.stdin, str | bytes):
            raise TypeError(f"Job.stdin must be str or bytes, got {type(self.stdin).__name__}")
        if self.limits is not None and not isinstance(self.limits, Limits):
            raise TypeError(f"Job.limits must be a Limits, got {type(self.limits).__name__}")
        if self.calls is not None and not (
            isinstance(self.calls, tuple) and all(isinstance(c, Call) for c in self.calls)
        ):
            raise TypeError("Job.calls must be a tuple of sandboxes.calls.Call")


JobLike = str | tuple | Job


def as_job(job: JobLike) -> Job:
    """Normalise a job given as a code string, a ``(code, stdin[, limits])`` tuple or a Job."""
    if isinstance(job, Job):
        return job
    if isinstance(job, str):
        return Job(job)
    if isinstance(job, tuple) and 1 <= len(job) <= 3:
        return Job(*job)
    raise TypeError(
        "a job is a code string, a (code, stdin) or (code, stdin, limits) tuple, or a "
        f"sandboxes.Job; got {type(job).__name__}"
    )


@runtime_checkable
class Sandbox(Protocol):
    """What every backend offers."""

    def run(self, code: str, stdin: str = "", limits: Limits | None = None) -> ExecResult: ...

    def run_many(self, jobs: Iterable[JobLike]) -> list[ExecResult]: ...

    def close(self) -> None: ...


# ----------------------------------------------------------------------------------------------
# channels to a fork server
# ----------------------------------------------------------------------------------------------


class ChannelClosed(Exception):
    """The server side went away."""


class ChannelTimeout(Exception):
    """The server did not answer in time."""


def _encode(text: str | bytes) -> bytes:
    if isinstance(text, bytes):
        return text
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


class Channel:
    """A byte stream to a fork server; subclasses implement ``_send`` and ``_recv_some``."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def _send(self, data: bytes) -> None:
        raise NotImplementedError

    def _recv_some(self, timeout: float) -> bytes:
        """Return some bytes (b"" on EOF); raise ChannelTimeout after ``timeout`` seconds."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _readable_fd(self) -> int | None:
        return None

    def looks_dead(self) -> bool:
        """An idle server never writes: readable now means end of stream (or garbage)."""
        fd = self._readable_fd()
        if fd is None:
            return False
        try:
            r, _, _ = select.select([fd], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(r) or bool(self._buf)

    def send(self, *frames: bytes) -> None:
        self.send_raw(b"".join(_LEN.pack(len(f)) + f for f in frames))

    def send_raw(self, data: bytes) -> None:
        try:
            self._send(data)
        except (BrokenPipeError, ConnectionError, OSError, ValueError) as exc:
            raise ChannelClosed(str(exc)) from exc

    def _recv_exact(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout()
            try:
                data = self._recv_some(left)
            except (ConnectionError, OSError, ValueError) as exc:
                raise ChannelClosed(str(exc)) from exc
            if not data:
                raise ChannelClosed("end of stream")
            self._buf += data
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def recv_frame(self, deadline: float, max_len: int) -> bytes:
        (n,) = _LEN.unpack(self._recv_exact(4, deadline))
        if n > max_len:
            raise ChannelClosed(f"protocol error: frame of {n} bytes (max {max_len})")
        return self._recv_exact(n, deadline)


class PipeChannel(Channel):
    """Pipes of a subprocess (the bubblewrap backend)."""

    def __init__(self, wfd: int, rfd: int) -> None:
        super().__init__()
        self.wfd, self.rfd = wfd, rfd

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.wfd, view) :]

    def _readable_fd(self) -> int | None:
        return self.rfd

    def _recv_some(self, timeout: float) -> bytes:
        r, _, _ = select.select([self.rfd], [], [], timeout)
        if not r:
            raise ChannelTimeout()
        return os.read(self.rfd, 1 << 20)


class SocketChannel(Channel):
    """A socket (the Docker backend's attach stream, demultiplexed by the subclass)."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock

    def _send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _readable_fd(self) -> int | None:
        return self.sock.fileno()

    def _recv_some(self, timeout: float) -> bytes:
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            raise ChannelTimeout()
        return self.sock.recv(1 << 20)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


# ----------------------------------------------------------------------------------------------
# workers and the pool
# ----------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _limits_json(limits: Limits) -> str:
    return json.dumps(asdict(limits))


def _request_header(job: Job, limits: Limits, nonce: str) -> bytes:
    if job.calls is None and not job.results:
        return b'{"limits": %s}' % _limits_json(limits).encode()
    head: dict = {"results": True, "results_cap": results_cap(limits)}
    if job.calls is not None:
        head["calls"] = request(job.calls, nonce)
    return b'{"limits": %s, %s' % (_limits_json(limits).encode(), json.dumps(head)[1:].encode())


def _failure(error: str, timed_out: bool = False, duration: float = 0.0) -> ExecResult:
    return ExecResult(exit_code=None, timed_out=timed_out, duration_s=duration, error=error)


SERVER_SOURCE_PATH = Path(__file__).with_name("_server.py")

#: ``python -c`` program that reads the server source (argv[1] bytes) from stdin and runs it;
#: the rest of stdin is then the control channel. Keeps command lines short.
#: The server runs in a namespace of its own; in a forked job child ``main()`` returns the job
#: runner, which is called once the bootstrap dropped its references to the server.
BOOTSTRAP = (
    "import os,sys\n"
    "n=int(sys.argv[1]);b=b''\n"
    "while len(b)<n:\n"
    " c=os.read(0,n-len(b))\n"
    " if not c:raise SystemExit(3)\n"
    " b+=c\n"
    "del sys.argv[1]\n"
    "g={'__name__':'mas_sandbox_server','__builtins__':__builtins__}\n"
    "exec(compile(b,'mas-sandbox-server','exec'),g)\n"
    "j=g['main']()\n"
    "del b,c,g,n\n"
    "os._exit(j())"
)
HELPER_MODULES = {
    "_mas_plain": Path(plain.__file__),
    "_mas_inside": Path(__file__).with_name("inside.py"),
}
"""Modules the fork server installs for jobs (name -> source file)."""


@functools.lru_cache(maxsize=1)
def _helper_modules() -> bytes:
    return json.dumps({k: p.read_text() for k, p in HELPER_MODULES.items()}).encode()


HIDDEN_PROC_FILES = (
    "/proc/stat",
    "/proc/vmstat",
    "/proc/zoneinfo",
    "/proc/meminfo",
    "/proc/diskstats",
    "/proc/softirqs",
    "/proc/interrupts",
    "/proc/loadavg",
    "/proc/sys/fs/dentry-state",
    "/proc/sys/fs/inode-nr",
    "/proc/sys/fs/file-nr",
)
"""Files of ``/proc`` that read empty in a job (both backends put an empty file in their place):
counters of the whole host that one job moves and a later job could read back (``processes``
counts every fork, ``vmstat`` page faults, ``meminfo`` the page cache's size, and disk and
interrupt activity, load, open files and cached inodes)."""


def server_command(python: str, config: dict, site_packages: bool = False) -> list[str]:
    """Interpreter command line that boots the fork server with ``config`` (plus the per-job
    seccomp filter of this machine, :func:`sandboxes._seccomp.build_job_filter`)."""
    from ._seccomp import build_job_filter

    job_filter = build_job_filter()
    if job_filter is not None:
        config = {**config, "job_filter": job_filter.hex()}
    flags = ["-I", "-B"] + ([] if site_packages else ["-S"])
    source = SERVER_SOURCE_PATH.read_bytes()
    return [python, *flags, "-c", BOOTSTRAP, str(len(source)), json.dumps(config)]


class Worker:
    """Host-side handle of one fork server. Subclasses start and stop the server."""

    #: seconds granted on top of a job's wall limit before the host gives up on the server
    #: (a healthy server answers right after the limit; this only catches a wedged one)
    grace_s = 5.0

    def __init__(self, index: int) -> None:
        self.index = index
        self.channel: Channel | None = None
        self.info: dict = {}
        self.jobs_done = 0

    # -- to implement ----------------------------------------------------------------------
    def _start(self) -> Channel:
        """Start the server; return its channel (before the ready message)."""
        raise NotImplementedError

    def _detach(self, graceful: bool) -> Callable[[], None]:
        """Forget the current server (idempotent) and return a function that stops it for
        good, never raising; ``graceful``: the server is idle and may exit by itself."""
        raise NotImplementedError

    def _describe_failure(self) -> str:
        """Diagnostics (e.g. the server's stderr) for an error message."""
        return ""

    def _oom_events(self) -> int | None:
        """A counter of OOM kills of this worker's cgroup/container, when known."""
        return None

    def _before_job(self, limits: list[Limits]) -> None:
        """Backend hook before a request is sent (e.g. set the cgroup limits): ``limits`` are
        those of every job sent and not yet answered, the new one last. ``OSError`` when the
        limits cannot be set: the job is not sent but requeued (and, with nothing in flight,
        the worker replaced)."""

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.channel is not None

    def start(self, timeout: float = 30.0) -> None:
        self.stop(graceful=False)
        try:
            self.channel = self._start()
            self.channel.send_raw(SERVER_SOURCE_PATH.read_bytes())
            self.channel.send(_helper_modules())
            ready = json.loads(self.channel.recv_frame(time.monotonic() + timeout, _MAX_HEADER))
        except (ChannelClosed, ChannelTimeout, ValueError) as exc:
            detail = self._describe_failure()
            self.stop(graceful=False)
            raise SandboxError(
                f"sandbox worker failed to start ({type(exc).__name__}: {exc})"
                + (f"\n{detail}" if detail else "")
            ) from None
        if not ready.get("ready"):
            self.stop(graceful=False)
            raise SandboxError(f"sandbox worker sent an unexpected greeting: {ready!r}")
        self.info = ready

    def stop(self, graceful: bool = True, background: bool = False) -> None:
        """Stop the server; ``graceful``: it is idle, let it exit on end of input first;
        ``background``: finish in another thread (the next job starts a new server at once)."""
        if self.channel is not None:
            self.channel.close()
        self.channel = None
        finish = self._detach(graceful)
        if background:
            threading.Thread(target=finish, name="sandbox-retire", daemon=True).start()
        else:
            finish()

    # -- jobs ------------------------------------------------------------------------------------
    def execute(self, job: Job, limits: Limits) -> ExecResult:
        """Run one job (starting or replacing the server as needed)."""
        results: list[ExecResult | None] = [None]
        todo = iter([0])
        self.run_stream([replace(job, limits=limits)], lambda: next(todo, None), results, limits)
        assert results[0] is not None
        return results[0]

    def run_stream(
        self,
        jobs: Sequence[Job],
        take: Callable[[], int | None],
        results: list[ExecResult | None],
        default_limits: Limits,
        depth: int = 1,
    ) -> None:
        """Run ``jobs[i]`` for every index ``take()`` hands out, into ``results[i]``.

        With ``depth=2`` the next request is already queued in the server's input while the
        current job runs, so the server never waits for the host between jobs (it still runs
        one job at a time). A request that was queued behind a job whose server died or had
        to be replaced never started; it is sent again, to the new server.
        """
        pending: deque[int] = deque()  # taken, to send (first) again
        # sent: (index, limits, sent at, nonce)
        inflight: deque[tuple[int, Limits, float, str]] = deque()
        sends: dict[int, int] = {}
        last_reply = time.monotonic()
        oom_mark: int | None = None
        exhausted = False
        while True:
            while len(inflight) < depth and not exhausted:
                i = pending.popleft() if pending else take()
                if i is None:
                    exhausted = True
                    break
                job = jobs[i]
                limits = job.limits or default_limits
                if not inflight:
                    if self.channel is not None and self.channel.looks_dead():
                        log.info("sandbox worker %d died while idle; restarting it", self.index)
                        self.stop(graceful=False)
                    if not self.alive:
                        try:
                            self.start()
                        except SandboxError as exc:
                            results[i] = _failure(str(exc))
                            continue
                    oom_mark = self._oom_events()
                    last_reply = time.monotonic()
                assert self.channel is not None
                try:
                    self._before_job([lim for _, lim, _, _ in inflight] + [limits])
                    nonce = secrets.token_hex(16)
                    self.channel.send(
                        _request_header(job, limits, nonce), _encode(job.code), _encode(job.stdin)
                    )
                except (ChannelClosed, OSError) as exc:
                    sends[i] = sends.get(i, 0) + 1
                    if sends[i] >= 2:
                        results[i] = _failure(f"sandbox worker unavailable: {exc}")
                    else:
                        pending.appendleft(i)  # never reached the server
                    if not inflight:
                        self.stop(graceful=False)
                    break
                sends[i] = sends.get(i, 0) + 1
                inflight.append((i, limits, time.monotonic(), nonce))
            if not inflight:
                if exhausted and not pending:
                    return
                continue
            i, limits, sent_at, nonce = inflight.popleft()
            result, state, oom_mark = self._receive(limits, oom_mark, max(sent_at, last_reply))
            if jobs[i].calls is not None and result.error is None:
                calls = jobs[i].calls
                assert calls is not None
                result.calls, result.calls_done = parse_results(result.results, nonce, len(calls))
                result.results = ""
            results[i] = result
            last_reply = time.monotonic()
            if state == "ok":
                if inflight:
                    # shrink to the jobs still running; a failure leaves them their limit
                    with contextlib.suppress(OSError):
                        self._before_job([lim for _, lim, _, _ in inflight])
                continue
            # The server is gone or retiring (it exits by itself after an unclean job):
            # whatever was queued behind this job never started.
            for j, _, _, _ in reversed(inflight):
                pending.appendleft(j)
            inflight.clear()
            if state == "unhealthy":
                log.info("sandbox worker %d left unclean by a job; replacing it", self.index)
                self.stop(background=True)
            else:
                self.stop(graceful=False)

    def _receive(
        self, limits: Limits, oom_before: int | None, started: float
    ) -> tuple[ExecResult, str, int | None]:
        """Read one result: (result, state, OOM-kill counter now); state is "ok",
        "unhealthy" (replace the server) or "dead"."""
        assert self.channel is not None
        deadline = started + limits.wall_s + self.grace_s + 0.1 * limits.wall_s
        cap = limits.max_output_bytes
        try:
            head = json.loads(self.channel.recv_frame(deadline, _MAX_HEADER))
            out = self.channel.recv_frame(deadline + 5, cap)
            err = self.channel.recv_frame(deadline + 5, cap)
            res_frame = self.channel.recv_frame(deadline + 5, RESULTS_CAP)
        except (ChannelClosed, ChannelTimeout, ValueError) as exc:
            oom = self._oom_events()
            detail = self._describe_failure()
            timed_out = isinstance(exc, ChannelTimeout)
            what = "stopped answering" if timed_out else f"died ({exc})"
            res = _failure(
                f"sandbox worker {what}; it was replaced" + (f": {detail}" if detail else ""),
                timed_out=timed_out,
                duration=time.monotonic() - started,
            )
            res.memory_exceeded = oom is not None and oom_before is not None and oom > oom_before
            return res, "dead", oom
        self.jobs_done += 1
        state = "ok" if head.get("healthy", False) else "unhealthy"
        oom_after = self._oom_events()
        if "error" in head:
            return (
                _failure(str(head["error"]), duration=time.monotonic() - started),
                state,
                oom_after,
            )
        oom = oom_after is not None and oom_before is not None and oom_after > oom_before
        result = ExecResult(
            exit_code=head.get("exit_code"),
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            timed_out=bool(head.get("timed_out") or head.get("cpu_exceeded")),
            memory_exceeded=bool(head.get("memory_exceeded")) or oom,
            output_truncated=bool(
                head.get("stdout_truncated")
                or head.get("stderr_truncated")
                or head.get("results_truncated")
            ),
            duration_s=float(head.get("duration_s", 0.0)),
            signal=head.get("signal"),
            cpu_exceeded=bool(head.get("cpu_exceeded")),
            cpu_time_s=float(head.get("cpu_s", 0.0)),
            peak_memory_bytes=int(head.get("maxrss_bytes", 0)),
            results=res_frame.decode("utf-8", "replace"),
        )
        return result, state, oom_after


@dataclass
class _PoolState:
    idle: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    closed: bool = False


UID_BASE = 100_000
UID_BLOCK = 256
_uid_lock = threading.Lock()
_uids_in_use: set[int] = set()


def allocate_uid() -> int:
    """A host uid for one sandbox worker, unique among the live workers of every process.

    Each host process owns a block of ``UID_BLOCK`` uids (chosen by its pid, so two live
    processes never share one) and hands each uid to one worker at a time: a uid is reused only
    after :func:`release_uid`, once the worker that had it is gone. So RLIMIT_NPROC and file
    ownership never mix two live workers.
    """
    first = UID_BASE + (os.getpid() % (1 << 22)) * UID_BLOCK
    with _uid_lock:
        for uid in range(first, first + UID_BLOCK):
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid
    raise SandboxError(f"more than {UID_BLOCK} live sandbox workers in this process")


def release_uid(uid: int | None) -> None:
    """Give back a uid of :func:`allocate_uid` (its worker and every job of it are gone)."""
    with _uid_lock:
        _uids_in_use.discard(uid)  # type: ignore[arg-type]


def default_workers() -> int:
    """Worker slots when the caller does not say: one per CPU, at least 2, at most 16."""
    return min(16, max(2, os.cpu_count() or 2))


class PooledSandbox:
    """A pool of fork-server workers; backends subclass it and provide ``_make_worker``.

    Thread-safe: any number of threads may call :meth:`run` / :meth:`run_many` at once; each
    job takes one idle worker. Usable as a context manager; :meth:`close` is idempotent.
    """

    def __init__(self, workers: int, limits: Limits | None = None) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits must be a sandboxes.Limits, got {type(limits).__name__}")
        self.limits = limits or Limits()
        self._n = workers
        self._workers: list[Worker] = []
        self._state = _PoolState()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def _make_worker(self, index: int) -> Worker:
        raise NotImplementedError

    def _start_workers(self) -> None:
        """Create and start every worker (in parallel); raise SandboxError on failure."""
        self._workers = [self._make_worker(i) for i in range(self._n)]
        errors: list[BaseException] = []

        def boot(w: Worker) -> None:
            try:
                w.start()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=boot, args=(w,), daemon=True) for w in self._workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            for w in self._workers:
                w.stop(graceful=False)
            raise errors[0]
        for w in self._workers:
            self._state.idle.put(w)

    # -- public API --------------------------------------------------------------------------
    @property
    def workers(self) -> int:
        return self._n

    def run(self, code: str, stdin: str | bytes = "", limits: Limits | None = None) -> ExecResult:
        """Run one Python program and return its result (never raises for the program)."""
        return self._run_job(Job(code, stdin, limits))

    def run_many(self, jobs: Iterable[JobLike]) -> list[ExecResult]:
        """Run a batch concurrently on all workers; results come back in input order.

        Each worker keeps its next request queued while a job runs (see Worker.run_stream),
        so the servers never wait for this process between jobs.
        """
        batch = [as_job(j) for j in jobs]
        if not batch:
            return []
        if len(batch) == 1:
            return [self._run_job(batch[0])]
        results: list[ExecResult | None] = [None] * len(batch)
        order = iter(range(len(batch)))
        lock = threading.Lock()

        def take() -> int | None:
            with lock:
                return next(order, None)

        def drive() -> None:
            worker = self._state.idle.get()
            try:
                if self._state.closed:
                    raise RuntimeError("this sandbox is closed")
                worker.run_stream(batch, take, results, self.limits, depth=2)
            finally:
                self._state.idle.put(worker)

        executor = self._get_executor()
        for f in [executor.submit(drive) for _ in range(min(self._n, len(batch)))]:
            f.result()
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Stop every worker (idempotent). Jobs running in other threads finish first."""
        with self._lock:
            if self._state.closed:
                return
            self._state.closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        taken = [self._state.idle.get() for _ in self._workers]  # waits for busy workers
        for w in taken:
            w.stop()
        for w in taken:  # wake threads still waiting for a worker: they see the pool closed
            self._state.idle.put(w)

    @property
    def closed(self) -> bool:
        return self._state.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._state.closed:
                for w in self._workers:
                    w.stop(graceful=False)
        except Exception:
            pass

    # -- internals ---------------------------------------------------------------------------
    def _get_executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._state.closed:
                raise RuntimeError("this sandbox is closed")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._n, thread_name_prefix="sandbox-run"
                )
            return self._executor

    def _run_job(self, job: Job) -> ExecResult:
        if self._state.closed:
            raise RuntimeError("this sandbox is closed")
        limits = job.limits or self.limits
        worker = self._state.idle.get()
        try:
            if self._state.closed:
                raise RuntimeError("this sandbox is closed")
            return worker.execute(job, limits)
        finally:
            self._state.idle.put(worker)

    def processes(self) -> Sequence[int]:  # pragma: no cover - overridden
        """Host pids of the live fork servers (for diagnostics and tests)."""
        return ()
