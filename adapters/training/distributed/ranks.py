"""The ranks of a ``torchrun`` / ``accelerate launch`` run: where this process stands
(:class:`DistContext`), joining the process group (:func:`setup`), and the block of a global
batch each rank owns (:func:`shard_range`). See :mod:`adapters.training.distributed`."""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["DistContext", "launched", "setup", "shard_range"]


def launched() -> bool:
    """True when a launcher (torchrun, accelerate launch) started this process as one rank."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def shard_range(n: int, rank: int, world_size: int) -> range:
    """The contiguous block of ``range(n)`` owned by ``rank`` (the first ``n % world_size``
    ranks get one more).

    >>> [list(shard_range(5, r, 2)) for r in range(2)]
    [[0, 1, 2], [3, 4]]
    >>> [len(shard_range(1, r, 2)) for r in range(2)]
    [1, 0]
    """
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


@dataclass
class DistContext:
    """This process's place among the ranks; every method is a no-op for a single process."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    enabled: bool = False
    owns_group: bool = False  # destroy the process group on close()
    cuda: bool = False
    timeout_s: float = 600.0
    cpu_group: Any = None  # gloo group for objects and barriers (None: the default group)
    long_group: Any = None  # gloo group with a long timeout (waiting for rank 0's evaluation)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def device(self, configured: Any) -> Any:
        """The device of this rank: ``cuda:LOCAL_RANK`` on CUDA, else what was configured."""
        if self.enabled and self.cuda:
            return torch.device("cuda", self.local_rank)
        return configured

    def shard(self, n: int) -> range:
        return shard_range(n, self.rank, self.world_size)

    # ---- collectives (all on CPU tensors over gloo, so they work next to NCCL)
    def barrier(self, long: bool = False) -> None:
        if self.enabled:
            import torch.distributed as dist

            dist.barrier(group=self.long_group if long else self.cpu_group)

    def _reduce(self, values: Sequence[float], op: str) -> list[float]:
        if not self.enabled:
            return [float(v) for v in values]
        import torch.distributed as dist

        t = torch.tensor([float(v) for v in values], dtype=torch.float64)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=self.cpu_group)
        return t.tolist()

    def all_sum(self, values: Sequence[float]) -> list[float]:
        return self._reduce(values, "SUM")

    def all_max(self, values: Sequence[float]) -> list[float]:
        return self._reduce(values, "MAX")

    def all_gather_objects(self, obj: Any) -> list[Any]:
        """``[obj of rank 0, obj of rank 1, ...]`` on every rank (pickled)."""
        if not self.enabled:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.cpu_group)
        return out

    def gather_objects(self, obj: Any) -> list[Any] | None:
        """``[obj of every rank]`` on rank 0, None elsewhere."""
        if not self.enabled:
            return [obj]
        import torch.distributed as dist

        out: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0, group=self.cpu_group)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.cpu_group)
        return box[0]

    def union(self, keys: Iterable[str]) -> list[str]:
        """The sorted union of every rank's ``keys``."""
        return sorted({k for part in self.all_gather_objects(sorted(keys)) for k in part})

    def close(self) -> None:
        if self.enabled and self.owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.enabled = False


def setup(device: str = "auto", timeout_s: float = 600.0) -> DistContext:
    """Join the process group when launched as a rank (see the module docstring).

    A process group that is already initialised (e.g. by ``accelerate.Accelerator``) is used as
    it is; without a launcher this returns the single-process context.
    """
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and not str(device).startswith("cpu")
    own = False
    if not (dist.is_available() and dist.is_initialized()):
        if not launched():
            return DistContext()
        if not dist.is_available():  # pragma: no cover - torch built without distributed
            raise RuntimeError("this torch build has no torch.distributed")
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if cuda:
            torch.cuda.set_device(local)
        dist.init_process_group(
            "nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=timeout_s)
        )
        own = True
    ctx = DistContext(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        enabled=True,
        owns_group=own,
        cuda=cuda,
        timeout_s=timeout_s,
    )
    if dist.get_backend() != "gloo":
        ctx.cpu_group = dist.new_group(
            backend="gloo", timeout=datetime.timedelta(seconds=timeout_s)
        )
    # rank 0 evaluates while the others wait: allow that to take hours, not dist_timeout_s
    ctx.long_group = dist.new_group(
        backend="gloo", timeout=datetime.timedelta(seconds=max(timeout_s, 6 * 3600))
    )
    return ctx
