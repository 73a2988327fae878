"""Local backend: bubblewrap isolation around warm fork servers.

Each worker slot is one ``bwrap`` process whose sandboxed child is the fork server
(``sandboxes/_server.py``) running as PID 1 of its own PID namespace. The sandbox sees:

* no network (``--unshare-net``: only a down loopback), no IPC/UTS sharing, its own /proc,
  whose host-wide event counters (``/proc/stat``, ``vmstat``, ``zoneinfo``:
  :data:`sandboxes.base.HIDDEN_PROC_FILES`) read empty;
* a read-only view of ``/usr`` (and the ``/bin``, ``/lib*`` links), a handful of ``/etc`` files
  the dynamic loader, Python and the JVM (``/etc/java-*``) need, a generated ``/etc/hosts``
  (``localhost`` and the sandbox's host name only), and the interpreter's prefix when it lives
  outside ``/usr`` (its ``site-packages`` hidden unless ``site_packages=True``); nothing else of the
  host, so no project directory, home, ``/etc/shadow`` or credentials;
* a private, size-limited tmpfs at ``/tmp`` (the job's cwd is ``/tmp/job``) and at
  ``/dev/shm``, both wiped after every job; ``/mnt/data`` leads to the job's ``mnt/data``
  (:func:`mnt_dir`); everything else read-only (``/``, ``/etc`` and
  ``/dev`` included, also without root);
* a clean environment (``PATH``, ``HOME``, ``LANG`` and little else);
* when the host runs as root: no capabilities and a uid of its own per worker (so RLIMIT_NPROC
  counts only that worker's processes and root-owned files stay unreadable), plus, where the
  cgroup v1 controllers are writable, cgroups per worker: memory and pids limits that follow
  the job's (a backstop against many processes each using their full address-space limit;
  OOM kills are reported as ``memory_exceeded``) and a cpu group (all processes of a job share
  one task's CPU weight; jobs run niced inside it, so the server acts on time);
* a seccomp filter (``sandboxes/_seccomp.py``): no new namespaces, mounts, ptrace, bpf,
  io_uring, keyrings, kernel modules, System V IPC or POSIX message queues (objects that would
  outlive a job), or foreign-ABI syscalls.

Per job the server forks a child that applies the rlimits (CPU, address space, processes, file
size, open files, no core) and, unless the job's limits say ``ipc``, a second seccomp filter
(``build_job_filter``: no pipes, sockets, memfds, shared anonymous memory or pidfds, whose
numbers come from counters of the whole host), and everything the job started is killed when its
main process exits or the wall clock runs out. See ``_server.py`` for the details of the job life
cycle.

Running without bubblewrap is refused unless ``allow_unisolated=True`` (then the same server
runs as a plain subprocess with rlimits only, and a warning is logged). Without root (jobs run
under the caller's uid, in a user namespace) or without writable cgroups the sandbox still
isolates but warns once per process (``SandboxDegradedWarning``); ``strict=True`` refuses.
Worker uids come from :func:`sandboxes.base.allocate_uid`: a uid is never shared by two live
workers of any process. :func:`spawn_isolated` gives helper processes (the math grader) the same
isolation.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from ._seccomp import build_filter
from .base import (
    HIDDEN_PROC_FILES,
    Channel,
    Limits,
    PipeChannel,
    PooledSandbox,
    SandboxError,
    Worker,
    allocate_uid,
    default_workers,
    release_uid,
    server_command,
)

log = logging.getLogger("sandboxes")

_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/mime.types",
)
HOSTS = "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n"
"""The jobs' ``/etc/hosts``: loopback names only (the job has no other network)."""
_host_files: dict[str, str] = {}


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _host_file(text: str) -> str:
    """A host file holding ``text``, made once per process (removed at exit), for the workers
    to bind read-only."""
    path = _host_files.get(text)
    if path is None or not os.path.exists(path):
        import atexit
        import tempfile

        fd, path = tempfile.mkstemp(prefix="mas-sandbox-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)
        atexit.register(_remove, path)
        _host_files[text] = path
    return path


def hosts_file() -> str:
    """The host file of :data:`HOSTS` that the workers bind at ``/etc/hosts``, so that
    ``localhost`` resolves in a job."""
    return _host_file(HOSTS)


def empty_file() -> str:
    """An empty host file, bound over the ``/proc`` files jobs must not read
    (:data:`sandboxes.base.HIDDEN_PROC_FILES`)."""
    return _host_file("")


_BWRAP_HINT = (
    "\n(bubblewrap could not set up its namespaces. Inside a container this usually means the"
    " container lacks CAP_SYS_ADMIN/CAP_NET_ADMIN or a seccomp/AppArmor profile blocks"
    " unshare(2); run on the host, grant those, or use sandboxes.DockerSandbox.)"
)
_uid_counter = itertools.count()
_spawner_lock = threading.Lock()
_spawner_pool: ThreadPoolExecutor | None = None
_stale_cgroups_checked = False


def _spawner() -> ThreadPoolExecutor:
    """One long-lived thread that starts every sandbox process.

    bubblewrap's ``--die-with-parent`` uses PR_SET_PDEATHSIG, which fires when the *thread*
    that forked it exits; spawning from a thread that never exits keeps workers alive for as
    long as this process lives (and kills them when it dies).
    """
    global _spawner_pool
    with _spawner_lock:
        if _spawner_pool is None:
            _spawner_pool = ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawner")
        return _spawner_pool


def _popen(args: list[str], **kw) -> subprocess.Popen:
    def spawn() -> subprocess.Popen:
        return subprocess.Popen(args, **kw)

    return _spawner().submit(spawn).result()


class SandboxDegradedWarning(RuntimeWarning):
    """The local sandbox runs with weaker isolation than its full mode (see LocalSandbox)."""


_warned: set[str] = set()


def _warn_degraded(what: str) -> None:
    if what in _warned:
        return
    _warned.add(what)
    log.warning("sandboxes: LocalSandbox runs in a DEGRADED mode: %s", what)
    warnings.warn(
        f"LocalSandbox runs in a degraded mode: {what} (LocalSandbox(strict=True) refuses)",
        SandboxDegradedWarning,
        stacklevel=4,
    )


class BubblewrapNotFound(SandboxError):
    """``bwrap`` is not installed (Debian/Ubuntu package ``bubblewrap``)."""


# how to get bubblewrap: the sandbox's error and the command lines' preflight say it the same way
BWRAP_INSTALL = (
    "install the Debian/Ubuntu package `bubblewrap` (`apt-get install bubblewrap`; "
    "Fedora: `dnf install bubblewrap`)"
)


def find_bwrap(bwrap: str = "bwrap") -> str | None:
    """The bubblewrap executable :class:`LocalSandbox` would use (a name looked up on ``PATH``, or
    a path that must be an executable file), or ``None`` when there is none. Starts nothing."""
    if os.sep in bwrap:
        return bwrap if os.path.isfile(bwrap) and os.access(bwrap, os.X_OK) else None
    return shutil.which(bwrap)


# ----------------------------------------------------------------------------------------------
# cgroup v1 backstop (root only, best effort)
# ----------------------------------------------------------------------------------------------


class _CgroupV1:
    """Memory + pids (+ cpu, where writable) cgroups (v1) for one worker, below this process's
    own cgroups. The cpu group makes a worker one scheduling entity: however many processes a
    job starts, together they get one task's share of the host's CPU, and inside it the
    server outranks its (niced) jobs, so it acts on time even against a fork bomb."""

    ROOT = Path("/sys/fs/cgroup")

    PREFIX = "mas-sandbox-"

    def __init__(self, name: str) -> None:
        self.dirs = {}
        for ctrl, base in self.parents().items():
            d = base / name
            d.mkdir()
            self.dirs[ctrl] = d
        self._last: dict[str, str] = {}

    @classmethod
    def parents(cls) -> dict[str, Path]:
        """This process's own memory and pids cgroups: worker cgroups are made below them."""
        own = {}
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            for c in ctrls.split(","):
                own[c] = path
        out = {c: cls.ROOT / c / own.get(c, "/").lstrip("/") for c in ("memory", "pids")}
        cpu = cls.ROOT / "cpu" / own.get("cpu", "/").lstrip("/")
        if (cpu / "cpu.shares").exists() and os.access(cpu, os.W_OK):
            out["cpu"] = cpu
        return out

    @classmethod
    def remove_stale(cls) -> None:
        """Remove empty worker cgroups left by processes that died without closing."""
        for base in cls.parents().values():
            try:
                entries = list(base.glob(cls.PREFIX + "*"))
            except OSError:
                continue
            for d in entries:
                try:
                    owner = int(d.name[len(cls.PREFIX) :].split("-", 1)[0])
                except ValueError:
                    continue
                if owner == os.getpid() or Path(f"/proc/{owner}").exists():
                    continue
                with contextlib.suppress(OSError):
                    d.rmdir()  # fails (EBUSY) unless empty

    @classmethod
    def available(cls) -> bool:
        if os.geteuid() != 0:
            return False
        try:
            parents = cls.parents()
        except (OSError, ValueError):
            return False
        return all(
            (parents[c] / "cgroup.procs").exists() and os.access(parents[c], os.W_OK)
            for c in ("memory", "pids")
        )

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def _write(self, ctrl: str, name: str, value: str) -> None:
        key = f"{ctrl}/{name}"
        if self._last.get(key) == value:
            return
        try:
            (self.dirs[ctrl] / name).write_text(value)
            self._last[key] = value
        except OSError as exc:  # e.g. EBUSY when usage is above the new limit
            log.debug("cgroup write %s=%s failed: %s", key, value, exc)

    def set_limits(self, memory_bytes: int, pids: int) -> None:
        self._write("memory", "memory.limit_in_bytes", str(memory_bytes))
        self._write("pids", "pids.max", str(pids))

    def oom_kills(self) -> int | None:
        try:
            for line in (self.dirs["memory"] / "memory.oom_control").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            return None
        return None

    def remove(self) -> None:
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    threading.Event().wait(0.01)


# ----------------------------------------------------------------------------------------------
# the worker
# ----------------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _terminate(proc: subprocess.Popen, graceful: bool) -> None:
    """Stop a worker process tree without leaving orphans or zombies behind.

    Gracefully: end of input makes the server exit and bwrap follow. Otherwise (or if that
    takes too long) the server (bwrap's child) is killed first, so bwrap reaps it and exits by
    itself; killing bwrap first would orphan the dying server to the host's init.
    """
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    if graceful:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
    if proc.poll() is None:
        for child in _children(proc.pid):
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2.0)
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()  # its sandboxed child dies too (PR_SET_PDEATHSIG)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.error("sandbox worker pid %s did not exit", proc.pid)
    with contextlib.suppress(OSError):
        if proc.stdout is not None:
            proc.stdout.close()


class _LocalWorker(Worker):
    def __init__(self, index: int, sandbox: LocalSandbox) -> None:
        super().__init__(index)
        self.sb = sandbox
        self.proc: subprocess.Popen | None = None
        self.stderr_file: IO[bytes] | None = None
        self.cgroup: _CgroupV1 | None = None
        self.workdir: str | None = None
        self.uid: int | None = None  # a uid of its own per server (root only), see _start

    def _start(self) -> Channel:
        sb = self.sb
        seccomp_fd = None
        self.stderr_file = tempfile.TemporaryFile()  # noqa: SIM115 (closed in _stop)
        self.cgroup = None
        if sb.use_cgroups:
            try:
                name = f"{_CgroupV1.PREFIX}{os.getpid()}-{self.index}-{next(_uid_counter)}"
                self.cgroup = _CgroupV1(name)
                self.cgroup.set_limits(sb.cgroup_memory(sb.limits), sb.limits.max_procs + 4)
            except OSError as exc:
                log.warning("sandbox: cgroup setup failed (%s); continuing with rlimits only", exc)
                self.cgroup = None
        config: dict = {"preload": list(sb.preload), "nproc": True}
        if self.cgroup is not None and "cpu" in self.cgroup.dirs:
            config["job_nice"] = 10  # below the server, within the worker's own cpu group
        if sb.isolated:
            if os.geteuid() == 0:
                self.uid = allocate_uid()
                config.update(drop_uid=self.uid, drop_gid=self.uid)
            config.update(work_root="/tmp", wipe=["/tmp", "/dev/shm"], kill_mode="pidns")
            program = build_filter() if sb.seccomp else None
            # the filter refuses System V IPC and message queues: nothing to remove after jobs
            config["clean_ipc"] = program is None
            if program is not None:
                seccomp_fd = os.memfd_create("mas-sandbox-seccomp")
                os.write(seccomp_fd, program)
                os.lseek(seccomp_fd, 0, os.SEEK_SET)
            args = sb.bwrap_args(seccomp_fd)
        else:
            # Unisolated (explicit opt-in): same uid as the caller, so RLIMIT_NPROC would count
            # the caller's own processes (and is void for root); the cgroup pids limit, where
            # available, is the only process cap.
            self.workdir = tempfile.mkdtemp(prefix="mas-sandbox-")
            config.update(work_root=self.workdir, wipe=[self.workdir], kill_mode="tree")
            config["clean_ipc"] = False  # the host's own IPC namespace: never touch it
            config["nproc"] = False
            args = []
        args += server_command(sb.python, config, sb.site_packages)
        if self.cgroup is not None:
            redirect = " && ".join(f'echo $$ > "{f}"' for f in self.cgroup.procs_files())
            args = ["/bin/sh", "-c", redirect + ' && exec "$@"', "sh", *args]
        try:
            self.proc = _popen(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr_file,
                env=sb.env(),
                cwd=self.workdir or "/",
                close_fds=True,
                pass_fds=() if seccomp_fd is None else (seccomp_fd,),
                start_new_session=True,
            )
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        return PipeChannel(self.proc.stdin.fileno(), self.proc.stdout.fileno())

    def _before_job(self, limits: list[Limits]) -> None:
        if self.cgroup is not None:
            memory = max(self.sb.cgroup_memory(lim) for lim in limits)
            self.cgroup.set_limits(memory, max(lim.max_procs for lim in limits) + 4)

    def _oom_events(self) -> int | None:
        return self.cgroup.oom_kills() if self.cgroup is not None else None

    def _describe_failure(self) -> str:
        # The server may not be reaped yet when its channel closes, so its stderr is read whether
        # or not it has exited; pread leaves the file offset it shares with the server alone.
        f = self.stderr_file
        if f is None:
            return ""
        try:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            start = max(0, size - 4000)
            text = os.pread(fd, size - start, start).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        if text.startswith("bwrap:"):
            text += _BWRAP_HINT
        return text

    def _detach(self, graceful: bool) -> Callable[[], None]:
        # the next server gets a fresh uid; this one is given back once its server is gone
        old_uid, self.uid = self.uid, None
        proc, self.proc = self.proc, None
        err, self.stderr_file = self.stderr_file, None
        cgroup, self.cgroup = self.cgroup, None
        workdir, self.workdir = self.workdir, None

        def finish() -> None:
            if proc is not None:
                _terminate(proc, graceful)
            if err is not None:
                err.close()
            if cgroup is not None:
                cgroup.remove()
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            release_uid(old_uid)

        return finish

    def host_pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


# ----------------------------------------------------------------------------------------------
# the bubblewrap command line
# ----------------------------------------------------------------------------------------------


JOB_DATA = "/tmp/job/mnt/data"
"""Where a job's ``/mnt/data`` leads: ``mnt/data`` in the job's own directory (wiped after every
job), so that programs written for SandboxFusion's data directory keep working."""
_mnt_path: str | None = None


def mnt_dir() -> str:
    """A host directory holding one symbolic link, ``data`` -> :data:`JOB_DATA`, made once per
    process (removed at exit), that the workers bind read-only at ``/mnt``: a job's
    ``/mnt/data`` is its own directory's ``mnt/data``, never anything of the host's."""
    global _mnt_path
    if _mnt_path is None or not os.path.isdir(_mnt_path):
        import atexit
        import tempfile

        path = tempfile.mkdtemp(prefix="mas-sandbox-mnt-")
        os.symlink(JOB_DATA, os.path.join(path, "data"))
        os.chmod(path, 0o755)
        atexit.register(shutil.rmtree, path, True)
        _mnt_path = path
    return _mnt_path


def bwrap_command(
    bwrap: str,
    python: str,
    python_prefix: str,
    *,
    env: dict[str, str],
    site_packages: bool = False,
    extra_ro: Sequence[str] = (),
    tmp_size_mb: int = 256,
    seccomp_fd: int | None = None,
    as_pid_1: bool = True,
) -> list[str]:
    """The bubblewrap command line (without the command) of the isolation described in the
    module docstring; ``extra_ro``: more host paths made visible, read-only, at the same place.
    As root the command keeps CAP_SETUID/SETGID/SETPCAP only, to drop to its own uid.
    ``as_pid_1``: the command is PID 1 of its namespace (the fork server, which kills with
    ``kill(-1)``); otherwise bubblewrap's own init is, and takes the command with it when this
    process dies (a PID 1 ignores its parent-death signal)."""
    a = [
        bwrap,
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        *(["--as-pid-1"] if as_pid_1 else []),
        "--hostname",
        "sandbox",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = "/" + name
        if os.path.islink(p):
            a += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            a += ["--ro-bind", p, p]
    a += ["--perms", "0755", "--dir", "/etc"]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    java = sorted(str(p) for p in Path("/etc").glob("java-*"))
    for f in (*_ETC_FILES, "/etc/python3", f"/etc/python{version}", *java):
        if os.path.exists(f):
            a += ["--ro-bind", f, f]
    a += ["--ro-bind", hosts_file(), "/etc/hosts", "--ro-bind", mnt_dir(), "/mnt"]
    prefix = python_prefix
    made: set[str] = set()

    def bind(path: str) -> list[str]:
        # parents that bwrap creates itself would be 0700 root: unusable after the uid drop
        out = []
        for parent in reversed(Path(path).parents[:-1]):
            if str(parent) not in made:
                made.add(str(parent))
                out += ["--perms", "0755", "--dir", str(parent)]
        return [*out, "--ro-bind", path, path]

    if not (prefix == "/usr" or prefix.startswith("/usr/")):
        a += bind(prefix)
        if not site_packages:
            for sp in Path(prefix).glob("lib/python3*/site-packages"):
                a += ["--tmpfs", str(sp)]
    exe_dir = os.path.dirname(python)
    if not (exe_dir.startswith(("/usr/", prefix + "/")) or exe_dir in ("/bin", "/sbin")):
        a += ["--ro-bind", python, python]
    a += ["--proc", "/proc", "--dev", "/dev"]
    for path in HIDDEN_PROC_FILES:
        a += ["--ro-bind", empty_file(), path]
    a += ["--size", str(16 << 20), "--perms", "1777", "--tmpfs", "/dev/shm"]
    a += ["--size", str(tmp_size_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
    made.update(("/dev", "/dev/shm", "/tmp"))  # mounted above: their modes stay
    for path in extra_ro:  # after the tmpfs mounts, so that a path under /tmp stays visible
        a += bind(path)
    # Nothing but /tmp and /dev/shm stays writable (without root the root directory is a
    # tmpfs of the sandbox user's; it is never wiped and has no size limit).
    a += ["--remount-ro", "/", "--remount-ro", "/dev"]
    a += ["--chdir", "/tmp", "--clearenv"]
    for k, v in env.items():
        a += ["--setenv", k, v]
    if seccomp_fd is not None:
        a += ["--seccomp", str(seccomp_fd)]
    if os.geteuid() == 0:
        a += ["--cap-drop", "ALL"]
        a += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    else:
        a += ["--unshare-user"]
    return a


def spawn_isolated(
    argv: list[str],
    *,
    extra_ro: Sequence[str] = (),
    env: dict[str, str] | None = None,
    site_packages: bool = True,
    **popen: object,
) -> tuple[subprocess.Popen, int | None]:
    """Start a helper process (e.g. a grader) under the same isolation as the sandbox's
    servers, from the long-lived spawner thread (so ``--die-with-parent`` ties it to this
    process). ``argv[0]`` is the interpreter (its installation is visible, site-packages
    included unless ``site_packages=False``); the process gets ``extra_ro`` read-only (a virtual
    environment's directory, say), ``env`` and nothing else of this process. As root it also gets a
    uid of its own (returned: give it back with :func:`sandboxes.base.release_uid` once the process
    is gone), which it must switch to itself (see :mod:`sandboxes.inside`); it finds it in
    ``$MAS_DROP_UID``. Without bubblewrap the helper runs unisolated, with a warning."""
    env = dict(env or {})
    uid = allocate_uid() if os.geteuid() == 0 else None
    if uid is not None:
        env["MAS_DROP_UID"] = str(uid)
    bwrap = find_bwrap()
    seccomp_fd = None
    if bwrap is None:
        log.warning(
            "sandboxes: bubblewrap not found; %s runs UNISOLATED", os.path.basename(argv[-1])
        )
        args = list(argv)
        popen_env = env
    else:
        program = build_filter()
        if program is not None:
            seccomp_fd = os.memfd_create("mas-helper-seccomp")
            os.write(seccomp_fd, program)
            os.lseek(seccomp_fd, 0, os.SEEK_SET)
        exe = argv[0]
        prefix = os.path.realpath(sys.base_prefix)
        args = bwrap_command(
            bwrap,
            os.path.realpath(exe),
            prefix,
            env=env,
            site_packages=site_packages,
            extra_ro=extra_ro,
            seccomp_fd=seccomp_fd,
            tmp_size_mb=64,
            as_pid_1=False,
        ) + list(argv)
        popen_env = {"PATH": "/usr/bin:/bin"}
    try:
        proc = _popen(
            args,
            env=popen_env,
            close_fds=True,
            pass_fds=() if seccomp_fd is None else (seccomp_fd,),
            start_new_session=True,
            **popen,
        )
    except BaseException:
        release_uid(uid)
        raise
    finally:
        if seccomp_fd is not None:
            os.close(seccomp_fd)
    return proc, uid


# ----------------------------------------------------------------------------------------------
# the sandbox
# ----------------------------------------------------------------------------------------------


class LocalSandbox(PooledSandbox):
    """Run Python programs under bubblewrap, through warm fork servers.

    Args:
        workers: number of fork servers (jobs that can run at once); default: one per CPU,
            between 2 and 16.
        limits: default :class:`Limits` for jobs that do not pass their own.
        bwrap: the bubblewrap executable (name on PATH or a path).
        python: interpreter to run inside the sandbox; default: this interpreter's base
            installation (a virtual environment's packages are not visible).
        site_packages: make the interpreter's site-packages importable (default False:
            standard library only).
        tmp_size_mb: size of the private /tmp tmpfs of each worker.
        preload: extra modules each server imports before forking (e.g. ``("numpy",)``).
        cgroups: ``"auto"`` (use cgroup v1 memory/pids limits when running as root and they
            are writable), True (require them) or False.
        seccomp: install the syscall filter of :mod:`sandboxes._seccomp` (no new
            namespaces, mounts, ptrace, bpf, io_uring, keyrings, ...).
        allow_unisolated: when bubblewrap is missing, run code *without isolation* (rlimits
            and process-tree cleanup only) instead of raising; logs a warning.
        strict: refuse (``SandboxError``) to run in a degraded mode instead of warning. The
            full mode needs root (a uid of its own per worker, so RLIMIT_NPROC counts one
            worker's processes and jobs of different workers cannot touch each other's files)
            and writable cgroup v1 memory/pids controllers (a memory backstop: without it a
            job may use ``max_procs`` times ``memory_mb``). Without them the sandbox still
            isolates, and says what is missing with a :class:`SandboxDegradedWarning` (once per
            process) unless the caller chose it (``cgroups=False``, ``allow_unisolated=True``).
    """

    def __init__(
        self,
        workers: int | None = None,
        limits: Limits | None = None,
        *,
        bwrap: str = "bwrap",
        python: str | None = None,
        site_packages: bool = False,
        tmp_size_mb: int = 256,
        preload: Sequence[str] = (),
        cgroups: bool | str = "auto",
        seccomp: bool = True,
        allow_unisolated: bool = False,
        strict: bool = False,
    ) -> None:
        super().__init__(workers if workers is not None else default_workers(), limits)
        if not isinstance(tmp_size_mb, int) or isinstance(tmp_size_mb, bool) or tmp_size_mb < 1:
            raise ValueError(f"tmp_size_mb must be a positive int, got {tmp_size_mb!r}")
        if cgroups not in ("auto", True, False):
            raise ValueError(f"cgroups must be 'auto', True or False, got {cgroups!r}")
        self.tmp_size_mb = tmp_size_mb
        self.seccomp = bool(seccomp)
        self.preload = tuple(preload)
        self.site_packages = bool(site_packages)
        self.bwrap = find_bwrap(bwrap)
        self.isolated = self.bwrap is not None
        if not self.isolated:
            if not allow_unisolated:
                raise BubblewrapNotFound(
                    f"bubblewrap executable {bwrap!r} not found. The local sandbox needs it to "
                    f"isolate code: {BWRAP_INSTALL}, or pass "
                    "LocalSandbox(allow_unisolated=True) to run code WITHOUT isolation "
                    "(rlimits only; never for untrusted code)."
                )
            log.warning(
                "sandboxes: bubblewrap (%r) not found; running code UNISOLATED "
                "(allow_unisolated=True): rlimits and process cleanup only, no filesystem or "
                "network isolation",
                bwrap,
            )
        self.python, self.python_prefix = self._find_python(python)
        global _stale_cgroups_checked
        if cgroups == "auto":
            self.use_cgroups = _CgroupV1.available()
        elif cgroups:
            if not _CgroupV1.available():
                raise SandboxError("cgroups=True, but cgroup v1 memory/pids are not writable")
            self.use_cgroups = True
        else:
            self.use_cgroups = False
        if self.use_cgroups and not _stale_cgroups_checked:
            _stale_cgroups_checked = True
            _CgroupV1.remove_stale()
        self.degraded = self._degraded(cgroups)
        if self.degraded:
            what = "; ".join(self.degraded)
            if strict:
                raise SandboxError(f"LocalSandbox(strict=True) refuses a degraded mode: {what}")
            _warn_degraded(what)
        self._start_workers()

    def _degraded(self, cgroups: bool | str) -> list[str]:
        """What this sandbox lacks of the full isolation (empty in the full mode)."""
        out = []
        if self.isolated and os.geteuid() != 0:
            out.append(
                "not running as root: every worker runs jobs under your own uid (in a user "
                "namespace), so RLIMIT_NPROC counts all your processes and there is no uid "
                "per worker"
            )
        if self.isolated and not self.use_cgroups and cgroups == "auto":
            out.append(
                "no writable cgroup v1 memory/pids controllers: no memory backstop (a job may "
                "use max_procs x memory_mb of memory) and no CPU group per worker"
            )
        return out

    # -- configuration ---------------------------------------------------------------------------
    def _find_python(self, python: str | None) -> tuple[str, str]:
        if python is None:
            exe = getattr(sys, "_base_executable", None) or sys.executable
            return os.path.realpath(exe), os.path.realpath(sys.base_prefix)
        found = python if os.sep in python else shutil.which(python)
        if not found:
            raise SandboxError(f"python interpreter {python!r} not found")
        try:
            prefix = subprocess.run(
                [found, "-I", "-S", "-c", "import sys; print(sys.base_prefix)"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxError(f"cannot run python interpreter {found!r}: {exc}") from exc
        return os.path.realpath(found), os.path.realpath(prefix)

    def env(self) -> dict[str, str]:
        """The complete environment of sandboxed programs (nothing of the caller's)."""
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "USER": "sandbox",
            "LOGNAME": "sandbox",
            "MALLOC_ARENA_MAX": "2",
        }

    def cgroup_memory(self, limits: Limits) -> int:
        """Memory limit of a worker's cgroup: the job's limit plus its tmpfs and the server."""
        return (limits.memory_mb + self.tmp_size_mb + 64 + 64) << 20

    def bwrap_args(self, seccomp_fd: int | None = None) -> list[str]:
        """The bubblewrap command line (without the interpreter)."""
        assert self.bwrap is not None
        return bwrap_command(
            self.bwrap,
            self.python,
            self.python_prefix,
            env=self.env(),
            site_packages=self.site_packages,
            tmp_size_mb=self.tmp_size_mb,
            seccomp_fd=seccomp_fd,
        )

    def _make_worker(self, index: int) -> Worker:
        return _LocalWorker(index, self)

    def processes(self) -> list[int]:
        """Host pids of the live workers' top processes (bwrap, or the server if unisolated)."""
        pids = []
        for w in self._workers:
            assert isinstance(w, _LocalWorker)
            pid = w.host_pid()
            if pid is not None:
                pids.append(pid)
        return pids

    def worker_uids(self) -> list[int]:
        """Host uids the workers run jobs under (root only; empty otherwise)."""
        return [w.uid for w in self._workers if isinstance(w, _LocalWorker) and w.uid is not None]
