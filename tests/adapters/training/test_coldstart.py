"""The oracle cold start: examples, ``python -m adapters.sft``, ``--init`` (tiny model, toy
grid)."""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("trl")

import envs  # noqa: E402
from adapters.policies import TransformersPolicy  # noqa: E402
from adapters.policies.models import load_base_model  # noqa: E402
from adapters.policies.specs import parse_policy_spec  # noqa: E402
from adapters.training.coldstart import apply_init, oracle_examples  # noqa: E402

from ..conftest import TINY_PLAN_PATH  # noqa: E402

TOY = {**TINY_PLAN_PATH, "height": 4, "width": 4, "prompt_style": "compact"}


def test_examples_are_the_prompts_the_policy_sees_on_train_instances_only():
    prefix = [{"role": "system", "content": "be brief"}]
    ex = oracle_examples("plan_path", TOY, 3, seed=0, prefix=prefix)
    assert [e["role"] for e in ex] == ["tool", "planner"] * 3  # the oracle solves at turn 1
    raw = envs.make("plan_path", **TOY).unwrapped
    for e in ex:
        raw.reset(seed=e["seed"], options={"split": "train"})
        assert raw.instance_id == e["instance_id"]
        if e["role"] == "planner":
            raw.step(raw.oracle("tool"))
        assert e["prompt"] == [
            *prefix,
            {"role": "user", "content": raw.observe(e["role"])["prompt"]},
        ]
        assert e["completion"] == [{"role": "assistant", "content": raw.oracle(e["role"])}]
    # the tool's completion is a search over the map copied from the prompt, not an answer
    tool = ex[0]["completion"][0]["content"]
    assert "deque" in tool and "def solve(m)" in tool
    assert tool.splitlines()[-2] == 'print("[" + ",".join(solve(LEVEL)) + "]")'  # after the map
    assert ex[1]["completion"][0]["content"].startswith("The tool's proposal solves it.")
    only = oracle_examples("plan_path", TOY, 3, seed=0, roles=["tool"])
    assert [e["role"] for e in only] == ["tool"] * 3
    # train-split instances only: none of them is a validation instance
    val = {r["instance_id"] for r in oracle_examples("plan_path", TOY, 3, seed=0)}
    raw.reset(seed=1, options={"split": "val"})
    assert raw.instance_id not in val


def _oracle_nll(model, tok, examples) -> float:
    """Mean negative log-likelihood per token of the oracle's completions under ``model``, each
    after the exact prompt the policy sees."""
    from adapters.training.logprobs import completion_logprobs

    pol = TransformersPolicy(model, tok, device="cpu")
    total = count = 0.0
    for e in examples:
        prompt = pol.encode_prompt(e["prompt"])
        text = e["completion"][0]["content"]
        comp = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        with torch.no_grad():
            lp = completion_logprobs(model, [prompt], [comp], pad_id=tok.pad_token_id)[0]
        total -= float(lp.sum())
        count += len(comp)
    return total / count


@pytest.fixture(scope="module")
def char_checkpoint(tmp_path_factory):
    """The tests' char-level chat model saved as a local checkpoint (a --model PATH)."""
    from ..conftest import make_char_model

    path = tmp_path_factory.mktemp("char-model")
    model, tok = make_char_model(seed=0, max_position_embeddings=4096)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_sft_command_exports_trains_and_moves_the_policy_toward_the_oracle(
    tmp_path, char_checkpoint
):
    from datasets import load_dataset

    from adapters.sft import main

    out, data = tmp_path / "cs", tmp_path / "data.jsonl"
    args = ["--env", "plan_path", "--model", str(char_checkpoint), "--device", "cpu"]
    args += ["--output", str(out), "--export", str(data), "--no-bf16", "--max-length", "4096"]
    args += [f"--env-config={k}={v}" for k, v in TOY.items()]
    args += ["--episodes", "12", "--roles", "tool", "--epochs", "6", "--lr", "5e-2"]
    args += ["--batch-size", "4", "--grad-accum", "1"]
    assert main(args) == 0
    ds = load_dataset("json", data_files=str(data))["train"]
    assert len(ds) == 12 and set(ds["role"]) == {"tool"}
    assert ds[0]["prompt"][-1]["role"] == "user" and ds[0]["completion"][0]["role"] == "assistant"
    card = json.loads((out / "coldstart.json").read_text())
    assert card["examples"] == 12 and card["optimizer_steps"] == 18
    assert card["losses"][-1]["loss"] < card["losses"][0]["loss"] / 2
    # unseen (validation) instances: the oracle's completions become far more likely
    val = oracle_examples("plan_path", TOY, 4, seed=77, roles=["tool"], split="val")
    base, tok = load_base_model(str(char_checkpoint), "cpu", "float32")
    before = _oracle_nll(base, tok, val)
    tuned, _ = load_base_model(str(char_checkpoint), "cpu", "float32")
    after = _oracle_nll(apply_init(tuned, out), tok, val)
    assert after < 0.5 * before, (before, after)


def test_init_starts_training_from_the_merged_cold_start(tmp_path, char_checkpoint):
    from adapters.sft import main
    from adapters.training.config import TrainConfig
    from adapters.training.trainer import Trainer

    out = tmp_path / "cs"
    args = ["--env", "plan_path", "--model", str(char_checkpoint), "--device", "cpu"]
    args += ["--output", str(out), "--max-length", "4096"]
    args += [f"--env-config={k}={v}" for k, v in TOY.items()]
    args += ["--episodes", "2", "--max-steps", "2", "--no-bf16", "--lr", "5e-2"]
    assert main(args) == 0
    merged, _ = load_base_model(str(char_checkpoint), "cpu", "float32")
    merged = apply_init(merged, out)
    cfg = TrainConfig(
        env="plan_path",
        env_config=TOY,
        model=str(char_checkpoint),
        init=str(out),
        lora_rank=4,
        steps=0,
        eval_episodes=0,
        device="cpu",
        progress=False,
        save_final=False,
        output_dir=str(tmp_path / "run"),
    )
    tr = Trainer(cfg, log=lambda s: None)
    want = merged.state_dict()
    got = {
        k.replace(".base_layer", ""): v
        for k, v in tr.run.models["shared"].model.state_dict().items()
    }
    for name, value in want.items():
        assert torch.equal(got[name], value), name
    # the vLLM backend loads its engines from that merged base, not from the --model checkpoint
    # (the LoRA deltas it receives apply to the merged weights)
    from types import SimpleNamespace

    from adapters.training.backends import VLLMBackend

    fake = SimpleNamespace(cfg=tr.cfg, _tmp=tmp_path / "vllm")
    exported_base = VLLMBackend._base_checkpoint(fake, tr.run.models["shared"], tr.run.tokenizer)  # type: ignore[arg-type]
    assert exported_base != str(char_checkpoint)
    for_vllm, _ = load_base_model(exported_base, "cpu", "float32")
    for name, value in for_vllm.state_dict().items():
        assert torch.equal(value, want[name]), name
    plain = SimpleNamespace(cfg=tr.cfg.replace(init="none"), _tmp=tmp_path / "vllm2")
    assert VLLMBackend._base_checkpoint(plain, tr.run.models["shared"], tr.run.tokenizer) == str(  # type: ignore[arg-type]
        char_checkpoint
    )
    # the exported adapter names its start, and loading it (--policy DIR) merges that first
    tr.export(tmp_path / "final")
    tr.close()
    exported = tmp_path / "final" / "shared"
    assert json.loads((exported / "init.json").read_text()) == {"init": str(out.resolve())}
    loaded = parse_policy_spec(str(exported), device="cpu").model.state_dict()
    for name, value in want.items():  # the RL adapter is fresh (B = 0): the cold start alone
        assert torch.allclose(loaded[name], value), name
    shutil.rmtree(out)
    with pytest.raises(ValueError, match="--init adapter"):
        parse_policy_spec(str(exported), device="cpu")
    with pytest.raises(ValueError, match=r"adapter_config\.json"):
        TrainConfig(init=str(tmp_path / "nothing-here")).resolved()
