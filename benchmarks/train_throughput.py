"""Trainer throughput: rollout tokens/s and step time split into generation / env / update.

    python benchmarks/train_throughput.py                       # embedded SmolLM2, CPU
    python benchmarks/train_throughput.py --env plan_path --steps 4 --candidates 4
    python benchmarks/train_throughput.py \\
        --model-config adapters/policies/configs/qwen3_1_7b.json \\
        --device cuda --instances 16 --max-new-tokens 512        # paper-sized model, random weights

Each step is a full :class:`adapters.training.trainer.Trainer` step (AT-GRPO tree sampling by
default): rollout of ``--instances`` instances with K candidates per agent-turn, the PPO update of
every sample, the JSONL logs and the checkpoint. Unset flags take the trainer's defaults for the
device (so the CPU default is the step of ``python -m adapters.train --env sokoban``). Columns:

- ``gen s``: time inside the policy's ``generate`` (batched decoding);
- ``env s``: the rest of the rollout: env steps, verifiers and sandboxed tool programs, cloning;
- ``update s``: log-probs, advantages, forward/backward and optimizer steps;
- ``ckpt s``: writing the checkpoint (LoRA adapter or full model, optimizer, RNG states);
- ``gen tok/s``: completion tokens generated per second of generation;
- ``train tok/s``: (prompt + completion) tokens of the trained samples per second of update (the
  shared-prompt forward runs each distinct prompt once, so this counts work saved too).

Every sample is trained (``skip_zero_advantage`` off), so the update cost does not depend on
whether a random or tiny model happens to earn varied rewards.

Side by side with TRL (``--compare-trl``, on by default on CPU): TRL's ``GRPOTrainer`` runs in
the same process after ours, on a fresh copy of the same model, with prompts of the same setting
(``env_dataset``), the same K, completion length, temperature, LoRA settings, learning rate and
torch threads (``benchmarks/trl_baseline.py``). The table compares trained samples per second of
step time (checkpoints excluded on both sides) and generated tokens per second, with the ratio
ours / TRL. Our steps play whole multi-agent episodes (later turns have longer prompts), TRL's
one generation per prompt. ``--model-config`` builds the
model from a config with random weights (no download); ``--layers N`` shrinks it for a quick
check. The first ``--warmup`` steps are reported but left out of the means. Numbers on a shared
machine are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from adapters.training.config import TrainConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._quick import parse_args

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="sokoban")
    p.add_argument("--model", default="smollm2", help="smollm2 | tiny | local path")
    p.add_argument("--model-config", default=None, help="config.json: random-weight model")
    p.add_argument("--layers", type=int, default=None, help="override num_hidden_layers")
    p.add_argument("--device", default="auto")
    p.add_argument("--algorithm", default="at-grpo")
    p.add_argument("--candidates", type=int, default=None, help="K (default: as the trainer)")
    p.add_argument("--instances", type=int, default=None)
    p.add_argument("--max-turns", type=int, default=None)
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--demos", type=int, default=None)
    p.add_argument("--micro-batch-size", type=int, default=None)
    p.add_argument("--gen-batch-size", type=int, default=None)
    p.add_argument("--no-share-prompt", action="store_true", help="full forward per sample")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--json", default=None, help="write the rows as JSON")
    p.add_argument(
        "--compare-trl",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run TRL's GRPOTrainer with the same settings and print the ratio",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    quick = dict(model="tiny", steps=1, instances=1, candidates=2, max_new_tokens=8)
    args = parse_args(build_parser(), argv, **quick)
    import torch

    from adapters.policies.models import model_from_config
    from adapters.training.config import TrainConfig
    from adapters.training.trainer import Trainer

    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda") or (args.device == "auto" and torch.cuda.is_available())
    models = None
    model_name = args.model
    if args.model_config:
        over = {"num_hidden_layers": args.layers} if args.layers else {}
        dtype = torch.bfloat16 if cuda else torch.float32
        dev = "cuda" if cuda and args.device == "auto" else args.device
        dev = "cpu" if dev == "auto" else dev
        models = model_from_config(args.model_config, device=dev, dtype=dtype, **over)
        model_name = f"{Path(args.model_config).stem} (random weights)"
    with tempfile.TemporaryDirectory(prefix="train-throughput-") as tmp:
        cfg = TrainConfig(
            env=args.env,
            env_config={"max_turns": args.max_turns} if args.max_turns else {},
            model=args.model,
            device=args.device,
            algorithm=args.algorithm,
            candidates=args.candidates,
            instances_per_step=args.instances,
            max_new_tokens=args.max_new_tokens,
            lora_rank=args.lora_rank,
            demos=args.demos,
            micro_batch_size=args.micro_batch_size,
            gen_batch_size=args.gen_batch_size,
            share_prompt_forward=not args.no_share_prompt,
            skip_zero_advantage=False,
            steps=args.warmup + args.steps,
            eval_episodes=0,
            output_dir=str(Path(tmp) / "run"),
            progress=False,
            plot_every=0,
            save_final=False,
            save_every=10_000,
        )
        t0 = time.perf_counter()
        trainer = Trainer(cfg, models=models, log=lambda s: None)
        setup = time.perf_counter() - t0
        c = trainer.cfg
        print(
            f"train_throughput: env {c.env} {c.env_config}, model {model_name} "
            f"({'LoRA r=' + str(c.policy.lora_rank) if c.policy.lora_rank else 'full fine-tuning'}"
            f", {c.policy.dtype}), device {trainer.run.device}, "
            f"{c.update.algorithm} K={c.rollout.candidates}, "
            f"{c.schedule.instances_per_step} instances/step, "
            f"max_new_tokens {c.generation.max_new_tokens}, "
            f"demos {c.demos}, torch threads {torch.get_num_threads()}; setup {setup:.1f} s"
        )
        header = (
            f"{'step':>4} {'gen s':>7} {'env s':>7} {'update s':>9} {'ckpt s':>7} {'step s':>7}"
            f" {'samples':>7} {'gen tok':>8} {'gen tok/s':>9} {'train tok':>9} {'train tok/s':>11}"
        )
        print(header)
        rows = []
        try:
            for i in range(trainer.run.cfg.schedule.steps):
                t = time.perf_counter()
                m = trainer.train_step()
                wall = time.perf_counter() - t
                train_tokens = m.get("tokens_trained", 0.0) + m.get("prompt_tokens", 0.0) * (
                    m.get("samples_trained", 0.0) / max(1.0, m.get("samples", 1.0))
                )
                row = {
                    "step": m["step"],
                    "warmup": i < args.warmup,
                    "gen_s": m["time/generation"],
                    "env_s": m["time/env"],
                    "update_s": m["time/update"],
                    "ckpt_s": max(0.0, wall - m["time/step"]),
                    "step_s": wall,
                    "samples": m.get("samples", 0.0),
                    "gen_tokens": m.get("completion_tokens", 0.0),
                    "train_tokens": train_tokens,
                }
                row["gen_tok_s"] = row["gen_tokens"] / max(row["gen_s"], 1e-9)
                row["train_tok_s"] = train_tokens / max(row["update_s"], 1e-9)
                rows.append(row)
                print(_fmt(row, f"{row['step']}{'*' if row['warmup'] else ''}"))
        finally:
            trainer.close()
    timed = [r for r in rows if not r["warmup"]] or rows
    mean = {
        k: statistics.fmean(r[k] for r in timed) for k in rows[0] if k not in ("step", "warmup")
    }
    mean["gen_tok_s"] = sum(r["gen_tokens"] for r in timed) / max(
        sum(r["gen_s"] for r in timed), 1e-9
    )
    mean["train_tok_s"] = sum(r["train_tokens"] for r in timed) / max(
        sum(r["update_s"] for r in timed), 1e-9
    )
    print(_fmt(mean, "mean"))
    print("(* = warm-up step, not in the mean)")
    result: dict = {"rows": rows, "mean": mean}
    if args.compare_trl:
        result["trl"] = _compare_trl(args, c, timed)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


def _compare_trl(args: argparse.Namespace, c: TrainConfig, ours: list[dict]) -> dict:
    """Run TRL with our run's settings and print the side-by-side table."""
    import torch
    from trl_baseline import run_trl

    from adapters.policies.models import load_base_model

    model, tok = load_base_model(c.policy.model, torch.device("cpu"), "float32", c.seed)
    with tempfile.TemporaryDirectory(prefix="trl-throughput-") as tmp:
        trl_rows = run_trl(
            env_id=c.env,
            env_config=dict(c.env_config),
            model=model,
            tokenizer=tok,
            prompts_per_step=c.schedule.instances_per_step,
            k=c.rollout.candidates,
            max_new_tokens=c.generation.max_new_tokens,
            temperature=c.generation.temperature,
            lora_rank=c.policy.lora_rank,
            lora_alpha=c.policy.lora_alpha,
            lr=c.update.lr,
            steps=args.steps,
            warmup=args.warmup,
            seed=c.seed,
            out_dir=tmp,
        )
    timed = [r for r in trl_rows if not r["warmup"]] or trl_rows
    ours_s = sum(r["gen_s"] + r["env_s"] + r["update_s"] for r in ours)
    ours_samples = sum(r["samples"] for r in ours)
    ours_tokens = sum(r["gen_tokens"] for r in ours)
    trl_s = sum(r["step_s"] for r in timed)
    trl_samples = sum(r["samples"] for r in timed)
    trl_tokens = sum(r["gen_tokens"] for r in timed)
    table = {
        "ours": {
            "samples_per_s": ours_samples / ours_s,
            "gen_tokens_per_s": ours_tokens / ours_s,
            "samples_per_step": ours_samples / len(ours),
            "step_s": ours_s / len(ours),
        },
        "trl": {
            "samples_per_s": trl_samples / trl_s,
            "gen_tokens_per_s": trl_tokens / trl_s,
            "samples_per_step": trl_samples / len(timed),
            "step_s": trl_s / len(timed),
        },
    }
    ratio = {k: table["ours"][k] / max(table["trl"][k], 1e-12) for k in table["ours"]}
    print()
    print(
        f"side by side (same model, K={c.rollout.candidates}, "
        f"max_new_tokens {c.generation.max_new_tokens}, "
        f"LoRA r={c.policy.lora_rank}, torch threads {torch.get_num_threads()}; timed steps only):"
    )
    print(f"{'trainer':<24}{'samples/step':>13}{'step s':>9}{'samples/s':>11}{'gen tok/s':>11}")
    for name, label in (("ours", "ours (AT-GRPO trainer)"), ("trl", "TRL GRPOTrainer")):
        t = table[name]
        print(
            f"{label:<24}{t['samples_per_step']:>13.1f}{t['step_s']:>9.1f}"
            f"{t['samples_per_s']:>11.3f}{t['gen_tokens_per_s']:>11.1f}"
        )
    print(
        f"{'ratio ours / TRL':<24}{'':>13}{'':>9}{ratio['samples_per_s']:>10.2f}x"
        f"{ratio['gen_tokens_per_s']:>10.2f}x"
    )
    return {"table": table, "ratio": ratio, "rows": trl_rows}


def _fmt(r: dict, label: str) -> str:
    return (
        f"{label:>4} {r['gen_s']:>7.1f} {r['env_s']:>7.2f} {r['update_s']:>9.1f}"
        f" {r['ckpt_s']:>7.2f} {r['step_s']:>7.1f} {r['samples']:>7.0f} {r['gen_tokens']:>8.0f}"
        f" {r['gen_tok_s']:>9.1f} {r['train_tokens']:>9.0f} {r['train_tok_s']:>11.1f}"
    )


if __name__ == "__main__":
    sys.exit(main())
