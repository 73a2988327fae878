"""Data-parallel training of one policy: what the update asks of the other ranks
(:class:`DataParallel`, :data:`SINGLE` for one process, :class:`RankParallel` under a launcher),
the DDP / FSDP2 wrapping of the policies (:func:`wrap_models`), gathering full weights
(:func:`full_state_dict`) and who pushes them to the generating engines (:func:`weight_sync`).
See :mod:`adapters.training.distributed`."""

from __future__ import annotations

import hashlib
import inspect
import os
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from adapters.training.batch import TrainItem, micro_batches, minibatches
from adapters.training.distributed.ranks import DistContext
from adapters.training.logprobs import completion_logprobs

if TYPE_CHECKING:  # pragma: no cover
    from adapters.training.backends import WeightSync

__all__ = [
    "SHARDED_MODES",
    "SINGLE",
    "DataParallel",
    "LogprobModule",
    "RankParallel",
    "full_state_dict",
    "resolve_mode",
    "weight_sync",
    "wrap_models",
]


class DataParallel:
    """What :func:`~adapters.training.update.update_policy` asks of the other ranks.

    This base class is the single-process case (:data:`SINGLE`): every method is the plain
    operation. :class:`RankParallel` is the multi-process one.
    """

    world_size = 1
    grad_scale = 1.0  # the loss is multiplied by this before backward (DDP/FSDP average)

    def total(self, value: float) -> float:
        """``value`` summed over ranks."""
        return float(value)

    def minibatches(self, items: Sequence[TrainItem], size: int, rng: Any) -> list[list[TrainItem]]:
        return minibatches(items, size, rng)

    def micro_batches(
        self, items: Sequence[TrainItem], size: int, max_tokens: int
    ) -> list[list[TrainItem]]:
        return micro_batches(items, size, max_tokens)

    def forward(self, pm: Any, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """The training forward ``fn(model, *args, **kw)`` of one micro-batch (one call each),
        e.g. ``completion_logprobs``; under DDP / FSDP2 it runs inside the wrapper's
        ``forward``, so their hooks see it."""
        return fn(pm.model, *args, **kw)

    def finish_micro_batches(self, pm: Any) -> None:
        """After a minibatch's micro-batches (padding passes on ranks that had fewer)."""

    def clip_grad_norm(self, params: Sequence[Any], max_norm: float) -> float:
        return _clip(params, max_norm)

    def begin_update(self, pm: Any) -> None:
        """Before the first forward of an update."""

    def end_update(self, pm: Any) -> None:
        """After the update (also after an error)."""


SINGLE = DataParallel()


def _clip(params: Sequence[Any], max_norm: float) -> float:
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    full = getattr(norm, "full_tensor", None)  # FSDP2: a DTensor
    return float(full() if full is not None else norm)


class LogprobModule(torch.nn.Module):
    """The module DDP / FSDP2 wrap: ``forward(fn, ...)`` runs a training forward
    ``fn(model, ...)`` (:func:`~adapters.training.logprobs.completion_logprobs` or any function
    of the model), so the library's hooks run around it."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return fn(self.model, *args, **kw)


class RankParallel(DataParallel):
    """The multi-process :class:`DataParallel` (see the module docstring)."""

    def __init__(
        self,
        ctx: DistContext,
        wrappers: Mapping[str, Any],
        mode: str,
        pad_id: int,
        share_prompt: bool,
    ) -> None:
        self.ctx = ctx
        self.world_size = ctx.world_size
        self.grad_scale = float(ctx.world_size)
        self.wrappers = dict(wrappers)  # policy id -> DDP module or FSDP2 root
        self.mode = mode
        self.pad_id = pad_id
        self.share_prompt = share_prompt
        self._n_micro = 0
        self._done = 0

    def is_sharded(self, pid: str) -> bool:
        return self.mode in SHARDED_MODES and pid in self.wrappers

    def total(self, value: float) -> float:
        return self.ctx.all_sum([value])[0]

    def minibatches(self, items: Sequence[TrainItem], size: int, rng: Any) -> list[list[TrainItem]]:
        """The global plan: every rank's prompt groups (by digest), one seeded shuffle, cut by
        global counts; each rank keeps its own items of each minibatch."""
        if size <= 0:
            return [list(items)]
        local: dict[str, list[TrainItem]] = defaultdict(list)
        for it in items:
            local[_digest(it.prompt_ids)].append(it)
        counts: dict[str, int] = defaultdict(int)
        for part in self.ctx.all_gather_objects({k: len(v) for k, v in local.items()}):
            for key, n in part.items():
                counts[key] += n
        order = sorted(counts)
        rng.shuffle(order)
        out: list[list[TrainItem]] = []
        cur: list[TrainItem] = []
        filled = 0
        for key in order:
            cur.extend(local.get(key, []))
            filled += counts[key]
            if filled >= size:
                out.append(cur)
                cur, filled = [], 0
        if filled:
            out.append(cur)
        return out

    def micro_batches(
        self, items: Sequence[TrainItem], size: int, max_tokens: int
    ) -> list[list[TrainItem]]:
        chunks = micro_batches(items, size, max_tokens) if items else []
        self._n_micro = int(self.ctx.all_max([len(chunks)])[0])
        self._done = 0
        return chunks

    def _set_sync(self, pid: str) -> None:
        last = self._done == self._n_micro - 1
        wrapper = self.wrappers[pid]
        if self.mode in SHARDED_MODES:
            wrapper.set_requires_gradient_sync(last)
        else:
            wrapper.require_backward_grad_sync = last  # what DDP.no_sync() toggles
        self._done += 1

    def forward(self, pm: Any, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        self._set_sync(pm.pid)  # DDP reads the flag in forward, FSDP2 in backward
        if self.is_sharded(pm.pid):  # see completion_logprobs: FSDP2 and the shared prefix
            kw["share_prefix"] = False
        return self.wrappers[pm.pid](fn, *args, **kw)

    def finish_micro_batches(self, pm: Any) -> None:
        while self._done < self._n_micro:  # zero-weight passes: the same collectives as others
            lp = self.forward(
                pm,
                completion_logprobs,
                [[self.pad_id]],
                [[self.pad_id]],
                pad_id=self.pad_id,
                temperature=1.0,
                share_prompt=self.share_prompt,
            )
            (lp.sum() * 0.0).backward()

    def begin_update(self, pm: Any) -> None:
        if self.is_sharded(pm.pid):
            _fsdp_reshard(self.wrappers[pm.pid])

    def end_update(self, pm: Any) -> None:
        if self.is_sharded(pm.pid):
            _fsdp_unshard(self.wrappers[pm.pid])


def _digest(ids: Sequence[int]) -> str:
    return hashlib.blake2b(repr(tuple(ids)).encode(), digest_size=12).hexdigest()


# ---------------------------------------------------------------------------------------------
# wrapping


SHARDED_MODES = ("fsdp", "hsdp")


def _hsdp_mesh(ctx: DistContext) -> Any:
    """The 2-D mesh of ``dp_mode: hsdp``: shard within a node (``LOCAL_WORLD_SIZE`` ranks),
    replicate across nodes."""
    from torch.distributed.device_mesh import init_device_mesh

    local = int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size))
    if local < 1 or ctx.world_size % local:
        raise ValueError(f"hsdp needs WORLD_SIZE ({ctx.world_size}) divisible by {local}")
    return init_device_mesh(
        "cuda" if ctx.cuda else "cpu",
        (ctx.world_size // local, local),
        mesh_dim_names=("replicate", "shard"),
    )


def _fsdp_modules(root: Any) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in root.modules() if isinstance(m, FSDPModule)]


def _fsdp_unshard(root: Any) -> None:
    """All-gather every FSDP2 unit and keep it gathered (forwards then run no collective)."""
    for m in _fsdp_modules(root):
        m.unshard()
        m.set_reshard_after_forward(False, recurse=False)


def _fsdp_reshard(root: Any) -> None:
    for m in _fsdp_modules(root):
        m.reshard()
        m.set_reshard_after_forward(True, recurse=False)


def _rebuild_optimizer(opt: Any, replace: Mapping[int, Any]) -> Any:
    """A fresh optimizer of the same class and groups over the replacement parameters."""
    groups = [
        {
            **{k: v for k, v in g.items() if k != "params"},
            "params": [replace[id(p)] for p in g["params"]],
        }
        for g in opt.param_groups
    ]
    return type(opt)(groups)


def resolve_mode(dp_mode: str, lora: bool) -> str:
    """``auto`` -> ``ddp`` with LoRA, ``fsdp`` for full fine-tuning.

    >>> resolve_mode("auto", True), resolve_mode("auto", False), resolve_mode("ddp", False)
    ('ddp', 'fsdp', 'ddp')
    """
    if dp_mode == "auto":
        return "ddp" if lora else "fsdp"
    return dp_mode


def wrap_models(
    ctx: DistContext,
    models: Mapping[str, Any],
    *,
    dp_mode: str,
    pad_id: int,
    share_prompt: bool,
) -> DataParallel:
    """Wrap each policy's model for data parallelism; :data:`SINGLE` for one process.

    FSDP2: one root per distinct module (per-role adapters on one base share it); the
    policies' ``params`` and optimizers are rebuilt over the sharded parameters. DDP: one
    wrapper per policy over its trainable parameters (those with ``requires_grad`` once the
    policy is active, i.e. its own LoRA adapter).
    """
    if not ctx.enabled:
        return SINGLE
    lora = any(pm.peft is not None for pm in models.values())
    mode = resolve_mode(dp_mode, lora)
    wrappers: dict[str, Any] = {}
    if mode in SHARDED_MODES:
        from torch.distributed.fsdp import fully_shard

        shard_kw = {"mesh": _hsdp_mesh(ctx)} if mode == "hsdp" else {}

        roots: dict[int, Any] = {}
        for pid, pm in models.items():
            key = id(pm.model)
            if key not in roots:
                names = {id(p): n for n, p in pm.model.named_parameters()}
                owned = {
                    q.pid: [names[id(p)] for p in q.params]
                    for q in models.values()
                    if q.model is pm.model
                }
                root = LogprobModule(pm.model)
                layer_names = set(getattr(pm.model, "_no_split_modules", None) or [])
                for module in pm.model.modules():
                    if type(module).__name__ in layer_names:
                        fully_shard(module, **shard_kw)
                fully_shard(root, **shard_kw)
                new = dict(pm.model.named_parameters())
                for q in models.values():
                    if q.model is pm.model:
                        swap = {id(p): new[n] for p, n in zip(q.params, owned[q.pid])}
                        q.params = [new[n] for n in owned[q.pid]]
                        q.optimizer = _rebuild_optimizer(q.optimizer, swap)
                with torch.no_grad():  # FSDP2 initialises lazily at the root's first forward
                    root(completion_logprobs, [[pad_id]], [[pad_id]], pad_id=pad_id)
                _fsdp_unshard(root)
                roots[key] = root
            wrappers[pid] = roots[key]
    elif mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        kw: dict[str, Any] = {}
        sig = inspect.signature(DDP.__init__).parameters
        if "forward_sync_buffers" in sig:
            kw["forward_sync_buffers"] = False
        else:  # pragma: no cover - torch < 2.13
            kw["broadcast_buffers"] = False
        if ctx.cuda:
            kw["device_ids"] = [ctx.local_rank]
        for pid, pm in models.items():
            pm.activate()  # only this policy's parameters require grad now
            wrappers[pid] = DDP(LogprobModule(pm.model), **kw)
        next(iter(models.values())).activate()
    else:
        raise ValueError(f"dp_mode must be auto, ddp, fsdp or hsdp, got {dp_mode!r}")
    return RankParallel(ctx, wrappers, mode, pad_id, share_prompt)


def full_state_dict(dp: DataParallel, pm: Any) -> dict[str, Any]:
    """The whole model's state dict (plain tensors): gathered from the shards under FSDP2 (a
    collective: every rank must call it), else ``state_dict()``."""
    if isinstance(dp, RankParallel) and dp.is_sharded(pm.pid):
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        root = dp.wrappers[pm.pid]
        _fsdp_reshard(root)
        try:
            return get_model_state_dict(
                pm.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
        finally:
            _fsdp_unshard(root)
    return pm.model.state_dict()


def weight_sync(ctx: DistContext, dp: DataParallel, cfg: Any) -> WeightSync:
    """How this rank feeds updated weights to the generating engines: vLLM servers are shared,
    so rank 0 pushes; a colocated engine belongs to its rank, so every rank pushes. FSDP2
    weights are gathered first (every rank takes part)."""
    from adapters.training.backends import WeightSync

    return WeightSync(
        pushes=ctx.is_main or cfg.compute.backend != "vllm-server",
        full_state=lambda pm: full_state_dict(dp, pm),
    )
