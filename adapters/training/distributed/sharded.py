"""Sharded checkpoint IO of FSDP2 policies with :mod:`torch.distributed.checkpoint` (every
rank writes its shards; any number of ranks, or one process, loads them), and loading a
single-process checkpoint into a sharded policy. See :mod:`adapters.training.checkpoints`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.training.distributed.parallel import (
    DataParallel,
    RankParallel,
    _fsdp_reshard,
    _fsdp_unshard,
)

__all__ = ["load_full_into_sharded", "load_sharded", "save_sharded"]


def save_sharded(dp: DataParallel, pm: Any, where: Path) -> None:
    """Write ``pm``'s model and optimizer state with DCP (every rank writes its shards)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    root = dp.wrappers[pm.pid] if isinstance(dp, RankParallel) else None
    if root is not None:
        _fsdp_reshard(root)
    try:
        msd, osd = get_state_dict(pm.model, pm.optimizer)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(where))
    finally:
        if root is not None:
            _fsdp_unshard(root)


def load_sharded(dp: DataParallel, pm: Any, where: Path) -> None:
    """Load a :func:`save_sharded` directory into ``pm`` (any number of ranks, or one process)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    root = dp.wrappers[pm.pid] if isinstance(dp, RankParallel) and dp.is_sharded(pm.pid) else None
    if root is not None:
        _fsdp_reshard(root)
    try:
        msd, osd = get_state_dict(pm.model, pm.optimizer)
        state: dict[str, Any] = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=str(where))  # in place
        set_state_dict(
            pm.model,
            pm.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
        )
    finally:
        if root is not None:
            _fsdp_unshard(root)


def load_full_into_sharded(dp: RankParallel, pm: Any, weights: dict, optim: dict) -> None:
    """Load a single-process checkpoint (full state dict, index-keyed optimizer state) into an
    FSDP2-sharded policy."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    names = [n for n, _ in pm.model.named_parameters()]
    by_index = dict(enumerate(names))
    fqn_optim: dict[str, Any] = {
        "state": {by_index[int(i)]: v for i, v in optim.get("state", {}).items()},
        "param_groups": [
            {**g, "params": [by_index[int(i)] for i in g["params"]]}
            for g in optim.get("param_groups", [])
        ],
    }
    root = dp.wrappers[pm.pid]
    _fsdp_reshard(root)
    try:
        set_state_dict(
            pm.model,
            pm.optimizer,
            model_state_dict=weights,
            optim_state_dict=fqn_optim,
            options=StateDictOptions(full_state_dict=True),
        )
    finally:
        _fsdp_unshard(root)
