"""Training on several processes: ``torchrun`` / ``accelerate launch`` ranks, DDP and FSDP2.

``torchrun --nproc-per-node N -m adapters.train ...`` (or ``accelerate launch --num-processes N -m
adapters.train ...``) starts N copies of the trainer; each finds its rank in the environment the
launcher sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``) and
:func:`setup` joins the process group (NCCL on CUDA, gloo on CPU, ``dist_timeout_s`` on every
collective). Without a launcher nothing here is used and the trainer runs as one process, exactly
as before.

One module per concern: :mod:`~adapters.training.distributed.ranks` (the process group and
each rank's share), :mod:`~adapters.training.distributed.parallel` (DDP / FSDP2 wrapping and the
update's view of the other ranks), :mod:`~adapters.training.distributed.sharded` (sharded
checkpoint IO) and :mod:`~adapters.training.distributed.reductions` (what a step reduces across
ranks). The names below are importable from this package.

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
  ranks, NVLink), replicated across nodes (only gradients cross the slower network). The training
  forward goes through the wrapper's ``forward`` (a :class:`LogprobModule` around
  :func:`~adapters.training.logprobs.completion_logprobs`), so the library's hooks run. Between
  updates FSDP2 modules are kept *unsharded* (``unshard()``, ``set_reshard_after_forward(False)``):
  generation and the old / reference log-prob passes run on full parameters with no collective
  inside a forward (ranks generate different lengths), and :meth:`RankParallel.begin_update`
  reshards for the update. Gradient clipping is ``torch.nn.utils.clip_grad_norm_``, which handles
  FSDP2's DTensor gradients.
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

from adapters.training.distributed.parallel import (
    SINGLE,
    DataParallel,
    LogprobModule,
    RankParallel,
    full_state_dict,
    weight_sync,
    wrap_models,
)
from adapters.training.distributed.ranks import DistContext, launched, setup, shard_range
from adapters.training.distributed.reductions import (
    advantages,
    gather_rollout,
    reduce_batch_stats,
    reduce_update_stats,
    step_stats,
)
from adapters.training.distributed.sharded import (
    load_full_into_sharded,
    load_sharded,
    save_sharded,
)

__all__ = [
    "SINGLE",
    "DataParallel",
    "DistContext",
    "LogprobModule",
    "RankParallel",
    "advantages",
    "full_state_dict",
    "gather_rollout",
    "launched",
    "load_full_into_sharded",
    "load_sharded",
    "reduce_batch_stats",
    "reduce_update_stats",
    "save_sharded",
    "setup",
    "shard_range",
    "step_stats",
    "weight_sync",
    "wrap_models",
]
