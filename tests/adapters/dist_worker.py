"""One rank of the distributed tests (``tests/adapters/training/test_distributed.py``), run by
torchrun::

    python -m torch.distributed.run --nproc-per-node N -m tests.adapters.dist_worker CASES OUT

``CASES`` is a JSON file ``{name: TrainConfig fields}``. For each case the rank trains a
:class:`ShapedTrainer` (rewards from the completion tokens, so that a random tiny model gets
varied rewards and every step updates the weights), then rank 0 writes ``OUT/<name>.pt``: every
policy's trainable parameters (FSDP2 shards gathered), the metrics lines and the trajectory lines.
The process group is created here, once, and shared by all cases.

``python -m tests.adapters.dist_worker cli ARGS...`` runs the real command line
(``adapters.train.main(ARGS)``) with the same reward shaping; ``... load RUN OUT`` resumes the run
in RUN and has rank 0 save the restored full weights and optimizer state to OUT.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def shaped(result):
    """Rewards from the completion tokens (varied even for a random model)."""
    for s in result.samples:
        s.reward = (sum(s.completion_ids) % 7) / 7
    return result


def make_trainer_class():
    from adapters.training.trainer import Trainer

    class ShapedTrainer(Trainer):
        def rollout(self, step):
            return shaped(super().rollout(step))

    return ShapedTrainer


def cli(argv: list[str]) -> int:
    from adapters import train
    from adapters.training.trainer import Trainer

    plain = Trainer.rollout
    Trainer.rollout = lambda self, step: shaped(plain(self, step))  # type: ignore[method-assign]
    return train._launched_main(argv)


def run_case(name: str, fields: dict, out: Path) -> None:
    import torch

    from adapters.training import distributed
    from adapters.training.config import TrainConfig

    cfg = TrainConfig(**fields, output_dir=str(out / f"{name}-run"))
    trainer = make_trainer_class()(cfg, log=lambda line: None)

    def snapshot() -> dict:
        params = {}
        for pid, pm in trainer.run.models.items():
            if isinstance(trainer.run.dp, distributed.RankParallel) and trainer.run.dp.is_sharded(
                pid
            ):
                state = distributed.full_state_dict(trainer.run.dp, pm)
            else:
                state = pm.trainable_state()
            params[pid] = {k: v.detach().cpu().clone() for k, v in state.items()}
        return params

    try:
        initial = snapshot()
        trainer.train()
        params = snapshot()
        if trainer.run.dist.is_main:
            torch.save(
                {
                    "initial": initial,
                    "params": params,
                    "metrics": (trainer.out / "metrics.jsonl").read_text().splitlines(),
                    "trajectories": trainer.traj_path.read_text().splitlines(),
                },
                out / f"{name}.pt",
            )
    finally:
        trainer.close()


def main(argv: list[str]) -> int:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        cases = json.loads(Path(argv[0]).read_text())
        out = Path(argv[1])
        for name, fields in cases.items():
            run_case(name, fields, out)
    finally:
        dist.destroy_process_group()
    return 0


def load(run: str, out: str) -> int:
    import torch
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
    )

    from adapters.training.distributed import parallel as distributed
    from adapters.training.trainer import Trainer

    trainer = Trainer.resume(run)
    try:
        pm = trainer.run.models["shared"]
        weights = distributed.full_state_dict(trainer.run.dp, pm)
        root = trainer.run.dp.wrappers["shared"]
        distributed._fsdp_reshard(root)
        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        optim = get_optimizer_state_dict(pm.model, pm.optimizer, options=opts)
        distributed._fsdp_unshard(root)
        names = [n for n, _ in pm.model.named_parameters()]
        if trainer.run.dist.is_main:
            torch.save({"weights": weights, "optim": optim, "names": names}, out)
    finally:
        trainer.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["cli"]:
        sys.exit(cli(sys.argv[2:]))
    if sys.argv[1:2] == ["load"]:
        sys.exit(load(*sys.argv[2:4]))
    sys.exit(main(sys.argv[1:]))
