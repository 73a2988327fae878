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
``rng.json``                Python, NumPy, torch (and CUDA) generator states
``shared.json``,            the setting's shared objects (``state_dict()`` of the MAE/SAGE
``shared.safetensors``      question pools) and, single-process, the rollout schedule's state
                            (rollouts produced ahead, the agent pipeline's in-flight work: each
                            env's recipe and, with segments, the partial completions with their
                            prefixes, behaviour log-probs, sampler states and policy versions),
                            in the data format of :mod:`adapters.training.state_codec`
``state.json``              format version, the step, the policy ids, the wall-clock time and the
                            byte offsets of ``trajectories.jsonl`` and ``metrics.jsonl`` at the
                            moment of the checkpoint
==========================  ===================================================================

Writing is atomic: everything goes into a temporary sibling directory that is fsynced and then
renamed, so a killed run leaves either the previous complete checkpoint or the new one (a
directory without ``state.json`` is never used). Only the newest ``keep`` checkpoints stay.

Nothing is read with full pickle: a run directory may come from someone else (a downloaded
checkpoint, shared storage), and unpickling runs whatever ``__reduce__`` its author planted.
Weights and optimizer states load with ``torch.load(weights_only=True)``, sharded ones through
DCP with a metadata reader that admits only DCP's own record types
(:mod:`adapters.training.distributed.sharded`), ``state.json`` and ``rng.json`` are JSON, and the
shared state is :mod:`~adapters.training.state_codec` data; ``config.yaml`` is read with
``yaml.safe_load``. A file holding anything else is refused with :class:`CheckpointError`,
naming it, before anything is built from it. Checkpoints of format 1 (pickled ``rng.pt`` and
``shared.pt``) are refused the same way.

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

from adapters.training import state_codec
from adapters.training.policy_models import PolicyModel
from adapters.training.state_codec import CheckpointError

if TYPE_CHECKING:  # pragma: no cover
    from adapters.training.distributed import DataParallel, DistContext

__all__ = [
    "CKPT_FORMAT",
    "CheckpointError",
    "SCHEDULE_KEY",
    "export_policies",
    "latest_checkpoint",
    "load_extra",
    "load_checkpoint",
    "save_checkpoint",
]

CKPT_FORMAT = 2  # 1: rng.pt and shared.pt were pickled
SCHEDULE_KEY = "_rollout_schedule"
"""The rollout schedule's state among the shared states (the rollouts produced ahead, the agent
pipeline's work in flight: see :mod:`adapters.training.schedule`)."""


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
    (tmp / "rng.json").write_text(json.dumps(_rng_state()))
    pools = {k: v for k, v in shared.items() if k != SCHEDULE_KEY}
    states = {k: v.state_dict() for k, v in shared.items()}
    state_codec.save(states, tmp / "shared", shared=pools)
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
    from adapters.training import distributed

    dp = dp or distributed.SINGLE

    state = _read_json(ckpt / "state.json")
    if not isinstance(state, dict) or state.get("format") != CKPT_FORMAT:
        got = state.get("format") if isinstance(state, dict) else None
        raise CheckpointError(
            f"{ckpt} has checkpoint format {got}, not {CKPT_FORMAT}"
            + (" (format 1 pickled its RNG and shared state: it is not read)" if got == 1 else "")
        )
    if sorted(state["policies"]) != sorted(models):
        raise RuntimeError(f"{ckpt} holds policies {state['policies']}, not {sorted(models)}")
    for pid, pm in models.items():
        if (ckpt / f"policy_{pid}").is_dir():  # written sharded (DCP)
            distributed.load_sharded(dp, pm, ckpt / f"policy_{pid}")
            continue
        weights = _load_tensors(ckpt / f"policy_{pid}.pt", device)
        optim = _load_tensors(ckpt / f"optimizer_{pid}.pt", device)
        if isinstance(dp, distributed.RankParallel) and dp.is_sharded(pid):
            distributed.load_full_into_sharded(dp, pm, weights, optim)
            continue
        pm.load_trainable_state(weights)
        pm.optimizer.load_state_dict(optim)
    _set_rng_state(_read_json(ckpt / "rng.json"), ckpt / "rng.json")
    pools = {k: v for k, v in shared.items() if k != SCHEDULE_KEY}
    saved_shared = state_codec.load(ckpt / "shared", shared=pools)
    if not isinstance(saved_shared, dict):
        raise CheckpointError(f"{ckpt / 'shared.json'} does not hold a mapping of shared states")
    for name, obj in shared.items():
        if name in saved_shared:
            obj.load_state_dict(saved_shared[name])
    return state


def load_extra(run_dir: Path, name: str, shared: Mapping[str, Any] | None = None) -> Any:
    """The state saved under ``name`` with the newest checkpoint's shared states (None: none);
    ``shared``: the run's shared objects, which that state may refer to by name."""
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None or not (ckpt / "shared.json").exists():
        return None
    pools = {k: v for k, v in (shared or {}).items() if k != SCHEDULE_KEY}
    saved = state_codec.load(ckpt / "shared", shared=pools)
    return saved.get(name) if isinstance(saved, dict) else None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a JSON file of a checkpoint ({exc})") from None


def _load_tensors(path: Path, device: Any) -> Any:
    """A state dict of tensors, read with ``weights_only=True`` (no pickled objects)."""
    import pickle

    import torch

    try:
        return torch.load(path, map_location=device, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
        why = str(exc).splitlines()[0][:300]
        raise CheckpointError(f"{path}: not a file of tensors ({why})") from None


def _rng_state() -> dict[str, Any]:
    """Python, NumPy, torch and CUDA generator states as JSON data."""
    import numpy as np
    import torch

    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    version, py_state, py_gauss = random.getstate()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    return {
        "python": [version, list(py_state), py_gauss],
        "numpy": [kind, np.asarray(keys).tolist(), pos, has_gauss, gauss],
        "torch": torch.get_rng_state().tolist(),
        "cuda": None if cuda is None else [s.tolist() for s in cuda],
    }


def _set_rng_state(rng: Any, path: Path) -> None:
    import numpy as np
    import torch

    try:
        version, py_state, py_gauss = rng["python"]
        random.setstate((int(version), tuple(int(x) for x in py_state), py_gauss))
        kind, keys, pos, has_gauss, gauss = rng["numpy"]
        np.random.set_state((str(kind), np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
        torch.set_rng_state(torch.tensor(rng["torch"], dtype=torch.uint8))
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in rng["cuda"]])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: not the RNG states of a checkpoint ({exc})") from None


def export_policies(
    models: Mapping[str, PolicyModel],
    tokenizer: Any,
    where: Path,
    ranks: DistContext | None = None,
    dp: DataParallel | None = None,
    init_dir: str | None = None,
) -> None:
    """Save each policy under ``where/<pid>``: its peft adapter, or the full model and tokenizer.
    ``init_dir``: the adapter merged into the base before training (``--init``); a peft adapter
    then records it in ``INIT_FILE`` so that loading it (``--policy DIR``) merges the same
    start first.

    Under torch.distributed every rank calls it (sharded weights are gathered) and rank 0 writes.
    """
    from adapters.policies.specs import INIT_FILE
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
            if init_dir is not None:
                (target / INIT_FILE).write_text(json.dumps({"init": init_dir}, indent=1))
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
