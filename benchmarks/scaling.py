"""Data-parallel scaling: samples/s on 1 and 2 CPU ranks, and a projection to 8-256 GPUs.

    python benchmarks/scaling.py                          # tiny model, Sokoban, 3 steps per run
    python benchmarks/scaling.py --model smollm2 --instances 4 --steps 4
    python benchmarks/scaling.py --skip-measure           # the projection with default costs
    python benchmarks/scaling.py --quick                  # 2 instances x K=2, 1 step (smoke run)

**Measured.** The same run (global batch ``--instances`` x K candidates, AT-GRPO tree
sampling, LoRA) is trained with ``python -m torch.distributed.run --standalone --nproc-per-node N
-m adapters.train`` for N = 1 and 2, one torch thread per rank. Every sample is trained
(``skip_zero_advantage`` off), so the update cost does not depend on whether a tiny model earns
rewards. samples/s = samples per step / step time, averaged over the steps after the first; the
ratio 2-rank / 1-rank is the speed-up (2.0 = linear; on a 2-core machine shared with other jobs
expect less). From the 1-rank run come the per-sample generation, env and update seconds, the
sample record size (the bytes rank 0 gathers) and the LoRA gradient size (the bytes DDP
all-reduces per optimizer step); from the 2-rank run the imbalance between the ranks' generation
times.

**Projected.** Step time of the paper's setting (Qwen3-1.7B, full fine-tuning with FSDP2, AT-GRPO
on Sokoban: K = 4, 2 agents, 4 turns, 4 instances per GPU: weak scaling, the global batch grows
with the GPUs) on H100s where every GPU generates with a colocated vLLM engine and then trains
(the hybrid layout of verl). Costs per GPU and step:

* generation: tree sampling generates wave by wave (one agent-turn of every live branch per
  wave: ``--waves`` = agents x turns), and a wave lasts until its longest completion is done, so
  the time is the larger of a latency bound, ``waves x longest completion x decode step time``
  (small per-GPU batches: 16 sequences per wave here), and a throughput bound, completion tokens /
  vLLM decode throughput plus prompt tokens (one prefill per K candidates) / prefill throughput;
  times a straggler factor ``1 + cv * sqrt(2 ln N)`` (no wave outlasts ``max_new_tokens``
  decode steps) (about the
  expected maximum of N ranks' times when they vary with coefficient of variation ``cv``:
  ``--straggler-cv``, an assumption; the imbalance measured on a shared CPU machine is printed
  but mostly measures the other jobs);
* env: the measured CPU seconds per env step (Sokoban, verifiers) / CPU cores per GPU;
* update: ``6 N_params`` FLOPs per trained token (shared-prompt forward: completion + prompt / K)
  plus ``2 N_params`` for the old-log-prob pass (bfloat16 recomputes it), at the assumed MFU;
* communication (not overlapped with compute: an upper bound), FSDP2 within a node and HSDP
  (``dp_mode: hsdp``) across nodes: per micro-batch two all-gathers of the bfloat16 parameters
  (forward, backward), per optimizer step one reduce-scatter of float32 gradients, one
  all-gather for the rollout, ring traffic ``(n-1)/n x bytes`` per GPU over NVLink; across
  nodes only the all-reduce of each node's gradient shard, over InfiniBand;
* weight sync to the colocated engine: the full weights once (device-to-device copy);
* gathering samples to rank 0: the measured record size x global samples over one NIC.

The assumptions are printed with the table; change them with the flags.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._quick import parse_args  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="sokoban")
    p.add_argument("--model", default="tiny", help="tiny | smollm2 | local path")
    p.add_argument("--instances", type=int, default=4, help="global instances per step")
    p.add_argument("--candidates", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--skip-measure", action="store_true", help="projection only")
    g = p.add_argument_group("projection assumptions")
    g.add_argument("--params", type=float, default=1.7e9, help="model parameters")
    g.add_argument("--prompt-tokens", type=float, default=600.0)
    g.add_argument("--completion-tokens", type=float, default=300.0)
    g.add_argument("--samples-per-instance", type=int, default=4 * 2 * 4, help="K x agents x turns")
    g.add_argument("--instances-per-gpu", type=int, default=4)
    g.add_argument("--decode-tok-s", type=float, default=30e3, help="vLLM per H100")
    g.add_argument("--decode-step-ms", type=float, default=5.0, help="per token, small batch")
    g.add_argument("--waves", type=int, default=2 * 4, help="agents x turns")
    g.add_argument("--longest-tokens", type=float, default=600.0, help="per wave and GPU")
    g.add_argument("--max-completion-tokens", type=float, default=1024.0, help="the cap")
    g.add_argument("--prefill-tok-s", type=float, default=250e3, help="vLLM per H100")
    g.add_argument("--peak-flops", type=float, default=989e12, help="H100 SXM bf16 dense")
    g.add_argument("--mfu", type=float, default=0.35)
    g.add_argument("--micro-batch", type=int, default=16)
    g.add_argument("--nvlink-gbs", type=float, default=360.0, help="NCCL bus bandwidth, GB/s")
    g.add_argument("--ib-gbs", type=float, default=45.0, help="per GPU across nodes, GB/s")
    g.add_argument("--gpus-per-node", type=int, default=8)
    g.add_argument("--cpus-per-gpu", type=int, default=12)
    g.add_argument("--hbm-gbs", type=float, default=2000.0, help="weight copy to the engine")
    g.add_argument("--straggler-cv", type=float, default=0.15, help="of per-GPU generation time")
    return p


# ---------------------------------------------------------------------------------------------
# measured


@dataclass
class Measured:
    ranks: int
    samples_per_s: float
    step_s: float
    samples: float
    gen_s: float
    env_s: float
    update_s: float
    gen_max_s: float
    record_bytes: float  # one sample's trajectory record
    grad_bytes: float  # the trainable parameters (LoRA) in float32


def measure(args: argparse.Namespace, ranks: int, where: Path) -> Measured:
    run = where / f"ranks{ranks}"
    config = {
        "env": args.env,
        "model": args.model,
        "instances_per_step": args.instances,
        "candidates": args.candidates,
        "max_new_tokens": args.max_new_tokens,
        "steps": args.steps,
        "skip_zero_advantage": False,
        "eval_episodes": 0,
        "demos": 0,
        "progress": False,
        "plot_every": 0,
        "save_final": False,
        "save_every": args.steps,
        "device": "cpu",
        "threads": 1,
        "output_dir": str(run),
    }
    cfg = where / f"ranks{ranks}.json"
    cfg.write_text(json.dumps(config))
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += ["--nproc-per-node", str(ranks), "-m", "adapters.train", "--config", str(cfg)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steady = rows[1:] or rows

    def mean(key: str) -> float:
        return statistics.mean(float(r.get(key, 0.0)) for r in steady)

    traj = (run / "trajectories.jsonl").read_text().splitlines()
    ckpt = next((run / "checkpoints").glob("step_*"))
    grad = sum(f.stat().st_size for f in ckpt.glob("policy_*.pt"))
    return Measured(
        ranks=ranks,
        samples_per_s=mean("samples") / mean("time/step"),
        step_s=mean("time/step"),
        samples=mean("samples"),
        gen_s=mean("time/generation"),
        env_s=mean("time/env"),
        update_s=mean("time/update"),
        gen_max_s=mean("time/generation_max"),
        record_bytes=sum(len(x) + 1 for x in traj) / max(1, len(traj)),
        grad_bytes=float(grad),
    )


# ---------------------------------------------------------------------------------------------
# projected


def project(args: argparse.Namespace, gpus: int, env_s_per_sample: float, cv: float, rec: float):
    n_params = args.params
    samples = args.instances_per_gpu * args.samples_per_instance  # per GPU
    k = 4
    gen = samples * args.completion_tokens / args.decode_tok_s
    gen += samples / k * args.prompt_tokens / args.prefill_tok_s
    step_s = args.decode_step_ms / 1e3
    gen = max(gen, args.waves * args.longest_tokens * step_s)
    gen *= 1.0 + cv * math.sqrt(2.0 * math.log(gpus)) if gpus > 1 else 1.0
    gen = min(gen, max(gen / 2, args.waves * args.max_completion_tokens * step_s))  # capped
    env = samples * env_s_per_sample / args.cpus_per_gpu
    train_tokens = samples * (args.completion_tokens + args.prompt_tokens / k)
    flops = train_tokens * n_params * (6.0 + 2.0)
    update = flops / (args.peak_flops * args.mfu)
    micro = math.ceil(samples / args.micro_batch)
    gathered = (2 * micro + 1) * 2 * n_params  # bf16 all-gathers: forward+backward, rollout
    scattered = 4 * n_params  # fp32 gradients, once per optimizer step
    shard = min(gpus, args.gpus_per_node)  # FSDP2 within a node; HSDP replicas across nodes
    nodes = math.ceil(gpus / args.gpus_per_node)
    comm = (shard - 1) / shard * (gathered + scattered) / (args.nvlink_gbs * 1e9)
    if nodes > 1:  # all-reduce of each gradient shard between the node replicas
        comm += 2 * (nodes - 1) / nodes * (scattered / shard) / (args.ib_gbs * 1e9)
    sync = 2 * n_params / (args.hbm_gbs * 1e9)
    gather = rec * samples * gpus / (args.ib_gbs * 1e9) if gpus > 1 else 0.0
    step = gen + env + update + comm + sync + gather
    return {
        "gpus": gpus,
        "nodes": nodes,
        "samples/step": samples * gpus,
        "gen s": gen,
        "env s": env,
        "update s": update,
        "comm s": comm,
        "sync s": sync + gather,
        "step s": step,
        "samples/s": samples * gpus / step,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(build_parser(), argv, instances=2, candidates=2, max_new_tokens=4, steps=1)
    env_s_per_sample, rec = 2e-3, 2000.0
    cv = args.straggler_cv
    if not args.skip_measure:
        with tempfile.TemporaryDirectory(prefix="mas-scaling-") as tmp:
            one = measure(args, 1, Path(tmp))
            two = measure(args, 2, Path(tmp))
        print(
            f"measured on CPU ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} "
            f"at the end): env {args.env}, model {args.model}, {args.instances} instances x "
            f"K={args.candidates} per step, {args.max_new_tokens} new tokens, LoRA with DDP, "
            f"{args.steps} steps (means over steps {min(2, args.steps)}..{args.steps}), one "
            "thread per rank\n"
        )
        print(f"{'ranks':>5} {'samples':>8} {'step s':>8} {'gen s':>7} {'env s':>7}", end="")
        print(f" {'update s':>8} {'samples/s':>10} {'vs 1 rank':>9}")
        for m in (one, two):
            print(
                f"{m.ranks:>5} {m.samples:>8.0f} {m.step_s:>8.2f} {m.gen_s:>7.2f} {m.env_s:>7.2f} "
                f"{m.update_s:>8.2f} {m.samples_per_s:>10.2f} "
                f"{m.samples_per_s / one.samples_per_s:>8.2f}x"
            )
        per = one.samples
        print(
            f"\nper sample (1 rank): generation {one.gen_s / per * 1e3:.1f} ms, env "
            f"{one.env_s / per * 1e3:.2f} ms, update {one.update_s / per * 1e3:.1f} ms; record "
            f"{one.record_bytes / 1e3:.1f} kB gathered to rank 0; LoRA gradients "
            f"{one.grad_bytes / 1e6:.2f} MB all-reduced per optimizer step"
        )
        imbalance = max(0.0, two.gen_max_s / max(two.gen_s, 1e-9) - 1.0)
        print(f"2 ranks: slowest rank's generation {imbalance * 100:.0f} % above rank 0's\n")
        env_s_per_sample = one.env_s / per
        rec = one.record_bytes
    print(
        f"projection: Qwen3-1.7B-sized ({args.params:.2g} params), full fine-tuning (FSDP2 in a "
        f"node, HSDP across nodes), "
        f"{args.instances_per_gpu} instances x {args.samples_per_instance} samples per GPU and "
        f"step, {args.prompt_tokens:.0f} prompt + {args.completion_tokens:.0f} completion tokens "
        f"per sample, {args.waves} waves per step whose longest completion has "
        f"{args.longest_tokens:.0f} tokens; H100: vLLM {args.decode_tok_s / 1e3:.0f}k decode / "
        f"{args.prefill_tok_s / 1e3:.0f}k prefill tok/s, {args.decode_step_ms:g} ms per decode "
        f"step at small batch, {args.peak_flops / 1e12:.0f} TFLOP/s x "
        f"MFU {args.mfu:.2f}, NCCL {args.nvlink_gbs:.0f} GB/s NVLink, {args.ib_gbs:.0f} GB/s "
        f"InfiniBand per GPU, {args.cpus_per_gpu} CPU cores per GPU for envs; env "
        f"{env_s_per_sample * 1e3:.2f} ms CPU per sample, straggler cv {cv:.2f}, record "
        f"{rec / 1e3:.1f} kB (env and record measured unless --skip-measure)\n"
    )
    rows = [project(args, n, env_s_per_sample, cv, rec) for n in (1, 8, 64, 256)]
    cols = list(rows[0])
    print(" ".join(f"{c:>12}" for c in [*cols, "efficiency"]))
    base = rows[0]["samples/s"]
    for r in rows:
        eff = r["samples/s"] / (base * r["gpus"])
        cells = [
            f"{r[c]:>12.0f}" if c in ("gpus", "nodes", "samples/step") else f"{r[c]:>12.2f}"
            for c in cols
        ]
        print(" ".join(cells), f"{eff * 100:>11.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
