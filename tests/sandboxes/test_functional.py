"""Functional behaviour of both backends: I/O, exit codes, batches, threads, lifecycle, errors."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import sandboxes

from .conftest import FAST, assert_no_strays, sandbox_processes


def test_stdin_and_sum(backend):
    r = backend.run("a, b = map(int, input().split())\nprint(a + b)", stdin="2 40\n")
    assert r.ok and r.stdout == "42\n" and r.stderr == "" and r.exit_code == 0
    assert 0 < r.duration_s < FAST.wall_s


def test_resource_usage_is_reported(backend):
    r = backend.run("x = bytearray(64 << 20)\nsum(range(3 * 10**6))")
    assert r.ok and r.cpu_time_s > 0.01 and r.peak_memory_bytes >= 64 << 20, r


def test_stdin_bytes_and_large(backend):
    data = "\n".join(str(i) for i in range(200_000))
    r = backend.run("import sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin=data)
    assert r.stdout == f"{sum(range(200_000))}\n", r
    r = backend.run("import sys\nprint(sys.stdin.buffer.read().hex())", stdin=b"\x00\xff")
    assert r.stdout == "00ff\n"


def test_input_at_eof_raises_eoferror(backend):
    r = backend.run("input()")
    assert r.exit_code == 1 and "EOFError" in r.stderr


@pytest.mark.parametrize(
    ("code", "status", "err"),
    [
        ("import sys\nsys.exit(3)", 3, ""),
        ("exit()", 0, ""),
        ("quit(5)", 5, ""),
        ("import sys\nsys.exit('bad input')", 1, "bad input\n"),
        ("raise SystemExit(256 + 7)", 7, ""),
        ("import os\nos._exit(9)", 9, ""),
    ],
)
def test_exit_codes(backend, code, status, err):
    r = backend.run(code)
    assert r.exit_code == status and r.stderr == err and not r.timed_out, r
    assert r.ok == (status == 0)


def test_uncaught_exception_traceback_is_the_programs_own(backend):
    r = backend.run("def f():\n    return 1 / 0\nf()\n")
    assert r.exit_code == 1 and not r.ok
    assert 'main.py", line 2, in f' in r.stderr and "ZeroDivisionError" in r.stderr
    assert "mas-sandbox-server" not in r.stderr and "_run_main" not in r.stderr


def test_syntax_error(backend):
    r = backend.run("def (:\n")
    assert r.exit_code == 1 and "SyntaxError" in r.stderr


def test_killed_by_signal(backend):
    r = backend.run("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)")
    assert r.exit_code is None and r.signal == signal.SIGTERM and not r.ok


def test_program_environment(backend):
    code = (
        "import os, sys\nprint(__name__, os.path.basename(sys.argv[0]), os.getcwd() == "
        "os.environ['HOME'])\nopen('f.txt', 'w').write('data')\nprint(sorted(os.listdir('.')))\n"
        "print(os.getuid() != 0)"
    )
    r = backend.run(code)
    assert r.stdout.splitlines() == ["__main__ main.py True", "['f.txt', 'main.py']", "True"], r
    r = backend.run("import os\nprint(sorted(os.listdir('.')))")  # files do not persist
    assert r.stdout == "['main.py']\n"


def test_threads_and_atexit_run_before_exit(backend):
    code = (
        "import atexit, threading, time\natexit.register(lambda: print('atexit'))\n"
        "def work():\n    time.sleep(0.1)\n    print('thread')\n"
        "threading.Thread(target=work).start()\nprint('main')\n"
    )
    r = backend.run(code)
    assert r.stdout == "main\nthread\natexit\n", r


def test_subprocess_inside_the_sandbox(backend):
    code = (
        "import subprocess, sys\n"
        "out = subprocess.run([sys.executable, '-c', 'print(6*7)'], "
        "capture_output=True, text=True)\n"
        "print(out.stdout.strip())\n"
    )
    r = backend.run(code, limits=sandboxes.Limits(wall_s=10, ipc=True))
    assert r.stdout == "42\n", r
    # without ipc the job may make no pipe (subprocess needs one): see test_integrity
    r = backend.run(code, limits=sandboxes.Limits(wall_s=10))
    assert r.exit_code != 0 and "PermissionError" in r.stderr, r


def test_threads_processes_and_multiprocessing_work(backend):
    code = (
        "import multiprocessing as mp, threading\n"
        "t = threading.Thread(target=print, args=('thread',))\nt.start()\nt.join()\n"
        "with mp.Pool(2) as pool:\n    print(pool.map(abs, [-1, -2, -3]))\n"
    )
    r = backend.run(code, limits=sandboxes.Limits(wall_s=10, ipc=True))
    assert r.stdout == "thread\n[1, 2, 3]\n", r


def test_unicode_round_trip(backend):
    text = "héllo wörld ✓ 漢字 🙂"
    r = backend.run("s = input()\nprint(s[::-1])\nprint('λ')", stdin=text)
    assert r.stdout == text[::-1] + "\nλ\n"
    r = backend.run("# coding: utf-8\nprint('ünïcode in source')")
    assert r.stdout == "ünïcode in source\n"


def test_invalid_utf8_is_replaced(backend):
    r = backend.run(
        "import sys\nsys.stdout.buffer.write(b'ok\\xff\\xfe!')\nsys.stderr.buffer.write(b'\\x80')"
    )
    assert r.stdout == "ok\ufffd\ufffd!" and r.stderr == "\ufffd"


def test_output_cap_is_exact_and_partial_output_kept(backend):
    r = backend.run("print('x' * 100)", limits=sandboxes.Limits(max_output_bytes=10))
    assert r.stdout == "x" * 10 and r.output_truncated and r.exit_code == 0 and not r.ok
    r = backend.run(
        "import time\nprint('started', flush=True)\ntime.sleep(10)",
        limits=sandboxes.Limits(wall_s=0.5),
    )
    assert r.timed_out and r.stdout == "started\n"


def test_run_many_keeps_input_order(backend):
    jobs = []
    for i in range(12):
        delay = (12 - i) * 0.01
        code = f"import time, sys\ntime.sleep({delay})\nprint({i}, sys.stdin.read())"
        jobs.append(
            [code, (code, f"in{i}"), sandboxes.Job(code, stdin=f"in{i}", limits=FAST)][i % 3]
        )
    results = backend.run_many(jobs)
    assert [r.stdout for r in results] == [
        f"{i} {'' if i % 3 == 0 else f'in{i}'}\n" for i in range(12)
    ]
    assert backend.run_many([]) == []


def test_run_many_per_job_limits(backend):
    results = backend.run_many(
        [
            sandboxes.Job("import time\ntime.sleep(5)", limits=sandboxes.Limits(wall_s=0.3)),
            "print('fine')",
        ]
    )
    assert results[0].timed_out and results[1].stdout == "fine\n"


def test_thread_safety(backend):
    errors, results = [], {}

    def client(k):
        try:
            for j in range(6):
                r = backend.run(f"print({k} * 100 + {j})")
                results[(k, j)] = r.stdout
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {(k, j): f"{k * 100 + j}\n" for k in range(6) for j in range(6)}


def test_worker_killed_from_outside_is_replaced(backend):
    servers, _ = sandbox_processes(backend)
    for pid in servers:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    results = backend.run_many(["print('back')"] * 4)
    assert all(r.stdout == "back\n" and r.error is None for r in results), results
    assert_no_strays(backend)


def test_run_many_recovers_from_an_unclean_job(backend):
    """A job that leaves too many files gets its worker replaced; the jobs queued behind it
    run on a fresh worker and see none of its files."""
    flood = "import os\nfor i in range(6000):\n    open(f'f{i}', 'w').close()\nprint('flooded')"
    look = "import os\nprint(sorted(os.listdir('.')))"
    jobs = [flood, look, look, flood, look, look, look, look]
    results = backend.run_many(jobs)
    for job, r in zip(jobs, results, strict=True):
        assert r.error is None, r
        assert r.stdout == ("flooded\n" if job == flood else "['main.py']\n"), r
    assert_no_strays(backend)


def test_run_many_survives_workers_killed_mid_batch(backend):
    """Jobs running when their server is killed report an error; the others all complete."""
    jobs = ["import time\ntime.sleep(0.3)\nprint('done')"] * 8

    def killer():
        time.sleep(0.45)
        for pid in sandbox_processes(backend)[0]:
            os.kill(pid, signal.SIGKILL)

    t = threading.Thread(target=killer)
    t.start()
    results = backend.run_many(jobs)
    t.join()
    failed = [r for r in results if r.error is not None]
    assert all(r.stdout == "done\n" and r.ok for r in results if r.error is None), results
    assert len(failed) <= 2 and len(results) - len(failed) >= 6, results
    assert all(r.exit_code is None and not r.ok for r in failed)
    assert all(r.stdout == "done\n" for r in backend.run_many(["print('done')"] * 4))


def test_bad_arguments_raise_clear_errors(backend):
    with pytest.raises(TypeError, match="code must be a str"):
        backend.run(b"print(1)")
    with pytest.raises(TypeError, match="a job is"):
        backend.run_many([42])
    with pytest.raises(TypeError, match="limits"):
        backend.run("print(1)", limits={"wall_s": 1})


# ----------------------------------------------------------------------------------------------
# lifecycle and construction
# ----------------------------------------------------------------------------------------------


def test_limits_validation():
    assert sandboxes.Limits() == sandboxes.Limits(
        wall_s=10, cpu_s=10, memory_mb=512, max_output_bytes=1 << 20, max_procs=64, max_file_mb=16
    )
    for bad in (
        {"wall_s": 0},
        {"wall_s": -1},
        {"wall_s": float("nan")},
        {"cpu_s": True},
        {"memory_mb": 1.5},
        {"memory_mb": 4},
        {"max_output_bytes": -1},
        {"max_procs": 0},
        {"max_file_mb": "16"},
    ):
        with pytest.raises(ValueError, match="Limits"):
            sandboxes.Limits(**bad)
    with pytest.raises(AttributeError):
        sandboxes.Limits().wall_s = 3  # frozen


def test_exec_result_ok():
    assert sandboxes.ExecResult(exit_code=0).ok
    assert not sandboxes.ExecResult(exit_code=0, output_truncated=True).ok
    assert not sandboxes.ExecResult(exit_code=None, error="boom").ok
    assert not sandboxes.ExecResult(exit_code=1).ok


def test_local_context_manager_closes_everything():
    with sandboxes.LocalSandbox(workers=2) as sb:
        assert sb.run("print(1)").stdout == "1\n"
        tops = sb.processes()
        servers, _ = sandbox_processes(sb)
        assert len(tops) == 2 and len(servers) == 2
    assert sb.closed
    time.sleep(0.1)
    for pid in tops + servers:
        assert not os.path.exists(f"/proc/{pid}") or _is_zombie_of_other(pid), pid
    sb.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        sb.run("print(1)")


def _is_zombie_of_other(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("kind", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_caller_environment_never_reaches_jobs(kind, monkeypatch):
    """Even a sandbox created while a secret sits in os.environ gives jobs a clean env."""
    from .conftest import _docker_or_skip

    secret = "mas-env-secret-3f9c1e"
    monkeypatch.setenv("MAS_SANDBOX_ENV_SECRET", secret)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    sb = sandboxes.LocalSandbox(workers=1) if kind == "local" else _docker_or_skip()
    try:
        r = sb.run("import os\nprint(sorted(os.environ))\nprint(repr(dict(os.environ)))")
        assert r.ok and secret not in r.stdout, r
        names = eval(r.stdout.splitlines()[0])
        assert "MAS_SANDBOX_ENV_SECRET" not in names and "AWS_SECRET_ACCESS_KEY" not in names
        assert {"PATH", "HOME", "LANG"} <= set(names)
    finally:
        sb.close()


def test_default_is_shared_and_works():
    a, b = sandboxes.default(), sandboxes.default()
    assert a is b and isinstance(a, sandboxes.LocalSandbox)
    assert a.run("print('shared')").stdout == "shared\n"


def test_missing_bwrap_is_a_clear_error():
    with pytest.raises(sandboxes.BubblewrapNotFound, match="bubblewrap") as info:
        sandboxes.LocalSandbox(bwrap="/nonexistent/bwrap")
    assert "allow_unisolated=True" in str(info.value)
    assert isinstance(info.value, sandboxes.SandboxError)


def test_bwrap_that_cannot_start_reports_its_stderr(tmp_path):
    # what bwrap prints inside a container without CAP_NET_ADMIN, then exits
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: loopback: Failed RTM_NEWADDR: No child processes' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    with pytest.raises(sandboxes.SandboxError, match="failed to start") as info:
        sandboxes.LocalSandbox(bwrap=str(fake), workers=1)
    message = str(info.value)
    assert "Failed RTM_NEWADDR" in message
    assert "CAP_NET_ADMIN" in message and "DockerSandbox" in message


def test_unisolated_opt_in_warns_and_runs(caplog):
    with caplog.at_level(logging.WARNING, logger="sandboxes"):
        sb = sandboxes.LocalSandbox(bwrap="/nonexistent/bwrap", allow_unisolated=True, workers=1)
    try:
        assert any("UNISOLATED" in rec.getMessage() for rec in caplog.records)
        r = sb.run(
            "import time, os\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\nprint(7)"
        )
        assert r.stdout == "7\n" and r.ok
        assert_no_strays(sb)
        # the server shares this process's IPC namespace: it must not clean it up after jobs
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        shm = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE | IPC_CREAT
        try:
            assert sb.run("print(sum([1, 2]))").stdout == "3\n"
            assert str(shm) in Path("/proc/sysvipc/shm").read_text().split()
        finally:
            libc.shmctl(shm, 0, None)  # IPC_RMID
    finally:
        sb.close()


def test_docker_errors_are_clear(monkeypatch):
    pytest.importorskip("docker")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(sandboxes.SandboxError, match="no Docker Engine reachable"):
        sandboxes.DockerSandbox()


@pytest.mark.docker
def test_docker_missing_image_says_how_to_build(docker_sandbox):
    with pytest.raises(sandboxes.SandboxError, match=r"build_sandbox_image\.sh"):
        sandboxes.DockerSandbox(image="mas-sandbox:no-such-tag", client=docker_sandbox.client)


@pytest.mark.docker
def test_docker_default_image_matches_build_script():
    from sandboxes.docker_backend import DEFAULT_IMAGE, IMAGE_ENV

    script = Path(__file__).resolve().parents[2] / "scripts" / "build_sandbox_image.sh"
    text = script.read_text()
    assert f'IMAGE="${{{IMAGE_ENV}:-{DEFAULT_IMAGE}}}"' in text


@pytest.mark.docker
def test_docker_container_is_locked_down(docker_sandbox):
    api = docker_sandbox.client.api
    for cid in docker_sandbox.containers():
        hc = api.inspect_container(cid)["HostConfig"]
        cfg = api.inspect_container(cid)["Config"]
        assert hc["NetworkMode"] == "none" and hc["ReadonlyRootfs"]
        assert hc["CapDrop"] == ["ALL"] and "no-new-privileges" in hc["SecurityOpt"]
        assert hc["Memory"] > 0 and hc["PidsLimit"] > 0 and hc["NanoCpus"] > 0
        assert "/tmp" in hc["Tmpfs"] and cfg["User"] and not cfg["User"].startswith("0")
    r = docker_sandbox.run("import os\nprint(os.getuid() != 0, os.listdir('/tmp'))")
    assert r.stdout == "True ['job']\n", r


@pytest.mark.docker
def test_docker_container_replaced_after_server_dies(docker_sandbox):
    before = set(docker_sandbox.containers())
    docker_sandbox.client.api.kill(next(iter(before)))
    results = docker_sandbox.run_many(["print('again')"] * 4)
    assert all(r.stdout == "again\n" for r in results), results
    assert set(docker_sandbox.containers()) != before


def test_module_doctests():
    import doctest

    from sandboxes import _seccomp, base

    for module in (base, _seccomp):
        failed, attempted = doctest.testmod(module)
        assert attempted > 0 and failed == 0, module.__name__
