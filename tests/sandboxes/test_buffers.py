"""The fork server's output buffers keep exactly what they say (issue 24, root cause D).

Before the fix, growing a buffer past 64 KiB reset its byte count: a 200,000-byte stdout came
back as its last 3,392 bytes with ``output_truncated`` false, and the lost prefix stayed in the
server's memory, where the next job on the same worker could read it from ``/proc/self/mem``.
"""

from __future__ import annotations

import pytest

import sandboxes
from sandboxes.calls import Call

from .conftest import one_worker_sandbox

LINE = "0123456789abcdef" * 4 + "\n"  # 65 bytes
BIG = 200_000


def _lines(n_bytes: int) -> str:
    return (LINE * (n_bytes // len(LINE) + 1))[:n_bytes]


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def one_worker(request):
    """One worker, so that consecutive jobs share a fork server."""
    lim = sandboxes.Limits(wall_s=5, cpu_s=5, memory_mb=256, max_output_bytes=256 * 1024)
    with one_worker_sandbox(request.param, lim) as sb:
        yield sb


def test_200kb_of_stdout_and_stderr_come_back_whole(one_worker):
    prog = f"import sys\nsys.stdout.write({_lines(BIG)!r})\nsys.stderr.write({_lines(BIG - 1)!r})\n"
    res = one_worker.run(prog)
    assert res.exit_code == 0 and not res.output_truncated
    assert res.stdout == _lines(BIG) and res.stderr == _lines(BIG - 1)


def test_past_the_limit_the_prefix_is_kept_and_flagged(one_worker):
    lim = sandboxes.Limits(wall_s=5, cpu_s=5, memory_mb=256, max_output_bytes=100_000)
    res = one_worker.run(f"print({_lines(BIG)!r}, end='')", limits=lim)
    assert res.output_truncated
    assert res.stdout == _lines(100_000)  # the first 100,000 bytes exactly, not the tail


def test_results_above_64_kib_come_back_whole(one_worker):
    prog = "def f(n):\n    return 'x' * n\n"
    (res,) = one_worker.run_many([sandboxes.Job(prog, calls=(Call.make("f", (150_000,)),))])
    assert res.calls[0] is not None and res.calls[0].status == "ok"
    assert res.calls[0].value == "x" * 150_000 and not res.output_truncated


def test_a_later_job_cannot_read_an_earlier_jobs_output(one_worker):
    """Job 1 prints a marker 200 KB long; job 2, on the same fork server, scans every readable
    page of its own memory for it."""
    marker = "golden42-" + "q7" * 8
    one_worker.run(f"print({marker!r} * 12_000)")
    scan = (
        "needle = b'golden42-' + b'q7' * 8\nfound = 0\n"
        "mem = open('/proc/self/mem', 'rb', 0)\n"
        "for line in open('/proc/self/maps'):\n"
        "    addr, perms = line.split()[:2]\n"
        "    if 'r' not in perms or '[v' in line:\n        continue\n"
        "    lo, hi = (int(x, 16) for x in addr.split('-'))\n"
        "    try:\n        mem.seek(lo)\n        data = mem.read(hi - lo)\n"
        "    except (OSError, ValueError, OverflowError):\n        continue\n"
        "    found += data.count(needle)\n"
        "print(found)\n"
    )
    res = one_worker.run(scan)
    assert res.exit_code == 0, res.stderr
    # the scan finds its own needle (and copies of it in what it read) a few times; an earlier
    # job's output would show up thousands of times (it printed the marker 12,000 times)
    assert int(res.stdout) < 50, res.stdout
