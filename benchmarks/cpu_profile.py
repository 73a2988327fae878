"""Where the CPU default's time goes, phase by phase, beside the floor of its token counts.

    python benchmarks/cpu_profile.py                            # this CPU's own path
    MAS_CPU_BF16=emulated python benchmarks/cpu_profile.py      # a CPU without native bfloat16
    python benchmarks/cpu_profile.py --episodes 8 --parts eval  # a shorter look
    python benchmarks/cpu_profile.py --quick                    # seconds: the tiny model

The run is the main job's, ``python -m adapters.train --env sokoban`` with its CPU defaults
(8 x 8 levels, compact prompts, the shipped cold start as its initial policy, the embedded
model; a :class:`~adapters.training.trainer.Trainer` built from the same configuration), so the
times are those a user waits for on this machine:

* ``eval``: the greedy evaluation before training (``--episodes`` validation levels, the
  configuration's 64 by default; the scripted reference policies it plays first are timed on
  a line of their own);
* ``train``: one training step (rollout of ``instances_per_step`` levels with K candidates per
  turn, the update, the logs and the checkpoint).

Each is split into ``prefill`` (the prompts' forward passes), ``decode`` (the one-token steps,
sampling included), ``update`` (training only: the forward and backward passes of the PPO
update and the optimizer step), ``env`` (the rest of the rollout outside ``generate``: env
steps, verifiers, sandboxed tool programs, the refresh of the generation copy) and ``other``
(what is left: chat templates and tokenizing inside ``generate``, the logs and the
checkpoint). The policy's own counters (:class:`~adapters.policies.transformers_policy.
GenerationStats`) time prefill and decode and count their tokens; a hook on the training
model's decoder counts the update's tokens.

The floor of a phase is its matrix products at the rate this machine reaches on the model's own
shapes: 2 x (linear-layer parameters) FLOPs per prompt token prefilled, 2 x (linear layers +
output head) per row of a decode step, 4 x (linear layers) per token of the update's passes
with gradients (forward, and backward to the activations: the base weights are frozen; 2 x
for a pass without) plus the head's forward and backward over the trained completion tokens,
divided by the GFLOP/s that ``torch.nn.functional.linear`` reaches on those shapes in the
phase's dtype: at ``--prefill-rows`` rows for prefill and update, at the decode steps' mean rows
for decode (the first line prints both dtypes at ``--prefill-rows`` and at ``gen_batch_size``
rows). Attention's scores and softmax are left out, so a ratio near 1 means the phase runs at
the machine's arithmetic limit and only fewer tokens make it faster; a large ratio means time
lost elsewhere (padding, attention over long prompts, Python around the model).

``MAS_CPU_BF16=emulated`` (adapters/policies/models.py) takes the path of a CPU without native
bfloat16 on a CPU that has it: generation in float32, the update without bfloat16 autocast, and
torch's, oneDNN's and MKL's kernels capped at AVX2 (the bfloat16 row of the matmul line then
shows the emulation's rate). There the generation copy's small decode steps use float16 weights
(``compute.generation_quant: auto``); ``--generation-quant none`` profiles plain float32 (with
packed weights a decode phase's floor is still computed at float32's rate, so its ratio can read
below 1). ``--quick`` runs that way, with the tiny model, and trains every
sample (``--train-all``: a tiny model's rewards rarely differ, and the update would be skipped).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._quick import parse_args

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PARTS = ("eval", "train")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="sokoban")
    p.add_argument("--model", default="smollm2", help="smollm2 | tiny | a model path")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {PARTS}")
    p.add_argument(
        "--episodes", type=int, default=None, help="evaluation levels (default: the config's)"
    )
    p.add_argument("--instances", type=int, default=None, help="levels per training step")
    p.add_argument("--candidates", type=int, default=None, help="K (default: the config's)")
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: the trainer's)")
    p.add_argument(
        "--train-all",
        action="store_true",
        help="train every sample (skip_zero_advantage off), not only those with an advantage",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--generation-quant",
        default=None,
        choices=("auto", "none", "fp16", "int8"),
        help="the generation copy's packed weights (default: the config's, auto)",
    )
    p.add_argument("--prefill-rows", type=int, default=512, help="rows of the prefill matmuls")
    p.add_argument("--matmul-s", type=float, default=0.3, help="seconds per matmul measurement")
    p.add_argument("--json", default=None, help="also write the tables as JSON")
    return p


# --------------------------------------------------------------------------------------------
# the model's shapes and the machine's rate on them


@dataclass(frozen=True)
class Shapes:
    """The matrix products of one forward token: ``layer`` (in, out) per decoder layer, times
    ``layers``, and the output ``head`` (hidden, vocabulary)."""

    layer: tuple[tuple[int, int], ...]
    layers: int
    head: tuple[int, int]

    @classmethod
    def of(cls, model: Any) -> Shapes:
        cfg = model.config.get_text_config()
        h, inter = cfg.hidden_size, cfg.intermediate_size
        heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
        hd = getattr(cfg, "head_dim", None) or h // heads
        attention = [(h, heads * hd), (h, kv * hd), (h, kv * hd), (heads * hd, h)]
        mlp = [(h, inter), (h, inter), (inter, h)]
        return cls(tuple(attention + mlp), int(cfg.num_hidden_layers), (h, int(cfg.vocab_size)))

    @property
    def body_params(self) -> int:
        """Parameters of the decoder layers' linear maps."""
        return self.layers * sum(i * o for i, o in self.layer)

    @property
    def head_params(self) -> int:
        return self.head[0] * self.head[1]


def matmul_gflops(shapes: Shapes, rows: int, dtype: Any, min_s: float, head: bool) -> float:
    """GFLOP/s of the model's matrix products (every layer's, and the head's with ``head``) on
    ``rows`` rows in ``dtype``: each shape timed (one warm-up, then the best of three rounds,
    ``min_s`` spread over them all), the time of the whole model summed from them."""
    import torch

    todo = [(s, shapes.layers) for s in shapes.layer] + ([(shapes.head, 1)] if head else [])
    seconds = flops = 0.0
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for (k, n), count in todo:
            x = torch.randn(rows, k, generator=gen).to(dtype)
            w = torch.randn(n, k, generator=gen).to(dtype) * k**-0.5
            torch.nn.functional.linear(x, w)  # warm-up
            best = float("inf")
            for _ in range(3):  # the best of three rounds: a busy machine slows some of them
                reps, t0 = 0, time.perf_counter()
                while reps < 2 or time.perf_counter() - t0 < min_s / len(todo) / 3:
                    torch.nn.functional.linear(x, w)
                    reps += 1
                best = min(best, (time.perf_counter() - t0) / reps)
            seconds += best * count
            flops += 2.0 * rows * k * n * count
    return flops / seconds / 1e9


# --------------------------------------------------------------------------------------------
# counters


class UpdateTokens:
    """Tokens of the update's forward passes, counted by a pre-hook on each training model's
    decoder while installed: ``grad`` those run with gradients, ``no_grad`` the others (padding
    excluded)."""

    def __init__(self, modules: list[Any]) -> None:
        self.grad = self.no_grad = 0
        self._handles = [
            m.register_forward_pre_hook(self._count, with_kwargs=True) for m in modules
        ]

    def _count(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        import torch

        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            return
        mask = kwargs.get("attention_mask")
        n = int(mask[:, -ids.shape[1] :].sum()) if mask is not None else int(ids.numel())
        if torch.is_grad_enabled():
            self.grad += n
        else:
            self.no_grad += n

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def _decoders(trainer: Any) -> list[Any]:
    """The training models' decoders (each module once)."""
    out: dict[int, Any] = {}
    for pm in trainer.run.models.values():
        model = pm.model
        dec = model.get_decoder() if hasattr(model, "get_decoder") else model
        out[id(dec)] = dec
    return list(out.values())


def _generators(trainer: Any) -> list[Any]:
    """The :class:`TransformersPolicy` objects the trainer's rollout and evaluation call."""
    from adapters.policies.transformers_policy import TransformersPolicy

    out: dict[int, Any] = {}
    for p in trainer.run.policies.values():
        inner = getattr(p, "inner", p)
        if isinstance(inner, TransformersPolicy):
            out[id(inner)] = inner
    if not out:
        raise SystemExit("cpu_profile: the trainer's backend generates without TransformersPolicy")
    return list(out.values())


# --------------------------------------------------------------------------------------------
# tables


@dataclass
class Phase:
    name: str
    seconds: float
    tokens: int | None = None
    flops: float | None = None
    gflops: float | None = None  # the matmul rate of the phase's dtype and rows

    @property
    def floor(self) -> float | None:
        if self.flops is None or not self.gflops:
            return None
        return self.flops / (self.gflops * 1e9)


@dataclass
class Table:
    title: str
    wall: float
    phases: list[Phase]
    notes: list[str] = field(default_factory=list)

    def print(self) -> None:
        print(f"\n{self.title}: {self.wall:.1f} s")
        print(
            f"{'phase':<10}{'seconds':>10}{'share':>8}{'tokens':>10}{'floor s':>10}{'x floor':>9}"
        )
        for p in self.phases:
            floor = p.floor
            tokens = f"{p.tokens:>10}" if p.tokens is not None else f"{'-':>10}"
            fl = f"{floor:>10.2f}" if floor is not None else f"{'-':>10}"
            ratio = f"{p.seconds / floor:>9.1f}" if floor else f"{'-':>9}"
            share = p.seconds / max(self.wall, 1e-9)
            print(f"{p.name:<10}{p.seconds:>10.2f}{share:>8.1%}{tokens}{fl}{ratio}")
        for note in self.notes:
            print(f"  {note}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "wall_s": self.wall,
            "phases": [
                {"phase": p.name, "seconds": p.seconds, "tokens": p.tokens, "floor_s": p.floor}
                for p in self.phases
            ],
            "notes": self.notes,
        }


class Rates:
    """:func:`matmul_gflops` of the model's shapes, measured when first asked for and kept:
    ``rates(dtype, rows, head)``."""

    def __init__(self, shapes: Shapes, min_s: float, prefill_rows: int) -> None:
        self.shapes, self.min_s, self.prefill_rows = shapes, min_s, prefill_rows
        self.gflops: dict[tuple[str, int, bool], float] = {}

    def __call__(self, dtype: Any, rows: int | None = None, head: bool = False) -> float:
        import torch

        name = str(dtype).removeprefix("torch.")
        key = (name, rows or self.prefill_rows, head)
        if key not in self.gflops:
            self.gflops[key] = matmul_gflops(
                self.shapes, key[1], getattr(torch, name), self.min_s, head
            )
        return self.gflops[key]


def _generation_phases(stats: Any, shapes: Shapes, rates: Rates, dtype: Any) -> list[Phase]:
    """Prefill at the rate of ``--prefill-rows`` rows; decode at the rate of its mean rows per
    step, the head included (one per step and row)."""
    rows = max(1, round(stats.decode_rows / max(stats.decode_steps, 1)))
    prefill = Phase(
        "prefill",
        stats.prefill_s,
        stats.prefill_tokens,
        2.0 * shapes.body_params * stats.prefill_tokens,
        rates(dtype),
    )
    decode = Phase(
        "decode",
        stats.decode_s,
        stats.generated,
        2.0 * (shapes.body_params + shapes.head_params) * stats.decode_rows,
        rates(dtype, rows, head=True) if stats.decode_steps else None,
    )
    return [prefill, decode]


def _generation_notes(stats: Any, rates: Rates) -> list[str]:
    rows = max(1, round(stats.decode_rows / max(stats.decode_steps, 1)))
    return [
        f"prefill: {stats.padding} padded positions besides the tokens; floor at "
        f"{rates.prefill_rows} rows",
        f"decode: {stats.decode_steps} steps of {rows} rows on average, the floor at that "
        f"many rows (head included)",
    ]


def profile_eval(trainer: Any, shapes: Shapes, rates: Rates, gen_dtype: Any) -> Table:
    from adapters.policies.transformers_policy import GenerationStats

    t0 = time.perf_counter()
    trainer.references()  # played first by the evaluation before training; kept in a file
    t_refs = time.perf_counter() - t0
    stats = GenerationStats()
    for g in _generators(trainer):
        g.stats = stats
    t0 = time.perf_counter()
    try:
        trainer.evaluate("before")
    finally:
        for g in _generators(trainer):
            g.stats = None
    wall = time.perf_counter() - t0
    env = Phase("env", wall - stats.generate_s)
    other = Phase("other", stats.generate_s - stats.prefill_s - stats.decode_s)
    n = trainer.run.cfg.eval.eval_episodes
    return Table(
        f"eval: {n} {trainer.run.cfg.env} levels, greedy",
        wall,
        [*_generation_phases(stats, shapes, rates, gen_dtype), env, other],
        [
            *_generation_notes(stats, rates),
            f"the reference policies before it (scripted, no model): {t_refs:.1f} s",
        ],
    )


def profile_train(trainer: Any, shapes: Shapes, rates: Rates, gen_dtype: Any) -> Table:
    from adapters.policies.transformers_policy import GenerationStats

    upd_dtype = _update_dtype(trainer)
    stats = GenerationStats()
    for g in _generators(trainer):
        g.stats = stats
    counter = UpdateTokens(_decoders(trainer))
    t0 = time.perf_counter()
    try:
        m = trainer.train_step()
    finally:
        counter.remove()
        for g in _generators(trainer):
            g.stats = None
    wall = time.perf_counter() - t0
    prefill, decode = _generation_phases(stats, shapes, rates, gen_dtype)
    t_update = float(m["time/update"])
    t_rollout = float(m["time/generation"]) + float(m["time/env"])
    completions = float(m.get("tokens_trained", 0.0))
    flops = 2.0 * shapes.body_params * (2 * counter.grad + counter.no_grad)
    flops += 4.0 * shapes.head_params * completions
    update = Phase("update", t_update, counter.grad + counter.no_grad, flops, rates(upd_dtype))
    env = Phase("env", max(0.0, t_rollout - stats.generate_s))
    other = Phase("other", wall - prefill.seconds - decode.seconds - update.seconds - env.seconds)
    in_gen = stats.generate_s - stats.prefill_s - stats.decode_s
    return Table(
        f"train step: {int(m.get('samples', 0))} samples, "
        f"{int(m.get('samples_trained', 0))} trained",
        wall,
        [prefill, decode, update, env, other],
        [
            *_generation_notes(stats, rates),
            f"other: {in_gen:.1f} s inside generate (templates, tokenizing), "
            f"{other.seconds - in_gen:.1f} s outside (logs, checkpoint)",
            f"update tokens: {counter.grad} with gradients, {counter.no_grad} without; "
            f"{int(completions)} completion tokens trained; update in {upd_dtype}",
        ],
    )


def _update_dtype(trainer: Any) -> str:
    cfg = trainer.run.cfg
    return "bfloat16" if cfg.update.update_precision == "bfloat16" else cfg.policy.dtype


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    quick = dict(
        model="tiny",
        episodes=1,
        instances=1,
        candidates=2,
        max_new_tokens=8,
        threads=1,
        train_all=True,
        prefill_rows=64,
        matmul_s=0.01,
    )
    args = parse_args(build_parser(), argv, **quick)
    from adapters.policies.models import CPU_BF16_ENV, apply_cpu_bf16_env

    if args.quick:  # the path of a CPU without native bfloat16, on any machine
        os.environ.setdefault(CPU_BF16_ENV, "emulated")
        apply_cpu_bf16_env()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown part(s) {sorted(unknown)}; choose from {PARTS}")

    import torch

    from adapters.policies.models import cpu_bf16_kind
    from adapters.training.config import TrainConfig
    from adapters.training.trainer import Trainer

    tables: list[Table] = []
    with tempfile.TemporaryDirectory(prefix="cpu-profile-") as tmp:
        cfg = TrainConfig(
            env=args.env,
            model=args.model,
            device="cpu",
            steps=1,
            eval_episodes=args.episodes,
            instances_per_step=args.instances,
            candidates=args.candidates,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
            threads=args.threads or None,
            **({"generation_quant": args.generation_quant} if args.generation_quant else {}),
            **({"skip_zero_advantage": False} if args.train_all else {}),
            progress=False,
            plot_every=0,
            save_final=False,
            output_dir=str(Path(tmp) / "run"),
        )
        t0 = time.perf_counter()
        trainer = Trainer(cfg, log=lambda s: None)
        setup = time.perf_counter() - t0
        try:
            c = trainer.run.cfg
            gen = _generators(trainer)[0]
            gen_dtype = next(gen.model.parameters()).dtype
            shapes = Shapes.of(gen.model)
            rates = Rates(shapes, args.matmul_s, args.prefill_rows)
            batch = int(c.generation.gen_batch_size)
            print(
                f"cpu_profile: {c.env} {c.env_config}, model {c.policy.model} "
                f"(init {c.policy.init}), {c.eval.eval_episodes} eval levels, "
                f"{c.schedule.instances_per_step} levels/step x K={c.rollout.candidates}, "
                f"max_new_tokens {c.generation.max_new_tokens}, {torch.get_num_threads()} torch "
                f"threads; setup {setup:.1f} s"
            )
            print(
                f"bfloat16 on this CPU: {cpu_bf16_kind()} (torch kernels "
                f"{torch.backends.cpu.get_cpu_capability()}); generation in "
                f"{str(gen_dtype).removeprefix('torch.')} (packed weights: {gen.quantize}), "
                f"update in {_update_dtype(trainer)}"
            )
            print(
                f"matmul GFLOP/s on the model's shapes ({shapes.body_params / 1e6:.1f} M "
                f"linear-layer + {shapes.head_params / 1e6:.1f} M head parameters): "
                + "; ".join(
                    f"{name} {rates(name):.1f} ({args.prefill_rows} rows), "
                    f"{rates(name, batch, head=True):.1f} ({batch} rows + head)"
                    for name in ("float32", "bfloat16")
                ),
                flush=True,
            )
            if "eval" in parts:
                tables.append(profile_eval(trainer, shapes, rates, gen_dtype))
                tables[-1].print()
                sys.stdout.flush()
            if "train" in parts:
                tables.append(profile_train(trainer, shapes, rates, gen_dtype))
                tables[-1].print()
        finally:
            trainer.close()
    if args.json:
        data = {
            "bf16": cpu_bf16_kind(),
            "gflops": [
                {"dtype": d, "rows": r, "head": h, "gflops": v}
                for (d, r, h), v in rates.gflops.items()
            ],
            "tables": [t.to_dict() for t in tables],
        }
        Path(args.json).write_text(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
