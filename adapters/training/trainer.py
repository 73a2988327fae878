"""The RL trainer: the loop that rolls out, updates, logs, evaluates and checkpoints.

One training step (AT-GRPO, Algorithm 1):

1. **Rollout** (:mod:`adapters.rollout`): ``instances_per_step`` fresh env instances (seeds
   derived from ``(seed, step, i)``) are rolled out by the
   :class:`~adapters.rollout.RolloutEngine`: tree sampling with K candidates per agent-turn and a
   keep rule (``at-grpo``), or K parallel episodes per instance (``grpo``, ``reinforce++``,
   ``tr-reinforce++``). Generation runs through the rollout backend
   (:mod:`adapters.training.backends`) on the policies built by
   :mod:`adapters.training.policy_models`; its seeds derive from ``(seed, step)`` too, so a
   resumed run needs no hidden random state.
2. **Update** (:mod:`adapters.training.update`): advantages per group key or per role, then
   PPO-clip epochs for each policy (one shared, or one per role) on its own samples
   (``Sample.policy_id``) with its own optimizer.
3. **Logging** (:mod:`adapters.training.metrics`): every sample (prompt, completion, reward
   parts, advantage) is appended to ``trajectories.jsonl``; one line of metrics per step goes to
   ``metrics.jsonl`` and TensorBoard (reward per role, success rate, team reward, loss, KL, clip
   fraction, grad norm, timings of generation / env+verifiers / update, tokens);
   ``training_curve.png`` is redrawn every ``plot_every`` steps and at the end.
4. **Checkpoint** (:mod:`adapters.training.checkpoints`, every ``save_every`` steps, atomic).
   ``Trainer.resume(run_dir)`` (``python -m adapters.train --resume DIR``) continues exactly.

Run directory: ``config.yaml`` (the resolved :class:`~adapters.training.config.TrainConfig`),
``metrics.jsonl``, ``trajectories.jsonl``, ``tensorboard/``, ``training_curve.png``,
``eval_before.json`` / ``eval_after.json`` (greedy evaluation on ``eval_split``,
:mod:`adapters.evaluation`), ``checkpoints/step_NNNNNN/`` and ``final/<policy>/`` (peft adapter
or model directory, loadable by ``python -m adapters.evaluate --policy DIR``).

Under ``torchrun`` / ``accelerate launch`` each process is one rank of a data-parallel run
(:mod:`adapters.training.distributed`): it rolls out its block of the step's instances, the update
is DDP / FSDP2 with the global batch's normalisation, rank 0 writes the logs and evaluates, and
checkpoints are written once and resume on any number of ranks (``docs/scaling.md``).

Default CPU run (``python -m adapters.train --env sokoban``; the same for ``plan_path`` and
``sudoku``): embedded SmolLM2-135M in float32 with a rank-8 LoRA adapter (a forward/backward costs
about 25% less than full fine-tuning here, and a checkpoint with Adam states is 30 MB instead of
about 1.6 GB), role sharing, the paper's protocol (AT-GRPO tree sampling with K = 4, T = 4 turns,
the paper's rewards) on 1 instance per step for 6 steps, 48 new tokens at temperature 1.0, lr 1e-3
in 4 PPO mini-batches per step, one oracle demonstration per role (the tool's is a one-line program
that prints the answer, ``oracle_tool="answer"``, so that it fits in 48 tokens; the run header
shows it), and 32 greedy validation episodes before and after training on the same seeds, compared
instance by instance (:func:`~adapters.evaluation.compare_reports`, last lines of the output).
Measured on the project's 2-core machine, 1 torch thread while a second run shared the cores:
Sokoban 6 steps in 727 s of training wall time, mean validation reward 0.317 -> 0.392 (paired
difference +0.075, 95% interval [+0.066, +0.085]); Plan-Path 881 s, 0.147 -> 0.196 (+0.049 [+0.042,
+0.056]); Sudoku (4 x 4) 0.048 -> 0.165 (+0.118 [+0.108, +0.127]), 1577 s of training wall time
while two more jobs shared the cores; each evaluation of 32 episodes took 12-25 minutes. On the
otherwise idle machine with 2 threads (``benchmarks/learning.py``) a training step took 71 s
(Sokoban), 69 s (Plan-Path) and 131 s (Sudoku: 6 steps about 13 minutes). What the
135M model learns in six steps is modest, and the per-agent rows say where it is: the gain is the
tool's (Sokoban tool reward 0.285 -> 0.436 per step, Plan-Path 0.181 -> 0.280, Sudoku 0.015 ->
0.251: its greedy programs earn the format and potential terms on more steps), the planner's reward
does not change and no instance is solved. On CUDA the defaults are the paper's sizes (see
:mod:`adapters.training.recipes`).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from adapters.evaluation import EvalReport, compare_reports, evaluate
from adapters.policies.models import load_base_model, resolve_device
from adapters.rollout import (
    LocalEnvPool,
    RolloutConfig,
    RolloutEngine,
    RolloutResult,
    Sample,
    create_shared_objects,
    derive_seed,
    env_roles,
    episode_specs,
    oracle_demos,
    write_jsonl,
)
from adapters.training import checkpoints, distributed
from adapters.training.backends import make_backend
from adapters.training.config import TrainConfig
from adapters.training.metrics import MetricsLogger, truncate_file
from adapters.training.policy_models import build_policy_models

__all__ = ["RESUMABLE_OVERRIDES", "Trainer"]

# fields that may change on --resume without breaking exactness
RESUMABLE_OVERRIDES = frozenset(
    {"steps", "progress", "plot_every", "eval_episodes", "eval_every", "save_final", "threads"}
)


def make_env_pool(cfg: TrainConfig) -> Any:
    """Where the envs step: threads in this process, or ``env_workers`` Ray actors (``env_pool:
    ray``) on a local Ray instance, or on the cluster at ``ray_address`` (``ray.init(address=
    ...)``), where each actor reserves one CPU and the actors are spread over the nodes."""
    if cfg.env_pool == "ray":
        from adapters.rollout.ray_pool import RayEnvPool

        if not cfg.ray_address:
            return RayEnvPool(num_workers=cfg.env_workers)
        spread = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}
        return RayEnvPool(
            num_workers=cfg.env_workers,
            init_kwargs={"address": cfg.ray_address},
            actor_options=spread,
        )
    return LocalEnvPool(workers=cfg.env_workers)


def _default_output_dir(cfg: TrainConfig) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return str(Path("runs") / f"{cfg.env}-{cfg.algorithm}-{stamp}")


class Trainer:
    """Trains policies on one setting (see the module docstring).

    Args:
        config: the run's :class:`TrainConfig` (auto values are resolved here).
        models: optional ``(model, tokenizer)`` to train instead of loading ``config.model`` (it is
            wrapped with LoRA adapters, or copied for per-role separate models).
        resume: continue from the newest checkpoint in ``config.output_dir``.
        log: where progress lines go (default: print, or ``tqdm.write`` under a progress bar).
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        models: Any = None,
        resume: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> None:
        import numpy as np
        import torch

        cfg = config.resolved()
        # one rank of a torchrun / accelerate launch, or a single process (distributed.py)
        self.dist = distributed.setup(cfg.device, cfg.dist_timeout_s)
        if cfg.output_dir is None:
            cfg.output_dir = self.dist.broadcast_object(_default_output_dir(cfg))
        self.cfg = cfg
        self.out = Path(cfg.output_dir)
        self._log_fn = log
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        error = None
        if self.dist.is_main:
            try:
                self._prepare_dir(resume)
            except (FileExistsError, FileNotFoundError) as exc:
                error = exc
        error = self.dist.broadcast_object(error)
        if error is not None:
            self.dist.close()
            raise error
        random.seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)
        torch.manual_seed(cfg.seed)
        # the base model and its tokenizer
        self.device = self.dist.device(resolve_device(cfg.device))
        if models is not None:
            base, self.tokenizer = models
            base.to(self.device)
        else:
            base, self.tokenizer = load_base_model(cfg.model, self.device, cfg.dtype, cfg.seed)
        self.pad_id = int(self.tokenizer.pad_token_id)
        # the setting: roles, run-wide shared objects, demonstrations that fit the token budget
        self.env_config = dict(cfg.env_config)
        self.roles = env_roles(cfg.env, self.env_config)
        self.shared = create_shared_objects(cfg.env, self.env_config)
        max_new = cfg.max_new_tokens or 256
        self.demos = oracle_demos(
            cfg.env,
            {**self.env_config, **self.shared},
            self.roles,
            cfg.demos or 0,
            cfg.seed,
            fits=lambda text: len(self.tokenizer(text)["input_ids"]) < max_new,
        )
        # the trainable policies, the policies that generate with them, and the rollout engine
        self.models = build_policy_models(cfg, self.roles, base)
        self.dp = distributed.wrap_models(
            self.dist,
            self.models,
            dp_mode=cfg.dp_mode,
            pad_id=self.pad_id,
            share_prompt=cfg.share_prompt_forward,
        )
        self.backend = make_backend(
            cfg,
            self.models,
            self.tokenizer,
            self.device,
            self.roles,
            self.demos,
            sync=distributed.weight_sync(self.dist, self.dp, cfg),
        )
        self.policies = self.backend.policies()
        self.role_policy = dict(self.backend.role_policy)
        self.pool = make_env_pool(cfg)
        self.engine = RolloutEngine(
            cfg.env,
            self.policies,
            RolloutConfig(
                candidates=cfg.candidates or 1,
                sampling=cfg.sampling or "tree",
                keep=cfg.keep or "best",
                keep_n=cfg.keep_n or 1,
                keep_scope=cfg.keep_scope or "branch",
                max_branches=cfg.max_branches,
                temperature=1.0 if cfg.temperature is None else cfg.temperature,
                top_p=1.0 if cfg.top_p is None else cfg.top_p,
                top_k=-1 if cfg.top_k is None else cfg.top_k,
                max_new_tokens=cfg.max_new_tokens or 256,
                role_sampling=cfg.role_sampling,
                prompt_seeds=self.dist.enabled,
            ),
            env_config={**self.env_config, **self.shared},
            role_policy=self.role_policy,
            pool=self.pool,
        )
        self.step = 0
        self.comparison: str | None = None  # the before/after table of the last train()
        self.traj_path = self.out / "trajectories.jsonl"
        state = self._restore() if resume else None
        if state is None and self.dist.is_main:
            truncate_file(self.traj_path, 0)
            (self.out / "metrics.jsonl").write_text("")
        self.metrics: Any = (
            MetricsLogger(self.out, purge_step=self.step + 1 if resume else None)
            if self.dist.is_main
            else distributed.NullMetrics()
        )
        if state is not None:
            self.metrics.truncate(int(state["metrics_bytes"]))
        if self.dist.enabled:  # every rank's engines hold the (restored) weights before step 1
            self.backend.sync(sorted(self.models))
            self.dist.barrier()

    # ------------------------------------------------------------------ setup
    def _prepare_dir(self, resume: bool) -> None:
        cfg_path = self.out / "config.yaml"
        if resume:
            if not cfg_path.is_file():
                raise FileNotFoundError(f"{self.out} has no config.yaml: nothing to resume")
            return
        if cfg_path.exists():
            raise FileExistsError(
                f"{self.out} already holds a run; resume it with --resume {self.out} or choose "
                "another --output-dir"
            )
        self.out.mkdir(parents=True, exist_ok=True)
        self.cfg.save(cfg_path)

    @classmethod
    def resume(cls, run_dir: str | Path, *, models: Any = None, **overrides: Any) -> Trainer:
        """Continue the run in ``run_dir`` from its newest checkpoint.

        Only :data:`RESUMABLE_OVERRIDES` may change (e.g. ``steps`` to train longer).
        """
        run_dir = Path(run_dir)
        cfg = TrainConfig.load(run_dir / "config.yaml")
        bad = sorted(set(overrides) - RESUMABLE_OVERRIDES)
        if bad:
            raise ValueError(
                f"cannot change {bad} when resuming (only {sorted(RESUMABLE_OVERRIDES)}): the "
                "rest of the run must stay what the checkpoint was trained with"
            )
        cfg = cfg.replace(**overrides, output_dir=str(run_dir))
        if overrides and os.environ.get("RANK", "0") == "0":  # one writer under torchrun
            tmp = run_dir / f".config.yaml.{os.getpid()}"
            cfg.save(tmp)
            os.replace(tmp, run_dir / "config.yaml")
        return cls(cfg, models=models, resume=True)

    def log(self, line: str) -> None:
        if not self.dist.is_main:
            return
        if self._log_fn is not None:
            self._log_fn(line)
        else:
            from tqdm.auto import tqdm

            tqdm.write(line, file=sys.stdout)

    # ------------------------------------------------------------------ rollout + update
    def rollout(self, step: int) -> RolloutResult:
        """Roll out this step's instances (seeds derived from ``(seed, step)``)."""
        cfg = self.cfg
        specs = episode_specs(
            cfg.env,
            cfg.instances_per_step or 1,
            seed=cfg.seed,
            tag=f"train-{step}",
            env_config={**self.env_config, **self.shared},
            split="train",
            instance=cfg.instance,
        )
        mine = self.dist.shard(len(specs))  # this rank's block of the global batch
        result = self.engine.run(
            specs[mine.start : mine.stop],
            seed=derive_seed(cfg.seed, "rollout", step),
            instance_offset=mine.start,
        )
        for s in result.samples:  # rollout ids ("shared/tool") -> the trained policy
            s.policy_id = self.backend.train_pid.get(s.policy_id, s.policy_id)
        return result

    def update(self, samples: Sequence[Sample], step: int) -> dict[str, float]:
        """Advantages for ``samples`` and one PPO update per policy; returns statistics."""
        from adapters.training.batch import make_items
        from adapters.training.logprobs import batch_logprobs
        from adapters.training.update import compute_advantages, mean_kl_to_ref, update_policy

        cfg = self.cfg
        not_trained = [s for s in samples if not s.trainable]
        frozen = [
            s for s in samples if cfg.train_roles is not None and s.role not in cfg.train_roles
        ]
        samples = [s for s in samples if cfg.train_roles is None or s.role in cfg.train_roles]
        items, dropped = make_items(samples, lambda s: cfg.sampling_temperature(s.role))
        by_pid: dict[str, list[Any]] = defaultdict(list)
        for it in items:
            by_pid[it.sample.policy_id].append(it)
        need_ref = (cfg.kl_loss_coef or 0.0) > 0 or (
            (cfg.kl_reward_coef or 0.0) > 0
            and cfg.algorithm in ("reinforce++", "tr-reinforce++-token")
        )
        pids = self.dist.union(by_pid)  # every rank updates the same policies (collectives)
        for pid, its in by_pid.items():
            pm = self.models[pid]
            pm.activate()
            if cfg.old_logprobs == "recompute":
                for it, lp in zip(its, batch_logprobs(pm.model, its, cfg, self.pad_id)):
                    it.old_logprobs = lp
            if need_ref:
                with pm.reference():
                    refs = batch_logprobs(pm.ref_forward_model, its, cfg, self.pad_id)
                for it, lp in zip(its, refs):
                    it.ref_logprobs = lp
        distributed.advantages(self.dist, cfg, items, compute_advantages)
        out: dict[str, float] = {
            "samples_untrainable": float(dropped),  # no token ids / log-probs
            "samples_reward_only": float(len(not_trained)),  # the env marked them (trainable)
            "samples_frozen_roles": float(len(frozen)),  # roles outside train_roles
        }
        totals: dict[str, float] = defaultdict(float)
        trained = 0
        for pid in pids:
            st = update_policy(cfg, self.models[pid], by_pid[pid], step, self.pad_id, self.dp)
            st = distributed.reduce_update_stats(self.dist, st)
            if len(pids) > 1 or cfg.per_role or cfg.role_policies:
                out.update({f"{k}/{pid}": v for k, v in st.items() if k in ("loss", "grad_norm")})
            if st.get("optimizer_steps"):
                trained += 1
                for k in (
                    "loss",
                    "pg_loss",
                    "kl_loss",
                    "entropy",
                    "clip_frac",
                    "approx_kl",
                    "grad_norm",
                    "mpt_masked_frac",
                ):
                    if k in st:
                        totals[k] += st[k]
            for k in ("samples_trained", "tokens_trained", "optimizer_steps"):
                out[k] = out.get(k, 0.0) + st.get(k, 0.0)
        for k in ("loss", "pg_loss", "clip_frac", "approx_kl", "grad_norm"):
            out[k] = totals.get(k, 0.0) / max(trained, 1)  # 0 when nothing was trained
        for k in ("kl_loss", "entropy", "mpt_masked_frac"):
            if k in totals:
                out[k] = totals[k] / max(trained, 1)
        kl = mean_kl_to_ref(items)
        if kl is not None:
            out["kl"] = kl
        nonzero = sum(1 for it in items if it.advantages is not None and bool(it.advantages.any()))
        out["zero_adv_frac"] = 1.0 - nonzero / len(items) if items else 1.0
        if self.dist.enabled:
            out.update(distributed.reduce_batch_stats(self.dist, items, dropped, nonzero, kl))
            out["samples_reward_only"], out["samples_frozen_roles"] = self.dist.all_sum(
                [out["samples_reward_only"], out["samples_frozen_roles"]]
            )
        self.backend.sync(pids)
        self.dist.barrier()  # shared vLLM servers: nobody generates before rank 0 has pushed
        return out

    def train_step(self) -> dict[str, Any]:
        """One full step (rollout, update, logs, checkpoint); returns its metrics line."""
        cfg = self.cfg
        step = self.step + 1
        t0 = time.perf_counter()
        self.backend.timer.reset()
        result = self.rollout(step)
        t_rollout = time.perf_counter() - t0
        t_gen = self.backend.timer.reset()
        t1 = time.perf_counter()
        stats = self.update(result.samples, step)
        t_update = time.perf_counter() - t1
        result = distributed.gather_rollout(self.dist, result)  # rank 0: every rank's samples
        if self.dist.is_main:
            with open(self.traj_path, "a") as fh:
                write_jsonl(result.samples, fh, train_step=step)
                os.fsync(fh.fileno())
        m: dict[str, Any] = {}
        m.update(result.metrics())
        m["groups"] = float(len({s.group for s in result.samples}))
        m["prompt_tokens"] = float(sum(len(s.prompt_ids) for s in result.samples))
        m.update(stats)
        m["lr"] = cfg.lr
        m["time/generation"] = t_gen
        m["time/env"] = max(0.0, t_rollout - t_gen)
        m["time/update"] = t_update  # under torchrun: rank 0's, waiting for the others included
        m["time/step"] = time.perf_counter() - t0
        if self.dist.enabled:
            m["world_size"] = float(self.dist.world_size)
            m["time/generation_max"], m["time/rollout_max"] = self.dist.all_max([t_gen, t_rollout])
        if t_gen > 0:
            m["throughput/gen_tokens_per_s"] = m.get("completion_tokens", 0.0) / t_gen
        self.metrics.log(step, m)
        self.step = step
        if step % cfg.save_every == 0 or step == cfg.steps:
            self.save_checkpoint()
        if cfg.plot_every and step % cfg.plot_every == 0:
            self.metrics.plot()
        return {"step": step, **m}

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, tag: str) -> EvalReport | None:
        """Greedy evaluation on ``eval_split`` (same instances every time); saved as JSON."""
        cfg = self.cfg
        if not cfg.eval_episodes:
            return None
        if not self.dist.is_main:  # rank 0 evaluates, the others wait
            self.dist.barrier(long=True)
            return None
        report = evaluate(
            cfg.env,
            self.policies,
            episodes=cfg.eval_episodes,
            env_config=self.env_config,
            role_policy=self.role_policy,
            split=cfg.eval_split,
            seed=cfg.seed,
            temperature=cfg.eval_temperature or 0.0,
            max_new_tokens=cfg.max_new_tokens or 256,
            instance=cfg.instance,
        )
        self.backend.timer.reset()
        (self.out / f"eval_{tag}.json").write_text(json.dumps(report.to_dict(), indent=2))
        self.metrics.log_eval(self.step, tag, report)
        self.dist.barrier(long=True)
        return report

    def train(self) -> list[dict[str, Any]]:
        """The whole run: evaluation before, ``steps`` steps, evaluation after, final export."""
        from tqdm.auto import tqdm

        cfg = self.cfg
        steps = cfg.steps or 0
        t_start = time.perf_counter()
        train_seconds = 0.0
        before_path = self.out / "eval_before.json"
        before = None
        if self.dist.broadcast_object(bool(cfg.eval_episodes) and not before_path.exists()):
            self.log(f"evaluating before training ({cfg.eval_episodes} {cfg.eval_split} episodes)")
            before = self.evaluate("before")
            if before is not None:
                self.log(before.table())
        elif self.dist.is_main and before_path.exists():
            before = json.loads(before_path.read_text())
        history: list[dict[str, Any]] = []
        bar = tqdm(
            total=steps,
            initial=self.step,
            desc=f"train {cfg.env}",
            disable=not cfg.progress or not self.dist.is_main,
            file=sys.stderr,
            dynamic_ncols=True,
        )
        try:
            while self.step < steps:
                t_step = time.perf_counter()
                m = self.train_step()
                train_seconds += time.perf_counter() - t_step
                history.append(m)
                bar.update(1)
                bar.set_postfix(
                    reward=f"{m.get('reward/mean', 0.0):.3f}",
                    success=f"{m.get('success_rate', 0.0):.2f}",
                )
                self.log(self.format_step(m))
                if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < steps:
                    rep = self.evaluate(f"step{self.step:06d}")
                    if rep is not None:
                        self.log(rep.table())
        finally:
            bar.close()
        after = None
        if cfg.eval_episodes:
            self.log(f"evaluating after training ({cfg.eval_episodes} {cfg.eval_split} episodes)")
            after = self.evaluate("after")
            if after is not None:
                self.log(after.table())
        self.metrics.plot()
        if cfg.save_final:
            self.export(self.out / "final")
        total = time.perf_counter() - t_start
        self.log(
            f"{cfg.env}: {len(history)} training steps in {train_seconds:.0f} s of training wall "
            f"time ({total:.0f} s with evaluation); outputs in {self.out}"
        )
        if before is not None and after is not None:
            self.comparison = compare_reports(before, after)
            self.log(self.comparison)
        return history

    def format_step(self, m: dict[str, Any]) -> str:
        roles = " ".join(f"{r} {m[f'reward/{r}']:.3f}" for r in self.roles if f"reward/{r}" in m)
        return (
            f"step {m['step']}/{self.cfg.steps}  reward {m.get('reward/mean', 0.0):.3f} ({roles})"
            f"  success {m.get('success_rate', 0.0):.2f}  team {m.get('team_reward', 0.0):.3f}"
            f"  loss {m.get('loss', 0.0):+.4f}  trained {int(m.get('samples_trained', 0))}"
            f"/{int(m.get('samples', 0))}  gen {m['time/generation']:.1f}s"
            f"  env {m['time/env']:.1f}s  update {m['time/update']:.1f}s"
        )

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Write this step's checkpoint (see :mod:`adapters.training.checkpoints`)."""
        return checkpoints.save_checkpoint(
            self.out,
            self.step,
            self.models,
            self.shared,
            trajectories_bytes=self.traj_path.stat().st_size if self.traj_path.exists() else 0,
            metrics_bytes=self.metrics.offset,
            keep=self.cfg.keep_checkpoints,
            ranks=self.dist,
            dp=self.dp,
        )

    def _restore(self) -> dict[str, Any] | None:
        ckpt = checkpoints.latest_checkpoint(self.out)
        if ckpt is None:
            return None
        state = checkpoints.load_checkpoint(ckpt, self.models, self.shared, self.device, self.dp)
        if self.dist.is_main:
            truncate_file(self.traj_path, int(state["trajectories_bytes"]))
        self.step = int(state["step"])
        if self.models:
            next(iter(self.models.values())).activate()
        return state

    def export(self, where: Path) -> None:
        """Save each policy: its peft adapter, or the full model and tokenizer."""
        checkpoints.export_policies(self.models, self.tokenizer, where, self.dist, self.dp)

    def close(self) -> None:
        self.metrics.close()
        self.engine.close()
        self.pool.close()
        self.backend.close()
        self.dist.close()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
