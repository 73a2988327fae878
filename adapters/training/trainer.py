"""The RL trainer: the loop that rolls out, updates, logs, evaluates and checkpoints.

One training step (AT-GRPO, Algorithm 1) is :meth:`Trainer.train_step`, which reads as the
algorithm does; each line of it names where its part lives:

1. **Rollout** (:meth:`Trainer.rollout`, :mod:`adapters.rollout`): ``instances_per_step`` fresh
   env instances (seeds derived from ``(seed, step, i)``) are rolled out by the
   :class:`~adapters.rollout.RolloutEngine`: tree sampling with K candidates per agent-turn and a
   keep rule (``at-grpo``), or K parallel episodes per instance (``grpo``, ``reinforce++``,
   ``tr-reinforce++``); the envs and verifiers give each sample its reward. Generation runs
   through the rollout backend (:mod:`adapters.training.backends`) on the policies built by
   :mod:`adapters.training.policy_models`; its seeds derive from ``(seed, step)`` too, so a
   resumed run needs no hidden random state. With ``--pipeline agent`` the rollout decodes one
   agent stage of every trajectory in flight instead (MarsRL section 3.3,
   :class:`~adapters.training.schedule.PipelineRollout` in the engine's place), and with
   ``--max-staleness N`` the step first rolls out, with the current policy, every step up to N
   ahead that the schedule (:class:`~adapters.training.schedule.RolloutSchedule`) names as due,
   and then trains on the rollout of its own step, made up to N policy versions earlier (the
   per-sample lag and what a resume keeps: :mod:`adapters.training.schedule`).
2. **Advantages and update** (:meth:`Trainer.update`, :mod:`adapters.training.update`): the
   advantages of the rewards (:func:`~adapters.training.update.compute_advantages`, AT-GRPO
   Eq. 1), then PPO epochs for each policy (one shared, or one per role) on its own samples
   (``Sample.policy_id``, Eq. 2) with its own optimizer
   (:func:`~adapters.training.update.update_policy`); the loss, term by term, is
   :func:`~adapters.training.losses.micro_batch_loss` (Eq. 3 and the terms around it).
3. **Logging** (:mod:`adapters.training.metrics`): every sample (prompt, completion, reward
   parts, advantage) is appended to ``trajectories.jsonl``; one line of metrics per step goes to
   ``metrics.jsonl`` and TensorBoard (reward per role, success rate, team reward, loss, KL, clip
   fraction, grad norm, timings of generation / env+verifiers / update, tokens);
   ``training_curve.png`` is redrawn every ``plot_every`` steps and at the end.
4. **Checkpoint** (:mod:`adapters.training.checkpoints`, every ``save_every`` steps, atomic).
   ``Trainer.resume(run_dir)`` (``python -m adapters.train --resume DIR``) continues exactly.
   The run directory is data: the setting its ``config.yaml`` names must be registered already
   (it imports nothing; ``--import MODULE`` loads a setting registered outside the repository).

Run directory: ``config.yaml`` (the resolved :class:`~adapters.training.config.TrainConfig`),
``metrics.jsonl``, ``trajectories.jsonl``, ``tensorboard/``, ``training_curve.png``,
``eval_before.json`` / ``eval_after.json`` (greedy evaluation on ``eval_split``,
:mod:`adapters.evaluation`; each episode's record replays it), ``episodes.html`` (the episode
viewer of those evaluations, :mod:`adapters.evaluation.viewer`), ``eval_references.json`` (the
no-op, demonstration-answer and oracle policies on the same instances), ``eval_open_loop.json``
(the trained team's most frequent answer at each turn replayed as a script that ignores the
instance: a team that scores no more has not learned to read it),
``checkpoints/step_NNNNNN/`` and ``final/<policy>/`` (peft adapter or model directory, loadable by
``python -m adapters.evaluate --policy DIR``).

Under ``torchrun`` / ``accelerate launch`` each process is one rank of a data-parallel run
(:mod:`adapters.training.distributed`): it rolls out its block of the step's instances, the update
is DDP / FSDP2 with the global batch's normalisation, rank 0 writes the logs and evaluates, and
checkpoints are written once and resume on any number of ranks (``docs/scaling.md``).

Default runs: ``python -m adapters.train --env ID`` resolves the setting's recipe for the device
(:mod:`adapters.training.recipes`; ``--print-config`` lists every value with its source, and the
run header lists what a CPU run scales down), evaluates the starting team greedily on distinct
validation instances, trains, and evaluates again on the same instances, compared instance by
instance (:func:`~adapters.evaluation.compare_reports`: success rate, the setting's progress
measure and the final team reward first, the shaped reward after them, then the no-op,
demonstration-answer, open-loop and oracle references on the same instances). What such runs
take is measured in ``benchmarks/learning.py``; what they show, with the numbers, in
``docs/learning.md``.
On CUDA the defaults are the paper's sizes (see :mod:`adapters.training.recipes`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from adapters.evaluation import EvalReport, compare_reports, evaluate, role_token_limits
from adapters.evaluation.passes import evaluate_datasets
from adapters.evaluation.references import (
    evaluate_references,
    open_loop_reference,
    oracle_constants,
)
from adapters.rollout import (
    RolloutProgress,
    RolloutResult,
    Sample,
    derive_seed,
    episode_specs,
    follow_steps,
    write_jsonl,
)
from adapters.training import checkpoints, distributed
from adapters.training.batch import TrainItem, make_items
from adapters.training.config import TrainConfig
from adapters.training.metrics import MetricsLogger, NullMetrics, read_jsonl, truncate_file
from adapters.training.run import Run, build_run
from adapters.training.schedule import Produced, RolloutSchedule, lag_metrics, make_pipeline

__all__ = ["RESUMABLE_OVERRIDES", "Trainer"]

SCHEDULE_KEY = checkpoints.SCHEDULE_KEY  # the rollouts produced ahead, the pipeline's work
# the share of a training step its rollout is taken to be until the first step has measured it
# (on a CPU generation is most of a step); the training bar moves by it (Trainer._step_bar)
ROLLOUT_SHARE = 0.8

# fields that may change on --resume without breaking exactness
RESUMABLE_OVERRIDES = frozenset(
    {"steps", "progress", "plot_every", "eval_episodes", "eval_every", "save_final", "threads"}
)


class Trainer:
    """Trains policies on one setting (see the module docstring): it holds the run it is given
    (``run``, a :class:`~adapters.training.run.Run` built by
    :func:`~adapters.training.run.build_run`: the resolved config, models, backend, engine, env
    pool, ...) and keeps the loop's state (step, metrics, checkpoints).

    Args:
        config: the run's :class:`TrainConfig` (auto values are resolved here).
        models: optional ``(model, tokenizer)`` to train instead of loading ``config.policy.model``
            (it is wrapped with LoRA adapters, or copied for per-role separate models).
        resume: continue from the newest checkpoint in ``config.output.output_dir``.
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
        self.run: Run = build_run(config, models=models, resume=resume)
        self._log_fn = log
        # the training bar's, in train(): moved by the rollout's agent steps
        self._on_progress: Callable[[RolloutProgress], None] | None = None
        self.step = 0
        self.comparison: str | None = None  # the before/after table of the last train()
        self.traj_path = self.run.out / "trajectories.jsonl"
        state = self._restore() if resume else None
        if state is None and self.run.dist.is_main:
            truncate_file(self.traj_path, 0)
            (self.run.out / "metrics.jsonl").write_text("")
        self.metrics: Any = (
            MetricsLogger(self.run.out, purge_step=self.step + 1 if resume else None)
            if self.run.dist.is_main
            else NullMetrics()
        )
        if state is not None:
            self.metrics.truncate(int(state["metrics_bytes"]))
        # Algorithm 1's rollout is self.rollout: the engine's episodes, or MarsRL's agent pipeline
        # in its place (--pipeline agent); the schedule queues the rollouts made ahead of the
        # update (--max-staleness). train_step shows how they meet.
        self.pipeline = make_pipeline(self.run.cfg, self.run.engine)  # None: whole trajectories
        self.schedule = RolloutSchedule(
            self.run.cfg.schedule.max_staleness, self.run.cfg.schedule.steps, self.pipeline
        )
        self._keep_schedule = not self.run.dist.enabled and self.schedule.checkpointable()
        if state is not None and (self.pipeline is not None or self.run.cfg.schedule.max_staleness):
            saved = checkpoints.load_extra(self.run.out, SCHEDULE_KEY, self.run.shared)
            if saved is not None:
                self.schedule.load_state_dict(saved)
            else:
                self.log(
                    "resumed without the rollouts produced ahead and the pipeline's in-flight "
                    "trajectories (not checkpointed under torchrun or with Ray env actors): they "
                    "are regenerated / dropped (see adapters.training.schedule)"
                )
        if self.run.dist.enabled:  # every rank's engines hold the (restored) weights before step 1
            self.run.backend.sync(sorted(self.run.models))
            self.run.dist.barrier()

    @property
    def cfg(self) -> TrainConfig:
        """The run's resolved, frozen configuration (``self.run.cfg``)."""
        return self.run.cfg

    @property
    def out(self) -> Path:
        """The run directory (``self.run.out``)."""
        return self.run.out

    @classmethod
    def resume(cls, run_dir: str | Path, *, models: Any = None, **overrides: Any) -> Trainer:
        """Continue the run in ``run_dir`` from its newest checkpoint.

        Only :data:`RESUMABLE_OVERRIDES` may change (e.g. ``steps`` to train longer). The
        setting that ``config.yaml`` names must be registered already: an id read from the run
        directory imports nothing (:func:`envs.registered_spec`; import the module of a setting
        registered outside this repository first, which ``--import MODULE`` does), so a planted
        ``config.yaml`` cannot make the resume import a module of its choosing.
        """
        import envs

        run_dir = Path(run_dir)
        cfg = TrainConfig.load(run_dir / "config.yaml")
        envs.registered_spec(cfg.env)  # ModuleNotLoadedError: nothing imported
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
        if not self.run.dist.is_main:
            return
        if self._log_fn is not None:
            self._log_fn(line)
        else:
            from tqdm.auto import tqdm

            tqdm.write(line, file=sys.stdout)

    # ------------------------------------------------------------------ rollout + update
    def rollout(self, step: int) -> RolloutResult:
        """Roll out this step's instances (seeds derived from ``(seed, step)``)."""
        cfg = self.run.cfg
        specs = episode_specs(
            cfg.env,
            self.run.cfg.schedule.instances_per_step,
            seed=cfg.seed,
            tag=f"train-{step}",
            env_config={**self.run.env_config, **self.run.shared},
            split="train",
            instance=cfg.instance,
        )
        mine = self.run.dist.shard(len(specs))  # this rank's block of the global batch
        seed = derive_seed(cfg.seed, "rollout", step)
        if self.pipeline is not None:  # instances numbered across steps: several are in flight
            first = (step - 1) * len(specs) + mine.start
            result = self.pipeline.run(
                specs[mine.start : mine.stop], seed, instance_offset=first, version=self.step
            )
        else:
            result = self.run.engine.run(
                specs[mine.start : mine.stop],
                seed=seed,
                instance_offset=mine.start,
                on_progress=self._on_progress,
            )
            for s in result.samples:
                s.policy_version = self.step  # generated after self.step updates
        for s in result.samples:  # rollout ids ("shared/tool") -> the trained policy
            s.policy_id = self.run.backend.train_pid.get(s.policy_id, s.policy_id)
        return result

    def update(self, samples: Sequence[Sample], step: int) -> dict[str, float]:
        """Algorithm 1's update of ``samples``: the advantages of their rewards, then each
        policy's PPO update on its own samples with its own optimizer (AT-GRPO Eq. 2, the loss
        in :mod:`adapters.training.losses`); returns the step's update statistics."""
        from adapters.training.update import (
            compute_advantages,
            mean_kl_to_ref,
            prepare_logprobs,
            update_policy,
        )

        cfg, dist = self.run.cfg, self.run.dist
        ucfg, off_policy = cfg.update, cfg.schedule.off_policy
        items, left_out = self._items(samples)
        by_pid: dict[str, list[Any]] = defaultdict(list)
        for it in items:
            by_pid[it.sample.policy_id].append(it)
        pids = dist.union(by_pid)  # every rank updates the same policies (collectives)
        # advantages (advantages.ESTIMATORS) first, so that only the trained items are scored
        # by the log-prob passes, unless a KL reward reads the old and reference log-probs
        if not ucfg.advantages_read_logprobs:
            distributed.advantages(dist, ucfg, items, compute_advantages)
        for pid, its in by_pid.items():
            prepare_logprobs(
                ucfg, self.run.models[pid], its, self.run.pad_id, off_policy=off_policy
            )
        if ucfg.advantages_read_logprobs:
            distributed.advantages(dist, ucfg, items, compute_advantages)
        per_policy = {  # each policy's statistics, reduced over the ranks
            pid: distributed.reduce_update_stats(
                dist,
                update_policy(
                    ucfg,
                    self.run.models[pid],
                    by_pid[pid],
                    step,
                    self.run.pad_id,
                    self.run.dp,
                    seed=cfg.seed,
                    off_policy=off_policy,
                ),
            )
            for pid in pids
        }
        out = distributed.step_stats(
            dist,
            per_policy,
            items,
            **left_out,
            kl=mean_kl_to_ref(items),
            per_policy_keys=len(pids) > 1 or bool(cfg.policy.per_role or cfg.policy.role_policies),
        )
        self.run.backend.sync(pids)
        dist.barrier()  # shared vLLM servers: nobody generates before rank 0 has pushed
        return out

    def _items(self, samples: Sequence[Sample]) -> tuple[list[TrainItem], dict[str, int]]:
        """The samples the update trains on, as token tensors (:func:`make_items`), and how
        many were left out for which reason (``distributed.step_stats``' counts)."""
        cfg = self.run.cfg
        roles = cfg.policy.train_roles
        reward_only = sum(1 for s in samples if not s.trainable)  # the env marked them
        frozen = sum(1 for s in samples if roles is not None and s.role not in roles)
        samples = [s for s in samples if roles is None or s.role in roles]
        cap = cfg.update.max_prompt_tokens  # the recipe's maximum prompt length: skip, count
        over = sum(1 for s in samples if cap and len(s.prompt_ids) > cap)
        samples = [s for s in samples if not (cap and len(s.prompt_ids) > cap)]
        items, dropped = make_items(samples, lambda s: cfg.generation.temperature_of(s.role))
        counts = dict(untrainable=dropped, reward_only=reward_only, frozen=frozen)
        return items, {**counts, "over_prompt_limit": over}

    def train_step(self) -> dict[str, Any]:
        """One step of Algorithm 1: roll out, compute the advantages and update each policy;
        then log and checkpoint. Returns the step's metrics line."""
        cfg, version = self.run.cfg, self.step  # version: the updates made so far
        step = version + 1
        t0 = time.perf_counter()
        # 1. rollout (self.rollout) with the policy as it is now: this step's, or with
        #    --max-staleness N each step up to N ahead not rolled out yet; the step trains on
        #    its own rollout, however early it was made
        for due in self.schedule.due(step):
            self.schedule.put(self._timed_rollout(due))
        got = self.schedule.pop(step, version)
        # 2. the advantages of the rewards, then each policy's PPO update on its own samples
        t1 = time.perf_counter()
        stats = self.update(got.result.samples, step)
        t_update = time.perf_counter() - t1
        # 3. logs (trajectories.jsonl, metrics.jsonl), 4. checkpoint
        m = self._step_metrics(step, got, stats, t_update, started=t0)
        self.metrics.log(step, m)
        self.step = step
        if step % cfg.output.save_every == 0 or step == cfg.schedule.steps:
            self.save_checkpoint()
        if cfg.output.plot_every and step % cfg.output.plot_every == 0:
            self.metrics.plot()
        return {"step": step, **m}

    def _timed_rollout(self, step: int) -> Produced:
        """:meth:`rollout` of step ``step`` with the policy as it is now, with its wall time,
        the generation time counted meanwhile and the pipeline's statistics of it."""
        timer = self.run.backend.timer
        timer.reset()
        t0 = time.perf_counter()
        result = self.rollout(step)
        t_rollout, t_gen = time.perf_counter() - t0, float(timer.reset())
        stats = dict(self.pipeline.last) if self.pipeline is not None else {}
        return Produced(step, self.step, result, t_rollout, t_gen, stats)

    def _step_metrics(
        self, step: int, got: Produced, stats: dict[str, float], t_update: float, started: float
    ) -> dict[str, Any]:
        """The step's metrics line, the step timed from ``started`` (rank 0 also appends every
        rank's samples to ``trajectories.jsonl``)."""
        result = distributed.gather_rollout(self.run.dist, got.result)  # rank 0: every rank's
        if self.run.dist.is_main:
            with open(self.traj_path, "a") as fh:
                write_jsonl(result.samples, fh, train_step=step)
                os.fsync(fh.fileno())
        m: dict[str, Any] = {}
        m.update(result.metrics())
        m["groups"] = float(len({s.group for s in result.samples}))
        m["prompt_tokens"] = float(sum(len(s.prompt_ids) for s in result.samples))
        m.update(stats)
        m.update(lag_metrics(result.samples, self.step))  # every trained sample's lag
        m.update(got.stats)  # the pipeline's in-flight count and ages, when it produced it
        m["lr"] = self.run.cfg.update.lr
        m["time/generation"] = got.t_gen
        m["time/env"] = max(0.0, got.t_rollout - got.t_gen)
        m["time/update"] = t_update  # under torchrun: rank 0's, waiting for the others included
        m["time/step"] = time.perf_counter() - started
        if self.run.dist.enabled:
            m["world_size"] = float(self.run.dist.world_size)
            m["time/generation_max"], m["time/rollout_max"] = self.run.dist.all_max(
                [got.t_gen, got.t_rollout]
            )
        if got.t_gen > 0:
            m["throughput/gen_tokens_per_s"] = m.get("completion_tokens", 0.0) / got.t_gen
        return m

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, tag: str) -> EvalReport | None:
        """Greedy evaluation on ``eval_split`` (same instances every time); saved as JSON."""
        cfg = self.run.cfg
        if not cfg.eval.eval_episodes:
            return None
        if not self.run.dist.is_main:  # rank 0 evaluates, the others wait
            self.run.dist.barrier(long=True)
            return None
        with self._bar(None, f"eval {tag}", "step") as bar:
            report = evaluate(
                cfg.env,
                self.run.policies,
                episodes=cfg.eval.eval_episodes,
                env_config=self.run.env_config,
                role_policy=self.run.role_policy,
                split=cfg.eval.eval_split,
                seed=cfg.seed,
                temperature=self.run.cfg.eval.eval_temperature,
                max_new_tokens=self.run.engine.generation.max_new_tokens,
                role_max_new_tokens=self.eval_token_limits(),
                instance=cfg.instance,
                on_progress=follow_steps(bar),
            )
        if (
            cfg.eval.eval_dataset
        ):  # full passes over separate benchmarks (adapters.evaluation.passes)
            scores = evaluate_datasets(
                cfg.env,
                self.run.policies,
                self.run.role_policy,
                cfg.eval.eval_dataset,
                env_config=self.run.env_config,
                seed=cfg.seed,
                temperature=self.run.cfg.eval.eval_temperature,
                max_new_tokens=self.run.engine.generation.max_new_tokens,
                out=self.run.out / f"eval_datasets_{tag}.json",
            )
            self.log(f"{tag}: pass@1 " + "  ".join(f"{k} {v:.3f}" for k, v in scores.items()))
        self.run.backend.timer.reset()
        (self.run.out / f"eval_{tag}.json").write_text(json.dumps(report.to_dict(), indent=2))
        self.metrics.log_eval(self.step, tag, report)
        if tag == "before":
            self.references()
        self.run.dist.barrier(long=True)
        return report

    def eval_token_limits(self) -> dict[str, int]:
        """The per-role token limits of this run's evaluations: the ones its training samples
        under (``role_sampling``) with ``eval_role_limits``, else none (every role gets
        ``max_new_tokens``)."""
        if not self.run.cfg.eval.eval_role_limits:
            return {}
        return role_token_limits(self.run.engine.generation, self.run.cfg.env, self.run.env_config)

    def references(self) -> dict[str, Any]:
        """The scripted reference policies (no-op, a constant answer, the demonstration's
        answer, the oracle) on
        the evaluation's instances (:mod:`adapters.evaluation.references`), played once and kept
        in ``eval_references.json``; name -> report dict."""
        cfg = self.run.cfg
        path = self.run.out / "eval_references.json"
        if not cfg.eval.eval_episodes or not self.run.dist.is_main:
            return {}
        if path.exists():
            return dict(json.loads(path.read_text()))
        reports = evaluate_references(
            cfg.env,
            self.run.roles,
            self.run.demos,
            oracle_constants(cfg.env, self.run.env_config, cfg.seed),
            episodes=cfg.eval.eval_episodes,
            env_config=self.run.env_config,
            split=cfg.eval.eval_split,
            seed=cfg.seed,
            max_new_tokens=cfg.generation.max_new_tokens,
            instance=cfg.instance,
        )
        for name, r in reports.items():
            self.log(
                f"reference {name}: success {r.success_rate:.3f}  {r.progress_label} "
                f"{r.progress:.3f}  team {r.team_reward:.3f}  mean reward {r.mean_reward:.3f}"
            )
        data = {name: r.to_dict() for name, r in reports.items()}
        path.write_text(json.dumps(data, indent=2))
        return data

    def _bar(self, total: float | None, desc: str, unit: str, **kwargs: Any) -> Any:
        """A progress bar on stderr (rank 0, unless ``progress`` is off); its rate is the mean
        over the whole bar (``smoothing=0``), which is what an ETA over similar steps needs. An
        evaluation's bar counts agent steps (:func:`~adapters.rollout.progress.follow_steps`:
        it moves after every generation wave, its total re-estimated as episodes end)."""
        from tqdm.auto import tqdm

        return tqdm(
            total=total,
            desc=desc,
            unit=unit,
            disable=not self.run.cfg.output.progress or not self.run.dist.is_main,
            file=sys.stderr,
            dynamic_ncols=True,
            smoothing=0,
            **kwargs,
        )

    def _step_bar(self, steps: int) -> tuple[Any, Callable[[dict[str, Any]], None]]:
        """The training bar: it moves after every generation wave, by the share of the rollout's
        agent steps done (:class:`~adapters.rollout.progress.RolloutProgress`) times the share of
        a step the rollout takes (the last step's, :data:`ROLLOUT_SHARE` before one is done),
        and counts a resumed run's earlier steps with the time they took (``metrics.jsonl``), so
        its ETA is right from the start."""
        bar = self._bar(
            steps,
            f"train {self.run.cfg.env}",
            "step",
            bar_format="{l_bar}{bar}| {n:.1f}/{total_fmt} steps [{elapsed}<{remaining}{postfix}]",
        )
        if self.step and not bar.disable:  # (a disabled bar keeps no clock)
            rows = read_jsonl(self.run.out / "metrics.jsonl")
            spent = sum(float(r.get("time/step", 0.0)) for r in rows if r["step"] <= self.step)
            bar.update(self.step)
            bar.start_t -= spent
            bar.refresh()
        rollout = {"share": ROLLOUT_SHARE}

        def on_progress(p: RolloutProgress) -> None:
            bar.set_postfix_str(f"step {self.step + 1} {p.describe()}", refresh=False)
            bar.update(max(0.0, self.step + rollout["share"] * p.share - bar.n))

        def step_done(m: dict[str, Any]) -> None:
            if m.get("time/step"):
                spent = m.get("time/generation", 0.0) + m.get("time/env", 0.0)
                rollout["share"] = min(1.0, spent / m["time/step"])
            bar.update(self.step - bar.n)

        self._on_progress = on_progress
        return bar, step_done

    def train(self) -> list[dict[str, Any]]:
        """The whole run: evaluation before, ``steps`` steps, evaluation after, final export.

        ``steps = 0`` evaluates the initial policies once (``eval_before.json`` and the
        references) and trains nothing; it says so."""
        cfg = self.run.cfg
        steps = self.run.cfg.schedule.steps
        t_start = time.perf_counter()
        before = self._evaluate_before()
        history: list[dict[str, Any]] = []
        if steps == 0:  # an evaluation only
            self.log(
                "--steps 0: nothing was trained; the evaluation above is of the initial policies"
                if cfg.eval.eval_episodes
                else "--steps 0 and --eval-episodes 0: nothing to train or evaluate"
            )
            self._write_viewer()
            return history
        train_seconds = 0.0
        bar, step_done = self._step_bar(steps)
        try:
            while self.step < steps:
                t_step = time.perf_counter()
                m = self.train_step()
                train_seconds += time.perf_counter() - t_step
                history.append(m)
                step_done(m)
                bar.set_postfix_str(
                    f"reward {m.get('reward/mean', 0.0):.3f}, "
                    f"success {m.get('success_rate', 0.0):.2f}"
                )
                self.log(self.format_step(m))
                if (
                    cfg.eval.eval_every
                    and self.step % cfg.eval.eval_every == 0
                    and self.step < steps
                ):
                    rep = self.evaluate(f"step{self.step:06d}")
                    if rep is not None:
                        self.log(rep.table())
        finally:
            self._on_progress = None
            bar.close()
        self._finish(before, len(history), train_seconds, t_start)
        return history

    def _evaluate_before(self) -> Any:
        """The evaluation before training (rank 0: its report, or the saved one's dict when a
        resumed run made it already; None without evaluation or on other ranks)."""
        cfg = self.run.cfg
        before_path = self.run.out / "eval_before.json"
        if self.run.dist.broadcast_object(
            bool(cfg.eval.eval_episodes) and not before_path.exists()
        ):
            self.log(
                "evaluating before training "
                f"({cfg.eval.eval_episodes} {cfg.eval.eval_split} episodes)"
            )
            before = self.evaluate("before")
            if before is not None:
                self.log(before.table())
            return before
        if self.run.dist.is_main and before_path.exists():
            return json.loads(before_path.read_text())
        return None

    def _finish(self, before: Any, steps: int, train_seconds: float, t_start: float) -> None:
        """After the last step: the evaluation after training, the curves, the final export,
        and the comparison with the evaluation before (references included); ``t_start``: when
        the run began."""
        cfg = self.run.cfg
        after = None
        if cfg.eval.eval_episodes:
            self.log(
                "evaluating after training "
                f"({cfg.eval.eval_episodes} {cfg.eval.eval_split} episodes)"
            )
            after = self.evaluate("after")
            if after is not None:
                self.log(after.table())
        self.metrics.plot()
        if cfg.output.save_final:
            self.export(self.run.out / "final")
        total = time.perf_counter() - t_start
        self.log(
            f"{cfg.env}: {steps} training steps in {train_seconds:.0f} s of training wall "
            f"time ({total:.0f} s with evaluation); outputs in {self.run.out}"
        )
        if before is not None and after is not None:
            refs: dict[str, Any] = dict(self.references())
            try:  # the trained team's own modal answers as a script that ignores the instance
                refs["open loop"] = open_loop_reference(after)
                (self.run.out / "eval_open_loop.json").write_text(
                    json.dumps(refs["open loop"].to_dict(), indent=2)
                )
            except Exception as exc:  # a setting whose records cannot be replayed (no crash)
                self.log(f"open-loop reference skipped: {exc}")
            self.comparison = compare_reports(before, after, references=refs)
            self.log(self.comparison)
            self._log_failures(before, after)
        self._write_viewer()

    def _log_failures(self, before: Any, after: Any) -> None:
        """What the team still gets wrong, before and after (``failures.json``,
        :mod:`adapters.evaluation.failures`), for the settings with a tool and a planner."""
        from adapters.evaluation.failures import breakdown, classified, format_breakdown

        if not self.run.dist.is_main or not classified(self.run.cfg.env, self.run.env_config):
            return
        try:
            table = breakdown({"before": before.to_dict(), "after": after.to_dict()})
        except Exception as exc:  # a record that does not replay: logged, the run stands
            self.log(f"failure breakdown skipped: {type(exc).__name__}: {exc}")
            return
        (self.run.out / "failures.json").write_text(json.dumps(table, indent=2))
        self.log("what the team gets wrong (adapters.evaluation.failures):")
        self.log(format_breakdown(table))

    def _write_viewer(self) -> None:
        """The episode viewer of the run's evaluations (``episodes.html``,
        :mod:`adapters.evaluation.viewer`); a failure is logged, never raised."""
        if not self.run.cfg.eval.eval_episodes or not self.run.dist.is_main:
            return
        from adapters.evaluation.viewer import AUTO_BUDGET_S, write_viewer

        try:
            page, n = write_viewer(self.run.out, budget_s=AUTO_BUDGET_S)
        except Exception as exc:
            self.log(f"no episode viewer ({type(exc).__name__}: {exc})")
            return
        self.log(f"episode viewer: {page} ({n} episodes; open it in a browser)")

    def format_step(self, m: dict[str, Any]) -> str:
        roles = " ".join(
            f"{r} {m[f'reward/{r}']:.3f}" for r in self.run.roles if f"reward/{r}" in m
        )
        return (
            f"step {m['step']}/{self.run.cfg.schedule.steps}"
            f"  reward {m.get('reward/mean', 0.0):.3f} ({roles})"
            f"  success {m.get('success_rate', 0.0):.2f}  team {m.get('team_reward', 0.0):.3f}"
            f"  loss {m.get('loss', 0.0):+.4f}  trained {int(m.get('samples_trained', 0))}"
            f"/{int(m.get('samples', 0))}  gen {m['time/generation']:.1f}s"
            f"  env {m['time/env']:.1f}s  update {m['time/update']:.1f}s"
        )

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Write this step's checkpoint (see :mod:`adapters.training.checkpoints`)."""
        return checkpoints.save_checkpoint(
            self.run.out,
            self.step,
            self.run.models,
            {**self.run.shared, SCHEDULE_KEY: self.schedule}
            if self._keep_schedule
            else self.run.shared,
            trajectories_bytes=self.traj_path.stat().st_size if self.traj_path.exists() else 0,
            metrics_bytes=self.metrics.offset,
            keep=self.run.cfg.output.keep_checkpoints,
            ranks=self.run.dist,
            dp=self.run.dp,
        )

    def _restore(self) -> dict[str, Any] | None:
        ckpt = checkpoints.latest_checkpoint(self.run.out)
        if ckpt is None:
            return None
        state = checkpoints.load_checkpoint(
            ckpt, self.run.models, self.run.shared, self.run.device, self.run.dp
        )
        if self.run.dist.is_main:
            truncate_file(self.traj_path, int(state["trajectories_bytes"]))
        self.step = int(state["step"])
        if self.run.models:
            next(iter(self.run.models.values())).activate()
        return state

    def export(self, where: Path) -> None:
        """Save each policy: its peft adapter, or the full model and tokenizer (with the
        ``init`` adapter it was trained on top of named in ``init.json``)."""
        checkpoints.export_policies(
            self.run.models,
            self.run.tokenizer,
            where,
            self.run.dist,
            self.run.dp,
            init_dir=self.run.init_dir,
        )

    def close(self) -> None:
        self.metrics.close()
        self.run.engine.close()
        self.run.pool.close()
        self.run.backend.close()
        self.run.dist.close()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
