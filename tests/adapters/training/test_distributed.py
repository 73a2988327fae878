"""Data-parallel training on 2 gloo ranks (torchrun, CPU, the tiny model) equals 1 rank.

* **Equivalence**: six layouts (shared LoRA with DDP, per-role LoRA adapters with DDP, full
  fine-tuning with FSDP2, per-role separate models with FSDP2, REINFORCE++ with minibatches and
  micro-batches, LoRA under FSDP2) are trained for 2 steps on 1 and on 2 ranks with the same
  global batch (4 instances, K = 2), and full fine-tuning with HSDP on 2 "nodes" (two torchrun
  agents meeting at a c10d rendezvous). The samples must be the same (token ids, rewards,
  advantages; log-probs to 1e-5: the batch shapes differ), the step metrics the same (gradient
  norm to a relative 1e-5, losses to 1e-6), and the parameters the same up to float rounding:
  ``max |theta_1 - theta_2| <= 1e-2 * max |theta_1 - theta_0|``. (The gradients agree to about
  1e-7 relative; AdamW divides each gradient component by its own running magnitude, so the
  components whose gradient nearly cancels carry that rounding into their step; measured: at most
  0.7 % of the largest change, for full fine-tuning.)
* **Failure**: a SIGKILLed rank makes torchrun stop the other rank and exit non-zero within
  seconds; a stopped (hung) rank makes the other fail after ``dist_timeout_s`` with a clear error.
* **Resume**: the killed run (FSDP2, sharded DCP checkpoints) resumed on 2 ranks equals the
  uninterrupted run exactly, and resumed on 1 rank equals it up to float rounding; a
  single-process checkpoint loads into FSDP2 shards exactly.

Every run is a real ``python -m torch.distributed.run`` launch (``--standalone``: a free port).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from .test_resume import _env as resume_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SMALL = {"height": 3, "width": 3, "min_distance": 2, "wall_density": 0.0, "max_turns": 2}
BASE = {
    "env": "plan_path",
    "env_config": SMALL,
    "model": "tiny",
    "lora_rank": 4,
    "steps": 2,
    "instances_per_step": 4,
    "candidates": 2,
    "max_new_tokens": 6,
    "eval_episodes": 0,
    "demos": 0,
    "progress": False,
    "plot_every": 0,
    "save_final": False,
    "lr": 1e-2,
    "ppo_minibatches": 1,  # one optimizer step per batch (the CPU recipe makes 4)
    "temperature": 1.0,
    "device": "cpu",
    # exact log-probs, so two ranks match one: sample on the float32 training modules and
    # update in float32 (the defaults on a CPU with native bfloat16 use a bfloat16 copy)
    "generation_model": "train",
    "update_precision": "float32",
}
CASES = {
    "lora": {},
    "lora_per_role": {"per_role": True},
    "full": {"lora_rank": 0, "lr": 1e-3},
    "full_per_role": {"lora_rank": 0, "lr": 1e-3, "per_role": True},
    "reinforce_minibatches": {
        "algorithm": "reinforce++",
        "minibatch_size": 4,
        "micro_batch_size": 2,
    },
    "lora_fsdp": {"dp_mode": "fsdp"},
    "lora_stale": {"max_staleness": 1},  # step 2 trains a rollout of version 0, corrected
}
NOT_COMPARED = ("time/", "throughput/", "world_size")
SHAPED_CLI = ("-m", "tests.adapters.dist_worker", "cli")  # adapters.train with shaped rewards


def _env() -> dict[str, str]:
    env = resume_env()  # one thread, this checkout first on the path
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def torchrun(nproc: int, *args: str) -> subprocess.Popen:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return subprocess.Popen(
        [*launcher, "--nproc-per-node", str(nproc), *args],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 600) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-6000:]
    return out


# ------------------------------------------------------------------------------ equivalence


def two_nodes(*args: str) -> list[subprocess.Popen]:
    """Two torchrun agents of one rank each, meeting at a c10d rendezvous on this machine: a
    2-node job in miniature (``LOCAL_WORLD_SIZE = 1``)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rdzv = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d"]
    rdzv += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"nodes-{port}"]
    cmd = [sys.executable, "-m", "torch.distributed.run", *rdzv, *args]
    return [
        subprocess.Popen(
            cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``{launch: {case: result}}``: one launch of 1 rank and one of 2 ranks (every case in
    each), and a 2-node launch of full fine-tuning with HSDP (``"nodes"``)."""
    tmp = tmp_path_factory.mktemp("dist")
    (tmp / "cases.json").write_text(json.dumps({k: {**BASE, **v} for k, v in CASES.items()}))
    hsdp = {**BASE, **CASES["full"], "dp_mode": "hsdp"}
    (tmp / "nodes.json").write_text(json.dumps({"full": hsdp}))
    worker = ("-m", "tests.adapters.dist_worker")
    out: dict = {}
    for n in (1, 2):
        (tmp / f"out{n}").mkdir()
        finish(torchrun(n, *worker, str(tmp / "cases.json"), str(tmp / f"out{n}")))
        out[n] = {c: torch.load(tmp / f"out{n}" / f"{c}.pt") for c in CASES}
    (tmp / "nodes").mkdir()
    for proc in two_nodes(*worker, str(tmp / "nodes.json"), str(tmp / "nodes")):
        finish(proc)
    out["nodes"] = {"full": torch.load(tmp / "nodes" / "full.pt")}
    return out


def _rows(lines: list[str]) -> list[dict]:
    return [json.loads(x) for x in lines]


@pytest.mark.parametrize("case", list(CASES))
def test_two_ranks_give_the_same_step_as_one_rank(runs, case):
    assert_same_steps(runs[1][case], runs[2][case], case)


def test_two_nodes_with_hsdp_give_the_same_step_as_one_rank(runs):
    """FSDP2 on a (2 nodes x 1 rank) mesh: replicated across the nodes, sharded within."""
    assert_same_steps(runs[1]["full"], runs["nodes"]["full"], "full/hsdp")


def assert_same_steps(one: dict, two: dict, case: str) -> None:
    # the same global batch: every sample (tokens, rewards, advantages), in the same order
    t1, t2 = _rows(one["trajectories"]), _rows(two["trajectories"])
    assert len(t1) == len(t2) > 0
    for a, b in zip(t1, t2):
        assert {k: v for k, v in a.items() if k not in ("logprobs", "advantage")} == {
            k: v for k, v in b.items() if k not in ("logprobs", "advantage")
        }
        assert max(abs(x - y) for x, y in zip(a["logprobs"], b["logprobs"])) < 1e-5
        assert a["advantage"] == pytest.approx(b["advantage"], abs=1e-5), (case, a["train_step"])
    assert {r["train_step"] for r in t1} == {1, 2}
    assert len({r["reward"] for r in t1}) > 1 and any(r["advantage"] for r in t1)
    assert len({r["reward"] for r in t2}) > 1 and any(r["advantage"] for r in t2)
    # the same step statistics, reduced over the ranks
    m1, m2 = _rows(one["metrics"]), _rows(two["metrics"])
    assert [m["world_size"] for m in m2] == [2.0, 2.0] and [m["world_size"] for m in m1] == [
        1.0
    ] * 2
    for a, b in zip(m1, m2):
        keys = {k for k in a if not k.startswith(NOT_COMPARED)}
        assert keys == {k for k in b if not k.startswith(NOT_COMPARED)}
        assert a["optimizer_steps"] >= 1
        for k in keys:
            rel = 1e-5 if k.startswith("grad_norm") else 1e-4
            assert a[k] == pytest.approx(b[k], rel=rel, abs=1e-6), k
    # the same parameters, up to float rounding (see the module docstring)
    assert one["params"].keys() == two["params"].keys()
    for pid, p1 in one["params"].items():
        p2, p0 = two["params"][pid], one["initial"][pid]
        change = max(float((p1[k] - p0[k]).abs().max()) for k in p1)
        diff = max(float((p1[k] - p2[k]).abs().max()) for k in p1)
        assert change > 0, f"{case}/{pid}: the step changed nothing"
        assert diff <= 1e-2 * change, f"{case}/{pid}: {diff:.3g} vs change {change:.3g}"


def test_global_minibatch_plan_splits_one_ranks_minibatches():
    """RankParallel.minibatches on each of 2 (simulated) ranks gives, minibatch by minibatch,
    the two halves of the 1-rank plan, also when one prompt group exists on both ranks."""
    import random

    from adapters.training.batch import TrainItem
    from adapters.training.distributed import DistContext, RankParallel

    def item(prompt):
        return TrainItem(None, list(prompt), [1, 2], torch.zeros(2))  # type: ignore[arg-type]

    ranks = [[item((1,)), item((1,)), item((2,)), item((3,))], [item((4,)), item((3,)), item((5,))]]

    class Fake(DistContext):
        def all_gather_objects(self, obj):
            return [
                obj if r == self.rank else {k: len(v) for k, v in _groups(ranks[r]).items()}
                for r in range(2)
            ]

    def _groups(items):
        from adapters.training.distributed.parallel import _digest

        out: dict = {}
        for it in items:
            out.setdefault(_digest(it.prompt_ids), []).append(it)
        return out

    class One(DistContext):
        def all_gather_objects(self, obj):
            return [obj]

    def plan(ctx, items):
        dp = RankParallel(ctx, {}, "ddp", 0, True)
        return [
            [tuple(it.prompt_ids) for it in mb] for mb in dp.minibatches(items, 3, random.Random(7))
        ]

    whole = plan(One(enabled=True), ranks[0] + ranks[1])
    parts = [plan(Fake(rank=r, world_size=2, enabled=True), ranks[r]) for r in range(2)]
    assert len(parts[0]) == len(parts[1]) == len(whole) >= 2
    for k, mb in enumerate(whole):
        assert sorted(mb) == sorted(parts[0][k] + parts[1][k])


# ------------------------------------------------------------------------------ failures, resume


def _run_config(tmp_path: Path, **kw) -> str:
    import yaml

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**BASE, "lora_rank": 0, "lr": 1e-3, "seed": 3, **kw}))
    return str(path)


def _rank_pid(agent: int, rank: int, timeout: float = 60) -> int:
    """The pid of the worker process with ``RANK=rank`` that torchrun (``agent``) started."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                env = (entry / "environ").read_bytes().split(b"\0")
            except (OSError, IndexError, ValueError):
                continue
            if ppid == agent and f"RANK={rank}".encode() in env:
                return int(entry.name)
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} worker under torchrun pid {agent}")


def _wait_for_step(proc: subprocess.Popen, metrics: Path, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metrics.exists() and metrics.read_text().strip():
            return
        if proc.poll() is not None:
            pytest.fail("the run ended before step 1:\n" + proc.stdout.read()[-4000:])
        time.sleep(0.05)
    pytest.fail("the run did not reach step 1 in time")


def _comparable(run: Path) -> list[dict]:
    rows = _rows((run / "metrics.jsonl").read_text().splitlines())
    return [{k: v for k, v in r.items() if not k.startswith(NOT_COMPARED)} for r in rows]


def test_sigkilled_rank_fails_the_run_and_resume_continues_exactly(tmp_path):
    config = _run_config(tmp_path, steps=4)
    full, killed, other = tmp_path / "full", tmp_path / "killed", tmp_path / "one-rank"
    ref = torchrun(2, *SHAPED_CLI, "--config", config, "--output-dir", str(full))
    victim = torchrun(2, *SHAPED_CLI, "--config", config, "--output-dir", str(killed))
    try:
        _wait_for_step(victim, killed / "metrics.jsonl")
        os.kill(_rank_pid(victim.pid, 1), signal.SIGKILL)
        t0 = time.time()
        out, _ = victim.communicate(timeout=120)
        waited = time.time() - t0
    finally:
        if victim.poll() is None:
            victim.kill()
    assert victim.returncode != 0 and waited < 60, (victim.returncode, waited)
    assert "Signal 9 (SIGKILL)" in out and "rank      : 1" in out, out[-3000:]
    assert len((killed / "metrics.jsonl").read_text().splitlines()) < 4  # killed mid-run
    finish(ref)

    shutil.copytree(killed, other)
    finish(torchrun(2, *SHAPED_CLI, "--resume", str(killed)))
    rows = _comparable(full)
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and rows[1]["optimizer_steps"] >= 1
    assert _comparable(killed) == rows  # exactly the uninterrupted run
    assert (killed / "trajectories.jsonl").read_text() == (full / "trajectories.jsonl").read_text()
    assert (full / "checkpoints" / "step_000004" / "policy_shared").is_dir()  # sharded (DCP)

    # the 2-rank sharded checkpoint resumed by 1 rank: the same run up to float rounding
    finish(torchrun(1, *SHAPED_CLI, "--resume", str(other)))
    for a, b in zip(_comparable(other), rows):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), k
    t_other = _rows((other / "trajectories.jsonl").read_text().splitlines())
    t_full = _rows((full / "trajectories.jsonl").read_text().splitlines())
    assert [r["completion_ids"] for r in t_other] == [r["completion_ids"] for r in t_full]


def test_single_process_checkpoint_resumes_sharded_on_two_ranks(tmp_path):
    """A full fine-tuning checkpoint of a plain ``python -m adapters.train`` run (full state
    dict, index-keyed AdamW state) is scattered into FSDP2 shards: gathered back, weights and
    optimizer moments are the saved ones exactly."""
    run = tmp_path / "single"
    config = _run_config(tmp_path, steps=1, skip_zero_advantage=False)
    cmd = [sys.executable, "-m", "adapters.train", "--config", config, "--output-dir", str(run)]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ckpt = run / "checkpoints" / "step_000001"
    finish(
        torchrun(2, "-m", "tests.adapters.dist_worker", "load", str(run), str(tmp_path / "x.pt"))
    )
    got = torch.load(tmp_path / "x.pt")
    weights = torch.load(ckpt / "policy_shared.pt")
    optim = torch.load(ckpt / "optimizer_shared.pt")
    assert weights.keys() == got["weights"].keys()
    for k, v in weights.items():
        assert torch.equal(v, got["weights"][k]), k
    assert len(optim["state"]) == len(got["optim"]["state"]) > 0
    for i, st in optim["state"].items():
        mine = got["optim"]["state"][got["names"][int(i)]]
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(st[key], mine[key]), (i, key)
        assert float(st["step"]) == float(mine["step"]) == 1.0


def test_a_hung_rank_fails_the_run_after_the_collective_timeout(tmp_path):
    config = _run_config(tmp_path, steps=200, dist_timeout_s=15.0)
    run_dir = tmp_path / "hung"
    proc = torchrun(2, *SHAPED_CLI, "--config", config, "--output-dir", str(run_dir))
    stopped = None
    try:
        _wait_for_step(proc, run_dir / "metrics.jsonl")
        stopped = _rank_pid(proc.pid, 1)
        os.kill(stopped, signal.SIGSTOP)
        t0 = time.time()
        out, _ = proc.communicate(timeout=240)
        waited = time.time() - t0
    finally:
        if stopped is not None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(stopped, sig)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert 10 < waited < 15 + 90, waited
    assert "error on rank 0 of 2" in out and "dist_timeout_s = 15" in out, out[-3000:]


@pytest.mark.slow
def test_torchrun_acceptance_command(tmp_path):
    """The issue's acceptance command: ``torchrun --nproc-per-node 2 -m adapters.train --env
    sokoban --model tiny --steps 2`` (plus an output directory and no progress bar)."""
    run_dir = tmp_path / "sokoban"
    out = finish(
        torchrun(
            2,
            "-m",
            "adapters.train",
            "--env",
            "sokoban",
            "--model",
            "tiny",
            "--steps",
            "2",
            "--output-dir",
            str(run_dir),
            "--no-progress",
        ),
        timeout=900,
    )
    assert "2 ranks" in out and "2 training steps in" in out and "paired per instance" in out
    assert out.count("step 1/2") == 1  # only rank 0 prints
    rows = _rows((run_dir / "metrics.jsonl").read_text().splitlines())
    assert [r["step"] for r in rows] == [1, 2] and rows[0]["world_size"] == 2.0
    assert (run_dir / "eval_after.json").is_file() and (run_dir / "final" / "shared").is_dir()
