"""Issue 48, root cause B: a tester's test ran where the golden program's results were, and a
channel through the host's page cache carried them to the coder's next program.

The decisive flaw: a tester's test the host could not evaluate (a helper function, random
inputs) ran whole in a sandbox job, and its second run received the golden program's results
(and the mutants') as objects. From there any channel between jobs reaches the coder: the
issue's used the page cache of the files bound from the host (set a page with ``pread``, clear
it with ``posix_fadvise(DONTNEED)``, read it with ``preadv2(RWF_NOWAIT)``) and earned the coder
a turn reward of 1.0 on a problem whose rule it never saw. Now such a test runs once, with no
program and no result in its job, and what it computed is decided on the host; and a job can
neither probe nor clear the page cache, nor read the host's memory, disk, interrupt, load and
file counters.
"""

from __future__ import annotations

import re

import pytest

import envs
import sandboxes

SECRET_A, SECRET_B = 7919, 104729
GOLDEN = f"def mix(x):\n    return x * {SECRET_A} + {SECRET_B}\n"

# a tester's test the host cannot decide as written (a helper function): before the fix it was
# replayed over the golden program's results, and over each mutant's
TESTER = """```python
def probe(v):
    return v + 5
assert mix(3) == probe(3)
```"""


class RecordingSandbox:
    """A sandbox that keeps every job it runs and every result that comes back."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.jobs: list = []
        self.results: list = []

    def run(self, code, stdin="", limits=None):
        return self.run_many([sandboxes.Job(code, stdin, limits)])[0]

    def run_many(self, jobs):
        jobs = [sandboxes.as_job(j) for j in jobs]
        out = self.inner.run_many(jobs)
        self.jobs += jobs
        self.results += list(out)
        return out

    def close(self) -> None:
        pass


def _numbers(text: str) -> set[int]:
    return {int(m) for m in re.findall(r"-?\d{5,}", text)}


def test_a_testers_test_never_runs_where_a_program_result_is(local_sandbox):
    """Every value the golden program and its mutants returned (numbers of five digits and
    more: 7919 * x + 104729 and its mutants' variants) stays out of every job that holds the
    tester's code. On 0a29a88 the replay job of the tester's test held the golden result
    128486 and the mutants' results."""
    sb = RecordingSandbox(local_sandbox)
    instance = {
        "prompt": "Write mix(x).",
        "style": "function",
        "entry_point": "mix",
        "tests": ["assert mix(1) == 112648", "assert mix(0) == 104729"],
        "solution": GOLDEN,
    }
    env = envs.make("code", sandbox=sb).unwrapped
    env.reset(seed=0, options={"instance": instance})
    env.step("```python\ndef mix(x):\n    return x\n```")  # the coder
    env.step(TESTER)  # the tester
    parts = env.infos["tester"]["reward_parts"]
    returned: set[int] = set()
    for res in sb.results:
        for call in res.calls or ():
            if getattr(call, "status", "") == "ok" and isinstance(call.value, int):
                returned.add(call.value)
    assert 3 * SECRET_A + SECRET_B in returned  # the golden program did run on the test's input
    tester_jobs = [j for j in sb.jobs if "probe" in j.code]
    assert tester_jobs, "the tester's test ran in no job"
    for job in tester_jobs:
        leaked = _numbers(job.code) & {v for v in returned if abs(v) >= 10_000}
        assert not leaked, f"a job holding the tester's code held program results {leaked}"
    # the test is still judged: the golden program fails `mix(3) == 8`, so it is not valid
    assert parts["components"]["valid"] == 0.0, parts


def test_a_testers_test_is_still_judged_on_the_host(local_sandbox):
    """A tester's helper-using test that is right earns validity: its asserts, written out with
    their inputs and expected values, are decided on the host over the golden program's plain
    results (and kill mutants)."""
    instance = {
        "prompt": "Write mix(x).",
        "style": "function",
        "entry_point": "mix",
        "tests": ["assert mix(1) == 112648"],
        "solution": GOLDEN,
    }
    env = envs.make("code", sandbox=local_sandbox).unwrapped
    env.reset(seed=0, options={"instance": instance})
    env.step("```python\ndef mix(x):\n    return x\n```")
    right = (
        "```python\ndef expected(v):\n    return v * 7919 + 104729\n"
        "for v in range(3):\n    assert mix(v) == expected(v)\n```"
    )
    env.step(right)
    comps = env.infos["tester"]["reward_parts"]["components"]
    assert comps["valid"] == 1.0 and comps["cov"] > 0.0, env.infos["tester"]["reward_parts"]


_PROBE = r"""
import ctypes, mmap, os
out = []
fd = os.open(os.__file__, os.O_RDONLY)
def call(name, f):
    try:
        f()
        out.append(name + "=ok")
    except OSError as e:
        out.append("%s=%d" % (name, e.errno))
call("fadvise", lambda: os.posix_fadvise(fd, 0, 4096, os.POSIX_FADV_DONTNEED))
call("nowait", lambda: os.preadv(fd, [bytearray(16)], 0, os.RWF_NOWAIT))
call("pread", lambda: os.preadv(fd, [bytearray(16)], 0, 0))
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
m = mmap.mmap(-1, 8192, flags=mmap.MAP_PRIVATE)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
vec = (ctypes.c_ubyte * 2)()
NR = {"x86_64": (27, 187, 28), "aarch64": (232, 213, 233)}[os.uname().machine]
def sys(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    out.append("%s=%s" % (name, "ok" if r == 0 else ctypes.get_errno()))
sys("mincore", NR[0], addr, 4096, ctypes.addressof(vec))
sys("readahead", NR[1], fd, 0, 4096)
sys("cachestat", 451, fd, 0, 0, 0)
sys("pageout", NR[2], addr, 4096, 21)
sys("dontneed", NR[2], addr, 4096, 4)
for f in ("meminfo", "diskstats", "softirqs", "interrupts", "loadavg", "sys/fs/dentry-state",
          "sys/fs/inode-nr", "sys/fs/file-nr"):
    out.append("%s=%d" % (f, len(open("/proc/" + f).read())))
print(" ".join(out))
"""


def test_a_job_can_neither_probe_nor_clear_the_page_cache(make_one_worker):
    """The channel's primitives are refused (EPERM), a plain read and the process's own
    ``madvise(DONTNEED)`` still work, and the host's counters read empty."""
    r = make_one_worker().run(_PROBE)
    assert r.exit_code == 0, r.stderr
    got = dict(item.split("=") for item in r.stdout.split())
    for name in ("fadvise", "nowait", "mincore", "readahead", "cachestat", "pageout"):
        assert got[name] == "1", (name, got)  # EPERM
    assert got["pread"] == got["dontneed"] == "ok", got
    hidden = [k for k in got if k.startswith(("sys/", "mem", "disk", "soft", "inter", "load"))]
    assert len(hidden) == 8 and all(got[k] == "0" for k in hidden), got


@pytest.mark.parametrize("program", ["if mix(2) > 0:\n    pass", "for c in mix(2):\n    pass"])
def test_a_test_whose_flow_depends_on_a_result_is_invalid(program, local_sandbox):
    """What the tester's code would need a result for (a branch, a loop over it) cannot be
    written out: the test is invalid, and it never saw the result."""
    from verifiers.code_tests import TestCase, run_tests

    rep = run_tests(
        GOLDEN,
        [TestCase.asserts("def h():\n    return 1\n" + program)],
        sandbox=local_sandbox,
        entry_point="mix",
        trusted_tests=False,
    )
    assert rep.results[0].status == "invalid_test", rep.results[0]
    assert "cannot be written as asserts" in rep.results[0].reason
