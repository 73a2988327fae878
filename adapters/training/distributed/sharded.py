"""Sharded checkpoint IO of FSDP2 policies with :mod:`torch.distributed.checkpoint` (every
rank writes its shards; any number of ranks, or one process, loads them), and loading a
single-process checkpoint into a sharded policy. See :mod:`adapters.training.checkpoints`.

DCP writes its ``.metadata`` file with pickle and its reader loads it with full pickle; here it
is read by :class:`SafeReader`, whose unpickler admits only DCP's own metadata records, torch's
sizes and dtypes and paths: a ``__reduce__`` payload planted there is refused
(:class:`~adapters.training.state_codec.CheckpointError`). The shards themselves DCP reads as
tensors (``weights_only``)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from adapters.training.distributed.parallel import (
    DataParallel,
    RankParallel,
    _fsdp_reshard,
    _fsdp_unshard,
)

__all__ = ["SafeReader", "load_full_into_sharded", "load_sharded", "save_sharded"]


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
        reader = SafeReader(where)
        reader.read_metadata()  # a refusal raises here, not wrapped in DCP's own errors
        dcp.load(state, checkpoint_id=str(where), storage_reader=reader)  # in place
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


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP metadata: its record types, torch sizes, dtypes and layouts, paths."""

    def find_class(self, module: str, name: str) -> Any:
        import torch

        ok = (
            module == "torch.distributed.checkpoint.metadata"
            or (module == "torch.distributed.checkpoint.filesystem" and name == "_StorageInfo")
            or (
                module == "torch"
                and (name == "Size" or isinstance(getattr(torch, name, None), torch.dtype))
            )
            or (module == "torch.serialization" and name == "_get_layout")
            or (module == "pathlib" and name in ("Path", "PosixPath", "PurePosixPath"))
            or (module == "collections" and name == "OrderedDict")
        )
        if not ok:
            from adapters.training.state_codec import CheckpointError

            raise CheckpointError(f"refusing {module}.{name} in a DCP metadata file")
        return super().find_class(module, name)


def _reader_class() -> type:
    from torch.distributed.checkpoint import FileSystemReader

    class _SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            from torch.distributed.checkpoint.metadata import StorageMeta

            rank = kwargs.get("rank")
            path = self._get_metadata_path(rank)
            with self.fs.create_stream(path, "rb") as f:
                metadata = _MetadataUnpickler(f).load()
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return _SafeReader


def SafeReader(path: Path) -> Any:
    """DCP's file system reader whose metadata unpickler admits DCP's own records only."""
    return _reader_class()(str(path))
