"""Checkpoints: what a training run saves, how it is written atomically, and how a run resumes.

A checkpoint is the directory ``<run>/checkpoints/step_NNNNNN/`` holding

==========================  ===================================================================
file                        content
==========================  ===================================================================
``policy_<pid>.pt``         the trainable weights of each policy: its LoRA adapter
                            (``get_peft_model_state_dict``) or, for full fine-tuning, the model
``optimizer_<pid>.pt``      each policy's optimizer state (AdamW moments, step counts)
``policy_<pid>/``           instead of the two files above, for a policy sharded with FSDP2 over
                            several ranks: model and optimizer state written by every rank with
                            ``torch.distributed.checkpoint`` (loadable by any number of ranks)
``rng.pt``                  Python, NumPy, torch (and CUDA) generator states
``shared.pt``               the setting's shared objects (``state_dict()`` of the MAE/SAGE
                            question pools) and, single-process, the rollout schedule's state
                            (rollouts produced ahead, the agent pipeline's in-flight work: env
                            states and, with segments, the partial completions with their
                            prefixes, behaviour log-probs, sampler states and policy versions)
``state.json``              format version, the step, the policy ids, the wall-clock time and the
                            byte offsets of ``trajectories.jsonl`` and ``metrics.jsonl`` at the
                            moment of the checkpoint
==========================  ===================================================================

Writing is atomic: everything goes into a temporary sibling directory that is fsynced and then
renamed, so a killed run leaves either the previous complete checkpoint or the new one (a
directory without ``state.json`` is never used). Only the newest ``keep`` checkpoints stay.

Resuming (:func:`load_checkpoint`, used by ``Trainer.resume`` / ``python -m adapters.train
--resume DIR``) reloads weights, optimizer states, RNG states and shared objects; the trainer
then truncates both JSONL logs to the saved offsets (lines written after the checkpoint by a run
that was killed are rewritten identically) and continues at the next step. Every random choice of
a step derives from ``(seed, step, ...)`` (:func:`~adapters.rollout.derive_seed`), so on CPU with
fixed seeds the later metrics equal those of an uninterrupted run.

:func:`export_policies` writes the final policies (``<run>/final/<pid>/``: a peft adapter
directory, or the full model and tokenizer), loadable by ``python -m adapters.evaluate --policy
DIR``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.training.policy_models import PolicyModel

if TYPE_CHECKING:  # pragma: no cover
    from adapters.training.distributed import DataParallel, DistContext

__all__ = [
    "CKPT_FORMAT",
    "export_policies",
    "latest_checkpoint",
    "load_extra",
    "load_checkpoint",
    "save_checkpoint",
]

CKPT_FORMAT = 1


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint directory of a run (None when there is none)."""
    ckdir = Path(run_dir) / "checkpoints"
    if not ckdir.is_dir():
        return None
    done = sorted(
        p
        for p in ckdir.iterdir()
        if p.is_dir() and p.name.startswith("step_") and (p / "state.json").is_file()
    )
    return done[-1] if done else None


def save_checkpoint(
    run_dir: Path,
    step: int,
    models: Mapping[str, PolicyModel],
    shared: Mapping[str, Any],
    *,
    trajectories_bytes: int,
    metrics_bytes: int,
    keep: int,
    ranks: DistContext | None = None,
    dp: DataParallel | None = None,
) -> Path:
    """Write ``checkpoints/step_NNNNNN`` atomically (temp dir + rename); prune old ones.

    Under torch.distributed every rank calls it (``ranks``, ``dp``): FSDP2-sharded policies are
    written by all ranks with DCP, everything else by rank 0 only."""
    import numpy as np
    import torch

    from adapters.training import distributed

    ranks = ranks or distributed.DistContext()
    dp = dp or distributed.SINGLE
    ckdir = Path(run_dir) / "checkpoints"
    final = ckdir / f"step_{step:06d}"
    tmp = ckdir / ranks.broadcast_object(f".tmp-step_{step:06d}-{os.getpid()}")
    if ranks.is_main:
        ckdir.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
    ranks.barrier()
    for pid, pm in models.items():
        if isinstance(dp, distributed.RankParallel) and dp.is_sharded(pid):
            distributed.save_sharded(dp, pm, tmp / f"policy_{pid}")
            continue
        if not ranks.is_main:
            continue
        torch.save(
            {k: v.detach().cpu() for k, v in pm.trainable_state().items()},
            tmp / f"policy_{pid}.pt",
        )
        torch.save(pm.optimizer.state_dict(), tmp / f"optimizer_{pid}.pt")
    ranks.barrier()
    if not ranks.is_main:
        ranks.barrier()
        return final
    rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }
    torch.save(rng, tmp / "rng.pt")
    torch.save({k: v.state_dict() for k, v in shared.items()}, tmp / "shared.pt")
    state = {
        "format": CKPT_FORMAT,
        "step": step,
        "trajectories_bytes": trajectories_bytes,
        "metrics_bytes": metrics_bytes,
        "policies": sorted(models),
        "time": time.time(),
        "world_size": ranks.world_size,
    }
    (tmp / "state.json").write_text(json.dumps(state, indent=2))
    _fsync_dir(tmp)
    if final.exists():  # a re-run of the same step after a resume
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(ckdir)
    done = sorted(p for p in ckdir.iterdir() if p.name.startswith("step_"))
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in ckdir.glob(".tmp-step_*"):
        shutil.rmtree(stale, ignore_errors=True)
    ranks.barrier()
    return final


def load_checkpoint(
    ckpt: Path,
    models: Mapping[str, PolicyModel],
    shared: Mapping[str, Any],
    device: Any,
    dp: DataParallel | None = None,
) -> dict[str, Any]:
    """Restore weights, optimizer states, RNG states and shared objects; returns ``state.json``.

    Any checkpoint loads into any number of ranks: a DCP directory ``policy_<pid>/`` is
    resharded, a full ``policy_<pid>.pt`` is loaded as it is (or scattered into FSDP2 shards)."""
    import numpy as np
    import torch

    from adapters.training import distributed

    dp = dp or distributed.SINGLE

    state = json.loads((ckpt / "state.json").read_text())
    if state.get("format") != CKPT_FORMAT:
        raise RuntimeError(f"{ckpt} has checkpoint format {state.get('format')}")
    if sorted(state["policies"]) != sorted(models):
        raise RuntimeError(f"{ckpt} holds policies {state['policies']}, not {sorted(models)}")
    for pid, pm in models.items():
        if (ckpt / f"policy_{pid}").is_dir():  # written sharded (DCP)
            distributed.load_sharded(dp, pm, ckpt / f"policy_{pid}")
            continue
        weights = torch.load(ckpt / f"policy_{pid}.pt", map_location=device)
        optim = torch.load(ckpt / f"optimizer_{pid}.pt", map_location=device)
        if isinstance(dp, distributed.RankParallel) and dp.is_sharded(pid):
            distributed.load_full_into_sharded(dp, pm, weights, optim)
            continue
        pm.load_trainable_state(weights)
        pm.optimizer.load_state_dict(optim)
    rng = torch.load(ckpt / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    saved_shared = torch.load(ckpt / "shared.pt", weights_only=False)
    for name, obj in shared.items():
        if name in saved_shared:
            obj.load_state_dict(saved_shared[name])
    return state


def load_extra(run_dir: Path, name: str) -> Any:
    """The state saved under ``name`` in the newest checkpoint's ``shared.pt`` (None: none)."""
    import torch

    ckpt = latest_checkpoint(run_dir)
    if ckpt is None or not (ckpt / "shared.pt").exists():
        return None
    return torch.load(ckpt / "shared.pt", weights_only=False).get(name)


def export_policies(
    models: Mapping[str, PolicyModel],
    tokenizer: Any,
    where: Path,
    ranks: DistContext | None = None,
    dp: DataParallel | None = None,
) -> None:
    """Save each policy under ``where/<pid>``: its peft adapter, or the full model and tokenizer.

    Under torch.distributed every rank calls it (sharded weights are gathered) and rank 0 writes.
    """
    from adapters.training import distributed

    ranks = ranks or distributed.DistContext()
    dp = dp or distributed.SINGLE
    if ranks.is_main:
        where.mkdir(parents=True, exist_ok=True)
    for pid, pm in models.items():
        target = where / pid
        if isinstance(dp, distributed.RankParallel) and dp.is_sharded(pid):
            full = distributed.full_state_dict(dp, pm)
            if ranks.is_main:
                pm.model.save_pretrained(str(target), state_dict=full)
                tokenizer.save_pretrained(str(target))
            continue
        if not ranks.is_main:
            continue
        if pm.peft is not None:
            tmp = where / f".tmp-{pid}"
            shutil.rmtree(tmp, ignore_errors=True)
            pm.peft.save_pretrained(str(tmp), selected_adapters=[pm.adapter])
            src = tmp / str(pm.adapter) if (tmp / str(pm.adapter)).is_dir() else tmp
            shutil.rmtree(target, ignore_errors=True)
            shutil.move(str(src), str(target))
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            pm.model.save_pretrained(str(target))
            tokenizer.save_pretrained(str(target))
    ranks.barrier()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
