"""Docker backend: a warm pool of locked-down containers, each running a fork server.

Every worker slot is one long-lived container started from the sandbox image (default
``mas-sandbox:latest``, or ``$MAS_SANDBOX_IMAGE``; build it with
``bash scripts/build_sandbox_image.sh`` or ``docker build -t IMAGE sandboxes/``) with:

* the host-wide event counters of ``/proc`` (``stat``, ``vmstat``, ``zoneinfo``) and the
  container's cgroup statistics masked (``MASKED_PATHS``), and the per-job seccomp filter of
  :mod:`sandboxes._seccomp` (no pipes, sockets, memfds, ...) installed by the fork server;
* ``--network none``, a read-only root filesystem, a size-limited tmpfs at ``/tmp`` (the job
  directory lives there; ``exec``, as the local backend's, so compiled programs run from it,
  ``nosuid``) and a small ``/dev/shm``; ``/mnt/data`` leads to the job's ``mnt/data``
  (:func:`sandboxes.local.mnt_dir`, bound read-only at ``/mnt``);
* memory (RAM + swap), pids and CPU limits on the container, ``--cap-drop ALL``,
  ``no-new-privileges``, and a non-root uid of its own (so RLIMIT_NPROC counts only that
  container's processes); a clean environment. The memory and pids limits follow the jobs:
  before a job whose limits differ from the container's current ones, the container is updated
  (memory: the job's limit plus the tmpfs and the server; pids: the job's plus a few), unless
  the caller fixed them (``memory_mb=``, ``pids=``). OOM kills are read from the container's
  own memory cgroup, found through its main process (cgroup v1 ``memory.oom_control`` or v2
  ``memory.events``, whatever the cgroup driver).

Instead of paying a ``docker exec`` per job (tens of milliseconds and several API round trips),
the container's main process is the same fork server as the local backend
(``sandboxes/_server.py``), talking over the container's attached stdin/stdout. It is PID 1 of
the container, so it cannot be signalled by jobs and ``kill(-1)`` removes every process a job
left; the work directory is wiped after each job, and jobs run niced so that inside the
container's CPU share the server always outranks them. A job that breaks its container (kills or
wedges the server, exhausts the container's memory, leaves the tmpfs unclean) gets the container
replaced. The server also removes every System V IPC object and POSIX message queue a job left
(a container's IPC namespace is shared by all its jobs). Containers are started with
``auto_remove`` and ``StdinOnce``: if this process dies, their stdin closes, the server kills the
running job and exits at once, and Docker removes them; containers of a dead owner found when a
DockerSandbox starts (e.g. after a crash of the Docker Engine's client side) are removed then.

The ``docker`` SDK is imported when a :class:`DockerSandbox` is created, not before.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from .base import (
    HIDDEN_PROC_FILES,
    Channel,
    Limits,
    PooledSandbox,
    SandboxError,
    SocketChannel,
    Worker,
    allocate_uid,
    default_workers,
    release_uid,
    server_command,
)
from .local import hosts_file, mnt_dir

log = logging.getLogger("sandboxes")

#: Docker's own masked paths plus the host-wide event counters jobs must not read
#: (:data:`sandboxes.base.HIDDEN_PROC_FILES`) and the container's cgroup statistics, which
#: every job of the container moves (page faults, OOM and pids events)
MASKED_PATHS = [
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
    *HIDDEN_PROC_FILES, "/sys/fs/cgroup",
]  # fmt: skip
DEFAULT_IMAGE = "mas-sandbox:latest"
IMAGE_ENV = "MAS_SANDBOX_IMAGE"
LABEL = "org.mas-rl-envs.sandbox"


def default_image() -> str:
    """The image DockerSandbox uses by default (``$MAS_SANDBOX_IMAGE`` or mas-sandbox:latest)."""
    return os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE


class _AttachChannel(SocketChannel):
    """The attach stream of a container without a TTY: 8-byte headers frame each chunk."""

    def __init__(self, sock, keepalive) -> None:
        super().__init__(sock)
        self._raw = bytearray()
        self._keepalive = keepalive  # the SDK's response object owns the socket
        self.stderr_tail = bytearray()

    def _recv_some(self, timeout: float) -> bytes:
        out = bytearray()
        while not out:
            while len(self._raw) >= 8:
                kind = self._raw[0]
                size = int.from_bytes(self._raw[4:8], "big")
                if len(self._raw) < 8 + size:
                    break
                payload = bytes(self._raw[8 : 8 + size])
                del self._raw[: 8 + size]
                if kind == 2:
                    self.stderr_tail += payload
                    del self.stderr_tail[:-4000]
                else:
                    out += payload
            if out:
                break
            data = super()._recv_some(timeout)
            if not data:
                return b""
            self._raw += data
        return bytes(out)


class _DockerWorker(Worker):
    def __init__(self, index: int, sandbox: DockerSandbox) -> None:
        super().__init__(index)
        self.sb = sandbox
        self.container_id: str | None = None
        self.uid: int | None = None
        self._attach: _AttachChannel | None = None
        self._oom_files: list[str] = []
        self._applied: tuple[int, int] | None = None

    def _start(self) -> Channel:
        sb = self.sb
        self.uid = allocate_uid()
        self._applied = (sb.container_memory_mb, sb.container_pids)
        api = sb.client.api
        config = {
            "preload": list(sb.preload),
            "nproc": True,
            "work_root": "/tmp",
            "wipe": ["/tmp", "/dev/shm"],
            "kill_mode": "pidns",
            "job_nice": 10,  # below the server, within the container's own cpu group
        }
        cmd = server_command(sb.python, config, sb.site_packages)
        host_config = api.create_host_config(
            network_mode="none",
            read_only=True,
            # exec: compiled programs of the service's languages run from the job directory
            # (Docker's tmpfs default is noexec); nosuid and no-new-privileges still hold
            tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={sb.tmpfs_mb}m,mode=1777"},
            shm_size=16 << 20,
            mem_limit=sb.container_memory_mb << 20,
            memswap_limit=sb.container_memory_mb << 20,
            pids_limit=sb.container_pids,
            nano_cpus=int(sb.cpus * 1e9),
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            auto_remove=True,
            init=False,
            # a network-disabled container gets no /etc/hosts: the local backend's (localhost)
            binds={
                hosts_file(): {"bind": "/etc/hosts", "mode": "ro"},
                mnt_dir(): {"bind": "/mnt", "mode": "ro"},  # /mnt/data: the job's mnt/data
            },
        )
        host_config["MaskedPaths"] = MASKED_PATHS
        c = api.create_container(
            sb.image,
            entrypoint=cmd,
            command=[],
            user=f"{self.uid}:{self.uid}",
            working_dir="/tmp",
            environment={
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": "/tmp",
                "TMPDIR": "/tmp",
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "MALLOC_ARENA_MAX": "2",
            },
            stdin_open=True,
            detach=False,  # with stdin_open: StdinOnce, so the server sees EOF when we go away
            network_disabled=True,
            volumes=["/etc/hosts"],
            labels={LABEL: "1", f"{LABEL}.owner-pid": str(os.getpid()), f"{LABEL}.owner": _me()},
            host_config=host_config,
        )
        self.container_id = c["Id"]
        sock = api.attach_socket(self.container_id, params={"stdin": 1, "stdout": 1, "stream": 1})
        raw = getattr(sock, "_sock", sock)
        self._attach = _AttachChannel(raw, sock)
        api.start(self.container_id)
        try:
            pid = int(api.inspect_container(self.container_id)["State"]["Pid"])
            self._oom_files = oom_files(Path(f"/proc/{pid}/cgroup").read_text())
        except (OSError, ValueError, KeyError, TypeError):
            self._oom_files = []
        if not self._oom_files:
            self._oom_files = sb.oom_paths(self.container_id)
        return self._attach

    def _before_job(self, limits: list[Limits]) -> None:
        sb = self.sb
        if self.container_id is None or (sb.fixed_memory and sb.fixed_pids):
            return
        memory = sb.container_memory_mb if sb.fixed_memory else sb.memory_for(limits)
        pids = sb.container_pids if sb.fixed_pids else max(lim.max_procs for lim in limits) + 8
        if self._applied == (memory, pids):
            return
        api = sb.client.api
        data = {"Memory": memory << 20, "MemorySwap": memory << 20, "PidsLimit": pids}
        try:
            api._result(
                api._post_json(api._url("/containers/{0}/update", self.container_id), data=data),
                True,
            )
            self._applied = (memory, pids)
        except Exception as exc:  # e.g. lowering memory below what the container uses now
            # Never run the job under the old limits: a container left at a previous job's
            # larger memory would let this job's processes together use more than its limit.
            # OSError makes the caller requeue the job and, with nothing in flight, replace the
            # container (a fresh one starts at the default limits, which an update only raises).
            log.info("updating sandbox container %s failed: %s", self.container_id[:12], exc)
            raise OSError(f"could not set the sandbox container's limits: {exc}") from exc

    def _detach(self, graceful: bool) -> Callable[[], None]:
        cid, self.container_id = self.container_id, None
        uid, self.uid = self.uid, None
        self._attach = None
        api = self.sb.client.api

        def finish() -> None:
            if cid is not None:
                try:
                    api.remove_container(cid, force=True)
                except Exception as exc:  # already gone (auto_remove) or removal in progress
                    log.debug("removing sandbox container %s: %s", cid[:12], exc)
            release_uid(uid)

        return finish

    def _describe_failure(self) -> str:
        parts = []
        if self._attach is not None and self._attach.stderr_tail:
            parts.append(self._attach.stderr_tail.decode("utf-8", "replace"))
        if self.container_id is not None:
            try:
                logs = self.sb.client.api.logs(self.container_id, stdout=False, stderr=True)
                parts.append(logs[-4000:].decode("utf-8", "replace"))
            except Exception:
                pass
        return "\n".join(p.strip() for p in parts if p.strip())

    def _oom_events(self) -> int | None:
        if self.container_id is None:
            return None
        for path in self._oom_files:
            try:
                for line in Path(path).read_text().splitlines():
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
            except (OSError, ValueError):
                continue
        return None


def oom_files(proc_cgroup: str) -> list[str]:
    r"""The files counting OOM kills of a process's memory cgroup, from its ``/proc/PID/cgroup``
    (v1: the ``memory`` controller's ``memory.oom_control``; v2: ``memory.events``).

    >>> oom_files("4:memory:/docker/abc\n0::/docker/abc\n")
    ['/sys/fs/cgroup/memory/docker/abc/memory.oom_control', '/sys/fs/cgroup/docker/abc/memory.events']
    """  # noqa: E501
    out = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, ctrls, path = parts
        if "memory" in ctrls.split(","):
            out.append(f"/sys/fs/cgroup/memory{path}/memory.oom_control")
        elif ctrls == "":
            out.append(f"/sys/fs/cgroup{path.rstrip('/')}/memory.events")
    return out


def _me() -> str:
    """This process, as ``pid:start-time`` (a pid alone may be reused)."""
    return f"{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2 :].split()[19]
    except (OSError, ValueError, IndexError):
        return "?"


def _owner_alive(owner: str) -> bool:
    pid, _, start = owner.partition(":")
    return pid.isdigit() and _start_time(int(pid)) == start


class DockerSandbox(PooledSandbox):
    """Run Python programs in a warm pool of locked-down Docker containers.

    Args:
        image: sandbox image (default ``$MAS_SANDBOX_IMAGE`` or ``mas-sandbox:latest``).
        workers: containers in the pool (jobs that can run at once); default: one per CPU,
            between 2 and 16.
        limits: default :class:`Limits` of jobs; per-job limits are enforced inside the
            container, the container's own limits are derived from these (see below).
        client: a ``docker.DockerClient``; default ``docker.from_env()``.
        python: interpreter inside the image.
        memory_mb: memory (and memory+swap) limit of each container; default the job memory
            limit plus the tmpfs plus 64 MiB for the server.
        pids: process limit of each container; default ``limits.max_procs + 8``.
        cpus: CPU share of each container.
        tmpfs_mb: size of the container's /tmp.
        preload, site_packages: as for :class:`~sandboxes.LocalSandbox`.
    """

    def __init__(
        self,
        image: str | None = None,
        workers: int | None = None,
        limits: Limits | None = None,
        *,
        client=None,
        python: str = "python3",
        memory_mb: int | None = None,
        pids: int | None = None,
        cpus: float = 1.0,
        tmpfs_mb: int = 128,
        preload: tuple[str, ...] = (),
        site_packages: bool = False,
    ) -> None:
        super().__init__(workers if workers is not None else default_workers(), limits)
        self.image = image or default_image()
        self.python = python
        self.preload = tuple(preload)
        self.site_packages = bool(site_packages)
        self.tmpfs_mb = int(tmpfs_mb)
        self.cpus = float(cpus)
        if not 0 < self.cpus <= 1024:
            raise ValueError(f"cpus must be positive, got {cpus!r}")
        self.fixed_memory, self.fixed_pids = memory_mb is not None, pids is not None
        self.container_memory_mb = int(memory_mb or self.memory_for([self.limits]))
        self.container_pids = int(pids or self.limits.max_procs + 8)
        self.client = client if client is not None else self._connect()
        self._check_image()
        self._remove_orphans()
        self._cgroup_root = self._find_cgroup_root()
        self._start_workers()

    @staticmethod
    def _connect():
        try:
            import docker
        except ImportError as exc:
            raise SandboxError(
                "DockerSandbox needs the docker SDK: pip install 'docker>=7' "
                "(the project's [docker] extra)"
            ) from exc
        try:
            client = docker.from_env(timeout=60)
            client.ping()
        except Exception as exc:
            host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
            raise SandboxError(
                f"no Docker Engine reachable at {host} ({type(exc).__name__}: {exc}). Start "
                "one (e.g. `dockerd &` or `systemctl start docker`) or set DOCKER_HOST."
            ) from None
        return client

    def _check_image(self) -> None:
        import docker.errors

        try:
            self.client.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise SandboxError(
                f"Docker image {self.image!r} not found. Build it with "
                "`bash scripts/build_sandbox_image.sh` (MAS_SANDBOX_IMAGE selects the name), or "
                f"`docker build -t {self.image} sandboxes/` where python:3.11-slim can be pulled."
            ) from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot inspect Docker image {self.image!r}: {exc}") from None

    def memory_for(self, limits: list[Limits]) -> int:
        """Container memory (MiB) for jobs with these limits: theirs, the tmpfs, the server."""
        return max(lim.memory_mb for lim in limits) + self.tmpfs_mb + 64

    def _remove_orphans(self) -> None:
        """Remove sandbox containers whose owning process is gone."""
        with contextlib.suppress(Exception):
            for c in self.client.api.containers(all=True, filters={"label": LABEL}):
                owner = (c.get("Labels") or {}).get(f"{LABEL}.owner")
                if owner and not _owner_alive(owner):
                    with contextlib.suppress(Exception):
                        self.client.api.remove_container(c["Id"], force=True)

    def _find_cgroup_root(self) -> str | None:
        try:
            info = self.client.info()
        except Exception:
            return None
        return "v2" if str(info.get("CgroupVersion", "1")) == "2" else "v1"

    def oom_paths(self, container_id: str) -> list[str]:
        """Host files that count OOM kills in a container's memory cgroup (best effort)."""
        if self._cgroup_root == "v1":
            return [f"/sys/fs/cgroup/memory/docker/{container_id}/memory.oom_control"]
        return [
            f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.events",
            f"/sys/fs/cgroup/docker/{container_id}/memory.events",
        ]

    def _make_worker(self, index: int) -> Worker:
        return _DockerWorker(index, self)

    def containers(self) -> list[str]:
        """Ids of the live containers of the pool."""
        return [
            w.container_id
            for w in self._workers
            if isinstance(w, _DockerWorker) and w.container_id is not None
        ]
