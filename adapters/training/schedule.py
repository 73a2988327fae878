"""Rollout scheduling: which rollout a training step trains on, and which policy generated it.

Two mechanisms, each optional, both off by default (the synchronous loop: step ``t`` rolls out
with the policy of version ``t - 1``, i.e. after ``t - 1`` updates, then updates):

* **Asynchronous rollouts with bounded staleness** (``--max-staleness N``,
  :class:`RolloutSchedule`). Generation runs ahead of the update by at most ``N`` policy
  versions: before step ``t`` trains, the rollouts of steps ``t .. t + N`` exist, each generated
  with the policy current when it was produced, so step ``t`` trains on a rollout generated with
  version ``max(0, t - 1 - N)`` and every trained sample lags by at most ``N`` versions. On one
  process this is an interleaved schedule (produce ahead, then update), the same data flow as
  verl's fully-async trainer, SkyRL or prime-rl, where a rollout producer and the trainer run
  concurrently and the producer may not get more than ``N`` versions ahead; here the producer and
  the trainer take turns, so the schedule (and its staleness) is exact and reproducible, and the
  overlap in time is what a separate generation process (vLLM servers, ``docs/scaling.md``) adds.
  Each sample records the version of the policy that generated it (``Sample.policy_version``;
  its oldest token's with segments), and the sampler's log-probs stay its behaviour log-probs;
  the update corrects for the lag (:mod:`adapters.training.update`: PPO ratio against the
  recomputed ``pi_old``, token weight ``min(pi_old / pi_behav, C)``, verl's decoupled rollout
  correction). ``N = 0`` is the synchronous loop, bit for bit: nothing is produced ahead and the
  update takes its usual path.
* **MarsRL's agentic pipeline** (``--pipeline agent``, :class:`PipelineRollout` over
  :class:`~adapters.rollout.pipeline.AgentPipeline`, MarsRL section 3.3): a step decodes one agent
  stage of every trajectory in flight plus the Solver stage of the step's new problems, and trains
  on all those outputs together; with ``--segment-tokens L --max-segments M`` (UloRL section 2.3)
  a step decodes at most ``L`` tokens of each unfinished completion. Its samples' lag is the age
  of their oldest token (0 without segments: a stage is decoded and trained in the same step; up
  to ``M - 1`` with segments, so ``N + M - 1`` with both mechanisms). Segments turn on the same
  off-policy correction as ``--max-staleness`` (the behaviour log-probs of each token are kept
  across its segments).

The per-sample lag (``version at training - Sample.policy_version``) is logged in
``metrics.jsonl`` (``lag/mean``, ``lag/max``, ``lag/N``: how many trained samples lag by N) and
can be recomputed from ``trajectories.jsonl`` (``train_step - 1 - policy_version``).

Resume: a single-process run checkpoints both the queue of rollouts produced ahead and the
pipeline's in-flight trajectories (the pipeline's counters and random states, and each branch's
env as its recipe: the episode spec and the completions stepped since the reset, from which
:meth:`~adapters.rollout.envpool.LocalEnvPool.rebuild` makes the same env again, checked against
the saved view; :meth:`RolloutSchedule.state_dict`), all of it data
(:mod:`adapters.training.state_codec`, never pickle), so a resumed run continues them without
losing or repeating any. With segments that includes the partial completions in flight
(:meth:`~adapters.rollout.segments.SegmentedGenerator.state_dict`: each one's prefix token ids,
the behaviour log-probs recorded so far, the sampler's random state and the policy version of each
segment) and the completions of a stage that already finished while their siblings are still
being decoded; a resumed run decodes the next segment of each from where the killed one stopped,
so its trajectories and weights equal an uninterrupted run's
(``tests/adapters/training/test_async.py`` kills a segmented run with SIGKILL while partials are in
flight). What is not kept, and restarts: under torchrun or with Ray env actors, all of it (each
rank's queue regenerates its steps with the restored weights, the same instances and seeds; the
pipeline starts empty). The trainer says so when it resumes such a run. A checkpoint written before
partials were kept still loads: its partially decoded stages restart from their beginning.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from adapters.rollout import RolloutEngine, RolloutResult, Sample
from adapters.rollout.envpool import EpisodeSpec, LocalEnvPool
from adapters.rollout.pipeline import AgentPipeline
from adapters.rollout.segments import SegmentConfig, SegmentedGenerator
from adapters.training.state_codec import CheckpointError, state_type

__all__ = [
    "PipelineRollout",
    "Produced",
    "RolloutSchedule",
    "lag_metrics",
    "make_pipeline",
]


@state_type
@dataclass
class Produced:
    """One step's rollout: for which step, with which policy version, and what it took."""

    step: int
    version: int  # policy updates made when it was generated
    result: RolloutResult
    t_rollout: float  # seconds: generation and env steps
    t_gen: float  # seconds of it in generation
    stats: dict[str, float]  # what the producer reports (the pipeline's in-flight count, ages)


class RolloutSchedule:
    """Which rollouts the trainer makes before a step trains, and which one it trains on: a
    queue that holds rollouts produced ahead of the update by at most ``max_staleness``
    versions (0: none, the synchronous loop).

    The trainer rolls out every step :meth:`due` names, with its current policy, :meth:`put`
    each result here, then :meth:`pop` the rollout of the step it trains
    (:meth:`~adapters.training.trainer.Trainer.train_step`). ``pipeline``: MarsRL's agent
    pipeline, whose in-flight trajectories a checkpoint keeps with the queue.

    >>> def produced(step, version):
    ...     return Produced(step, version, RolloutResult([], []), 0.0, 0.0, {})
    >>> sched = RolloutSchedule(max_staleness=1, last_step=3)
    >>> sched.due(1)  # step 2's rollout is made ahead, with the same policy (version 0)
    [1, 2]
    >>> for s in sched.due(1):
    ...     sched.put(produced(s, version=0))
    >>> sched.pop(1, version=0).version
    0
    >>> sched.due(2)  # after one update: step 3 is rolled out with version 1
    [3]
    >>> sched.put(produced(3, version=1))
    >>> sched.pop(2, version=1).version  # step 2 trains one version late
    0
    """

    def __init__(
        self,
        max_staleness: int = 0,
        last_step: int | None = None,
        pipeline: PipelineRollout | None = None,
    ) -> None:
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        self.max_staleness = max_staleness
        self.last_step = last_step
        self.pipeline = pipeline
        self._queue: dict[int, Produced] = {}

    @property
    def queued(self) -> list[int]:
        """Steps whose rollouts are produced and not yet trained."""
        return sorted(self._queue)

    def due(self, step: int) -> list[int]:
        """The steps to roll out now, before step ``step`` trains: every step up to ``step +
        max_staleness`` (not past the run's last) whose rollout is not produced yet."""
        stale = [s for s in self._queue if s < step]
        if stale:
            raise ValueError(f"rollouts of steps {sorted(stale)} were never trained")
        end = step + self.max_staleness
        if self.last_step is not None:
            end = max(step, min(end, self.last_step))
        return [s for s in range(step, end + 1) if s not in self._queue]

    def put(self, produced: Produced) -> None:
        """Keep a rollout until its step trains."""
        self._queue[produced.step] = produced

    def pop(self, step: int, version: int) -> Produced:
        """The rollout step ``step`` trains on, now that the policy is at version ``version``."""
        got = self._queue.pop(step)
        lag = version - got.version
        if lag > self.max_staleness:  # cannot happen: the queue holds N steps ahead at most
            raise AssertionError(
                f"step {step}: rollout {lag} versions old (> {self.max_staleness})"
            )
        return got

    def checkpointable(self) -> bool:
        """Whether :meth:`state_dict` holds everything in flight: the envs of the pipeline's
        branches live in this process (a local env pool; partial completions always do)."""
        if self.pipeline is None:
            return True
        return isinstance(self.pipeline.pipeline.engine.pool, LocalEnvPool)

    def state_dict(self) -> dict[str, Any]:
        """The rollouts produced ahead, and the pipeline's in-flight state (see the module
        docstring); :meth:`load_state_dict` restores them."""
        return {"queue": dict(self._queue), "pipeline": self.pipeline_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._queue = dict(state.get("queue", {}))
        if state.get("pipeline") is not None and self.pipeline is not None:
            self.pipeline.load_state_dict(state["pipeline"])

    def pipeline_state(self) -> dict[str, Any] | None:
        return self.pipeline.state_dict() if self.pipeline is not None else None


class PipelineRollout:
    """MarsRL's agentic pipeline (:class:`~adapters.rollout.pipeline.AgentPipeline`) behind the
    interface of :meth:`RolloutEngine.run`: each call is one pipeline step; its samples carry
    the policy version of their oldest token, and :attr:`last` keeps the pipeline's statistics
    of the step (in flight, ages)."""

    def __init__(
        self, engine: RolloutEngine, segments: SegmentConfig | None = None, seed: int = 0
    ) -> None:
        self.pipeline = AgentPipeline(engine, segments=segments, seed=seed)
        self.last: dict[str, float] = {}

    def run(
        self, specs: Sequence[EpisodeSpec], seed: int, instance_offset: int, version: int
    ) -> RolloutResult:
        batch = self.pipeline.step(specs, seed=seed, instance_offset=instance_offset)
        for s, lag in zip(batch.samples, batch.lags):
            s.policy_version = max(0, version - lag)
        n = max(1, len(batch.ages))
        self.last = {
            "pipeline/in_flight": float(batch.in_flight),
            "pipeline/age_mean": sum(batch.ages) / n,
            "pipeline/age_max": float(max(batch.ages, default=0)),
            "pipeline/wait_mean": sum(batch.waits) / max(1, len(batch.waits)),
        }
        return batch.result

    def state_dict(self) -> dict[str, Any]:
        """The pipeline's counters, random states and in-flight branches with their envs
        (recipes of a local env pool: spec and completions), in order: those waiting for their
        next stage, those being decoded in segments (with the completions of their stage that
        finished) and the segment generators' partial completions
        (:meth:`SegmentedGenerator.state_dict`); a decoding branch whose group is complete and
        stepped keeps its candidates' envs too, as recipes."""
        p = self.pipeline
        pool = p.engine.pool

        def env(b: Any) -> dict[str, Any]:  # an engine branch
            spec, completions = pool.recipe(b.view.branch_id)
            return {"spec": spec, "completions": list(completions)}

        def clone(o: Any) -> dict[str, Any]:  # a stepped candidate (StepOutcome) of a group
            spec, completions = pool.recipe(o.branch.branch_id)
            return {"spec": spec, "completions": list(completions)}

        return {
            "steps": p.steps,
            "next_instance": p._next_instance,
            "rng": p._rng.getstate(),
            "sibling_rng": p._sibling_rng.getstate(),
            "admitted": dict(p._admitted),
            "ready": [(b, env(b)) for b in p._ready],
            "decoding": [
                (bid, d, env(d.branch), [clone(o) for o in d.outcomes or []])
                for bid, d in p._decoding.items()
            ],
            "generators": [(key, g.state_dict()) for key, g in p._generators.items()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`. The envs get new branch ids in this process's pool; the
        partial completions follow their branches. (A checkpoint written before partials were
        kept lists its decoding branches under ``ready``: their stage restarts.)"""
        p = self.pipeline
        pool = p.engine.pool
        p.steps = int(state["steps"])
        p._next_instance = int(state["next_instance"])
        p._rng.setstate(state["rng"])
        p._sibling_rng.setstate(state["sibling_rng"])
        p._admitted = dict(state["admitted"])

        def restored(branch: Any, env: dict[str, Any]) -> Any:
            if not isinstance(env, dict) or not isinstance(env.get("spec"), EpisodeSpec):
                raise CheckpointError("an in-flight branch without its recipe (spec, completions)")
            view = pool.rebuild(env["spec"], [str(c) for c in env["completions"]])
            want = replace(branch.view, branch_id=view.branch_id)
            if view != want:
                raise CheckpointError(
                    f"the env rebuilt for an in-flight branch of instance {want.instance_id} is "
                    f"not the one saved (step {view.step} vs {want.step}, instance "
                    f"{view.instance_id}): its setting is not reproducible from its seed"
                )
            return replace(branch, view=view)

        p._ready = [restored(b, env) for b, env in state["ready"]]
        p._decoding = {}
        ids: dict[Hashable, Hashable] = {}
        for old_id, d, env, *stepped in state.get("decoding", []):
            branch = restored(d.branch, env)
            ids[old_id] = branch.view.branch_id
            if d.outcomes is not None:  # a complete group, stepped: its candidates' envs
                outs = []
                for o, env in zip(d.outcomes, stepped[0]):
                    if not isinstance(env, dict) or not isinstance(env.get("spec"), EpisodeSpec):
                        raise CheckpointError("a stepped candidate without its recipe")
                    view = pool.rebuild(env["spec"], [str(c) for c in env["completions"]])
                    outs.append(replace(o, branch=view))
                d = replace(d, outcomes=outs)
            p._decoding[branch.view.branch_id] = replace(d, branch=branch)
        p._generators = {}
        for (pid, role), gen_state in state.get("generators", []):
            if p.segments is None:
                raise ValueError("the checkpoint holds partial completions of segments")
            gen = SegmentedGenerator(
                p.engine.policies[pid],
                gen_state["params"],
                p.segments.segment_tokens,
                p.segments.max_segments,
            )
            gen.load_state_dict(gen_state, keys=ids)
            p._generators[(pid, role)] = gen


def make_pipeline(cfg: Any, engine: RolloutEngine) -> PipelineRollout | None:
    """The agent pipeline a resolved config asks for (``pipeline: agent``), else None."""
    if cfg.schedule.pipeline != "agent":
        return None
    segments = None
    if cfg.schedule.segment_tokens:
        segments = SegmentConfig(cfg.schedule.segment_tokens, cfg.schedule.max_segments)
    return PipelineRollout(engine, segments, seed=cfg.seed)


def lag_metrics(samples: Sequence[Sample], version: int) -> dict[str, float]:
    """The lag of every trained sample in versions (``version - policy_version``): mean, max and
    a count per lag value.

    >>> s = [Sample("g", 0, "", "", "r", "p", 0, 0, 0, True, "", "", [], [], [], 0.0, {}, False,
    ...      False, policy_version=v) for v in (3, 3, 2)]
    >>> lag_metrics(s, version=3)
    {'lag/mean': 0.3333333333333333, 'lag/max': 1.0, 'lag/0': 2.0, 'lag/1': 1.0}
    """
    lags = [version - s.policy_version for s in samples]
    if not lags:
        return {}
    out = {"lag/mean": sum(lags) / len(lags), "lag/max": float(max(lags))}
    for lag, count in sorted(Counter(lags).items()):
        out[f"lag/{lag}"] = float(count)
    return out
