"""Rollout scheduling in the trainer (adapters.training.schedule): MarsRL's agent pipeline
(section 3.3) as ``--pipeline agent``, and asynchronous rollouts with bounded staleness
(``--max-staleness``) with the off-policy correction of the loss."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from adapters.rollout import Sample  # noqa: E402
from adapters.training.batch import TrainItem  # noqa: E402
from adapters.training.config import ConfigError, TrainConfig  # noqa: E402
from adapters.training.logprobs import completion_logprobs  # noqa: E402
from adapters.training.losses import ppo_clip_loss, truncated_is_weights  # noqa: E402
from adapters.training.sections import ScheduleConfig, UpdateConfig  # noqa: E402
from adapters.training.trainer import Trainer  # noqa: E402
from adapters.training.update import prepare_logprobs, update_policy  # noqa: E402

from ..conftest import char_models  # noqa: E402
from ..conftest import tiny_train_config as cfg  # noqa: E402


class ShapedTrainer(Trainer):
    """Rewards from the completion text, so that every step really updates the weights."""

    def rollout(self, step):
        result = super().rollout(step)
        for s in result.samples:
            s.reward = (sum(map(ord, s.completion)) % 5) / 5
        return result


def _run(tmp_path, name, steps=2, **kw):
    tr = ShapedTrainer(cfg(tmp_path, name, steps=steps, **kw), models=char_models(), log=str)
    lines = [tr.train_step() for _ in range(steps)]
    params = {k: v.detach().clone() for k, v in tr.run.models["shared"].model.named_parameters()}
    tr.close()
    traj = [json.loads(x) for x in (tmp_path / name / "trajectories.jsonl").read_text().split("\n")
            if x]  # fmt: skip
    return lines, traj, params


def _params(tr):
    return {k: v.detach().clone() for k, v in tr.run.models["shared"].model.named_parameters()}


def _rows(tmp_path, name, step):
    lines = (tmp_path / name / "trajectories.jsonl").read_text().split("\n")
    return [r for r in map(json.loads, filter(None, lines)) if r["train_step"] == step]


def test_staleness_zero_is_the_synchronous_loop(tmp_path):
    """``--max-staleness 0`` (the trainer's step, through the rollout schedule) against the
    synchronous loop written out here without any schedule: roll out with the weights of the
    moment, then update. The same trajectories (completions, behaviour log-probs, rewards,
    advantages, versions) and the same weights after every step; and, computed independently,
    every sample's log-probs are those of the weights it trained against (it was generated
    after the previous update, not ahead of it), its lag is 0, and no importance weight
    enters the loss."""
    n0 = ShapedTrainer(cfg(tmp_path, "n0", max_staleness=0), models=char_models(), log=str)
    plain = ShapedTrainer(cfg(tmp_path, "plain", max_staleness=0), models=char_models(), log=str)
    model, pad = plain.run.models["shared"].model, plain.run.pad_id
    try:
        for step in (1, 2):
            line = n0.train_step()
            assert line["lag/max"] == 0.0 and "is_weight_mean" not in line
            rows = _rows(tmp_path, "n0", step)
            assert rows and all(r["policy_version"] == step - 1 for r in rows)
            result = plain.rollout(step)  # plain's weights: n0's before this step's update
            with torch.no_grad():
                for r in rows:
                    temp = plain.cfg.generation.temperature_of(r["role"])
                    lp = completion_logprobs(model, [r["prompt_ids"]], [r["completion_ids"]],
                                             pad_id=pad, temperature=temp)[0]  # fmt: skip
                    assert torch.allclose(lp, torch.tensor(r["logprobs"]), atol=1e-4), step
            plain.update(result.samples, step)
            plain.step = step
            assert rows == [{"train_step": step, **s.to_dict()} for s in result.samples]
            assert any(r["advantage"] not in (None, 0) for r in rows)
            after, expected = _params(n0), _params(plain)
            assert after.keys() == expected.keys()
            assert all(torch.equal(after[k], expected[k]) for k in after)
    finally:
        n0.close()
        plain.close()


def test_staleness_one_trains_samples_at_most_one_version_old(tmp_path):
    lines, traj, _ = _run(tmp_path, "n1", steps=3, max_staleness=1)
    lags = {t["train_step"]: t["train_step"] - 1 - t["policy_version"] for t in traj}
    # steps 1 and 2 are both generated before the first update, step 3 after it
    assert lags == {1: 0, 2: 1, 3: 1}
    assert [m["lag/max"] for m in lines] == [0.0, 1.0, 1.0]
    assert lines[1]["lag/1"] == lines[1]["samples"]
    assert all(0 < m["is_weight_mean"] <= 2.0 for m in lines if m["samples_trained"])
    # step 1 trained on-policy (pi_old = pi_behav); step 2's samples predate that update
    assert lines[0]["is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert abs(lines[1]["is_weight_mean"] - 1.0) > 1e-3
    # the same instances as the synchronous run, in the same steps: none lost or repeated
    _, sync, _ = _run(tmp_path, "sync", steps=3)
    first = {(t["train_step"], t["instance_id"]) for t in traj if t["turn"] == 0}
    assert first == {(t["train_step"], t["instance_id"]) for t in sync if t["turn"] == 0}


def test_truncated_importance_weight_hand_case():
    # ratio 1 (pi = pi_old), A = 1: the surrogate is -w per token; behaviour log-probs recorded
    # at generation 1 below, equal, and 0.5 below pi_old -> w = min(e^1, 2), 1, e^0.5
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    behav = torch.tensor([[-2.0, -2.0, -1.0]])
    mask = torch.ones(1, 3)
    w = truncated_is_weights(old, behav, mask, cap=2.0)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, math.exp(0.5)]]))
    loss, _ = ppo_clip_loss(old.clone(), old, torch.ones(1, 3), mask, is_weights=w)
    assert loss.item() == pytest.approx(-(2.0 + 1.0 + math.exp(0.5)) / 3)


def _items(model_pair, shift):
    model, tok = model_pair
    out = []
    for i, (p, c, r) in enumerate([("ab", "cd", 1.0), ("ab", "ef", 0.0)]):
        pids, cids = tok(p)["input_ids"], tok(c)["input_ids"]
        with torch.no_grad():
            lp = completion_logprobs(model, [pids], [cids], pad_id=tok.pad_token_id)[0]
        behav = (lp - shift).tolist()  # as if a policy `shift` nats less sure had sampled them
        s = Sample("g", 0, "0", "0", "r", "shared", 0, 0, i, True, p, c, pids, cids, behav, r, {},
                   False, True)  # fmt: skip
        it = TrainItem(s, pids, cids, torch.tensor(behav))
        it.advantages = torch.full((len(cids),), 1.0 if r else 0.5)
        out.append(it)
    return out


@pytest.mark.parametrize("old", ["rollout", "forward"])
@pytest.mark.parametrize("cap, weight", [(2.0, 2.0), (1.5, 1.5), (10.0, math.e)])
def test_the_update_weights_tokens_by_the_recorded_behaviour_logprobs(tmp_path, cap, weight, old):
    """pi_old / pi_behav = e on every token (the sampler's log-probs 1 nat lower): the first
    step's policy loss is the synchronous one times min(e, cap), whether pi_old comes from a
    pass before the update (stale samples with ``rollout``) or from its own forward."""
    from adapters.training.policy_models import build_policy_models

    tr_cfg = cfg(tmp_path, "x").resolved()
    pair = char_models()
    losses = {}
    for n in (0, 1):
        models = build_policy_models(tr_cfg, ["r"], pair[0])
        pm = models["shared"]
        items = _items((pm.model, pair[1]), shift=1.0)
        ucfg = UpdateConfig(lr=1e-9, rollout_is_cap=cap, old_logprobs=old)
        stale = ScheduleConfig(max_staleness=n).off_policy
        prepare_logprobs(ucfg, pm, items, pair[1].pad_token_id, off_policy=stale)
        if n:
            for it in items:  # kept as generated
                assert it.behav_logprobs.tolist() == it.sample.logprobs
        if n and old == "rollout":  # pi_old recomputed by a pass
            for it in items:
                assert torch.allclose(it.old_logprobs, it.behav_logprobs + 1.0, atol=1e-5)
        elif old == "rollout":
            for it in items:
                it.old_logprobs = it.old_logprobs + 1.0  # the same ratio 1 as the stale case
        st = update_policy(ucfg, pm, items, 1, pair[1].pad_token_id, off_policy=stale)
        if old == "forward":  # pi_old is the forward's: filled in by the update
            for it in items:
                assert torch.allclose(
                    it.old_logprobs, torch.tensor(it.sample.logprobs) + 1, atol=1e-5
                )
        losses[n] = st["pg_loss"]
        if n:
            assert st["is_weight_mean"] == pytest.approx(weight, rel=1e-4)
    assert losses[1] == pytest.approx(weight * losses[0], rel=1e-4)


def test_pipeline_agent_trains_marsrl_in_stages_and_logs_lags(tmp_path):
    kw = dict(env="marsrl", env_config={}, pipeline="agent", instances_per_step=1, steps=2)
    tr = Trainer(cfg(tmp_path, "pipe", max_new_tokens=4, **kw), models=char_models(), log=str)
    lines = [tr.train_step() for _ in range(2)]
    tr.close()
    traj = [json.loads(x) for x in (tmp_path / "pipe" / "trajectories.jsonl").read_text().split(
        "\n") if x]  # fmt: skip
    # step 1: the Solver of problem 0; step 2: its first verifier stage and problem 1's Solver
    assert {(t["train_step"], t["instance"], t["role"]) for t in traj} == {
        (1, 0, "solver"), (2, 0, "verifier"), (2, 1, "solver")}  # fmt: skip
    assert all(m["samples_trained"] > 0 and m["optimizer_steps"] == 1 for m in lines)
    assert [m["lag/max"] for m in lines] == [0.0, 0.0]  # a stage trains in the step it decodes
    assert lines[1]["pipeline/age_max"] == 1.0 and lines[1]["pipeline/in_flight"] > 0


def test_pipeline_config():
    assert TrainConfig(env="marsrl").resolved(cuda=True).schedule.pipeline == "agent"  # MarsRL 3.3
    assert TrainConfig(env="marsrl").resolved(cuda=False).schedule.pipeline == "none"
    assert TrainConfig(env="sokoban").resolved(cuda=True).schedule.pipeline == "none"
    with pytest.raises(ConfigError, match="together"):
        TrainConfig(pipeline="agent", segment_tokens=8)
    with pytest.raises(ConfigError, match="pipeline agent"):
        TrainConfig(pipeline="none", segment_tokens=8, max_segments=2)


def test_marsrl_cuda_recipe_turns_segments_on_section_4():
    # MarsRL 4: 64k response tokens in at most 4 segments of 16k (UloRL 2.3's segment rollout)
    c = TrainConfig(env="marsrl").resolved(cuda=True)
    assert (
        c.schedule.pipeline,
        c.schedule.segment_tokens,
        c.schedule.max_segments,
        c.generation.max_new_tokens,
    ) == (
        "agent",
        16384,
        4,
        65536,
    )
    assert "MarsRL §4" in c.sources["segment_tokens"]
    cpu = TrainConfig(env="marsrl").resolved(cuda=False)  # whole trajectories: no segments
    assert (cpu.schedule.pipeline, cpu.schedule.segment_tokens, cpu.schedule.max_segments) == (
        "none",
        0,
        0,
    )
    off = TrainConfig(env="marsrl", pipeline="none").resolved(cuda=True)
    assert (off.schedule.segment_tokens, off.schedule.max_segments) == (0, 0)
    assert off.sources["segment_tokens"] == "off without --pipeline agent"
    zero = TrainConfig(env="marsrl", segment_tokens=0).resolved(cuda=True)
    assert (zero.schedule.pipeline, zero.schedule.segment_tokens, zero.schedule.max_segments) == (
        "agent",
        0,
        0,
    )
    assert TrainConfig(env="sokoban").resolved(cuda=True).schedule.segment_tokens == 0


def test_segments_in_the_pipeline_lag_by_the_steps_a_completion_spans(tmp_path):
    """UloRL 2.3 segments of 2 tokens, at most 2: a completion longer than 2 tokens is decoded
    over two steps and trains one version after its first token was sampled."""
    kw = dict(env="marsrl", env_config={}, pipeline="agent", instances_per_step=1, steps=3)
    c = cfg(tmp_path, "seg", max_new_tokens=4, segment_tokens=2, max_segments=2, **kw)
    tr = Trainer(c, models=char_models(), log=str)
    lines = [tr.train_step() for _ in range(3)]
    tr.close()
    traj = [json.loads(x) for x in (tmp_path / "seg" / "trajectories.jsonl").read_text().split(
        "\n") if x]  # fmt: skip
    assert traj and all(len(t["completion_ids"]) <= 4 for t in traj)
    lags = [t["train_step"] - 1 - t["policy_version"] for t in traj]
    assert set(lags) <= {0, 1}
    long = [lag for t, lag in zip(traj, lags) if len(t["completion_ids"]) > 2]
    assert long and all(lag == 1 for lag in long)
    assert max(m.get("lag/max", 0.0) for m in lines) == 1.0
    # segments switch on the off-policy correction (behaviour log-probs kept across segments)
    assert all("is_weight_mean" in m for m in lines if m.get("samples_trained"))


def _read(tmp_path, name):
    rows = (tmp_path / name / "trajectories.jsonl").read_text().split("\n")
    return [json.loads(x) for x in rows if x]


@pytest.mark.parametrize(
    "kw",
    [
        dict(max_staleness=1),  # the rollout of step 3 was produced before the kill
        dict(env="marsrl", env_config={}, pipeline="agent", instances_per_step=1),
        dict(
            env="marsrl",
            env_config={},
            pipeline="agent",
            instances_per_step=1,
            segment_tokens=2,
            max_segments=2,
        ),
    ],
    ids=["staleness", "pipeline", "segments"],
)
def test_resume_continues_the_work_in_flight_exactly(tmp_path, kw):
    """A run stopped after step 2 (its checkpoint written, the process gone) and resumed trains
    step 3 on exactly what the uninterrupted run trains: the rollout produced ahead, or the
    pipeline's in-flight trajectories (their next stage, or with segments their partial
    completions: prefix, behaviour log-probs, sampler state), none lost or repeated."""
    kw = dict(steps=3, max_new_tokens=4, **kw)
    a = ShapedTrainer(cfg(tmp_path, "a", **kw), models=char_models(), log=str)
    for _ in range(3):
        a.train_step()
    a.close()
    b = ShapedTrainer(cfg(tmp_path, "b", **kw), models=char_models(), log=str)
    b.train_step()
    b.train_step()
    in_flight = b.schedule.queued, _in_flight(b)
    b.close()
    assert in_flight[0] or in_flight[1][0]  # something was in flight at the stop
    if "segment_tokens" in kw:  # and partial completions with a prefix among it
        assert any(tokens for _, _, tokens, *_ in in_flight[1][1])
    c = ShapedTrainer.resume(tmp_path / "b", models=char_models())
    assert (c.schedule.queued, _in_flight(c)) == in_flight
    c.train_step()
    c.close()
    ta, tb = _read(tmp_path, "a"), _read(tmp_path, "b")
    assert ta == tb
    if "pipeline" in kw and "segment_tokens" not in kw:
        # step 3 continues problem 1 (admitted at step 2) with its verifier
        assert (3, 1, "verifier") in {(t["train_step"], t["instance"], t["role"]) for t in tb}


def _in_flight(tr):
    """The pipeline's branches in flight and its partial completions (segments), in order."""
    if tr.pipeline is None:
        return 0, []
    pipe = tr.pipeline.pipeline
    partials = [p for g in pipe._generators.values() for *_, p in g._pending]
    return pipe.in_flight, [
        (p.prompt_ids, p.seed, p.token_ids, p.logprobs, p.versions) for p in partials
    ]


def _kill_and_resume(tmp_path, fields, at_kill):
    """Run the CLI (tests/adapters/dist_worker.py) on ``fields`` once uninterrupted and once
    killed with SIGKILL as soon as its first checkpoint exists, call ``at_kill(run_dir)``, then
    ``--resume`` the killed run; both runs must end cleanly with the same trajectories, line by
    line. Returns ``(full, killed)`` run directories."""
    import signal
    import subprocess
    import sys
    import time

    import yaml

    from .test_distributed import ROOT, _env

    (tmp_path / "run.yaml").write_text(yaml.safe_dump(fields))
    cli = [sys.executable, "-m", "tests.adapters.dist_worker", "cli"]

    def train(*args):
        return subprocess.Popen([*cli, *args], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip

    full, killed = tmp_path / "full", tmp_path / "killed"
    ref = train("--config", str(tmp_path / "run.yaml"), "--output-dir", str(full))
    out, _ = ref.communicate(timeout=600)
    assert ref.returncode == 0, out[-3000:]
    victim = train("--config", str(tmp_path / "run.yaml"), "--output-dir", str(killed))
    deadline = time.time() + 300
    first = killed / "checkpoints" / "step_000001" / "state.json"  # holds the queue, pipeline
    while not first.exists():
        assert victim.poll() is None and time.time() < deadline, "ended before the kill"
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=60)
    at_kill(killed)
    resumed = train("--resume", str(killed))
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out[-3000:]
    assert "resumed without" not in out
    t_full = (full / "trajectories.jsonl").read_text().splitlines()
    assert (killed / "trajectories.jsonl").read_text().splitlines() == t_full
    return full, killed


_MARSRL_TINY = dict(env="marsrl", model="tiny", lora_rank=4, steps=4, instances_per_step=1,
                    candidates=2, max_new_tokens=4, eval_episodes=0, demos=0, progress=False,
                    plot_every=0, save_final=False, lr=1e-2, ppo_minibatches=1, device="cpu",
                    pipeline="agent")  # fmt: skip


@pytest.mark.slow
def test_sigkill_then_resume_continues_the_pipeline_and_the_queue(tmp_path):
    """``python -m adapters.train`` (tiny model, MarsRL, --pipeline agent --max-staleness 1)
    killed with SIGKILL after its first step, then ``--resume``: the trajectories equal those of
    the uninterrupted run line by line (nothing in flight lost or trained twice)."""

    def killed_mid_run(run):
        assert (run / "metrics.jsonl").read_text().count("\n") < 4

    full, _ = _kill_and_resume(tmp_path, {**_MARSRL_TINY, "max_staleness": 1}, killed_mid_run)
    steps = {json.loads(x)["train_step"] for x in (full / "trajectories.jsonl").open()}
    assert steps == {1, 2, 3, 4}


@pytest.mark.slow
def test_sigkill_then_resume_continues_partial_segments(tmp_path):
    """``python -m adapters.train`` (tiny model, MarsRL, --pipeline agent, --segment-tokens 2
    --max-segments 2, so that a 4-token completion spans two steps) killed with SIGKILL after a
    checkpoint that holds partial completions in flight, then ``--resume``: the trajectories and
    the final weights equal those of the uninterrupted run (every partial continued from its
    saved prefix, behaviour log-probs and policy versions; none lost, none decoded twice)."""
    from adapters.training import checkpoints
    from adapters.training.trainer import SCHEDULE_KEY

    def partials_in_flight(run):
        ckpt = checkpoints.latest_checkpoint(run)
        assert ckpt is not None and ckpt.name != "step_000004"  # killed mid-run
        pipe = checkpoints.load_extra(run, SCHEDULE_KEY)["pipeline"]
        partials = [p for _, gen in pipe["generators"] for *_, p in gen["pending"]]
        assert any(p.token_ids for p in partials)  # a prefix in flight at the checkpoint
        assert all(len(p.logprobs) == len(p.token_ids) and p.versions for p in partials)

    fields = {**_MARSRL_TINY, "segment_tokens": 2, "max_segments": 2}
    full, killed = _kill_and_resume(tmp_path, fields, partials_in_flight)
    rows = [json.loads(x) for x in (full / "trajectories.jsonl").open()]
    assert {r["train_step"] for r in rows} >= {2, 3, 4}  # step 1's completions span 2 steps
    assert any(r["train_step"] - 1 > r["policy_version"] for r in rows)  # spans two steps
    last = "checkpoints/step_000004/policy_shared.pt"
    w_full, w_killed = torch.load(full / last), torch.load(killed / last)
    assert w_full.keys() == w_killed.keys()
    assert all(torch.equal(w_full[k], w_killed[k]) for k in w_full)
