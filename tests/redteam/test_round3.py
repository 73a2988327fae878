"""Issue 24's attacks that are not reward forgeries of one completion: secrets in reasons,
state carried between jobs, output buffers (the forgeries themselves are rows of
:mod:`tests.redteam.attacks`, ``ROUND3``)."""

from __future__ import annotations

import json
import threading
import time

import pytest

import envs

from .attacks import CLIP, py


def test_golden_source_and_values_never_reach_the_testers_reasons(local_sandbox):
    """Root cause A: a failed golden run's reason quoted what the golden program returned, so
    a test returning the program's own source put it in ``reward_parts`` (which ``serve_env``
    sends to clients). Tests that could fetch it are now invalid, and no reason about the
    golden run shows a value it returned."""
    leaks = [
        "assert clip(5, 0, 10) == 5 and "
        "__builtins__.eval(\"open('/tmp/job/main.py').read()\") == 0",
        "assert clip(5, 0, 10) == 7",  # the golden returns 5: that 5 must not be shown
        "assert clip(5, 0, 10) == 7, clip(5, 0, 10)",  # nor through the assert's message
        "assert clip.__globals__ == 0",
    ]
    for test in leaks:
        env = envs.make("code", sandbox=local_sandbox, max_turns=2).unwrapped
        env.reset(options={"instance": CLIP})
        env.step(py(CLIP["solution"]))
        env.step(f"```python\n{test}\n```")
        parts = env.infos["tester"]["reward_parts"]
        text = json.dumps(parts["reasons"])
        assert parts["components"]["valid"] == 0.0, (test, parts)
        assert "return lo" not in text and "returned" not in text, (test, text)


# ---------------------------------------------------------------- B: state between jobs

_OBSERVE = (
    "import os\n"
    "def ino(d):\n"
    "    p = os.path.join(d, 'probe')\n"
    "    open(p, 'w').close()\n"
    "    n = os.stat(p).st_ino\n"
    "    os.unlink(p)\n"
    "    return n\n"
    "print(os.getpid(), ino('/tmp/job'), ino('/dev/shm'))\n"
)


def _mover(k: int) -> str:
    """A job that moves the inode counters of both tmpfs mounts by ``k`` (files made and
    removed again: nothing is left to wipe) and the PID counter by ``k // 100``."""
    return (
        "import os\n"
        f"for d in ('/tmp/job', '/dev/shm'):\n    for i in range({k}):\n"
        "        p = os.path.join(d, 'f%d' % i)\n"
        "        open(p, 'w').close()\n        os.unlink(p)\n"
        f"for i in range({k // 100}):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
        "print('moved')\n"
    )


def test_a_job_cannot_move_the_next_jobs_inode_and_pid_counters(make_one_worker):
    """Root cause B: tmpfs numbers inodes in sequence and a PID namespace counts pids, so a
    job that made k files (5,000 in 0.07 s) or k processes moved what the next job on the same
    worker saw by k: a covert channel from one job (the golden run) to the next (a mutant's).
    Now a job that moves a counter gets a fresh worker after it: what the next job sees is the
    same whatever k was (the view of a first job on a fresh worker)."""
    seen = []
    for k in (0, 300, 5000):
        sb = make_one_worker()
        first = sb.run(_mover(k))
        assert first.stdout == "moved\n", first.stderr
        after = sb.run(_OBSERVE)
        assert after.exit_code == 0, after.stderr
        seen.append(after.stdout)
    quiet, small, big = (_numbers(s) for s in seen)
    fresh = _numbers(make_one_worker().run(_OBSERVE).stdout)
    # After a mover the next job starts from a fresh worker: its inode numbers are those of a
    # first job, whatever k was, and so is its pid (up to the one or two pids a fresh Docker
    # container may use for its own start-up; k moved it by 3 and by 50).
    assert small[1:] == big[1:] == fresh[1:]
    assert abs(small[0] - big[0]) <= 2 and abs(small[0] - fresh[0]) <= 2
    assert quiet[1:] != fresh[1:]  # (a quiet job keeps its worker: every job sees the count)


def _numbers(text: str) -> list[int]:
    return [int(x) for x in text.split()]


# ---------------------------------------------------------------- C: no stalls


@pytest.mark.serial  # wall-clock gaps of this process's threads
def test_a_hostile_step_does_not_stall_the_hosts_other_threads(local_sandbox):
    """Root cause C: host-side evaluation held the GIL for seconds (a three-argument ``pow``,
    a 1.5 GB format width, a 200,000-character program compiled on the host), so through
    ``serve_env`` one request froze every session. While another thread steps through such
    completions, this thread's 10 ms ticks never wait more than 0.5 s."""
    from .test_host_bounds import HOSTILE, _env

    names = ["defs", "asserts", "modpow", "percent_width", "list_scans", "shared_rows"]
    done = threading.Event()

    def steps() -> None:
        try:
            for name in names:
                env = _env("code_function", local_sandbox)
                for _ in range(2):
                    env.step(HOSTILE[name])
        finally:
            done.set()

    worker = threading.Thread(target=steps)
    worst, last = 0.0, time.perf_counter()
    worker.start()
    while not done.is_set():
        time.sleep(0.01)
        now = time.perf_counter()
        worst, last = max(worst, now - last), now
    worker.join()
    assert worst < 0.5, worst
