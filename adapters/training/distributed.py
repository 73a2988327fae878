"""Training on several processes: ``torchrun`` / ``accelerate launch`` ranks, DDP and FSDP2.

``torchrun --nproc-per-node N -m adapters.train ...`` (or ``accelerate launch --num-processes N -m
adapters.train ...``) starts N copies of the trainer; each finds its rank in the environment the
launcher sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``) and
:func:`setup` joins the process group (NCCL on CUDA, gloo on CPU, ``dist_timeout_s`` on every
collective). Without a launcher nothing here is used and the trainer runs as one process, exactly
as before.

What each rank does in one step
-------------------------------
* **Rollout of its share.** ``instances_per_step`` is the *global* batch. Instance ``i`` always
  gets the seed ``derive_seed(seed, "train-<step>", i)`` and rank ``r`` rolls out the contiguous
  block :func:`shard_range` of instance indices, numbered globally (``RolloutEngine.run(...,
  instance_offset=)``), so a group (one instance's candidates) never spans ranks. Generation
  seeds come from ``(step seed, instance, branch)`` instead of the position in the batch
  (``RolloutConfig.prompt_seeds``), so the samples of instance ``i`` are the same for any number of
  ranks.
* **Advantages.** AT-GRPO / GRPO groups live on one rank, so each rank computes its own; the
  REINFORCE++ family whitens over the whole batch, so those items are gathered first
  (:meth:`DistContext.all_gather_objects`) and every rank computes the same global advantages.
* **Update** (:class:`RankParallel`, used by :func:`~adapters.training.update.update_policy`):
  minibatches are cut from the *global* list of prompt groups (the same seeded shuffle on every
  rank; each rank trains on its part of each minibatch); the token-mean (or sequence-mean)
  denominator is the global one (all-reduced before the first backward), so the gradients of N
  ranks sum to the gradient of one rank holding the whole batch; ranks with fewer micro-batches
  run zero-weight padding passes so that every rank joins the same number of collectives;
  gradients are summed across ranks (loss x world size, since DDP and FSDP average) on the last
  micro-batch only (``no_sync`` / ``set_requires_gradient_sync``).
* **Wrapping** (``TrainConfig.dp_mode``): ``ddp`` -
  :class:`torch.nn.parallel.DistributedDataParallel` over the policy's trainable parameters (LoRA
  adapters: one DDP per adapter, default with LoRA); ``fsdp`` - FSDP2
  (:func:`torch.distributed.fsdp.fully_shard` on every decoder layer, ``_no_split_modules``, then
  on the root): parameters, gradients and AdamW states sharded across ranks (default for full
  fine-tuning); ``hsdp`` - FSDP2 on a 2-D mesh: sharded within a node (``LOCAL_WORLD_SIZE``
  ranks, NVLink), replicated across nodes (only gradients cross the slower network). The training forward goes through the wrapper's ``forward`` (a
  :class:`LogprobModule` around :func:`~adapters.training.logprobs.completion_logprobs`), so the
  library's hooks run. Between updates FSDP2 modules are kept *unsharded*
  (``unshard()``, ``set_reshard_after_forward(False)``): generation and the old / reference
  log-prob passes run on full parameters with no collective inside a forward (ranks generate
  different lengths), and :meth:`RankParallel.begin_update` reshards for the update. Gradient
  clipping is ``torch.nn.utils.clip_grad_norm_``, which handles FSDP2's DTensor gradients.
* **Logs, evaluation, checkpoints.** Rank 0 gathers the samples and writes ``trajectories.jsonl``
  (in a canonical order: the same file for any number of ranks) and ``metrics.jsonl`` (losses and
  counts summed over ranks, timings the slowest rank's), and runs the evaluations while the others
  wait. Checkpoints (:mod:`adapters.training.checkpoints`) are written once: replicated state
  (LoRA adapters, their optimizers, RNG, the step) by rank 0 in the single-process format, sharded
  FSDP2 state with :mod:`torch.distributed.checkpoint` (``get_state_dict`` / ``set_state_dict``,
  one ``policy_<pid>/`` directory per policy), which any number of ranks can load (DCP reshards).

Failures: a rank that dies is seen by the launcher's elastic agent, which stops the other ranks
and reports the failed rank (``torchrun`` exits non-zero); a rank that hangs makes the others'
next collective fail after ``dist_timeout_s``. ``--resume DIR`` then continues exactly.

Limits: evaluation runs on rank 0 only; the MAE/SAGE shared question pools are per rank (rank 0's
is checkpointed); with FSDP2 the full parameters must fit one device during rollout (gradients and
optimizer states, the bulk of the memory, stay sharded).
"""

from __future__ import annotations

import datetime
import hashlib
import inspect
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from adapters.rollout import RolloutResult
from adapters.training.batch import TrainItem, micro_batches, minibatches
from adapters.training.logprobs import completion_logprobs

if TYPE_CHECKING:  # pragma: no cover
    from adapters.training.backends import WeightSync

__all__ = [
    "SINGLE",
    "DataParallel",
    "DistContext",
    "LogprobModule",
    "RankParallel",
    "launched",
    "setup",
    "shard_range",
    "wrap_models",
]


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


# ---------------------------------------------------------------------------------------------
# the process group


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


# ---------------------------------------------------------------------------------------------
# the update's view of the other ranks


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


# ---------------------------------------------------------------------------------------------
# sharded checkpoints


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


# ---------------------------------------------------------------------------------------------
# what the trainer reduces across ranks

_SUMMED = (  # weighted by the global denominators, so the ranks' parts add up
    "pg_loss",
    "kl_loss",
    "entropy",
    "loss",
    "clip_frac",
    "approx_kl",
    "samples_trained",
    "tokens_trained",
)


def advantages(
    ctx: DistContext, cfg: Any, items: list[TrainItem], compute: Callable[[Any, Any], None]
) -> None:
    """``compute(cfg, items)`` with the statistics of the global batch: local for an estimator
    of ``scope="group"`` (its groups never span ranks), over every rank's items (gathered) for
    one of ``scope="batch"`` (REINFORCE++ whitening)."""
    from adapters.training.advantages import ESTIMATORS

    if not ctx.enabled or ESTIMATORS[cfg.algorithm].scope == "group":
        compute(cfg, items)
        return
    parts = ctx.all_gather_objects(items)
    compute(cfg, [it for part in parts for it in part])
    for it, done in zip(items, parts[ctx.rank]):
        it.advantages = done.advantages
        it.sample.advantage = done.sample.advantage


def reduce_update_stats(ctx: DistContext, st: dict[str, float]) -> dict[str, float]:
    """One policy's :func:`~adapters.training.update.update_policy` statistics for the whole
    batch: weighted losses and counts summed, ``ratio_max`` the largest; the gradient norm and
    optimizer steps are the same on every rank."""
    if not ctx.enabled:
        return st
    keys = (*_SUMMED, "ratio_max")
    present = ctx.all_sum([1.0 if k in st else 0.0 for k in keys])
    sums = ctx.all_sum([st.get(k, 0.0) for k in _SUMMED])
    out = dict(st)
    out.update({k: v for k, v, p in zip(_SUMMED, sums, present) if p})
    if present[-1]:
        out["ratio_max"] = ctx.all_max([st.get("ratio_max", 0.0)])[0]
    return out


def reduce_batch_stats(
    ctx: DistContext, items: Sequence[TrainItem], dropped: int, nonzero: int, kl: float | None
) -> dict[str, float]:
    """``samples_untrainable``, ``zero_adv_frac`` and ``kl`` of the global batch."""
    kl_tokens = sum(len(it.old_logprobs) for it in items if it.ref_logprobs is not None)
    d, nz, n, num, den = ctx.all_sum(
        [dropped, nonzero, len(items), (kl or 0.0) * kl_tokens, kl_tokens]
    )
    out = {"samples_untrainable": d, "zero_adv_frac": 1.0 - nz / n if n else 1.0}
    if den:
        out["kl"] = num / den
    return out


def gather_rollout(ctx: DistContext, result: RolloutResult) -> RolloutResult:
    """On rank 0 every rank's samples (:func:`canonical_order`) and episodes; elsewhere
    ``result`` itself."""
    if not ctx.enabled:
        return result
    parts = ctx.gather_objects((result.samples, result.episodes))
    if parts is None:
        return result
    samples = canonical_order([s for p in parts for s in p[0]])
    return RolloutResult(samples=samples, episodes=[e for p in parts for e in p[1]])


def weight_sync(ctx: DistContext, dp: DataParallel, cfg: Any) -> WeightSync:
    """How this rank feeds updated weights to the generating engines: vLLM servers are shared,
    so rank 0 pushes; a colocated engine belongs to its rank, so every rank pushes. FSDP2
    weights are gathered first (every rank takes part)."""
    from adapters.training.backends import WeightSync

    return WeightSync(
        pushes=ctx.is_main or cfg.backend != "vllm-server",
        full_state=lambda pm: full_state_dict(dp, pm),
    )


# ---------------------------------------------------------------------------------------------
# logs on rank 0


def canonical_order(samples: Sequence[Any]) -> list[Any]:
    """Samples gathered from the ranks in the order one process records them: by agent step,
    then instance (stable: branches and candidates keep their order)."""
    return sorted(samples, key=lambda s: (s.step, s.instance))


@dataclass
class NullMetrics:
    """The metrics logger of ranks other than 0: writes nothing."""

    offset: int = 0
    path: Path = field(default_factory=lambda: Path(os.devnull))

    def log(self, *a: Any, **k: Any) -> None: ...
    def log_scalars(self, *a: Any, **k: Any) -> None: ...
    def log_eval(self, *a: Any, **k: Any) -> None: ...
    def plot(self, *a: Any, **k: Any) -> None: ...
    def truncate(self, *a: Any, **k: Any) -> None: ...
    def close(self) -> None: ...
