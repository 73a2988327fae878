"""Fixtures for the sandbox tests: one sandbox per backend for the module, and process checks.

Docker tests are marked ``docker``; without an engine or the image they are skipped, unless
``MAS_REQUIRE_DOCKER=1`` (CI), where they fail instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import sandboxes

FAST = sandboxes.Limits(wall_s=2, cpu_s=2, memory_mb=256, max_output_bytes=64 * 1024)


def _docker_or_skip(workers: int = 2, limits: sandboxes.Limits = FAST):
    """A DockerSandbox with the default image, or skip/fail with the reason."""
    try:
        return sandboxes.DockerSandbox(workers=workers, limits=limits)
    except sandboxes.SandboxError as exc:
        if os.environ.get("MAS_REQUIRE_DOCKER") == "1":
            pytest.fail(f"MAS_REQUIRE_DOCKER=1 but the Docker sandbox is unavailable: {exc}")
        pytest.skip(f"Docker sandbox unavailable: {exc}")


def one_worker_sandbox(backend: str, limits: sandboxes.Limits):
    """A fresh sandbox of ``backend`` (``"local"`` or ``"docker"``) with one worker, so that
    consecutive jobs share a fork server (Docker: or skip/fail as above)."""
    if backend == "local":
        return sandboxes.LocalSandbox(workers=1, limits=limits)
    return _docker_or_skip(1, limits)


@pytest.fixture(scope="module")
def local_sandbox():
    with sandboxes.LocalSandbox(workers=2, limits=FAST) as sb:
        yield sb


@pytest.fixture(scope="module")
def docker_sandbox():
    sb = _docker_or_skip()
    try:
        yield sb
    finally:
        sb.close()


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request):
    """Parametrises a test over both backends (module-scoped sandboxes)."""
    name = "local_sandbox" if request.param == "local" else "docker_sandbox"
    return request.getfixturevalue(name)


# ----------------------------------------------------------------------------------------------
# the host's process table
# ----------------------------------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, uid) for every process on the host."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
            uid = os.stat(f"/proc/{name}").st_uid
        except (OSError, ValueError):
            continue
        out[int(name)] = (ppid, uid)
    return out


def sandbox_processes(sb) -> tuple[list[int], list[int]]:
    """(servers, strays): the sandbox's fork servers, and every other process of its workers.

    Local: every descendant of a worker's bubblewrap process (of the server when unisolated),
    plus every host process running
    under a worker uid (root mode). Docker: every process in a pool container's pids cgroup.
    Once a job has returned, only the servers (and bwrap itself) may be left.
    """
    if isinstance(sb, sandboxes.LocalSandbox):
        table = _proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        servers: list[int] = []
        strays: list[int] = []
        for top in sb.processes():
            stack = list(children.get(top, []))
            depth1 = set(stack)
            if not sb.isolated:  # no bwrap: the top process is the server itself
                servers.append(top)
                depth1 = set()
            while stack:
                pid = stack.pop()
                (servers if pid in depth1 else strays).append(pid)
                stack.extend(children.get(pid, []))
        uids = set(sb.worker_uids())
        for pid, (_, uid) in table.items():
            if uid in uids and pid not in servers and pid not in strays:
                strays.append(pid)
        return servers, strays
    servers, strays = [], []
    for cid in sb.containers():
        procs = _container_pids(cid)
        info = sb.client.api.inspect_container(cid)
        main = info["State"]["Pid"]
        for pid in procs:
            (servers if pid == main else strays).append(pid)
    return servers, strays


def _container_pids(cid: str) -> list[int]:
    for path in (
        f"/sys/fs/cgroup/pids/docker/{cid}/cgroup.procs",
        f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cgroup.procs",
    ):
        try:
            return [int(x) for x in Path(path).read_text().split()]
        except OSError:
            continue
    raise AssertionError(f"cannot find the cgroup of container {cid[:12]}")


def assert_no_strays(sb) -> None:
    servers, strays = sandbox_processes(sb)
    assert servers, "no fork server found"
    details = []
    for pid in strays:
        try:
            details.append((pid, Path(f"/proc/{pid}/cmdline").read_bytes()[:80]))
        except OSError:
            continue  # exited meanwhile
    assert not details, f"processes left behind: {details}"
