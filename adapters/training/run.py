"""What a training run is built from, built in one place: :func:`build_run`.

:func:`build_run` takes a :class:`~adapters.training.config.TrainConfig` and returns a
:class:`Run`, every collaborator of the training loop, in the order they depend on each other:

1. the resolved config (:meth:`TrainConfig.resolved`: frozen, every auto value set) and this
   process's rank (:mod:`adapters.training.distributed`); the run directory (``config.yaml``
   written once, by rank 0) and the seeds;
2. the base model and its tokenizer (:func:`~adapters.policies.models.load_base_model`);
3. the setting: its roles, run-wide shared objects and the oracle's demonstrations that fit the
   token budget (:mod:`adapters.rollout.episodes`);
4. the trainable policies (:mod:`adapters.training.policy_models`), their data-parallel wrapping,
   the rollout backend that generates with them (:mod:`adapters.training.backends`), the env
   pool and the :class:`~adapters.rollout.RolloutEngine`.

:class:`~adapters.training.trainer.Trainer` is a :class:`Run` plus the loop's state (step,
metrics, checkpoints).
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.policies.base import Policy
from adapters.policies.models import load_base_model, resolve_device
from adapters.rollout import (
    LocalEnvPool,
    RolloutEngine,
    create_shared_objects,
    env_roles,
    oracle_demos,
)
from adapters.training import distributed
from adapters.training.backends import make_backend
from adapters.training.config import TrainConfig
from adapters.training.distributed import DataParallel, DistContext
from adapters.training.policy_models import PolicyModel, build_policy_models

__all__ = ["Run", "build_run", "make_env_pool"]


@dataclass(eq=False)
class Run:
    """The collaborators of one training run (see the module docstring)."""

    cfg: TrainConfig  # resolved: every section's auto knobs set
    dist: DistContext
    out: Path
    device: Any
    tokenizer: Any
    pad_id: int
    env_config: dict[str, Any]
    roles: list[str]
    shared: dict[str, Any]  # the setting's run-wide shared objects (create_shared)
    demos: dict[str, list[dict[str, str]]]
    models: dict[str, PolicyModel]
    dp: DataParallel
    backend: Any  # adapters.training.backends: TransformersBackend, VLLMBackend, ...
    policies: dict[str, Policy]
    role_policy: dict[str, str]
    pool: Any
    engine: RolloutEngine
    init_dir: str | None = (
        None  # the adapter merged into the base before training (cfg.policy.init)
    )


def build_run(config: TrainConfig, *, models: Any = None, resume: bool = False) -> Run:
    """Resolve ``config`` and build every collaborator of the run (module docstring).

    ``models``: an optional ``(model, tokenizer)`` to train instead of loading
    ``config.policy.model``.
    ``resume``: the run directory must hold a run (its ``config.yaml``); otherwise it must not.
    """
    import torch

    cfg = config.resolved()
    # one rank of a torchrun / accelerate launch, or a single process
    dist = distributed.setup(cfg.compute.device, cfg.compute.dist_timeout_s)
    if cfg.output.output_dir is None:
        where = dist.broadcast_object(_default_output_dir(cfg))
        cfg = cfg.replace(output_dir=where).resolved()
    out = Path(str(cfg.output.output_dir))
    if cfg.compute.threads:
        torch.set_num_threads(cfg.compute.threads)
    error = None
    made = not out.exists()
    if dist.is_main:
        try:
            prepare_run_dir(out, cfg, resume)
        except (FileExistsError, FileNotFoundError) as exc:
            error = exc
    error = dist.broadcast_object(error)
    if error is not None:
        dist.close()
        raise error
    try:
        return _build(cfg, dist, out, models)
    except BaseException:
        if not resume and dist.is_main:  # no orphan directory holding only config.yaml
            (out / "config.yaml").unlink(missing_ok=True)
            if made:
                with contextlib.suppress(OSError):
                    out.rmdir()  # only when nothing else was written there
        raise


def _build(cfg: TrainConfig, dist: DistContext, out: Path, models: Any) -> Run:
    import numpy as np
    import torch

    random.seed(cfg.seed)
    np.random.seed(cfg.seed % 2**32)
    torch.manual_seed(cfg.seed)
    # the base model and its tokenizer
    device = dist.device(resolve_device(cfg.compute.device))
    if models is not None:
        base, tokenizer = models
        base.to(device)
    else:
        base, tokenizer = load_base_model(cfg.policy.model, device, cfg.policy.dtype, cfg.seed)
    init_dir = None
    if cfg.policy.init not in (None, "none"):
        base, init_dir = start_from(cfg, base, dist)
    # the setting: roles, run-wide shared objects, demonstrations that fit the token budget
    env_config = dict(cfg.env_config)
    roles = env_roles(cfg.env, env_config)
    shared = create_shared_objects(cfg.env, env_config)
    demos = oracle_demos(
        cfg.env,
        {**env_config, **shared},
        roles,
        cfg.demos,
        cfg.seed,
        fits=lambda text: len(tokenizer(text)["input_ids"]) < cfg.generation.max_new_tokens,
    )
    # the trainable policies, the policies that generate with them, and the rollout engine
    trained = build_policy_models(cfg, roles, base)
    pad_id = int(tokenizer.pad_token_id)
    dp = distributed.wrap_models(
        dist,
        trained,
        dp_mode=cfg.compute.dp_mode,
        pad_id=pad_id,
        share_prompt=cfg.update.share_prompt_forward,
    )
    sync = distributed.weight_sync(dist, dp, cfg)
    sharded = getattr(dp, "mode", "") in ("fsdp", "hsdp")  # parallel.SHARDED_MODES
    backend = make_backend(
        cfg, trained, tokenizer, device, roles, demos, sync=sync, sharded=sharded
    )
    policies = backend.policies()
    role_policy = dict(backend.role_policy)
    pool = make_env_pool(cfg)
    engine = RolloutEngine(
        cfg.env,
        policies,
        cfg.rollout,
        generation=cfg.generation,
        env_config={**env_config, **shared},
        role_policy=role_policy,
        pool=pool,
        prompt_seeds=dist.enabled,  # a branch's samples do not depend on its rank's share
    )
    return Run(
        cfg=cfg,
        dist=dist,
        out=out,
        device=device,
        tokenizer=tokenizer,
        pad_id=pad_id,
        env_config=env_config,
        roles=roles,
        shared=shared,
        demos=demos,
        models=trained,
        dp=dp,
        backend=backend,
        policies=policies,
        role_policy=role_policy,
        pool=pool,
        engine=engine,
        init_dir=init_dir,
    )


def start_from(cfg: TrainConfig, base: Any, dist: DistContext) -> tuple[Any, str]:
    """``base`` with ``cfg.policy.init`` merged into its weights, and the adapter directory merged:
    the setting's shipped or cached oracle cold start (made by rank 0 on first use) or a peft
    adapter directory (:mod:`adapters.training.coldstart`)."""
    from adapters.training.coldstart import apply_init, cold_start_of, ensure_cold_start
    from adapters.training.shipped import shipped_init

    init = str(cfg.policy.init)
    if init.startswith("cold-start"):
        made = str(ensure_cold_start(cfg, cold_start_of(cfg))) if dist.is_main else None
        where = str(dist.broadcast_object(made))
    else:
        where = str(shipped_init(init) or init)
    return apply_init(base, where), str(Path(where).resolve())


def prepare_run_dir(out: Path, cfg: TrainConfig, resume: bool) -> None:
    """A new run writes ``config.yaml`` into a directory that holds no run; a resumed one needs
    it."""
    cfg_path = out / "config.yaml"
    if resume:
        if not cfg_path.is_file():
            raise FileNotFoundError(f"{out} has no config.yaml: nothing to resume")
        return
    if cfg_path.exists():
        raise FileExistsError(
            f"{out} already holds a run; resume it with --resume {out} or choose another "
            "--output-dir"
        )
    out.mkdir(parents=True, exist_ok=True)
    cfg.save(cfg_path)


def make_env_pool(cfg: TrainConfig) -> Any:
    """Where the envs step: threads in this process, or ``env_workers`` Ray actors (``env_pool:
    ray``) on a local Ray instance, or on the cluster at ``ray_address`` (``ray.init(address=
    ...)``), where each actor reserves one CPU and the actors are spread over the nodes."""
    if cfg.compute.env_pool == "ray":
        from adapters.rollout.ray_pool import RayEnvPool

        if not cfg.compute.ray_address:
            return RayEnvPool(num_workers=cfg.compute.env_workers)
        spread = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}
        return RayEnvPool(
            num_workers=cfg.compute.env_workers,
            init_kwargs={"address": cfg.compute.ray_address},
            actor_options=spread,
        )
    return LocalEnvPool(workers=cfg.compute.env_workers)


def _default_output_dir(cfg: TrainConfig) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return str(Path("runs") / f"{cfg.env}-{cfg.update.algorithm}-{stamp}")
