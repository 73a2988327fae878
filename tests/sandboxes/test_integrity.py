"""What the reward's integrity needs from the sandbox, on both backends: calls with plain
results on a nonce-tagged channel, no server frames in reach, nothing carried between jobs
through System V IPC or message queues, jobs that die with the host, per-job container limits,
unique worker uids, and a degraded mode that says so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

import sandboxes
from sandboxes.base import UID_BLOCK, allocate_uid, release_uid
from sandboxes.calls import Call

from .conftest import FAST

ROOT = Path(__file__).resolve().parents[2]
SLOW = sandboxes.Limits(wall_s=6, cpu_s=6, memory_mb=256, max_output_bytes=64 * 1024)


# ---------------------------------------------------------------- calls and their channel


def test_calls_return_plain_values_and_exceptions(backend):
    code = (
        "import sys\ndef f(x):\n    print('noise')\n    return {x: (x, [x])}\n"
        "def g():\n    raise KeyError('k')\n"
    )
    job = sandboxes.Job(
        code, calls=(Call.make("f", (2,)), Call.make("g"), Call.make("h"), Call.make("f", ("a",)))
    )
    r = backend.run_many([job])[0]
    assert r.calls_done and r.exit_code == 0 and r.stdout == "noise\nnoise\n"
    f1, g, h, f2 = r.calls
    assert f1.status == "ok" and f1.value == {2: (2, [2])}
    assert (g.status, g.exc_type, g.message) == ("exc", "KeyError", "'k'")
    assert h.exc_type == "NameError" and f2.value == {"a": ("a", ["a"])}


def test_custom_objects_come_back_opaque(backend):
    code = (
        "class Liar(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\n"
        "class Any_:\n    def __eq__(self, o): return True\n"
        "def f():\n    return [Liar(3), Any_(), (i for i in range(2))]\n"
    )
    r = backend.run_many([sandboxes.Job(code, calls=(Call.make("f"),))])[0]
    liar, anything, gen = r.calls[0].value
    assert type(liar) is int and liar == 3 and liar != 4
    assert anything != 1 and anything != anything and anything != None  # noqa: E711
    assert list(gen) == [0, 1] and gen != [0, 1]


@pytest.mark.parametrize(
    "ending",
    [
        "import os\nos._exit(0)",
        "import sys\nsys.exit(0)",
        "raise SystemExit",
        "import atexit, os\natexit.register(lambda: os._exit(0))\nraise ValueError",
    ],
)
def test_a_program_that_exits_leaves_its_results_missing(backend, ending):
    code = "def f():\n    return 1\n" + ending
    r = backend.run_many([sandboxes.Job(code, calls=(Call.make("f"),))])[0]
    assert r.calls == (None,) and not r.calls_done


def test_forged_result_lines_do_not_count(backend):
    """Lines on stdout, lines without the nonce and a second, different line for a call."""
    code = textwrap.dedent(
        """
        import os, sys
        def f():
            print("deadbeef 0 [\\"ok\\",7]")
            os.write(3, b"0123456789abcdef0123456789abcdef 0 [\\"ok\\",7]\\n")
            fr = sys._getframe(1)
            while fr is not None and 'calls' not in fr.f_locals:
                fr = fr.f_back
            nonce = fr.f_locals['calls']['nonce']
            os.write(3, ('%s 0 [\\"ok\\",7]\\n' % nonce).encode())
            return 1
        """
    )
    r = backend.run_many([sandboxes.Job(code, calls=(Call.make("f"),))])[0]
    assert r.calls[0].status == "bad" and r.calls[0].message == "conflicting results"


def test_no_server_frames_or_state_in_reach(backend):
    code = textwrap.dedent(
        """
        import sys, gc
        frames = []
        f = sys._getframe(0)
        while f is not None:
            frames.append(f)
            f = f.f_back
        names = set()
        for fr in frames[1:]:
            names |= set(fr.f_globals) | set(fr.f_locals)
        print(len(frames), sorted(n for n in names if n in (
            'CONFIG', 'CODE', 'main', '_run_job', 'status', 'header', 'g', 'b'
        )))
        """
    )
    r = backend.run(code, limits=FAST)
    assert r.ok and r.stdout == "3 []\n", r


# ---------------------------------------------------------------- nothing carried between jobs

IPC = textwrap.dedent(
    """
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    shm = libc.shmget(0x4d4153, 1 << 20, 0o1666)
    msg = libc.msgget(0x4d4154, 0o1666)
    sem = libc.semget(0x4d4155, 1, 0o1666)
    libc.mq_open.restype = ctypes.c_int
    mq = libc.mq_open(b"/masq", os.O_CREAT | os.O_RDWR, 0o666, None)
    seen = {k: open('/proc/sysvipc/' + k).read().count(chr(10)) - 1 for k in ('shm', 'msg', 'sem')}
    print(shm >= 0, msg >= 0, sem >= 0, mq >= 0, seen)
    """
)


def test_no_ipc_survives_a_job(backend):
    """Local: the seccomp filter refuses System V IPC and message queues. Docker: they can be
    made, and are gone before the next job (one worker, so the same container)."""
    sb = backend
    first = sb.run(IPC, limits=SLOW)
    assert first.ok, first
    second = sb.run(IPC, limits=SLOW)
    made = first.stdout.split("{")[0].split()
    if isinstance(sb, sandboxes.LocalSandbox):
        assert made == ["False"] * 4
    # whatever the first job made, the next one finds nothing of it
    assert second.stdout.endswith("{'shm': 0, 'msg': 0, 'sem': 0}\n") or second.stdout.endswith(
        "{'shm': 1, 'msg': 1, 'sem': 1}\n"
    ), second
    check = (
        "print({k: open('/proc/sysvipc/' + k).read().count(chr(10)) - 1 "
        "for k in ('shm', 'msg', 'sem')})"
    )
    for _ in range(sb.workers):  # every worker is clean after its job
        assert sb.run(check, limits=SLOW).stdout == "{'shm': 0, 'msg': 0, 'sem': 0}\n"


# ---------------------------------------------------------------- jobs die with the host

HOST = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    import sandboxes
    kind = sys.argv[1]
    sb = (sandboxes.LocalSandbox(workers=1) if kind == "local"
          else sandboxes.DockerSandbox(workers=1))
    ids = sb.worker_uids() if kind == "local" else sb.containers()
    print(" ".join(map(str, ids)), flush=True)
    daemon = (
        "import os, time\\n"
        "if os.fork() == 0:\\n    os.setsid()\\n    time.sleep(60)\\n"
        "time.sleep(60)\\n"
    )
    sb.run(daemon, limits=sandboxes.Limits(wall_s=60, cpu_s=60))
    """
)


def _uid_processes(uid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    out.append(int(name))
            except OSError:
                continue
    return out


@pytest.mark.parametrize("kind", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_jobs_die_with_the_host(kind):
    if kind == "local" and os.geteuid() != 0:
        pytest.skip("needs root: the jobs are found by their worker uid")
    if kind == "docker":
        from .conftest import _docker_or_skip

        _docker_or_skip().close()
    host = subprocess.Popen(
        [sys.executable, "-c", HOST.format(root=str(ROOT)), kind],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ident = host.stdout.readline().strip()  # type: ignore[union-attr]
        assert ident, "the host did not start its sandbox"
        time.sleep(1.5)  # the job and its daemon are running now
        if kind == "local":
            assert len(_uid_processes(int(ident))) >= 3  # server, job, daemon
    finally:
        host.send_signal(signal.SIGKILL)
        host.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if kind == "local":
            alive = _uid_processes(int(ident))
        else:
            import docker

            # The low-level listing: ``containers.list`` inspects every container it
            # lists and fails when a parallel test removes one in between.
            client = docker.from_env()
            try:
                alive = [c["Id"] for c in client.api.containers(all=True, filters={"id": ident})]
            finally:
                client.close()
        if not alive:
            break
        time.sleep(0.2)
    assert not alive, f"still running after the host died: {alive}"


# ---------------------------------------------------------------- worker uids, degraded mode


def test_uids_are_unique_among_live_workers():
    got: list[int] = []
    try:
        with pytest.raises(sandboxes.SandboxError, match="live sandbox workers"):
            for _ in range(UID_BLOCK + 1):  # some may be held by live sandboxes already
                got.append(allocate_uid())
        assert len(set(got)) == len(got) > 0
        release_uid(got[-1])
        assert allocate_uid() == got[-1]
    finally:
        for uid in got:
            release_uid(uid)


def test_replaced_workers_never_share_a_uid(local_sandbox):
    if os.geteuid() != 0:
        pytest.skip("uids per worker need root")
    for _ in range(70):  # more than the old 64-slot wrap
        r = local_sandbox.run(
            "import os, signal\nos.kill(1, signal.SIGKILL)\nimport time\ntime.sleep(0.01)",
            limits=FAST,
        )
        assert r.error is None or "replaced" in r.error
        uids = local_sandbox.worker_uids()
        assert len(set(uids)) == len(uids)


def test_degraded_mode_warns_or_is_refused(monkeypatch):
    """Without writable cgroups (forced here) the sandbox warns, once; strict=True refuses."""
    import sandboxes.local as local

    monkeypatch.setattr(local._CgroupV1, "available", classmethod(lambda cls: False))
    monkeypatch.setattr(local, "_warned", set())
    with pytest.raises(sandboxes.SandboxError, match="degraded"):
        sandboxes.LocalSandbox(workers=1, strict=True)
    with pytest.warns(sandboxes.SandboxDegradedWarning, match="no memory backstop"):
        sb = sandboxes.LocalSandbox(workers=1)
    try:
        assert sb.degraded and sb.run("print(1)").stdout == "1\n"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sandboxes.LocalSandbox(workers=1).close()  # said once per process
        sandboxes.LocalSandbox(workers=1, cgroups=False).close()  # chosen: no warning
    finally:
        sb.close()


@pytest.mark.skipif(
    os.geteuid() != 0
    or not Path("/usr/bin/setpriv").exists()
    or not Path("/usr/bin/python3").exists(),
    reason="needs root, setpriv and /usr/bin/python3 to run a non-root host",
)
def test_non_root_mode_warns_and_keeps_the_root_read_only():
    script = textwrap.dedent(
        f"""
        import sys, warnings
        sys.path.insert(0, {str(ROOT)!r})
        warnings.simplefilter("error", RuntimeWarning)
        import sandboxes
        try:
            sandboxes.LocalSandbox(workers=1, python="/usr/bin/python3")
        except sandboxes.SandboxDegradedWarning as w:
            print("warned:", "not running as root" in str(w))
        try:
            sandboxes.LocalSandbox(workers=1, python="/usr/bin/python3", strict=True)
        except sandboxes.SandboxError as e:
            print("strict refused:", "degraded" in str(e))
        warnings.simplefilter("ignore")
        with sandboxes.LocalSandbox(workers=1, python="/usr/bin/python3") as sb:
            r = sb.run("for p in ('/x', '/etc/x', '/dev/x', '/tmp/x'):\\n"
                       "    try:\\n        open(p, 'w').write('1'); print(p, 'written')\\n"
                       "    except OSError as e:\\n        print(p, e.errno)")
            print(r.stdout.strip().replace(chr(10), ';'))
        """
    )
    out = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ["PATH"], "HOME": "/tmp"},
    )
    if "Permission denied" in out.stderr and "warned" not in out.stdout:
        pytest.skip(f"this Python cannot run as an unprivileged user: {out.stderr[-300:]}")
    assert out.stdout.splitlines() == [
        "warned: True",
        "strict refused: True",
        "/x 30;/etc/x 30;/dev/x 30;/tmp/x written",
    ], out.stderr[-2000:]


# ---------------------------------------------------------------- Docker: limits follow the jobs

# three processes of 200 MiB each: every one passes the rlimits of a 256 MiB job, together they
# exceed it, so only the container's own memory limit stops them
_THREE_HOGS = textwrap.dedent(
    """
    import os, time
    kids = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            x = bytearray(200 << 20)
            for i in range(0, len(x), 4096):
                x[i] = 1
            time.sleep(5)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)
    """
)


@pytest.mark.docker
def test_docker_container_limits_follow_the_job():
    from .conftest import _docker_or_skip

    sb = _docker_or_skip()
    sb.close()
    with sandboxes.DockerSandbox(workers=1, limits=sandboxes.Limits(memory_mb=64)) as sb:
        big = sandboxes.Limits(wall_s=20, cpu_s=20, memory_mb=700)
        r = sb.run("x = bytearray(450 << 20)\nprint(len(x) >> 20)", limits=big)
        assert r.ok and r.stdout == "450\n", r
        r = sb.run(_THREE_HOGS, limits=sandboxes.Limits(wall_s=20, cpu_s=20, memory_mb=256))
        assert r.memory_exceeded, r
        assert sb.run("print(1)").stdout == "1\n"


def test_helper_sees_a_read_only_path_under_tmp(tmp_path):
    """A helper's extra read-only path (a virtual environment, say) may lie under /tmp, which
    the helper gets as a fresh tmpfs: the path is bound over it, read-only, not hidden by it."""
    import shutil
    import subprocess
    import sys

    from sandboxes.base import release_uid
    from sandboxes.local import spawn_isolated

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed: the helper would run unisolated")
    assert str(tmp_path).startswith("/tmp/")
    (tmp_path / "marker.txt").write_text("visible")
    code = (
        f"import pathlib; p = pathlib.Path({str(tmp_path)!r}) / 'marker.txt'; "
        "print(p.read_text())\n"
        "try:\n    p.write_text('x')\nexcept OSError:\n    print('read-only')"
    )
    proc, uid = spawn_isolated(
        [os.path.realpath(sys.executable), "-I", "-c", code],
        extra_ro=[str(tmp_path)],
        stdout=subprocess.PIPE,
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if uid is not None:
            release_uid(uid)
    assert out.decode().split() == ["visible", "read-only"]
    assert (tmp_path / "marker.txt").read_text() == "visible"


@pytest.mark.docker
def test_docker_job_never_runs_under_a_larger_limit_it_could_not_lower(monkeypatch):
    """Lowering a container's memory can fail (e.g. while the previous job's memory is still
    being reclaimed under load); the job must then not run in the container left at the earlier
    job's larger limit, where three 200 MiB processes fit although the job's limit is 256 MiB."""
    from .conftest import _docker_or_skip

    sb = _docker_or_skip()
    sb.close()
    with sandboxes.DockerSandbox(workers=1, limits=sandboxes.Limits(memory_mb=64)) as sb:
        big = sandboxes.Limits(wall_s=20, cpu_s=20, memory_mb=700)
        assert sb.run("print(2)", limits=big).stdout == "2\n"
        api = sb.client.api
        real = api._post_json
        refused: list[str] = []

        def post_json(url, *args, **kwargs):
            if url.endswith("/update") and not refused:
                refused.append(url)
                raise RuntimeError("cannot set memory limit below current usage (simulated)")
            return real(url, *args, **kwargs)

        monkeypatch.setattr(api, "_post_json", post_json)
        r = sb.run(_THREE_HOGS, limits=sandboxes.Limits(wall_s=20, cpu_s=20, memory_mb=256))
        assert refused, "the limit update was never attempted"
        assert r.memory_exceeded, r
        assert sb.run("print(1)").stdout == "1\n"
