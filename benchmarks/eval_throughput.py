"""Evaluation throughput: validation episodes per second, episode by episode vs played together.

    python benchmarks/eval_throughput.py --model tiny --episodes 16
    python benchmarks/eval_throughput.py --model smollm2 --env sokoban --episodes 64

The policies, prompts (system message, one oracle demonstration per role), env options and
sampling are exactly those of the main job's evaluation (``python -m adapters.train --env ENV``
with its CPU defaults: a ``Trainer`` is built with no training step). The same validation
instances are then evaluated three ways, in one run, on the same machine:

* ``sequential``: one episode at a time (``evaluate(episodes=1, first=i)``);
* ``chunked``: every wave's prompts in one ``generate`` call, decoded in chunks of the trainer's
  ``gen_batch_size`` with each call's shared prompt prefix recomputed (the evaluation before
  batched evaluation scopes);
* ``batched``: :func:`adapters.evaluation.evaluate` as it is now: all live episodes of a wave in
  one batch, and the KV cache of the prompt prefixes kept from one wave to the next
  (:meth:`~adapters.policies.TransformersPolicy.evaluation_scope`).

It prints episodes/s, wall time and mean shaped reward per mode (greedy decoding: modes that play
the same episodes agree up to float ties between batch layouts; a shorter sequential run plays
only the first episodes, so its mean differs).

Measured on the project's 2-core machine while six other jobs loaded it (load average 10-15, so
absolute times are several times an idle machine's; compare the ratios), Sokoban with the CPU
defaults (48 new tokens, one demonstration per role, ``gen_batch_size`` 16):

* ``--model tiny --episodes 8 --threads 2``: sequential 0.024 episodes/s (334.7 s), chunked 0.043
  (185.0 s), batched 0.128 (62.3 s): 5.4x the sequential rate, 3.0x the chunked one;
* ``--model smollm2 --episodes 8 --sequential-episodes 1 --threads 2``: sequential 0.00067
  episodes/s (one episode, 1483.5 s), batched 0.0061 (8 episodes, 1310.8 s): 9.1x; the load fell
  during the later chunked run, so its time is not comparable and is left out.

These ratios are confounded: the modes ran in the order given, under a load that changed, and the
first mode pays the warm-up. A later run on the quieter machine (load 2-5), ``--model smollm2
--episodes 4 --modes batched,chunked``, measured batched 0.034 episodes/s (116.6 s, first) and
chunked 0.048 (83.7 s): at 4 episodes (one chunk either way, so only the prefix cache differs)
batched was not faster.

On the idle machine (2 torch threads), ``--model smollm2 --episodes 8``, both orders:
``--modes batched,chunked``: batched 0.066 episodes/s (121.7 s), chunked 0.063 (126.9 s), 1.04x;
``--modes chunked,batched``: chunked 0.062 (128.7 s), batched 0.076 (105.6 s), 1.22x. So on the
embedded model the gain is small (13-16 s per episode either way): 64 batched episodes still take
longer than 32 chunked ones, which is why the CPU default stays at 32 validation episodes.

Where the time goes (``--phases``: the policy's forward passes timed, prefill = several tokens per
row, decode = one). Sokoban CPU defaults, embedded model, 2 threads, batched mode:

* 8 episodes (idle machine): 103 s; prefill 66.8 s for 27,466 tokens (411 tokens/s), decode
  35.5 s for 236 one-token steps;
* 32 episodes (another evaluation ran beside it for about a minute): 475 s (14.8 s per episode);
  prefill 372 s for 108,368 tokens (291 tokens/s), decode 97 s.

Prefill dominates (65-78 %), and it runs at the machine's arithmetic limit: a forward pass over
8 or 32 rows of 430 new tokens after a shared 626-token prefix measures 434-487 tokens/s, about
95 GFLOP/s for the model's 106 M non-embedding parameters in float32, on two cores with AVX but
no AVX2 or AVX-512 (so no faster lower-precision path). The tokens are what is left to cut. The
shared prompt prefix (system message, demonstration, task rules: 626 tokens for the tool, 724 for
the planner) is already computed once per evaluation; what each row prefills is its own state,
history and role instructions, 151 tokens at the first wave growing to 631 at the eighth. Reusing
each episode's own KV cache from its previous prompt would save 18 % of those tokens with the
embedded model (40 % with the tiny one, whose states never change), because the current state
comes before the history in the prompts and changes whenever a move is played. So evaluating 64
validation episodes before and after training in less time than 32 used to take (a 2x speed-up)
is out of reach on this machine without changing the prompts' layout (history before state, role
instructions inside the shared prefix), which would change what the model is shown and is left
for a measured change of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._quick import parse_args

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODES = ("sequential", "chunked", "batched")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="sokoban")
    p.add_argument("--model", default="tiny", help="tiny | smollm2 | a model path")
    p.add_argument("--episodes", type=int, default=16, help="validation episodes per mode")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {MODES}")
    p.add_argument(
        "--sequential-episodes",
        type=int,
        default=None,
        help="episodes for the sequential mode (default --episodes; its rate is per episode)",
    )
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--phases",
        action="store_true",
        help="also print each mode's prefill and decode seconds and tokens (a wrapper times the "
        "policy's forward passes)",
    )
    return p


class Phases:
    """Wall time and tokens of the model's forward passes, split into prefill (several tokens per
    row) and decode (one token per row), counted while installed (``--phases``)."""

    def __init__(self) -> None:
        self.seconds = {"prefill": 0.0, "decode": 0.0}
        self.tokens = {"prefill": 0, "decode": 0}

    @contextlib.contextmanager
    def installed(self) -> Any:
        from adapters.policies.transformers_policy import TransformersPolicy

        forward = TransformersPolicy._forward

        def timed(policy: Any, input_ids: Any, *args: Any) -> Any:
            t0 = time.perf_counter()
            out = forward(policy, input_ids, *args)
            phase = "decode" if input_ids.shape[1] == 1 else "prefill"
            self.seconds[phase] += time.perf_counter() - t0
            self.tokens[phase] += int(input_ids.numel())
            return out

        TransformersPolicy._forward = timed  # type: ignore[method-assign,assignment]
        try:
            yield self
        finally:
            TransformersPolicy._forward = forward  # type: ignore[method-assign]

    def row(self) -> str:
        p, d = self.seconds["prefill"], self.seconds["decode"]
        return (
            f"{p:>10.1f}{self.tokens['prefill']:>10}{self.tokens['prefill'] / max(p, 1e-9):>9.0f}"
            f"{d:>10.1f}{self.tokens['decode']:>9}"
        )


def run_mode(mode: str, trainer: Any, episodes: int) -> tuple[float, float, int]:
    """``(seconds, mean reward, episodes)`` of one mode on the trainer's validation set."""
    from adapters.evaluation import evaluate
    from adapters.policies.wrappers import ManagedPolicy

    class Unscoped(ManagedPolicy):
        """No evaluation scope: the behaviour before batched evaluation."""

        def evaluation_scope(self, batch_size: int | None = None) -> Any:
            return contextlib.nullcontext()

    cfg = trainer.cfg
    policies: dict[str, Any] = dict(trainer.run.policies)
    if mode == "chunked":
        policies = {k: Unscoped(p) for k, p in policies.items()}
    common = dict(
        env_config=trainer.run.env_config,
        role_policy=trainer.run.role_policy,
        split=cfg.eval.eval_split,
        seed=cfg.seed,
        temperature=cfg.eval.eval_temperature or 0.0,
        max_new_tokens=cfg.generation.max_new_tokens,
    )
    t0 = time.perf_counter()
    rewards: list[float] = []
    if mode == "sequential":
        for i in range(episodes):
            rep = evaluate(cfg.env, policies, episodes=1, first=i, **common)
            rewards += rep.values("reward")
    else:
        rep = evaluate(cfg.env, policies, episodes=episodes, **common)
        rewards = rep.values("reward")
    return time.perf_counter() - t0, sum(rewards) / len(rewards), len(rewards)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(build_parser(), argv, episodes=1, threads=1)
    import tempfile

    import torch

    from adapters.training.config import TrainConfig
    from adapters.training.trainer import Trainer

    torch.set_num_threads(args.threads)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown mode(s) {sorted(unknown)}; choose from {MODES}")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig(
            env=args.env,
            model=args.model,
            steps=0,
            eval_episodes=args.episodes,
            seed=args.seed,
            threads=args.threads,
            device="cpu",
            progress=False,
            plot_every=0,
            save_final=False,
            output_dir=tmp,
        )
        trainer = Trainer(cfg, log=lambda s: None)
        print(
            f"eval throughput: {args.env}, model {args.model}, {args.threads} torch threads, "
            f"{trainer.cfg.generation.max_new_tokens} new tokens, "
            f"gen_batch_size {trainer.cfg.generation.gen_batch_size}"
            f", demos {trainer.cfg.demos}",
            flush=True,
        )
        head = f"{'mode':<12}{'episodes':>9}{'seconds':>10}{'episodes/s':>12}{'mean reward':>13}"
        if args.phases:
            head += f"{'prefill s':>10}{'tokens':>10}{'tok/s':>9}{'decode s':>10}{'tokens':>9}"
        print(head)
        for mode in modes:
            n = args.sequential_episodes or args.episodes if mode == "sequential" else args.episodes
            phases = Phases()
            with phases.installed() if args.phases else contextlib.nullcontext():
                seconds, reward, done = run_mode(mode, trainer, n)
            line = f"{mode:<12}{done:>9}{seconds:>10.1f}{done / seconds:>12.3f}{reward:>13.3f}"
            print(line + (phases.row() if args.phases else ""))
            sys.stdout.flush()
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
