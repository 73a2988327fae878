"""Generation speed of the transformers backend, and the update's time per token.

    python benchmarks/generation.py --model smollm2 --env sokoban
    python benchmarks/generation.py --device cuda --rows 16,64,128 --cache 1000
    python benchmarks/generation.py --quick                      # seconds: the tiny model

Everything below is measured in one run, on one device, so the ratios compare like with like:

* ``generate``: new tokens per second of :class:`~adapters.policies.TransformersPolicy` on the
  setting's validation prompts (the CPU training run's compact prompts), greedy and sampled
  (temperature 1, the training recipe's sampling), for the policy as training holds it (a LoRA
  adapter on the float32 model: ``adapter fp32``) and for the generation copy the trainer now
  samples from (:class:`~adapters.training.backends.GenerationCopy`: the adapter merged, in
  bfloat16 where the device has it: ``merged``). The sampled/greedy ratio at the same length
  (every row generated to the token budget in both modes) shows what the draw costs; at natural
  lengths it also holds the difference in what the two modes write; merged/adapter shows what
  the copy gains.
* ``decode step``: milliseconds of one decode step (one new token for every row) after a
  ``--cache``-token prompt, at each ``--rows``, for both.
* ``CPU decoding`` (CPU only): new tokens per second of the merged copy with transformers' own
  attention and cache (``TransformersPolicy(cpu_decoding=False)``) and with
  :mod:`adapters.policies.decoding`, on the distinct prompts (greedy: padded rows, so a mask) and
  on one prompt sampled ``--samples`` times (equal rows: no mask, the case of tree sampling's
  candidates), every row to the token budget; and one decode step at each ``--rows`` without a
  mask, for both, and for transformers' ``StaticCache`` of fixed length (the cache CUDA graphs
  need; on a CPU it only adds attention over the unused positions, so its ratio says whether
  the CPU should use one).
* ``compiled`` (``--compile``, default ``on``): the merged copy's decode step compiled over a
  static cache (:mod:`adapters.policies.graphs`; CUDA graphs on CUDA) at each ``--rows``, and
  its greedy tokens/s beside the eager loop's on the same prompts (the first call, which
  compiles, timed apart; how many completions equal the eager loop's).
* ``packed weights`` (CPU only, ``--packed``, default ``fp16``): the generation copy in float32
  (what a CPU without native bfloat16 generates with) beside the same copy with float16-weight
  or int8 linear layers (:mod:`adapters.policies.quantize`): one decode step at 1, 4 and each
  ``--rows``, and greedy tokens/s on the prompts with how many completions equal float32's.
  Under ``MAS_CPU_BF16=emulated`` it measures the AVX2 path.
* ``update``: seconds per 1,000 tokens of one forward and backward pass of the LoRA policy over
  prompt + completion sequences (the update's unit of work), in float32 and under bfloat16
  autocast.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _prompts(env_id: str, n: int, env_config: dict[str, Any]) -> list[str]:
    import envs

    raw = envs.make(env_id, **env_config).unwrapped
    out = []
    for i in range(n):
        raw.reset(seed=i, options={"split": "val"})
        out.append(raw.observe(raw.agent_selection)["prompt"])
    return out


def _policy_models(model: Any, rank: int) -> Any:
    import torch

    from adapters.training.config import TrainConfig
    from adapters.training.policy_models import build_policy_models

    cfg = TrainConfig(env="plan_path", lora_rank=rank, device="cpu").resolved()
    pm = build_policy_models(cfg, ["tool", "planner"], model)["shared"]
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a trained-looking adapter (B = 0 would merge to nothing)
        for p in pm.params:
            p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    return pm


def _gen_rate(
    policy: Any, prompts: list[str], params: Any, fixed_length: bool = False
) -> tuple[float, int]:
    """New tokens per second of one ``generate`` call; ``fixed_length``: no row ends before the
    token budget (EOS ignored), so two runs generate the same number of tokens."""
    if fixed_length:
        policy.eos_ids = frozenset()
    t = time.perf_counter()
    out = policy.generate(prompts, params)
    dt = time.perf_counter() - t
    tokens = sum(len(c.token_ids) for cs in out for c in cs)
    return tokens / dt, tokens


def _decode_ms(
    module: Any,
    rows: int,
    cache: int,
    device: Any,
    steps: int = 8,
    kind: str = "transformers",
    mode: str = "on",
) -> float:
    """Median milliseconds of a decode step over ``rows`` rows after ``cache`` positions, with
    ``kind``: transformers' attention and ``DynamicCache`` (``transformers``), its ``StaticCache``
    of ``cache + steps`` positions (``static``), :mod:`adapters.policies.decoding` (``ours``), or
    the compiled step over a static cache of :mod:`adapters.policies.graphs` (``compiled``,
    compiled with ``mode``; CUDA graphs on CUDA), timed after three warm-up steps (compilation,
    graph recording)."""
    import torch
    from transformers import DynamicCache, StaticCache

    from adapters.policies.decoding import decode_cache, use_decode_attention
    from adapters.policies.graphs import GraphDecoder
    from adapters.policies.models import cache_keyword

    use_decode_attention(module, kind == "ours")
    kw = cache_keyword(module)
    ids = torch.randint(100, 20000, (1, cache), device=device)
    warmup = 3 if kind == "compiled" else 0
    with torch.inference_mode():
        if kind == "static":
            kv = StaticCache(config=module.config, max_cache_len=cache + steps)
        elif kind == "ours":
            kv = decode_cache(module.config)
        else:
            kv = DynamicCache(config=module.config)
        module(input_ids=ids, use_cache=True, logits_to_keep=1, **{kw: kv})
        tok = torch.randint(100, 20000, (rows, 1), device=device)
        if kind == "compiled":
            graph = GraphDecoder(module, mode, kw, keep_kw=True)
            zeros = torch.zeros(rows, dtype=torch.long, device=device)
            attn = torch.ones((rows, cache), dtype=torch.long, device=device)
            run = graph.start(kv, zeros, attn, zeros + cache, budget=warmup + steps)
        else:
            kv.reorder_cache(torch.zeros(rows, dtype=torch.long, device=device))
        times = []
        for i in range(warmup + steps):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            if kind == "compiled":
                run.step(tok[:, 0])
            else:
                pos = torch.full((rows, 1), cache + i, device=device)
                module(
                    input_ids=tok, position_ids=pos, use_cache=True, logits_to_keep=1, **{kw: kv}
                )
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    times = sorted(times[warmup:])
    return 1000 * times[len(times) // 2]


def _compiled_rows(module: Any, tok: Any, prompts: list[str], args: Any, device: Any) -> None:
    """The merged copy with compiled decode steps (``args.compile``) beside the eager loop
    :class:`~adapters.policies.TransformersPolicy` runs on the device (on a CPU the decode path
    of :mod:`adapters.policies.decoding`, elsewhere transformers' own): one decode step at each
    ``--rows``, greedy tokens/s on the prompts (the first call, which compiles, timed apart) and
    how many completions equal the eager loop's."""
    from adapters.policies import SamplingParams, TransformersPolicy

    eager_kind = "ours" if device.type == "cpu" else "transformers"
    print(
        f"{'merged copy, decode steps':<34}{'eager':>16}{'compile ' + args.compile:>16}{'ratio':>8}"
    )
    for rows in [int(r) for r in args.rows.split(",")]:
        ms = _decode_ms(module, rows, args.cache, device, kind=eager_kind)
        c = _decode_ms(module, rows, args.cache, device, kind="compiled", mode=args.compile)
        label = f"decode step, {rows} rows (ms)"  # a static cache; CUDA graphs on CUDA
        print(f"{label:<34}{ms:>16.2f}{c:>16.2f}{ms / c:>8.2f}")
    params = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)
    eager = TransformersPolicy(module, tok, device=device, batch_size=len(prompts))
    graphs = TransformersPolicy(
        module, tok, device=device, batch_size=len(prompts), compile_decode=args.compile
    )
    t = time.perf_counter()
    first = graphs.generate(prompts, params)  # compiles (and records the graphs)
    compile_s = time.perf_counter() - t
    rate_e, _ = _gen_rate(eager, prompts, params)
    rate_c, _ = _gen_rate(graphs, prompts, params)
    ref = [c.token_ids for cs in eager.generate(prompts, params) for c in cs]
    same = sum(a == c.token_ids for a, cs in zip(ref, first) for c in cs)
    print(
        f"{'generate greedy (tokens/s)':<34}{rate_e:>16.1f}{rate_c:>16.1f}{rate_c / rate_e:>8.2f}"
    )
    print(f"{'first call (compiles), s':<34}{'':>16}{compile_s:>16.1f}")
    print(f"{'completions equal to eager':<34}{'':>16}{f'{same} of {len(ref)}':>16}")


def _update_s_per_1k(module: Any, rows: int, length: int, bf16: bool, device: Any) -> float:
    import torch

    ids = torch.randint(100, 20000, (rows, length), device=device)
    params = [p for p in module.parameters() if p.requires_grad]
    times = []
    for _ in range(3):
        t = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = module(input_ids=ids, labels=ids).loss
        loss.backward()
        for p in params:
            p.grad = None
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return min(times) / (rows * length) * 1000


KINDS = ("transformers", "static", "ours")
"""The caches and attention :func:`_decode_ms` compares on a CPU."""


def _packed_rows(pm: Any, tok: Any, prompts: list[str], args: Any, device: Any) -> None:
    """The float32 generation copy beside copies with packed weights (``args.packed``)."""
    import copy

    import torch

    from adapters.policies import SamplingParams, TransformersPolicy
    from adapters.policies.quantize import available, quantize_linears
    from adapters.training.backends import GenerationCopy

    kinds = [k for k in args.packed.split(",") if k and k != "off"]
    if not kinds:
        return
    ref = GenerationCopy(pm, torch.float32).model
    params = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)

    def greedy(module: Any) -> tuple[float, list[list[int]]]:
        pol = TransformersPolicy(module, tok, device=device, batch_size=len(prompts))
        t = time.perf_counter()
        out = pol.generate(prompts, params)
        ids = [list(cs[0].token_ids) for cs in out]
        return sum(map(len, ids)) / (time.perf_counter() - t), ids

    rate0, ids0 = greedy(ref)
    rows = sorted({1, 4, *(int(r) for r in args.rows.split(","))})
    ms0 = {r: _decode_ms(ref, r, args.cache, device, kind="ours") for r in rows}
    for kind in kinds:
        if not available(kind):
            print(f"packed weights {kind}: this torch build has no fbgemm {kind} kernels")
            continue
        packed = quantize_linears(copy.deepcopy(ref), kind)
        print(f"{'packed weights (CPU)':<34}{'float32':>16}{kind:>16}{'ratio':>8}")
        for r in rows:
            ms = _decode_ms(packed, r, args.cache, device, kind="ours")
            label = f"decode step, {r} rows (ms)"
            print(f"{label:<34}{ms0[r]:>16.1f}{ms:>16.1f}{ms0[r] / ms:>8.2f}")
        rate, ids = greedy(packed)
        label = f"{len(prompts)} prompts, greedy (tok/s)"
        print(f"{label:<34}{rate0:>16.1f}{rate:>16.1f}{rate / rate0:>8.2f}")
        same = sum(a == b for a, b in zip(ids0, ids))
        print(f"{'  completions equal to float32':<34}{'':>16}{f'{same}/{len(ids)}':>16}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--env", default="sokoban")
    p.add_argument("--device", default="auto")
    p.add_argument("--prompts", type=int, default=32, help="validation prompts for 'generate'")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--rows", default="16,64,128", help="decode-step batch sizes")
    p.add_argument("--cache", type=int, default=1000, help="tokens in the cache of a decode step")
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--samples", type=int, default=16, help="samples of one prompt (CPU decoding)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave)")
    p.add_argument("--update-length", type=int, default=256, help="tokens per update sequence")
    p.add_argument(
        "--packed",
        default="fp16",
        help="comma-separated packed-weight kinds for the CPU rows (fp16, int8; off: none)",
    )
    p.add_argument(
        "--compile",
        default="on",
        help="compile_decode of the 'compiled' rows (adapters.policies.graphs; off: no rows)",
    )
    from benchmarks._quick import parse_args

    args = parse_args(
        p,
        argv,
        model="tiny",
        prompts=4,
        max_new_tokens=8,
        rows="4",
        cache=64,
        update_length=32,
        samples=4,
        compile="eager",
    )
    import torch

    from adapters.policies import SamplingParams, TransformersPolicy
    from adapters.policies.models import load_base_model, native_bf16, resolve_device
    from adapters.training.backends import GenerationCopy

    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(None if args.device == "auto" else args.device)
    base, tok = load_base_model(args.model, device, "float32")
    pm = _policy_models(base, args.lora_rank)
    gen_dtype = torch.bfloat16 if native_bf16(device) else torch.float32
    merged = GenerationCopy(pm, gen_dtype)
    prompts = _prompts(args.env, args.prompts, {"prompt_style": "compact"})
    variants = {"adapter fp32": pm.model, f"merged {str(gen_dtype)[6:]}": merged.model}
    print(
        f"device {device}, model {args.model}, {len(prompts)} {args.env} prompts, "
        f"{args.max_new_tokens} new tokens, LoRA rank {args.lora_rank}, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"{'measure':<34}{'adapter fp32':>16}{'merged':>16}{'ratio':>8}")
    rates: dict[str, dict[str, float]] = {}
    for mode, params in (
        ("greedy", SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)),
        ("sampled", SamplingParams(temperature=1.0, seed=0, max_new_tokens=args.max_new_tokens)),
    ):
        row = {}
        for name, module in variants.items():
            pol = TransformersPolicy(module, tok, device=device, batch_size=len(prompts))
            row[name], _ = _gen_rate(pol, prompts, params)
        rates[mode] = row
        a, b = row.values()
        print(f"{'generate ' + mode + ' (tokens/s)':<34}{a:>16.1f}{b:>16.1f}{b / a:>8.2f}")
    # the draw's own cost: both modes generate every row to the token budget, so the same
    # number of tokens after the same prefill (natural lengths differ between the modes, and
    # tokens/s with them mixes that difference into the ratio)
    for i, module in enumerate(variants.values()):
        fixed = {}
        for mode, temperature in (("greedy", 0.0), ("sampled", 1.0)):
            params = SamplingParams(
                temperature=temperature, seed=0, max_new_tokens=args.max_new_tokens
            )
            pol = TransformersPolicy(module, tok, device=device, batch_size=len(prompts))
            fixed[mode], _ = _gen_rate(pol, prompts, params, fixed_length=True)
        label = "sampled / greedy, same length, " + ["adapter", "merged"][i]
        print(f"{label:<40}{fixed['sampled'] / fixed['greedy']:>10.2f}")
    for i, name in enumerate(variants):
        s_over_g = rates["sampled"][name] / rates["greedy"][name]
        label = "sampled / greedy, natural, " + ["adapter", "merged"][i]
        print(f"{label:<40}{s_over_g:>10.2f}")
    for rows in [int(r) for r in args.rows.split(",")]:
        ms = [_decode_ms(m, rows, args.cache, device) for m in variants.values()]
        label = f"decode step, {rows} rows (ms)"
        print(f"{label:<34}{ms[0]:>16.1f}{ms[1]:>16.1f}{ms[0] / ms[1]:>8.2f}")
    if device.type == "cpu":
        print(f"{'CPU decoding':<34}{'transformers':>16}{'ours':>16}{'ratio':>8}")
        workloads = (
            (
                f"{len(prompts)} prompts, greedy (tok/s)",
                prompts,
                SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens),
            ),
            (
                f"1 prompt x {args.samples}, T=1 (tok/s)",
                prompts[:1],
                SamplingParams(
                    temperature=1.0, n=args.samples, seed=0, max_new_tokens=args.max_new_tokens
                ),
            ),
        )
        for label, batch, params in workloads:
            rate = []
            for ours in (False, True):
                pol = TransformersPolicy(
                    merged.model,
                    tok,
                    device=device,
                    batch_size=max(len(prompts), args.samples),
                    cpu_decoding=ours,
                )
                rate.append(_gen_rate(pol, batch, params, fixed_length=True)[0])
            print(f"{label:<34}{rate[0]:>16.1f}{rate[1]:>16.1f}{rate[1] / rate[0]:>8.2f}")
        for rows in [int(r) for r in args.rows.split(",")]:
            ms = [_decode_ms(merged.model, rows, args.cache, device, kind=k) for k in KINDS]
            label = f"decode step, {rows} rows (ms)"
            print(f"{label:<34}{ms[0]:>16.1f}{ms[2]:>16.1f}{ms[0] / ms[2]:>8.2f}")
            label = f"  static cache, {rows} rows (ms)"  # transformers' StaticCache, no graphs
            print(f"{label:<34}{ms[1]:>16.1f}{'':>16}{ms[0] / ms[1]:>8.2f}")
        _packed_rows(pm, tok, prompts, args, device)
    pm.model.train()
    fp32 = _update_s_per_1k(pm.model, 4, args.update_length, False, device)
    bf16 = _update_s_per_1k(pm.model, 4, args.update_length, True, device)
    print(f"{'update s/1k tokens fp32 | bf16':<34}{fp32:>16.2f}{bf16:>16.2f}{fp32 / bf16:>8.2f}")
    if args.compile != "off":  # last: compilation leaves worker threads and caches behind
        _compiled_rows(merged.model, tok, prompts, args, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
