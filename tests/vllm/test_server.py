"""Generation on a real ``vllm serve`` process (the OpenAI-compatible server, CPU, float32).

The server (``conftest.server``) serves the embedded SmolLM2 checkpoint with the flags
:mod:`adapters.policies.vllm_server` documents. Checked: the same samples as the colocated engine
for the same seeds (token ids, text, finish reasons; log-probs to 1e-4); weight and LoRA updates
change the outputs, which then match transformers with the same weights; the ``vllm-server``
rollout backend equals the colocated ``vllm`` backend before and after a sync; a server whose
weights differ from the trainer's is refused at start; and a 2-rank torchrun training run on the
server leaves the trained adapters in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.policies.base import SamplingParams

from .test_backend import _models, _name, _shift, _step
from .test_logprobs import PROMPTS, TOL, hf_logprobs

QUESTION = "What is the capital of France? Answer in one sentence."
GREEDY = SamplingParams(temperature=0, max_new_tokens=16)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def remote(server, hf):
    from adapters.policies.vllm_server import VLLMServerPolicy

    _, tok = hf
    policy = VLLMServerPolicy([server], tokenizer=tok)
    yield policy
    policy.close()


def _same(a, b, tol=1e-4):
    assert len(a) == len(b)
    for row_a, row_b in zip(a, b):
        assert len(row_a) == len(row_b)
        for x, y in zip(row_a, row_b):
            assert (x.token_ids, x.prompt_ids, x.text, x.finish_reason) == (
                y.token_ids,
                y.prompt_ids,
                y.text,
                y.finish_reason,
            )
            assert max((abs(p - q) for p, q in zip(x.logprobs, y.logprobs)), default=0) < tol


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(n=2, temperature=1.0, max_new_tokens=16, seed=5),
        SamplingParams(temperature=0.7, max_new_tokens=12, prompt_seeds=(11, 12)),
        SamplingParams(temperature=0, max_new_tokens=24, stop=(".",)),
    ],
    ids=["seeded", "prompt-seeds", "greedy-stop"],
)
def test_server_samples_equal_the_colocated_engine(engine, remote, params):
    assert remote.max_model_len == engine.max_model_len == 1024
    _same(engine.generate(PROMPTS, params), remote.generate(PROMPTS, params))


def test_full_weight_update_reaches_the_server(remote, hf):
    import torch

    model, _ = hf
    base = remote.generate([QUESTION], GREEDY)[0][0]
    down = {n: p for n, p in model.named_parameters() if n.endswith("mlp.down_proj.weight")}
    saved = {n: p.detach().clone() for n, p in down.items()}
    try:
        assert remote.update_weights({n: torch.zeros_like(p) for n, p in down.items()}) == 30
        changed = remote.generate([QUESTION], GREEDY)[0][0]
        assert changed.token_ids != base.token_ids
        with torch.no_grad():
            for p in down.values():
                p.zero_()
        ref = hf_logprobs(model, changed.prompt_ids, changed.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(ref, changed.logprobs)) < TOL
    finally:
        with torch.no_grad():
            for n, p in down.items():
                p.copy_(saved[n])
        remote.update_weights(saved)
    restored = remote.generate([QUESTION], GREEDY)[0][0]
    assert restored.token_ids == base.token_ids


def test_lora_adapter_versions_reach_the_server(remote, hf, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model

    from adapters.policies.models import load_policy_model
    from adapters.policies.openai_compat import OpenAIAPIError

    model, _ = load_policy_model(None, device="cpu", dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear"), adapter_name="a")
    base = remote.generate([QUESTION], GREEDY)[0][0]
    view = remote.for_adapter("a")
    outputs = []
    for version in (1, 2):
        _step([p for n, p in peft.named_parameters() if "lora_B" in n], version, scale=0.2)
        peft.save_pretrained(str(tmp_path / f"v{version}"))
        remote.update_adapter("a", tmp_path / f"v{version}" / "a")
        out = view.generate([QUESTION], GREEDY)[0][0]
        ref = hf_logprobs(peft, out.prompt_ids, out.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(ref, out.logprobs)) < TOL
        outputs.append(out)
    assert outputs[0].token_ids != base.token_ids or _shift(outputs[0], base) > 0.05
    assert outputs[1].token_ids != outputs[0].token_ids or _shift(outputs[1], outputs[0]) > 0.05
    remote.remove_adapter("a")
    with pytest.raises(OpenAIAPIError, match="404"):
        view.generate([QUESTION], GREEDY)
    assert remote.generate([QUESTION], GREEDY)[0][0].token_ids == base.token_ids


def test_server_backend_equals_colocated_backend_before_and_after_sync(engine, server, tmp_path):
    from adapters.training.backends import VLLMBackend, VLLMServerBackend
    from adapters.training.config import TrainConfig

    cfg = TrainConfig(
        model="smollm2",
        dtype="float32",
        lora_rank=8,
        per_role=True,
        backend="vllm-server",
        vllm_servers=[server],
        output_dir=str(tmp_path / "run"),
    ).resolved(cuda=False)
    models, tok = _models(cfg, ["alpha", "beta"])
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=12, seed=3)
    local = VLLMBackend(cfg, models, tok, "cpu", ["alpha", "beta"], engine=engine)
    remote = VLLMServerBackend(cfg, models, tok, "cpu", ["alpha", "beta"])
    try:
        before = {}
        for pid in ("alpha", "beta"):
            a = local.policies()[pid].generate([QUESTION], params)
            _same(a, remote.policies()[pid].generate([QUESTION], params))
            before[pid] = a
        alpha = models["alpha"]
        _step([p for p in alpha.params if "lora_B" in _name(alpha, p)], 7)
        local.sync(["alpha"])
        remote.sync(["alpha"])
        after = local.policies()["alpha"].generate([QUESTION], params)
        _same(after, remote.policies()["alpha"].generate([QUESTION], params))
        assert [c.token_ids for c in after[0]] != [c.token_ids for c in before["alpha"][0]]
        assert list((tmp_path / "run" / "vllm-sync").iterdir())  # adapters went through there
    finally:
        local.close()
        remote.close()


def test_server_with_other_weights_is_refused(server, tmp_path):
    import torch

    from adapters.training.backends import VLLMServerBackend
    from adapters.training.config import TrainConfig

    cfg = TrainConfig(
        model="smollm2",
        dtype="float32",
        lora_rank=0,
        backend="vllm-server",
        vllm_servers=[server],
        output_dir=str(tmp_path / "run"),
    ).resolved(cuda=False)
    models, tok = _models(cfg, ["alpha"])
    with torch.no_grad():
        for n, p in models["shared"].model.named_parameters():
            if n.endswith("mlp.down_proj.weight"):
                p.mul_(3.0)
    with pytest.raises(RuntimeError, match="logprobs-mode processed_logprobs"):
        VLLMServerBackend(cfg, models, tok, "cpu", ["alpha"])


def _train_on_server(server, run, *args, via=()):
    """The CLI with token-shaped rewards (tests/adapters/dist_worker.py) on 3 x 3 one-turn path
    planning, the embedded model with LoRA, generating on ``server``; ``via``: a launcher
    (torchrun) before ``-m tests.adapters.dist_worker``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, *via, "-m", "tests.adapters.dist_worker", "cli", "--env", "plan_path"]
    for kv in ("height=3", "width=3", "min_distance=2", "wall_density=0.0", "max_turns=1"):
        cmd += ["--env-config", kv]
    cmd += ["--model", "smollm2", "--dtype", "float32", "--lora-rank", "8"]
    cmd += ["--backend", "vllm-server", "--vllm-servers", server]
    cmd += ["--instances-per-step", "2", "--candidates", "2", "--max-new-tokens", "8"]
    cmd += ["--eval-episodes", "0", "--demos", "0", "--lr", "1e-2", "--no-progress"]
    cmd += ["--init", "none"]  # the base model: the grid settings' CPU cold start needs trl
    cmd += [*args, "--output-dir", str(run)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]


def test_two_rank_training_on_the_server_leaves_the_trained_adapters_there(server, hf, tmp_path):
    """``torchrun --nproc-per-node 2`` with ``--backend vllm-server``: per-role LoRA adapters,
    rewards shaped from the tokens (tests/adapters/dist_worker.py) so that both steps update;
    rank 0 pushes the adapters. Afterwards the server's adapter generates exactly what the
    exported final adapter computes in transformers, and differs from the base model."""
    pytest.importorskip(
        "pettingzoo",
        reason="the trainer's envs need the project's dependencies in this venv: "
        "bash scripts/setup_vllm.sh --train",
    )
    import torch
    from peft import PeftModel

    from adapters.policies.models import load_policy_model
    from adapters.policies.vllm_server import VLLMServerPolicy

    run = tmp_path / "run"
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    # one optimizer step: approx_kl compares the server's log-probs with the not-yet-updated policy
    _train_on_server(
        server, run, "--per-role", "--steps", "2", "--ppo-minibatches", "1", via=torchrun
    )
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["world_size"] for r in rows] == [2.0, 2.0]
    assert all(r["optimizer_steps"] >= 1 for r in rows)
    assert rows[0]["approx_kl"] < 1e-6  # the server's log-probs are the trainer's

    model, tok = load_policy_model(None, device="cpu", dtype=torch.float32)
    remote = VLLMServerPolicy([server], tokenizer=tok)
    try:
        for role in ("tool", "planner"):
            peft = PeftModel.from_pretrained(model, str(run / "final" / role))
            assert role in remote.adapters  # loaded by the training run
            c = remote.for_adapter(role).generate([QUESTION], GREEDY)[0][0]
            ref = hf_logprobs(peft, c.prompt_ids, c.token_ids, 1.0)
            assert max(abs(a - b) for a, b in zip(ref, c.logprobs)) < TOL
            with peft.disable_adapter():  # the base model: the adapter moved the log-probs
                untrained = hf_logprobs(peft, c.prompt_ids, c.token_ids, 1.0)
            assert max(abs(a - b) for a, b in zip(untrained, c.logprobs)) > 10 * TOL
            model = peft.unload()
    finally:
        remote.close()


def test_bounded_staleness_on_the_server(server, tmp_path):
    """``--max-staleness 1`` with ``--backend vllm-server`` (one process): the rollouts produced
    ahead are generated by the server with the weights it held then, so from step 2 on every
    trained sample lags the policy by exactly one version, its recorded version says which, and
    the update applies the truncated importance weight (``is_weight_mean`` logged)."""
    pytest.importorskip(
        "pettingzoo",
        reason="the trainer's envs need the project's dependencies in this venv: "
        "bash scripts/setup_vllm.sh --train",
    )
    run = tmp_path / "run"
    _train_on_server(server, run, "--steps", "3", "--max-staleness", "1")
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["lag/max"] for r in rows] == [0.0, 1.0, 1.0]
    assert all("is_weight_mean" in r for r in rows[1:])
    traj = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert {(t["train_step"], t["policy_version"]) for t in traj} == {(1, 0), (2, 0), (3, 1)}
