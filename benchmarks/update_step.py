"""Where one update's time goes, and what the PPO ratio's denominator costs.

    python benchmarks/update_step.py                     # the 8 x 8 Sokoban CPU default step
    python benchmarks/update_step.py --env plan_path
    python benchmarks/update_step.py --quick             # seconds: the tiny model

One rollout step of the setting's default run (``python -m adapters.train --env ENV`` with its
device defaults, step 1), then the update of its samples three ways, each from the same weights
and optimizer state, in one run:

* ``pass over every sample``: the old log-probs recomputed for every sample before the advantages
  are known (the trainer's order before the denominator's source became a knob value);
* ``pass over trained samples``: advantages first, then the pass over the samples the update
  trains on (``old_logprobs: recompute``; what a multi-step update still needs);
* ``the update's forward``: no pass; the training forward's own log-probs, detached, are the old
  ones (``old_logprobs: forward``, the default of a one-step update; only for a one-step update).

Columns: seconds of the pass, of the update (forward, backward and optimizer step), their total
and the total's ratio to the first row. ``fwd+bwd`` is one forward and backward over the trained
samples in the update's micro-batches (the unit the update costs a multiple of);
``|g - g1|/|g1|`` the norm of the difference between the gradient a row's optimizer step applied
and the first row's, relative to the first row's: the rounding of the bfloat16 passes (a
separate pass in other micro-batches scores each token slightly differently, so its PPO ratio is
1 only up to rounding), not a different step.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._quick import parse_args


def _items(run: Any, samples: Any) -> list[Any]:
    """Fresh train items of a copy of ``samples`` (each update fills its own tensors)."""
    from adapters.training.batch import make_items

    items, _ = make_items(
        copy.deepcopy(samples), lambda s: run.cfg.generation.temperature_of(s.role)
    )
    return items


def _update(trainer: Any, samples: Any, mode: str) -> tuple[float, float, list[Any]]:
    """(pass s, update s, the gradient of its optimizer step) of one update of ``samples``."""
    from adapters.training.update import compute_advantages, prepare_logprobs, update_policy

    run = trainer.run
    old = "forward" if mode == "forward" else "recompute"
    ucfg = dataclasses.replace(run.cfg.update, old_logprobs=old)
    items = _items(run, samples)
    pm = run.models[items[0].sample.policy_id]
    t = time.perf_counter()
    if mode != "every":
        compute_advantages(ucfg, items)
    prepare_logprobs(ucfg, pm, items, run.pad_id)
    if mode == "every":
        compute_advantages(ucfg, items)
    t_pass = time.perf_counter() - t
    grads: list[Any] = []
    step = pm.optimizer.step

    def recording_step(*a: Any, **kw: Any) -> Any:  # the clipped gradient it applies
        grads[:] = [p.grad.detach().float().clone() for p in pm.params if p.grad is not None]
        return step(*a, **kw)

    pm.optimizer.step = recording_step
    t = time.perf_counter()
    try:
        update_policy(ucfg, pm, items, 1, run.pad_id, run.dp, seed=run.cfg.seed)
    finally:
        del pm.optimizer.step  # the class's method again
    t_update = time.perf_counter() - t
    return t_pass, t_update, grads


def _fwd_bwd(trainer: Any, samples: Any) -> tuple[float, int]:
    """Seconds of one forward and backward over the trained samples, and their tokens."""
    import torch

    from adapters.training.batch import micro_batches, padded_cost
    from adapters.training.logprobs import completion_logprobs
    from adapters.training.update import compute_advantages, precision, trained_items

    run = trainer.run
    ucfg = run.cfg.update
    items = _items(run, samples)
    compute_advantages(ucfg, items)
    items = trained_items(ucfg, items)
    pm = run.models[items[0].sample.policy_id]
    pm.model.train()
    chunks = micro_batches(items, ucfg.micro_batch_size, ucfg.micro_batch_tokens)
    t = time.perf_counter()
    with precision(ucfg, pm.model):
        for mb in chunks:
            lp = completion_logprobs(
                pm.model,
                [it.prompt_ids for it in mb],
                [it.completion_ids for it in mb],
                pad_id=run.pad_id,
                temperature=mb[0].temperature,
            )
            lp.sum().backward()
    pm.optimizer.zero_grad(set_to_none=True)
    pm.model.eval()
    if any(p.device.type == "cuda" for p in pm.params):
        torch.cuda.synchronize()
    return time.perf_counter() - t, sum(padded_cost(mb) for mb in chunks)


def _norm(tensors: list[Any]) -> float:
    return float(sum(float((t * t).sum()) for t in tensors)) ** 0.5


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--env", default="sokoban")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave)")
    p.add_argument("--instances", type=int, default=0, help="instances rolled out (0: default)")
    p.add_argument("--max-new-tokens", type=int, default=0, help="(0: the setting's default)")
    p.add_argument(
        "--train-all",
        action="store_true",
        help="train every sample (skip_zero_advantage off), e.g. when a model earns equal rewards",
    )
    args = parse_args(p, argv, model="tiny", instances=1, max_new_tokens=8, train_all=True)
    import torch

    from adapters.training.config import TrainConfig
    from adapters.training.trainer import Trainer

    if args.threads:
        torch.set_num_threads(args.threads)
    extra: dict[str, Any] = {} if args.device == "auto" else {"device": args.device}
    if args.instances:
        extra["instances_per_step"] = args.instances
    if args.max_new_tokens:
        extra["max_new_tokens"] = args.max_new_tokens
    if args.train_all:
        extra["skip_zero_advantage"] = False
    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig(
            env=args.env,
            model=args.model,
            output_dir=out,
            steps=1,
            eval_episodes=0,
            **extra,
        )
        trainer = Trainer(cfg, log=lambda _line: None)
        t = time.perf_counter()
        samples = trainer.rollout(1).samples
        t_roll = time.perf_counter() - t
        pm = next(iter(trainer.run.models.values()))
        start = ([q.detach().clone() for q in pm.params], copy.deepcopy(pm.optimizer.state_dict()))
        rows = []
        modes = [("every", "pass over every sample"), ("trained", "pass over trained samples")]
        if trainer.run.cfg.update.one_step:  # else the forward's log-probs are not pi_old's
            modes.append(("forward", "the update's forward"))
        for mode, label in modes:
            with torch.no_grad():
                for q, w in zip(pm.params, start[0]):
                    q.copy_(w)
            pm.optimizer.load_state_dict(copy.deepcopy(start[1]))
            rows.append((label, *_update(trainer, samples, mode)))
        fb, tokens = _fwd_bwd(trainer, samples)
        trainer.close()
    ucfg = trainer.run.cfg.update
    print(
        f"env {args.env}, model {args.model}, {len(samples)} samples "
        f"({sum(len(s.completion_ids) for s in samples)} completion tokens), rollout "
        f"{t_roll:.1f} s, {torch.get_num_threads()} threads, update precision "
        f"{ucfg.update_precision}, {ucfg.ppo_minibatches} mini-batch(es)"
    )
    print(f"one fwd+bwd over the trained samples: {fb:.1f} s ({tokens} padded tokens)")
    print(f"{'old log-probs from':<28}{'pass s':>8}{'update s':>10}{'total s':>9}{'ratio':>7}"
          f"{'x fwd+bwd':>10}{'|g - g1|/|g1|':>15}")  # fmt: skip
    base_total = rows[0][1] + rows[0][2]
    first = rows[0][3]
    scale = _norm(first) or 1.0
    for label, t_pass, t_upd, grads in rows:
        total = t_pass + t_upd
        diff = _norm([a - b for a, b in zip(grads, first)]) / scale
        print(
            f"{label:<28}{t_pass:>8.1f}{t_upd:>10.1f}{total:>9.1f}{base_total / total:>7.2f}"
            f"{total / fb:>10.2f}{diff:>15.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
