"""The int8 and float16-weight generation copies (adapters.policies.quantize): close to float32,
follow updates, and chosen (fp16, by ``auto``) only where bfloat16 is emulated."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from adapters.policies import SamplingParams, TransformersPolicy  # noqa: E402
from adapters.policies import quantize as q  # noqa: E402
from adapters.policies.models import CPU_BF16_ENV, tiny_model  # noqa: E402

pytestmark = pytest.mark.skipif(not q.available(), reason="this torch has no fbgemm int8 kernels")


def test_int8_linear_is_close_and_follows_its_weight():
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 40)
    x = torch.randn(5, 96)
    net = q.quantize_linears(torch.nn.Sequential(lin))
    assert type(net[0]).__name__ == "_Int8Linear"
    assert net[0].weight is lin.weight  # the float parameter is kept, shared
    err = (net(x) - torch.nn.functional.linear(x, lin.weight, lin.bias)).abs().max()
    assert 0 < err < 0.05
    half = net(x.bfloat16())  # a bfloat16 model's activations go through the float32 kernels
    assert half.dtype == torch.bfloat16 and (half.float() - net(x)).abs().max() < 0.05
    with torch.no_grad():
        lin.weight.mul_(-2.0)
    stale = net(x)
    assert q.repack(net) == 1
    want = torch.nn.functional.linear(x, lin.weight, lin.bias)
    assert (net(x) - want).abs().max() < 0.1 < (stale - want).abs().max()


def test_fp16_linear_is_float32_for_large_calls_and_close_for_small_ones():
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 40)
    net = q.quantize_linears(torch.nn.Sequential(lin), "fp16")
    assert type(net[0]).__name__ == "_Fp16Linear" and net[0].weight is lin.weight
    ref = torch.nn.functional.linear
    small = torch.randn(2, 3, 96)  # 6 rows: the float16 kernels
    err = (net(small) - ref(small, lin.weight, lin.bias)).abs().max()
    assert 0 < err < 1e-2
    big = torch.randn(2, q.FP16_MAX_ROWS, 96)  # 32 rows: F.linear on the float weight
    assert torch.equal(net(big), ref(big, lin.weight, lin.bias))
    nobias = q.quantize_linears(torch.nn.Sequential(torch.nn.Linear(96, 8, bias=False)), "fp16")
    assert (nobias(small) - ref(small, nobias[0].weight)).abs().max() < 1e-2
    with torch.no_grad():
        lin.weight.mul_(-2.0)
    stale = net(small)
    assert q.repack(net) == 1
    want = ref(small, lin.weight, lin.bias)
    assert (net(small) - want).abs().max() < 1e-2 < (stale - want).abs().max()
    with pytest.raises(ValueError, match="kind"):
        q.quantize_linears(torch.nn.Sequential(torch.nn.Linear(4, 4)), "int4")


def test_auto_is_fp16_only_for_float32_where_bfloat16_is_emulated(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setenv(CPU_BF16_ENV, "emulated")
    assert q.resolve_quantize("auto", cpu, torch.float32) == "fp16"
    assert q.resolve_quantize("int8", cpu, torch.float32) == "int8"
    assert q.resolve_quantize("auto", cpu, torch.bfloat16) == "none"
    assert q.resolve_quantize("none", cpu, torch.float32) == "none"
    assert q.resolve_quantize("auto", torch.device("cuda"), torch.float32) == "none"
    for kind in ("int8", "fp16"):
        with pytest.raises(ValueError, match="CPU only"):
            q.resolve_quantize(kind, torch.device("cuda"), torch.float32)
    with pytest.raises(ValueError, match="use one of"):
        q.resolve_quantize("int4", cpu, torch.float32)
    assert q.resolve_quantize("auto", cpu, torch.float32, compiled=True) == "none"
    with pytest.raises(ValueError, match="compile_decode"):
        q.resolve_quantize("fp16", cpu, torch.float32, compiled=True)
    monkeypatch.setattr(q, "available", lambda kind="int8": False)
    assert q.resolve_quantize("auto", cpu, torch.float32) == "none"


def test_fp16_policy_generates_what_the_float_model_does():
    """Greedy decoding with float16 weights in the decode steps (prefill in float32) gives the
    float32 model's tokens on a random tiny model."""
    model, tok = tiny_model(seed=1)
    qmodel, _ = tiny_model(seed=1)
    params = SamplingParams(temperature=0, max_new_tokens=12)
    prompts = ["go left and then up", "a longer prompt with more words", "x"]
    ref = TransformersPolicy(model, tok, device="cpu").generate(prompts, params)
    pol = TransformersPolicy(qmodel, tok, device="cpu", quantize="fp16")
    assert pol.quantize == "fp16" and type(pol.model.lm_head).__name__ == "_Fp16Linear"
    got = pol.generate(prompts, params)
    assert [c[0].token_ids for c in got] == [c[0].token_ids for c in ref]


def test_int8_policy_generates_near_the_float_model():
    """A random tiny model's next-token distributions barely move under int8 weights: the
    first token's log-probs of a batch stay within a few hundredths of a nat."""
    model, tok = tiny_model(seed=1)
    qmodel, _ = tiny_model(seed=1)
    params = SamplingParams(temperature=0, max_new_tokens=1)
    prompts = ["go left and then up", "a longer prompt with more words", "x"]
    ref = TransformersPolicy(model, tok, device="cpu").generate(prompts, params)
    pol = TransformersPolicy(qmodel, tok, device="cpu", quantize="int8")
    assert pol.quantize == "int8"
    got = pol.generate(prompts, params)
    ids = tok(prompts[0], return_tensors="pt").input_ids
    with torch.no_grad():
        a = torch.log_softmax(model(ids).logits[0, -1], -1)
        b = torch.log_softmax(qmodel(ids).logits[0, -1], -1)
    assert (a - b).abs().max() < 0.1
    assert [len(c[0].token_ids) for c in got] == [len(c[0].token_ids) for c in ref] == [1, 1, 1]


@pytest.mark.parametrize("kind", ["int8", "fp16"])
def test_generation_copy_requantizes_after_an_update(kind):
    pytest.importorskip("peft")
    from adapters.training.backends import GenerationCopy
    from adapters.training.config import TrainConfig
    from adapters.training.policy_models import build_policy_models

    model, tok = tiny_model(seed=2)
    cfg = TrainConfig(env="plan_path", lora_rank=4, device="cpu").resolved()
    pm = build_policy_models(cfg, ["tool", "planner"], model)["shared"]
    copy = GenerationCopy(pm, torch.float32)
    TransformersPolicy(copy.model, tok, device="cpu", quantize=kind)  # quantizes the copy
    ids = tok("move the box", return_tensors="pt").input_ids[:, :4]  # few rows: fp16's kernels
    with torch.no_grad():
        for p in pm.params:  # an "update" of the adapter
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.5)
        stale = copy.model(ids).logits[0, -1]
        copy.refresh()
        fresh = copy.model(ids).logits[0, -1]
        want = pm.model(ids).logits[0, -1]
    assert (fresh - want).abs().max() < 0.1 * (stale - want).abs().max()


def test_run_header_names_the_generation_weights():
    from types import SimpleNamespace

    from adapters.policies import ScriptedPolicy
    from adapters.train import _generation_note

    model, tok = tiny_model(seed=0)
    pol = TransformersPolicy(model, tok, device="cpu", quantize="fp16")
    trainer = SimpleNamespace(run=SimpleNamespace(policies={"shared": pol}))
    assert _generation_note(trainer) == ", generation float32 + fp16"
    scripted = SimpleNamespace(run=SimpleNamespace(policies={"p": ScriptedPolicy(lambda o: "x")}))
    assert _generation_note(scripted) == ""
