"""Trainer (fast): shared-prompt log-probs, advantages, per-role routing, logs, checkpoints.

Everything runs on the tiny char-level model from conftest (no download) on a small Plan-Path.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from adapters.training.advantages import group_advantages  # noqa: E402
from adapters.training.batch import TrainItem  # noqa: E402
from adapters.training.checkpoints import latest_checkpoint  # noqa: E402
from adapters.training.config import TrainConfig  # noqa: E402
from adapters.training.logprobs import completion_logprobs, sequence_logprobs  # noqa: E402
from adapters.training.trainer import Trainer  # noqa: E402
from adapters.training.update import compute_advantages  # noqa: E402

from ..conftest import TINY_PLAN_PATH, char_models, make_char_model  # noqa: E402
from ..conftest import tiny_train_config as cfg  # noqa: E402

SMALL = TINY_PLAN_PATH


def trainer(tmp_path, name="run", seed=0, cls=None, **kw) -> Trainer:
    cls = cls or Trainer
    return cls(cfg(tmp_path, name, **kw), models=char_models(seed), log=lambda s: None)


class ShapedTrainer(Trainer):
    """Rewards from the completion text, so that a random model gets varied rewards and every
    step really updates the weights and the optimizer state."""

    def rollout(self, step):
        result = super().rollout(step)
        for s in result.samples:
            s.reward = (sum(map(ord, s.completion)) % 5) / 5
        return result


# ------------------------------------------------------------------------------ log-probs


def test_shared_prompt_forward_equals_full_forward_values_and_gradients():
    model, tok = make_char_model(seed=1)
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    p1, p2 = (
        enc("<|user|>go left\n<|assistant|>"),
        enc("<|user|>a longer prompt here\n<|assistant|>"),
    )
    prompts = [p1, p1, p2, p1, p2]
    comps = [enc("abc"), enc("hello!"), enc("x"), enc("abcd"), enc("zz top")]
    weights = torch.randn(5, 6)

    def run(share):
        model.zero_grad()
        lp = completion_logprobs(
            model, prompts, comps, pad_id=tok.pad_token_id, temperature=0.7, share_prompt=share
        )
        (lp * weights).sum().backward()
        return lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    shared, g_shared = run(True)
    full, g_full = run(False)
    assert shared.shape == (5, 6)
    assert torch.allclose(shared, full, atol=1e-5)
    for i, c in enumerate(comps):  # padding stays zero
        assert torch.all(shared[i, len(c) :] == 0)
    for n in g_full:
        err = (g_shared[n] - g_full[n]).norm() / g_full[n].norm().clamp(min=1e-12)
        assert err < 1e-4, (n, float(err))
    # and both equal sequence_logprobs on one unpadded sequence
    ids = torch.tensor([p2 + comps[4]])
    mask = torch.zeros_like(ids)
    mask[0, len(p2) :] = 1
    with torch.no_grad():
        ref = sequence_logprobs(model, ids, torch.ones_like(ids), mask, temperature=0.7)
    assert torch.allclose(ref[0, len(p2) :], shared[4, : len(comps[4])], atol=1e-5)


def test_rollout_logprobs_match_training_logprobs(tmp_path):
    """Generating on the float32 training modules (``generation_model="train"``), the sampler's
    log-probs are the training model's (the merged bfloat16 copy's are close, and recomputed)."""
    tr = trainer(tmp_path, temperature=0.8, generation_model="train")
    samples = tr.rollout(1).samples
    s = samples[0]
    lp = completion_logprobs(
        tr.run.models["shared"].model,
        [s.prompt_ids],
        [s.completion_ids],
        pad_id=tr.run.pad_id,
        temperature=0.8,
    )
    assert torch.allclose(lp[0], torch.tensor(s.logprobs), atol=1e-4)
    tr.close()


def test_micro_batches_pack_by_prompt_within_budgets():
    from adapters.training.batch import micro_batches, padded_cost

    items = _items([0.0] * 7, ["g"] * 7, lengths=[4] * 7)
    prompts = [[1] * 10, [1] * 10, [2] * 50, [2] * 50, [2] * 50, [3] * 12, [3] * 12]
    for it, p in zip(items, prompts):
        it.prompt_ids = p
    chunks = micro_batches(items, size=8, max_tokens=64)
    assert sorted(id(it) for c in chunks for it in c) == sorted(id(it) for it in items)
    assert all(padded_cost(c) <= 64 for c in chunks)
    assert [len({it.prompt_key for it in c}) for c in chunks] == [1, 2]  # 50-prompt alone
    assert len(micro_batches(items, size=2)) == 4 and len(micro_batches(items, 8)) == 1


# ------------------------------------------------------------------------------ advantages


def _items(rewards, groups, roles=None, lengths=None):
    from adapters.rollout import Sample

    out = []
    for i, (r, g) in enumerate(zip(rewards, groups)):
        n = (lengths or [3] * len(rewards))[i]
        s = Sample(
            group=g, instance=0, instance_id="x", branch="0", role=(roles or ["a"] * 9)[i],
            policy_id="shared", turn=0, step=0, candidate=i, kept=False, prompt="p",
            completion="c", prompt_ids=[1], completion_ids=[2] * n, logprobs=[-1.0] * n,
            reward=r, reward_parts={}, success=False, done=True,
        )  # fmt: skip
        out.append(TrainItem(s, [1], [2] * n, torch.full((n,), -1.0)))
    return out


def test_advantages_per_algorithm():
    rewards, groups = [1.0, 0.0, 0.5, 0.5, 0.2], ["g1", "g1", "g2", "g2", "g3"]
    items = _items(rewards, groups)
    compute_advantages(TrainConfig(algorithm="at-grpo").update, items)
    expected = group_advantages(rewards, groups)
    for it, e in zip(items, expected.tolist()):
        assert torch.allclose(it.advantages, torch.full((3,), e))
        assert it.sample.advantage == pytest.approx(e)
    assert [round(it.sample.advantage, 4) for it in items[2:]] == [0.0, 0.0, 0.0]

    items = _items([1.0, 0.0, 2.0, 1.0], ["a", "b", "c", "d"], lengths=[2, 2, 2, 2])
    compute_advantages(TrainConfig(algorithm="reinforce++").update, items)
    flat = torch.cat([it.advantages for it in items])  # whitened over the whole batch
    assert flat.mean().abs() < 1e-6 and flat.std(unbiased=False) == pytest.approx(1, abs=1e-4)

    roles = ["solver", "solver", "judge", "judge"]
    items = _items([1.0, 0.0, 10.0, 12.0], ["a", "b", "c", "d"], roles=roles, lengths=[2] * 4)
    compute_advantages(TrainConfig(algorithm="tr-reinforce++").update, items)
    # per-role whitening: each role's advantages are +-1 regardless of its reward scale
    assert [round(it.sample.advantage, 4) for it in items] == [1.0, -1.0, -1.0, 1.0]


# ------------------------------------------------------------------------------ routing


def _make_signal(samples, role_with_signal):
    """Equal rewards for every other role, varying rewards for ``role_with_signal``."""
    for s in samples:
        s.reward = float(s.candidate) if s.role == role_with_signal else 0.3


def _snapshot(module):
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def test_per_role_adapters_only_the_intended_policy_changes(tmp_path):
    tr = trainer(tmp_path, per_role=True)
    assert sorted(tr.run.models) == ["planner", "tool"]
    peft_model = tr.run.models["tool"].peft
    assert peft_model is tr.run.models["planner"].peft  # one base, two adapters
    samples = tr.rollout(1).samples
    assert {s.role: s.policy_id for s in samples} == {"tool": "tool", "planner": "planner"}
    _make_signal(samples, "planner")
    before = _snapshot(peft_model)
    stats = tr.update(samples, 1)
    after = _snapshot(peft_model)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed, "the planner adapter did not change"
    assert all(".planner." in n for n in changed), sorted(changed)[:5]
    assert any("lora_B.planner" in n for n in changed)
    assert stats["samples_trained"] == sum(1 for s in samples if s.role == "planner")
    # and the other way round
    samples = tr.rollout(2).samples
    _make_signal(samples, "tool")
    before = _snapshot(peft_model)
    tr.update(samples, 2)
    after = _snapshot(peft_model)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and all(".tool." in n for n in changed)
    tr.close()


def test_per_role_separate_models_only_the_intended_policy_changes(tmp_path):
    tr = trainer(tmp_path, per_role=True, lora_rank=0, lr=1e-3)
    tool, planner = tr.run.models["tool"].model, tr.run.models["planner"].model
    assert tool is not planner
    assert tr.run.models["tool"].ref_model is None  # no KL coefficient: no frozen reference copy
    samples = tr.rollout(1).samples
    _make_signal(samples, "tool")
    b_tool, b_plan = _snapshot(tool), _snapshot(planner)
    tr.update(samples, 1)
    assert all(torch.equal(b_plan[n], p) for n, p in planner.named_parameters())
    assert any(not torch.equal(b_tool[n], p) for n, p in tool.named_parameters())
    tr.close()


def test_role_sharing_trains_one_policy_on_every_role(tmp_path):
    tr = trainer(tmp_path)
    assert list(tr.run.models) == ["shared"]
    samples = tr.rollout(1).samples
    assert {s.policy_id for s in samples} == {"shared"}
    for s in samples:
        s.reward = float(s.candidate)
    stats = tr.update(samples, 1)
    assert stats["samples_trained"] == len(samples)
    assert stats["optimizer_steps"] == 1 and stats["grad_norm"] > 0
    tr.close()


def test_full_fine_tuning_kl_uses_a_frozen_copy(tmp_path):
    tr = trainer(tmp_path, lora_rank=0, kl_loss_coef=0.1, lr=1e-3)
    pm = tr.run.models["shared"]
    assert pm.peft is None and pm.ref_model is not None and pm.ref_model is not pm.model
    assert not any(p.requires_grad for p in pm.ref_model.parameters())
    samples = tr.rollout(1).samples
    for s in samples:
        s.reward = float(s.candidate)
    ref_before = _snapshot(pm.ref_model)
    assert tr.update(samples, 1)["kl"] == pytest.approx(0.0, abs=1e-6)
    assert all(torch.equal(ref_before[n], p) for n, p in pm.ref_model.named_parameters())
    tr.close()


def test_kl_reference_is_the_base_with_adapters_disabled(tmp_path):
    tr = trainer(tmp_path, kl_loss_coef=0.1)
    samples = tr.rollout(1).samples
    for s in samples:
        s.reward = float(s.candidate)
    stats = tr.update(samples, 1)
    # LoRA starts at B = 0: the policy equals the reference before the first update
    assert stats["kl"] == pytest.approx(0.0, abs=1e-5)
    assert "kl_loss" in stats
    stats = tr.update(tr.rollout(2).samples, 2)
    assert stats["kl"] > 0  # after an update the policy has moved away from the base
    tr.close()


@pytest.mark.parametrize("algorithm", ["grpo", "reinforce++", "tr-reinforce++-token"])
def test_other_algorithms_run_a_step(tmp_path, algorithm):
    tr = trainer(tmp_path, algorithm=algorithm, kl_reward_coef=0.05, steps=1)
    assert tr.cfg.rollout.sampling == "parallel"
    m = tr.train_step()
    assert (m["samples"] > 0 and "loss" in m) or m["samples_trained"] == 0
    tr.close()


def test_oracle_demos_from_the_oracle():
    from adapters.rollout import oracle_demos

    demos = oracle_demos("plan_path", SMALL, ["tool", "planner"], 2, seed=0)
    assert set(demos) == {"tool", "planner"}
    assert [m["role"] for m in demos["planner"]] == ["user", "assistant"] * 2
    assert demos["planner"][0]["content"] != demos["planner"][2]["content"]  # two instances
    assert demos["planner"][1]["content"].splitlines()[-1].startswith("####")
    assert demos["tool"][1]["content"].startswith("```python")
    short = oracle_demos(
        "plan_path", SMALL, ["tool", "planner"], 1, seed=0, fits=lambda t: len(t) < 200
    )
    assert set(short) == {"planner"}  # the tool's program is too long to be written


def test_oracle_demonstrations_prefix_the_prompts(tmp_path):
    env_config = {**SMALL, "oracle_tool": "search"}  # the search program, not the one-liner
    tr = trainer(tmp_path, demos=1, max_new_tokens=64, env_config=env_config)
    assert set(tr.run.demos) == {"planner"}  # the tool's oracle program exceeds 64 tokens
    assert tr.run.role_policy == {"tool": "shared/tool", "planner": "shared/planner"}
    samples = tr.rollout(1).samples
    assert {s.policy_id for s in samples} == {"shared"}  # routed back to the trained policy
    planner = next(x for x in samples if x.role == "planner")
    text = tr.run.tokenizer.decode(planner.prompt_ids)
    assert tr.run.demos["planner"][1]["content"] in text
    assert text.endswith(planner.prompt + "\n<|assistant|>")
    tool = next(x for x in samples if x.role == "tool")
    assert tr.run.tokenizer.decode(tool.prompt_ids) == f"<|user|>{tool.prompt}\n<|assistant|>"
    tr.close()


def test_eval_role_limits_evaluate_each_role_under_its_training_limit(tmp_path):
    """``eval_role_limits`` gives each role of the evaluation the token limit it samples under in
    training (``role_sampling``); off (the default), every role gets ``max_new_tokens``."""
    got = {}
    for on in (False, True):
        tr = trainer(
            tmp_path,
            f"limits-{on}",
            steps=0,
            eval_episodes=1,
            max_new_tokens=8,
            role_sampling={"planner": {"max_new_tokens": 3}},
            eval_role_limits=on,
        )
        tr.train()
        tr.close()
        got[on] = json.loads((tmp_path / f"limits-{on}" / "eval_before.json").read_text())
    assert got[False]["token_limits"] == {"tool": 8, "planner": 8}
    assert got[True]["token_limits"] == {"tool": 8, "planner": 3}


# ------------------------------------------------------------------------------ outputs


def test_run_writes_logs_checkpoints_and_plot(tmp_path):
    tr = trainer(tmp_path, steps=2, eval_episodes=1, plot_every=1, save_final=True)
    tr.train()
    tr.close()
    out = tmp_path / "run"
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    for key in (
        "reward/tool", "reward/planner", "success_rate", "team_reward", "loss", "grad_norm",
        "clip_frac", "time/generation", "time/env", "time/update", "completion_tokens",
    ):  # fmt: skip
        assert key in lines[0], key
    traj = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert {t["train_step"] for t in traj} == {1, 2}
    assert len(traj) == sum(m["samples"] for m in lines)
    assert all("advantage" in t and "reward_parts" in t for t in traj)
    assert (out / "training_curve.png").stat().st_size > 1000
    assert list((out / "tensorboard").iterdir())
    assert json.loads((out / "eval_before.json").read_text())["episodes"] == 1
    assert (out / "eval_after.json").exists()
    refs = json.loads((out / "eval_references.json").read_text())
    assert {"no-op", "oracle"} <= set(refs) and refs["oracle"]["success_rate"] == 1.0
    assert refs["no-op"]["progress_label"] == "distance closed"
    lines = tr.comparison.splitlines()  # the task's measures lead, the shaped reward after
    assert [x.split()[0] for x in lines[2:6]] == ["success", "distance", "team", "mean"]
    assert any(x.split()[:1] == ["oracle"] for x in lines)
    assert any(x.split()[:2] == ["open", "loop"] for x in lines)  # the team's answers as a script
    open_loop = json.loads((out / "eval_open_loop.json").read_text())
    assert open_loop["episodes"] == 1 and open_loop["policies"]
    assert (out / "final" / "shared" / "adapter_config.json").exists()
    ck = latest_checkpoint(out)
    assert ck is not None and ck.name == "step_000002"
    state = json.loads((ck / "state.json").read_text())
    assert state["trajectories_bytes"] == (out / "trajectories.jsonl").stat().st_size
    assert TrainConfig.load(out / "config.yaml") == tr.cfg
    with pytest.raises(FileExistsError):
        Trainer(tr.cfg, models=char_models())


def _comparable(m):
    return {k: v for k, v in m.items() if not k.startswith(("time/", "throughput/"))}


def test_resume_in_process_matches_uninterrupted_run(tmp_path):
    a = trainer(tmp_path, "a", steps=3, cls=ShapedTrainer)
    full = [_comparable(a.train_step()) for _ in range(3)]
    a.close()
    assert all(m["optimizer_steps"] == 1 and m["grad_norm"] > 0 for m in full)
    b = trainer(tmp_path, "b", steps=3, cls=ShapedTrainer)
    b.train_step()
    b.train_step()
    b.close()
    # a run killed during step 3 leaves partial log lines behind
    with open(tmp_path / "b" / "trajectories.jsonl", "a") as fh:
        fh.write('{"partial": true}\n{"trunc')
    with open(tmp_path / "b" / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 3, "partial": true}\n')
    c = ShapedTrainer.resume(tmp_path / "b", models=char_models())
    assert c.step == 2
    third = _comparable(c.train_step())
    c.close()
    assert third == full[2]
    ta = (tmp_path / "a" / "trajectories.jsonl").read_text()
    tb = (tmp_path / "b" / "trajectories.jsonl").read_text()
    assert ta == tb
    ma = [
        _comparable(json.loads(x))
        for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    ]
    mb = [
        _comparable(json.loads(x))
        for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    ]
    assert ma == mb


def test_per_role_adapters_checkpoint_round_trip(tmp_path):
    a = trainer(tmp_path, "a", per_role=True, steps=1, cls=ShapedTrainer)
    a.train_step()
    saved = {pid: _snapshot(pm.model) for pid, pm in a.run.models.items()}
    opt = {pid: pm.optimizer.state_dict() for pid, pm in a.run.models.items()}
    a.close()
    b = ShapedTrainer.resume(tmp_path / "a", models=char_models())
    assert b.step == 1
    for pid, pm in b.run.models.items():
        pm.activate()
        now = _snapshot(pm.model)
        assert all(torch.equal(now[n], saved["planner"][n]) for n in now if ".planner." in n)
        assert all(torch.equal(now[n], saved["tool"][n]) for n in now if ".tool." in n)
        st = pm.optimizer.state_dict()["state"]
        assert st.keys() == opt[pid]["state"].keys() and st
        for k in st:
            assert torch.equal(st[k]["exp_avg"], opt[pid]["state"][k]["exp_avg"])
    b.close()


def test_resume_refuses_changes_that_break_exactness(tmp_path):
    tr = trainer(tmp_path, steps=1)
    tr.train_step()
    tr.close()
    with pytest.raises(ValueError, match="cannot change"):
        Trainer.resume(tmp_path / "run", models=char_models(), lr=0.5)
    longer = Trainer.resume(tmp_path / "run", models=char_models(), steps=2)
    assert longer.cfg.schedule.steps == 2 and longer.step == 1
    longer.close()


def test_a_shared_prefix_is_computed_once_and_changes_nothing():
    """Prompts that start alike (system message, demonstrations, task preamble) share one
    prefill of their common prefix, in generation and in the training forward; values and
    gradients equal a forward of each whole sequence."""
    from adapters.policies import SamplingParams, TransformersPolicy
    from adapters.policies.transformers_policy import prompt_batch

    model, tok = make_char_model(seed=3)
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    preamble = "<|system|>Solve the puzzle and answer after ####, e.g. #### [U,D].\n<|user|>"
    prompts = [enc(preamble + t + "\n<|assistant|>") for t in ("map A", "the map B here", "C")]
    assert prompt_batch(prompts, tok.pad_token_id, "cpu").prefix_len > 32
    comps = [enc("abc"), enc("hello!"), enc("x")]
    weights = torch.randn(3, 6)

    def run(share):
        model.zero_grad()
        lp = completion_logprobs(
            model, prompts, comps, pad_id=tok.pad_token_id, temperature=0.9, share_prompt=share
        )
        (lp * weights).sum().backward()
        return lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    shared, g_shared = run(True)
    full, g_full = run(False)
    assert torch.allclose(shared, full, atol=1e-5)
    for n in g_full:
        err = (g_shared[n] - g_full[n]).norm() / g_full[n].norm().clamp(min=1e-12)
        assert err < 1e-4, (n, float(err))
    # generation: batched with the shared prefix == each prompt alone (greedy), and the first
    # prompt's seeded samples (its row seeds do not depend on the batch) are the same
    policy = TransformersPolicy(model, tok, device="cpu", batch_size=8)
    chats = [[{"role": "user", "content": tok.decode(p)}] for p in prompts]
    for params in (
        SamplingParams(n=1, temperature=0.0, max_new_tokens=6),
        SamplingParams(n=2, temperature=0.8, max_new_tokens=6, seed=11),
    ):
        together = policy.generate(chats, params)
        for i, chat in enumerate(chats if params.greedy else chats[:1]):
            alone = policy.generate([chat], params)[0]
            for a, b in zip(together[i], alone):
                assert a.token_ids == b.token_ids
                assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
