"""Compiled decode steps over a static cache (adapters.policies.graphs) against the eager loop.

On a CPU the step is traced with torch.compile's ``eager`` backend (``fullgraph=True``): what
is checked is that the whole step traces without a graph break (what a CUDA graph needs) and that
decoding through the static cache gives the eager loop's tokens and log-probs. The CUDA graphs
themselves run in ``tests/gpu`` and ``scripts/gpu_check.sh``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from adapters.policies import SamplingParams, TransformersPolicy  # noqa: E402
from adapters.policies.graphs import (  # noqa: E402
    GraphDecoder,
    cache_shape,
    check_mode,
    supports,
)

from ..conftest import make_char_model  # noqa: E402

PROMPTS = [
    "hello",
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a longer question?"}],
    "hello there, a third prompt",
]


def _pair(seed: int = 1, **kw):
    model, tok = make_char_model(seed=seed, eos_bias=3.0, max_position_embeddings=2048)
    eager = TransformersPolicy(model, tok, device="cpu", batch_size=8, **kw)
    graph = TransformersPolicy(model, tok, device="cpu", batch_size=8, compile_decode="eager", **kw)
    return eager, graph


@pytest.mark.parametrize("cpu_decoding", [True, False])
def test_static_steps_give_the_eager_tokens_and_logprobs(cpu_decoding):
    eager, graph = _pair(cpu_decoding=cpu_decoding)
    reasons = set()
    for params in (
        SamplingParams(temperature=0, max_new_tokens=10),
        SamplingParams(n=3, max_new_tokens=10, seed=3),
        SamplingParams(n=2, max_new_tokens=10, seed=5, top_k=5, top_p=0.9, temperature=0.7),
    ):
        ref = [c for cs in eager.generate(PROMPTS, params) for c in cs]
        got = [c for cs in graph.generate(PROMPTS, params) for c in cs]
        reasons |= {c.finish_reason for c in ref}
        assert [c.token_ids for c in got] == [c.token_ids for c in ref]
        assert [c.finish_reason for c in got] == [c.finish_reason for c in ref]
        for a, b in zip(got, ref):
            assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0) < 1e-4
    # rows ended early (EOS) and ran to the limit in one chunk: the static batch kept them all
    assert reasons == {"stop", "length"}
    # one compiled shape per (rows, positions) bucket, reused across calls
    assert graph._graphs is not None and len(graph._graphs.shapes) <= 2


def test_segments_and_evaluation_scope_decode_the_same_on_static_steps():
    eager, graph = _pair()
    params = SamplingParams(n=2, max_new_tokens=30, seed=11)
    whole = [c for cs in eager.generate(PROMPTS, params) for c in cs]
    parts = [p for ps in graph.start_partials(PROMPTS, params) for p in ps]
    while not all(p.finished for p in parts):
        parts = graph.extend(parts, params, 7)
    done = [graph.finish_partial(p, params) for p in parts]
    assert [c.token_ids for c in done] == [c.token_ids for c in whole]
    greedy = SamplingParams(temperature=0, max_new_tokens=16)
    with graph.evaluation_scope(batch_size=16):
        first = graph.generate(PROMPTS, greedy)
        second = graph.generate(PROMPTS, greedy)
    ref = eager.generate(PROMPTS, greedy)
    for out in (first, second):
        assert [[c.token_ids for c in cs] for cs in out] == [
            [c.token_ids for c in cs] for cs in ref
        ]


def test_the_step_traces_whole_and_compiles_each_shape_once():
    """``fullgraph=True``: a graph break would raise here, not fall back to eager steps. The step
    function's compiled code is shared by every policy (another model's weights and cache here):
    what it computes must be this policy's."""
    from torch._dynamo.utils import counters

    eager, graph = _pair(seed=2)
    counters.clear()
    params = SamplingParams(temperature=0, max_new_tokens=10)
    out = graph.generate(PROMPTS, params)
    again = graph.generate(PROMPTS[:2], params)  # 2 rows: the same (8, L) shape
    assert graph._graphs is not None and len(graph._graphs.shapes) == 1
    assert sum(counters["graph_break"].values()) == 0
    assert [c.token_ids for cs in out for c in cs] == [
        c.token_ids for cs in eager.generate(PROMPTS, params) for c in cs
    ]
    assert [c.token_ids for cs in again for c in cs] == [c.token_ids for cs in out[:2] for c in cs]


def test_evicted_shapes_are_rebuilt_and_decode_the_same():
    eager, graph = _pair(seed=4)
    assert graph._graphs is not None
    graph._graphs.max_shapes = 1
    for budget in (10, 300, 10):  # (8, 256), (8, 512), (8, 256) again
        params = SamplingParams(n=2, max_new_tokens=budget, seed=budget)
        got = [c.token_ids for cs in graph.generate(PROMPTS, params) for c in cs]
        assert got == [c.token_ids for cs in eager.generate(PROMPTS, params) for c in cs]
        assert len(graph._graphs.shapes) == 1
    assert graph._graphs.shapes == [(8, 256)]


def test_cache_shapes_modes_and_support():
    assert cache_shape(1, 1) == (8, 256)
    assert cache_shape(8, 257) == (8, 512)
    assert cache_shape(33, 512) == (64, 512)
    with pytest.raises(ValueError, match="rows and positions"):
        cache_shape(0, 10)
    with pytest.raises(ValueError, match="compile_decode must be one of"):
        check_mode("fast")
    model, tok = make_char_model()
    with pytest.raises(ValueError, match="compile_decode must be one of"):
        TransformersPolicy(model, tok, device="cpu", compile_decode="graphs")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        TransformersPolicy(model, tok, device="cpu", compile_decode="cudagraphs")
    with pytest.raises(ValueError, match="other than 'off'"):
        GraphDecoder(model, "off", "cache", True)
    assert supports(model)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    windowed = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            use_sliding_window=True,
            sliding_window=16,
            max_window_layers=1,
        )
    )
    assert not supports(windowed)  # a sliding-window layer: the eager loop decodes
    policy = TransformersPolicy(windowed, tok, device="cpu", compile_decode="eager")
    assert policy._graphs is None
    params = SamplingParams(temperature=0, max_new_tokens=4)
    assert len(policy.generate(PROMPTS[:1], params)[0][0].token_ids) >= 1


def test_a_refreshed_generation_copy_is_what_the_compiled_steps_read(tmp_path, graph_starts):
    """The trainer refreshes its merged copy in place after each update: the compiled step (and
    a recorded graph, on CUDA) must read the new weights. Through the trainer's own wiring."""
    pytest.importorskip("peft")
    from adapters.training.trainer import Trainer

    from ..conftest import char_models, tiny_train_config

    cfg = tiny_train_config(tmp_path, generation_model="merged", compile_decode="eager")
    tr = Trainer(cfg, models=char_models(seed=3), log=lambda s: None)
    copy = tr.run.backend.copies["shared"]
    copy.refresh()
    compiled = TransformersPolicy(
        copy.model, tr.run.tokenizer, device="cpu", compile_decode="eager"
    )
    eager = TransformersPolicy(copy.model, tr.run.tokenizer, device="cpu")
    greedy = SamplingParams(temperature=0, max_new_tokens=12)

    def tokens(policy):
        return [c.token_ids for cs in policy.generate(PROMPTS, greedy) for c in cs]

    before = tokens(compiled)
    assert before == tokens(eager)
    pm = tr.run.models["shared"]
    with torch.no_grad():  # an "update" of the adapter, then the trainer's refresh
        for p in pm.params:
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.5)
    copy.refresh()
    after = tokens(compiled)
    assert after == tokens(eager) != before
    result = tr.rollout(1)  # the trainer's own policies decode on compiled steps
    assert result.samples and graph_starts and set(graph_starts) == {"eager"}
    tr.close()


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (scripts/gpu_check.sh)"
)
@pytest.mark.parametrize("mode", ["on", "cudagraphs"])
def test_cuda_graphs_decode_the_eager_tokens_and_follow_weight_updates(mode):
    model, tok = make_char_model(seed=1, eos_bias=3.0, max_position_embeddings=2048)
    model = model.to("cuda")
    eager = TransformersPolicy(model, tok, device="cuda", batch_size=8)
    graph = TransformersPolicy(model, tok, device="cuda", batch_size=8, compile_decode=mode)

    def run(policy, params):
        return [c for cs in policy.generate(PROMPTS, params) for c in cs]

    for params in (
        SamplingParams(temperature=0, max_new_tokens=16),
        SamplingParams(n=3, max_new_tokens=16, seed=3),
    ):
        for _ in range(2):  # the second call replays the recorded graphs
            ref, got = run(eager, params), run(graph, params)
            assert [c.token_ids for c in got] == [c.token_ids for c in ref]
            for a, b in zip(got, ref):
                assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0) < 1e-3
    greedy = SamplingParams(temperature=0, max_new_tokens=16)
    before = [c.token_ids for c in run(graph, greedy)]
    with torch.no_grad():  # weights changed in place, as the generation copy's refresh does
        for p in model.parameters():
            p.mul_(1.5)
    after = [c.token_ids for c in run(graph, greedy)]
    assert after == [c.token_ids for c in run(eager, greedy)] != before
