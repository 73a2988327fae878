"""Hostile programs against both backends.

For each attack: ``run`` returns within the wall limit plus one second with the right flags,
the host is unchanged (files, secrets, processes), nothing is left in the host's process table,
and the next job in the same sandbox works.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import sandboxes

from .conftest import FAST, assert_no_strays

PROJECT = Path(__file__).resolve().parents[2]
SECRET = f"mas-secret-{uuid.uuid4().hex}"


# Attacks that should end by themselves (crash, error, exit) get a roomy wall limit, so that a
# loaded machine cannot turn their expected outcome into a timeout; the ones that must hit the
# wall limit keep the short one of FAST.
ROOMY = sandboxes.Limits(wall_s=6, cpu_s=6, memory_mb=256, max_output_bytes=64 * 1024)
# the network attacks make sockets, which jobs may do only with ipc (the network namespace is
# what they test)
SOCKETS = dataclasses.replace(ROOMY, ipc=True)


@dataclass
class Attack:
    name: str
    code: str
    check: Callable[[sandboxes.ExecResult], None]
    limits: sandboxes.Limits = field(default_factory=lambda: ROOMY)


def _timed_out(r):
    assert r.timed_out and r.exit_code is None and r.error is None, r


def _limit_hit(r):
    """Killed at the wall limit, or stopped by the memory/process limits (MemoryError)."""
    assert r.error is None and not r.ok, r
    assert r.timed_out or r.memory_exceeded, r


def _exited_nonzero(r):
    assert r.exit_code not in (0, None) and not r.timed_out and r.error is None, r


def _exit_zero(r):
    assert r.exit_code == 0 and r.error is None, r


def _says(*lines):
    def check(r):
        assert r.exit_code == 0 and r.error is None, r
        assert r.stdout.splitlines() == list(lines), r

    return check


def _contains(word):
    def check(r):
        assert word in r.stderr, r

    return check


def _both(*checks):
    def check(r):
        for c in checks:
            c(r)

    return check


def _cpu_limit(r):
    """Killed once its CPU time ran out (1 s); only a starved job (a loaded host) may reach
    the wall limit first, and never with more CPU time than allowed."""
    assert r.timed_out and r.signal is not None and r.cpu_time_s <= 2.2, r
    assert r.cpu_exceeded or r.cpu_time_s < 1.0, r


def _crashed(r):
    """Stack overflow: a SIGSEGV, or a clean RecursionError/MemoryError exit."""
    assert r.error is None and not r.timed_out and not r.ok, r
    assert r.signal == 11 or r.exit_code == 1, r


def _truncated(stream):
    def check(r):
        assert r.output_truncated and r.error is None, r
        text = getattr(r, stream)
        assert 0 < len(text.encode()) <= FAST.max_output_bytes + 8  # replacement chars only
        assert set(text) <= {"x", "\n", "\ufffd"}

    return check


def _memory(r):
    assert r.memory_exceeded and not r.ok and r.error is None, r


def _signal(sig):
    def check(r):
        assert r.exit_code is None and r.signal == sig and not r.timed_out, r

    return check


def _binary(r):
    assert r.exit_code == 0 and r.error is None, r
    assert "\ufffd" in r.stdout and "ABC" in r.stdout


def _closed_stdout(r):
    assert r.exit_code not in (0, None) and r.stdout == "" and r.error is None, r


def _quick_exit(r):
    assert r.exit_code == 0 and not r.timed_out and r.duration_s < 5, r  # the daemon sleeps 30 s
    assert r.stdout == "parent done\n"


NET_BLOCKED = """
import socket
def attempt(fn):
    try:
        fn()
        return "open"
    except OSError:
        return "blocked"
"""

ATTACKS = [
    Attack("infinite_loop", "while True:\n    pass\n", _timed_out, FAST),
    Attack("sleep_past_limit", "import time\ntime.sleep(60)\n", _timed_out, FAST),
    Attack(
        "cpu_limit",
        "while True:\n    pass\n",
        _cpu_limit,
        sandboxes.Limits(wall_s=5, cpu_s=1, memory_mb=256),  # CPU time runs out first
    ),
    Attack(
        "fork_bomb",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        _timed_out,
        FAST,
    ),
    Attack(
        "thread_bomb",
        "import threading, time\nts = []\nwhile True:\n    try:\n"
        "        t = threading.Thread(target=time.sleep, args=(60,), daemon=True)\n"
        "        t.start(); ts.append(t)\n    except RuntimeError:\n        pass\n",
        _limit_hit,
        FAST,
    ),
    Attack(
        "memory_bomb",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n",
        _memory,
    ),
    Attack("one_huge_allocation", "x = bytearray(1 << 40)\n", _memory),
    Attack(
        "deep_recursion",
        "def f(n):\n    return f(n + 1) + 1\nf(0)\n",
        _both(_exited_nonzero, _contains("RecursionError")),
    ),
    Attack(
        "c_stack_overflow",
        "import pickle, sys\nsys.setrecursionlimit(10**8)\nx = []\nfor _ in range(2 * 10**5):\n"
        "    x = [x]\npickle.dumps(x)\n",
        _crashed,
        sandboxes.Limits(wall_s=6, memory_mb=256),  # crashes in well under a second when idle
    ),
    Attack("segfault_ctypes", "import ctypes\nctypes.string_at(0)\n", _signal(11)),
    Attack(
        "disk_fill",
        "i = 0\nwhile True:\n    with open(f'fill{i}', 'wb') as f:\n"
        "        f.write(b'x' * (8 << 20))\n    i += 1\n",
        _exited_nonzero,
    ),
    Attack(
        "inode_exhaustion",
        "import os\ni = 0\nwhile True:\n    os.mkdir(f'd{i}')\n    open(f'd{i}/f', 'w').close()\n"
        "    i += 1\n",
        _limit_hit,
        FAST,
    ),
    Attack(
        "huge_file",
        "with open('big', 'wb') as f:\n    f.write(b'x' * (64 << 20))\n",
        _exited_nonzero,
    ),
    Attack(
        "too_many_open_files",
        "fs = []\nwhile True:\n    fs.append(open('/dev/null'))\n",
        _exited_nonzero,
    ),
    Attack(
        "huge_stdout",
        "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
        _both(_truncated("stdout"), _timed_out),
        FAST,
    ),
    Attack(
        "huge_stderr_then_exit",
        "import sys\nfor _ in range(200):\n    sys.stderr.write('x' * 65536)\n",
        _both(_truncated("stderr"), _exit_zero),
    ),
    Attack("one_enormous_line", "print('x' * (32 << 20))\n", _truncated("stdout")),
    Attack(
        "binary_output",
        "import sys\nsys.stdout.buffer.write(bytes(range(256)) * 64 + b'ABC')\n",
        _binary,
    ),
    Attack(
        "close_stdout", "import os\nos.close(1)\nos.close(2)\nprint('x' * 100)\n", _closed_stdout
    ),
    Attack(
        "network_tcp",
        NET_BLOCKED
        + "print(attempt(lambda: socket.create_connection(('1.1.1.1', 80), timeout=1)))\n"
        + "print(attempt(lambda: socket.create_connection(('127.0.0.1', HOSTPORT), timeout=1)))\n",
        _says("blocked", "blocked"),
        SOCKETS,
    ),
    Attack(
        "network_udp",
        NET_BLOCKED
        + "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        + "print(attempt(lambda: s.sendto(b'x', ('8.8.8.8', 53))))\n",
        _says("blocked"),
        SOCKETS,
    ),
    Attack(
        "network_dns",
        NET_BLOCKED + "print(attempt(lambda: socket.getaddrinfo('example.com', 80)))\n",
        _says("blocked"),
        SOCKETS,
    ),
    Attack(
        "read_etc_shadow",
        "try:\n    print(open('/etc/shadow').read()[:10] or 'empty')\nexcept OSError:\n"
        "    print('denied')\n",
        _says("denied"),
    ),
    Attack(
        "read_project_file",
        "try:\n    print(open(PLANTED).read())\nexcept OSError:\n    print('denied')\n",
        _says("denied"),
    ),
    Attack(
        "read_environment_secret",
        "import os, glob\nseen = repr(dict(os.environ))\nfor p in glob.glob('/proc/*/environ'):\n"
        "    try:\n        seen += open(p, errors='replace').read()\n    except OSError:\n"
        "        pass\nprint('leak' if 'SECRET' in seen else 'clean')\n",
        _says("clean"),
    ),
    Attack(
        "write_outside_tmp",
        "import os\nok = []\nfor p in WRITE_TARGETS:\n    try:\n        open(p, 'w').write('x')\n"
        "        ok.append(p)\n    except OSError:\n        pass\nprint(ok)\n",
        _exit_zero,  # test_attack checks that none of the host paths appeared
    ),
    Attack(
        "signal_parent",
        "import os, signal\nfor pid in (os.getppid(), 1, -1):\n    for sig in (signal.SIGTERM,"
        " signal.SIGKILL, signal.SIGSTOP):\n        try:\n            os.kill(pid, sig)\n"
        "        except OSError:\n            pass\nprint('still here')\n",
        _says("still here"),
    ),
    Attack(
        "stop_self",
        "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n",
        _timed_out,
        FAST,
    ),
    Attack(
        "daemon_outlives_job",
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        import signal\n        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "        time.sleep(30)\n        open('/tmp/late', 'w').write('x')\n    os._exit(0)\n"
        "os.wait()\nprint('parent done')\n",
        _quick_exit,
    ),
    Attack(
        "privilege_escalation",
        "import os\ntry:\n    os.setuid(0)\n    print('root')\nexcept OSError:\n"
        "    print('root' if os.geteuid() == 0 else 'denied')\n",
        _says("denied"),
    ),
    Attack(
        "new_namespaces",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nok = []\n"
        "for flag in (0x10000000, 0x20000, 0x40000000):  # user, mount, net\n"
        "    if libc.unshare(flag) == 0:\n        ok.append(hex(flag))\n"
        "print(ok or 'denied')\n",
        _says("denied"),
    ),
    Attack(
        "read_server_memory",
        "try:\n    f = open('/proc/1/mem', 'rb')\n    print('open')\nexcept OSError:\n"
        "    print('denied')\n",
        _says("denied"),
    ),
]


def test_at_least_twenty_attacks():
    assert len({a.name for a in ATTACKS}) == len(ATTACKS) >= 20


@pytest.fixture(scope="module")
def host_listener():
    """A TCP server on the host's loopback that a job must not reach."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    yield srv.getsockname()[1]
    srv.close()


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A secret file in the project directory and one in the host's /tmp."""
    paths = [PROJECT / f".sandbox-test-secret-{uuid.uuid4().hex}", Path("/tmp") / SECRET]
    for p in paths:
        p.write_text(SECRET)
    yield paths
    for p in paths:
        p.unlink(missing_ok=True)


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_attack(backend, attack, host_listener, planted, monkeypatch):
    monkeypatch.setenv("MAS_SANDBOX_TEST_SECRET", SECRET)
    targets = [str(PROJECT / f"escape-{uuid.uuid4().hex}"), f"/tmp/escape-{uuid.uuid4().hex}"]
    targets += ["/usr/escape", "/etc/escape", "/escape", str(Path.home() / "escape")]
    code = (
        attack.code.replace("HOSTPORT", str(host_listener))
        .replace("PLANTED", repr(str(planted[0])))
        .replace("WRITE_TARGETS", repr(targets))
        .replace("'SECRET'", repr(SECRET))
    )
    before = {p: os.path.exists(p) for p in targets}
    start = time.monotonic()
    result = backend.run(code, limits=attack.limits)
    elapsed = time.monotonic() - start

    assert elapsed <= attack.limits.wall_s + 1.0, (elapsed, result)
    attack.check(result)
    assert SECRET not in result.stdout + result.stderr
    assert {p: os.path.exists(p) for p in targets} == before, "the job wrote to the host"
    assert all(p.read_text() == SECRET for p in planted)
    assert_no_strays(backend)
    follow = backend.run("print(sum(map(int, input().split())))", stdin="20 22")
    assert follow.ok and follow.stdout == "42\n", follow


def test_daemon_is_gone_after_the_job(backend):
    """The late write of a daemonised grandchild never happens, and no process survives."""
    code = ATTACKS[[a.name for a in ATTACKS].index("daemon_outlives_job")].code
    code = code.replace("time.sleep(30)", "time.sleep(0.5)").replace("/tmp/late", "late")
    assert backend.run(code).stdout == "parent done\n"
    time.sleep(1.0)
    assert_no_strays(backend)
    r = backend.run("import os\nprint(sorted(os.listdir('.')))")
    assert r.stdout == "['main.py']\n", r


def test_host_keeps_working_after_memory_bomb(backend):
    """A bomb spread over several processes is capped as a whole (cgroup/container limit)."""
    code = (
        "import os\nfor _ in range(8):\n    if os.fork() == 0:\n        break\n"
        "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n"
    )
    r = backend.run(code, limits=sandboxes.Limits(wall_s=2, memory_mb=256))
    assert r.error is None and not r.ok, r
    assert_no_strays(backend)
    assert backend.run("print('ok')").stdout == "ok\n"


SCAN_MEMORY = r"""
import sys
pairs = [line.split() for line in sys.stdin.read().splitlines()]
canary = pairs[0][0] + pairs[0][1]  # made here: the scan must find it (positive control)
found = []
with open("/proc/self/maps") as maps:
    regions = [line.split() for line in maps]
mem = open("/proc/self/mem", "rb", buffering=0)
for fields in regions:
    lo, hi = (int(x, 16) for x in fields[0].split("-"))
    if "r" not in fields[1] or "w" not in fields[1]:
        continue
    pos = lo
    while pos < hi:
        size = min(hi - pos, 1 << 20)
        try:
            mem.seek(pos)
            data = mem.read(size + 64)
        except (OSError, OverflowError, ValueError):
            break
        for k, (first, second) in enumerate(pairs):
            first_b, second_b = first.encode(), second.encode()
            i = data.find(first_b)
            while i != -1:
                if data[i + len(first_b) : i + len(first_b) + len(second_b)] == second_b:
                    found.append(k)
                i = data.find(first_b, i + 1)
        pos += size
print(sorted(set(found)))
"""


@pytest.mark.parametrize("kind", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_no_job_sees_an_earlier_jobs_data(kind):
    """Code, stdin, stdout and stderr of a job never reach a later job's address space.

    The later job (same worker) scans its own writable memory for each secret, which it only
    ever holds in two halves; a canary it joins itself shows that the scan works.
    """
    from .conftest import _docker_or_skip

    sb = sandboxes.LocalSandbox(workers=1) if kind == "local" else _docker_or_skip()
    try:
        secrets = [uuid.uuid4().hex for _ in range(5)]  # canary, code, stdin, stdout, stderr
        out, err = secrets[3], secrets[4]
        first = sb.run(
            f"# {secrets[1]}\nimport sys\nsecret, a, b, c, d = sys.stdin.read().split()\n"
            "print(a + b)\nprint(c + d, file=sys.stderr)\n",
            stdin=" ".join([secrets[2], out[:16], out[16:], err[:16], err[16:]]),
        )
        assert first.stdout == out + "\n" and first.stderr == err + "\n", first
        stdin = "\n".join(f"{s[:16]} {s[16:]}" for s in secrets)
        scan = sb.run(SCAN_MEMORY, stdin=stdin, limits=sandboxes.Limits(wall_s=20))
        assert scan.ok, scan
        assert scan.stdout == "[0]\n", f"earlier jobs' data found in memory: {scan.stdout}"
    finally:
        sb.close()
