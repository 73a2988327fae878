"""Issue 36's attacks that are not reward forgeries of one completion: kernel counters shared by
every job of the host (root cause D) and pickle payloads planted in a run directory (root cause
E). The forgeries themselves are rows of :mod:`tests.redteam.attacks` (``ROUND4``)."""

from __future__ import annotations

import pytest

import sandboxes

from .attacks import checkpointed_run as checkpointed_run_in
from .attacks import plant_payload

K = 37_000  # pipes made by the job of the measurement

_MOVER = f"""
import mmap, os, socket

def count(make, k):
    n = 0
    for _ in range(k):
        try:
            make()
        except OSError:
            break
        n += 1
    return n

def pipe():
    r, w = os.pipe()
    os.close(r)
    os.close(w)

def sock():
    a, b = socket.socketpair()
    a.close()
    b.close()

def memfd():
    os.close(os.memfd_create("m"))

def shared():
    mmap.mmap(-1, 4096).close()

def pidfd():
    os.close(os.pidfd_open(os.getpid()))

print(count(pipe, {K}), count(sock, {K // 8}), count(memfd, {K // 8}), count(shared, {K // 8}),
      count(pidfd, {K // 8}))
"""

# what a later job can read of those counters: its own stdout pipe's inode number (the server
# makes that pipe just before the job), the host's fork count and its cgroup's statistics
_OBSERVE = """
import os
text = open("/proc/stat").read() + open("/proc/vmstat").read()
cgroup = os.path.isdir("/sys/fs/cgroup") and os.listdir("/sys/fs/cgroup")
print(os.fstat(1).st_ino, len(text), len(cgroup or []))
"""


def _observe(sb) -> list[int]:
    r = sb.run(_OBSERVE)
    assert r.exit_code == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


def test_a_job_cannot_move_a_host_wide_counter_the_next_job_reads(make_one_worker):
    """Root cause D: pipe and socket inode numbers come from one host-wide counter (memfds and
    shared memory from another, pidfds from the host's process count): a job that made 37,000
    pipes moved the number the next job read from its own stdout's inode by 37,000, across
    workers and sandbox instances, so a tester's replayed helper could tell the golden run from
    the mutants'. Now a job can make none of these objects, the next job's reading moves by the
    host's own activity only, and the event counters of /proc (and Docker's cgroup statistics)
    read empty."""
    one_worker = make_one_worker()
    before = _observe(one_worker)
    moved = one_worker.run(_MOVER)
    assert moved.exit_code == 0, moved.stderr
    assert moved.stdout.split() == ["0"] * 5  # no pipe, socket, memfd, shared map or pidfd
    after = _observe(one_worker)
    assert after[0] - before[0] < K // 4, (before, after)
    assert after[1:] == before[1:] == [0, 0]


def test_jobs_that_need_pipes_ask_for_ipc(make_one_worker):
    """``Limits(ipc=True)`` gives them back (subprocess, multiprocessing, the service's
    compilers): those jobs compare nothing with another job."""
    lim = sandboxes.Limits(wall_s=10, cpu_s=10, memory_mb=256, ipc=True)
    r = make_one_worker().run(_MOVER.replace(str(K), "10").replace(str(K // 8), "10"), limits=lim)
    assert r.stdout.split() == ["10"] * 5, r


# ---------------------------------------------------------------- E: no pickle on --resume


@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory):
    """A MarsRL run of the char model with the agent pipeline and segments, stopped after two
    steps: its checkpoint holds weights, optimizer states, RNG states and the pipeline's work
    in flight (branches, partial completions)."""
    pytest.importorskip("peft")
    return checkpointed_run_in(tmp_path_factory.mktemp("resume"))


@pytest.mark.parametrize(
    "name",
    ["state.json", "rng.json", "shared.json", "shared.safetensors", "policy_shared.pt",
     "optimizer_shared.pt", "config.yaml"],
)  # fmt: skip
def test_resume_refuses_a_planted_payload_in_every_file_it_reads(name, checkpointed_run, tmp_path):
    """Root cause E: ``--resume`` loaded ``rng.pt``, ``shared.pt`` and the pipeline's pickled
    env states with full pickle, so a ``__reduce__`` planted in a shared run directory ran.
    Every file a resume reads now holds data (JSON, safetensors, tensors read with
    ``weights_only``, YAML read safely): a payload in any of them is refused with an error
    naming the file, and it never runs."""
    import shutil

    import yaml

    from adapters.training.state_codec import CheckpointError
    from adapters.training.trainer import Trainer
    from tests.adapters.conftest import char_models

    run = tmp_path / "run"
    shutil.copytree(checkpointed_run, run)
    ckpt = sorted((run / "checkpoints").glob("step_*"))[-1]
    target = run / name if name == "config.yaml" else ckpt / name
    assert target.exists()
    marker = tmp_path / "payload-ran"
    plant_payload(target, str(marker))
    with pytest.raises((CheckpointError, yaml.YAMLError)) as err:
        Trainer.resume(run, models=char_models()).close()
    assert name in str(err.value) or "python/object" in str(err.value), err.value
    assert not marker.exists()


def test_shared_state_admits_only_checkpoint_data_types(checkpointed_run, tmp_path):
    """A well-formed JSON tree naming a class outside the checkpoint's record types (the data
    format's own way to ask for an object) is refused before anything is built."""
    import json
    import shutil

    from adapters.training.state_codec import CheckpointError
    from adapters.training.trainer import Trainer
    from tests.adapters.conftest import char_models

    run = tmp_path / "run"
    shutil.copytree(checkpointed_run, run)
    shared = sorted((run / "checkpoints").glob("step_*"))[-1] / "shared.json"
    tree = json.loads(shared.read_text())
    tree[1].append(["x", ["D", "subprocess.Popen", {"args": ["l", ["touch", "/tmp/x"]]}]])
    shared.write_text(json.dumps(tree))
    with pytest.raises(CheckpointError, match=r"refusing subprocess\.Popen"):
        Trainer.resume(run, models=char_models()).close()
