"""Agentic pipeline parallelism: one agent stage per training step (MarsRL section 3.3, Fig. 3a).

A synchronous trainer rolls out whole trajectories (Solver, V1, C1, V2, C2) and then updates, so
every step waits for five decodes in a row and the first agent's outputs wait for the last
agent's. MarsRL splits training at the granularity of agents instead. At every training step the
rollout takes inputs from two places, new problems (for the Solver) and the outputs the preceding
agent produced in the previous step; all outputs of that step, whatever their stage, form one
training batch. A trajectory admitted at step ``t`` therefore has its Solver samples trained at
``t``, V1 at ``t + 1``, C1 at ``t + 2``, V2 at ``t + 3`` and C2 at ``t + 4``; later agents act
with a newer policy on inputs an older one wrote, and the agent-specific rewards (section 3.2)
are what let each stage be trained on its own.

:class:`AgentPipeline` is that stage scheduler over a
:class:`~adapters.rollout.engine.RolloutEngine`; it reuses the engine's grouped rollouts as they
are (K candidates per input, MarsRL's adaptive selection of two outputs of the preceding agent
with ``keep="adaptive", keep_n=2, keep_scope="instance"``; the environment ends an episode on an
accepting or unparsed verdict, so the Corrector only ever receives error reports)::

    pipe = AgentPipeline(engine)
    for step in range(steps):
        batch = pipe.step(new_specs(step), seed=step)   # one stage of everything in flight
        train_on(batch.result.samples)                  # groups are complete within a step
        push_weights()                                  # the next stage decodes with them
    pipe.drain(...)                                     # optional: finish what is in flight

Each :class:`PipelineBatch` is what ``engine.run`` returns for a synchronous step (samples and the
episodes that ended), so an advantage estimator and the update take it unchanged; its ``ages``
say how many policy versions ago each sample's trajectory started (the input staleness the
paper's design accepts) and ``lags`` how many versions ago the oldest token of each sample was
sampled (0 without segments: a stage is decoded and trained in the same step).

Segment rollouts (``segments=SegmentConfig(L, M)``, UloRL section 2.3, which MarsRL adds inside
each agent's decoding): a step then decodes at most ``L`` tokens of every in-flight completion
(:mod:`adapters.rollout.segments`); a long completion holds only its own trajectory, never the
step. UloRL adds a trajectory that finishes within a stage to the training buffer at once. The
advantage of a sample is relative to its group (the K candidates of one input: GRPO, MarsRL
2.2), and a group whose members have not all finished has no mean yet, so group completeness is
the release rule here: a completion that finishes waits, stepped in its env clone for its
reward, only for the other members of its own group, and the group enters the step's batch in
the step its last member finishes (a partial group's advantage would favour the completions
that finish first, the short ones). Which candidates go on to the next agent is decided when
every group of the instance's stage is in (MarsRL's selection pools an instance's candidates:
``keep_scope="instance"``), so a group trained early is logged with ``kept`` false; the
candidates chosen later are marked then. The batch's ``waits`` count, per sample, the steps
between its completion's end and its group's release.

How a trainer drives it (:mod:`adapters.training.schedule` does, for ``--pipeline agent``):
replace ``engine.run(specs, seed)`` by ``pipeline.step(specs, seed)``, admit
``instances_per_step`` new problems each step, record ``batch.lags`` as the staleness metric.
Its in-flight branches live in the engine's env pool (and, with segments, as partial
completions in memory); :class:`adapters.training.schedule.PipelineRollout` checkpoints the
branches with their envs and, with segments, the partial completions and the finished
completions of stages still being decoded, so that a resumed run continues them exactly.
Requirements: rewards known at each step (no ``env.award`` lookahead) and token-level backends
for segments (:meth:`~adapters.policies.base.Policy.extend`).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from adapters.policies.base import Completion
from adapters.rollout.engine import RolloutEngine, _Branch
from adapters.rollout.envpool import EpisodeSpec, StepOutcome
from adapters.rollout.episodes import derive_seed
from adapters.rollout.records import Episode, RolloutResult, Sample
from adapters.rollout.segments import SegmentConfig, SegmentedGenerator

__all__ = ["AgentPipeline", "PipelineBatch"]


@dataclass
class PipelineBatch:
    """One pipeline step: its training batch and, per sample, its trajectory age, its token lag
    and how many steps its completion waited, finished, for the rest of its stage (segments)."""

    step: int
    result: RolloutResult
    ages: list[int] = field(default_factory=list)
    lags: list[int] = field(default_factory=list)
    waits: list[int] = field(default_factory=list)  # steps a finished completion waited
    in_flight: int = 0

    @property
    def samples(self) -> list[Sample]:
        return self.result.samples


@dataclass
class _Decoding:
    """A branch whose agent stage is being decoded in segments."""

    branch: _Branch
    slots: list[Completion | None]
    oldest: int  # the oldest policy version among its tokens so far
    finished_at: list[int] = field(default_factory=list)  # step each slot's completion ended
    outcomes: list[StepOutcome] | None = None  # stepped when its group was complete
    recorded: list[Sample] = field(default_factory=list)  # its group's samples (released)


class AgentPipeline:
    """Schedules MarsRL's agentic pipeline over ``engine`` (see the module docstring)."""

    def __init__(
        self, engine: RolloutEngine, segments: SegmentConfig | None = None, seed: int = 0
    ) -> None:
        if engine._lookahead:
            raise ValueError(
                f"{engine.env_id!r} pays a step's reward one step later; the agent pipeline "
                "trains every stage in the step that decoded it and needs final rewards"
            )
        self.engine = engine
        self.segments = segments
        self.steps = 0
        self._next_instance = 0
        self._rng = random.Random(seed)
        self._sibling_rng = random.Random(seed * 31 + 7)
        self._ready: list[_Branch] = []  # waiting for their next stage's decode
        self._admitted: dict[int, int] = {}  # instance -> step it entered the pipeline
        self._decoding: dict[int, _Decoding] = {}  # branch id -> segment state
        self._generators: dict[tuple[str, str], SegmentedGenerator] = {}

    @property
    def in_flight(self) -> int:
        """Branches inside the pipeline (waiting for a stage or being decoded)."""
        return len(self._ready) + len(self._decoding)

    def step(
        self, specs: Sequence[EpisodeSpec] = (), seed: int = 0, instance_offset: int | None = None
    ) -> PipelineBatch:
        """Admit ``specs`` as new problems, decode one stage (or one segment) of everything in
        flight with the current policy, and return all outputs that finished as one batch.

        The new problems are numbered from ``instance_offset`` (default: after the previous
        ones); under several ranks pass the global index of this rank's first problem."""
        eng = self.engine
        episodes: list[Episode] = []
        samples: list[Sample] = []
        first = self._next_instance if instance_offset is None else instance_offset
        roots = eng._roots(specs, first, eng.config.sampling == "parallel")
        for b in roots:
            if b.instance in self._admitted:
                raise ValueError(f"instance {b.instance} is already in the pipeline")
            self._admitted[b.instance] = self.steps
        self._next_instance = first + len(specs)
        live = self._ready + eng._retire_done(roots, episodes)
        self._ready = []
        n = 1 if eng.config.sampling == "parallel" else eng.config.candidates
        lags: list[int] = []
        if self.segments is None:
            if live:
                completions = eng._generate(live, n, seed=seed * 7919 + self.steps)
                self._ready = eng._finish_wave(
                    live, completions, seed, self.steps, self._rng, self._sibling_rng,
                    samples, episodes,
                )  # fmt: skip
            lags = [0] * len(samples)
            waits = [0] * len(samples)
        else:
            lags, waits = self._segment_stage(live, n, seed, samples, episodes)
        ages = [self.steps - self._admitted[s.instance] for s in samples]
        inside = {b.instance for b in self._ready}
        inside |= {d.branch.instance for d in self._decoding.values()}
        self._admitted = {i: t for i, t in self._admitted.items() if i in inside}
        batch = PipelineBatch(
            step=self.steps,
            result=RolloutResult(samples=samples, episodes=episodes),
            ages=ages,
            lags=lags,
            waits=waits,
            in_flight=self.in_flight,
        )
        self.steps += 1
        return batch

    def drain(self, seed: int = 0, max_steps: int = 10_000) -> list[PipelineBatch]:
        """Step without new problems until nothing is in flight."""
        out: list[PipelineBatch] = []
        while self.in_flight and len(out) < max_steps:
            out.append(self.step((), seed))
        return out

    # ------------------------------------------------------------------ segments
    def _segment_stage(
        self,
        live: list[_Branch],
        n: int,
        seed: int,
        samples: list[Sample],
        episodes: list[Episode],
    ) -> tuple[list[int], list[int]]:
        """Submit the newly ready branches and decode one segment everywhere; release every group
        whose K completions are all in (stepped for their rewards, appended to ``samples``), and
        advance every instance whose groups of this stage are all in. Returns the released
        samples' lags (versions since their oldest token) and waits (module docstring)."""
        eng = self.engine
        parallel = eng.config.sampling == "parallel"
        for b in live:
            role = b.view.agent or ""
            pid = eng.policy_id_for(role)
            gen = self._generator(pid, role, n, seed)
            params = replace(
                gen.params, prompt_seeds=(derive_seed(seed, b.instance, b.path, self.steps),)
            )
            gen.submit([[{"role": "user", "content": b.view.prompt}]], [b.view.branch_id], params)
            self._decoding[b.view.branch_id] = _Decoding(b, [None] * n, self.steps, [0] * n)
        for gen in self._generators.values():
            for f in gen.stage(version=self.steps):
                d = self._decoding[f.key]  # type: ignore[index]
                d.slots[f.sample] = f.completion
                d.finished_at[f.sample] = self.steps
                d.oldest = min([d.oldest, *(v for _, v in f.partial.versions)])
        lags: list[int] = []
        waits: list[int] = []
        by_instance: dict[int, list[_Decoding]] = defaultdict(list)
        for d in self._decoding.values():
            if d.outcomes is None and all(c is not None for c in d.slots):  # a complete group
                comps = [c for c in d.slots if c is not None]
                (d.outcomes,) = eng._step_candidates(
                    [d.branch], [comps], samples, self._sibling_rng
                )
                first = len(samples)
                eng._record([d.branch], [comps], [d.outcomes], [[]], parallel, samples)
                d.recorded = samples[first:]
                lags += [self.steps - d.oldest] * len(comps)
                waits += [self.steps - at for at in d.finished_at]
            by_instance[d.branch.instance].append(d)
        for group in by_instance.values():
            if any(d.outcomes is None for d in group):
                continue  # the keep rule pools the instance's candidates: wait for all
            branches = [d.branch for d in group]
            outcomes = [d.outcomes for d in group if d.outcomes is not None]
            keeps, leaf_of = eng._keep(branches, outcomes, parallel, self._rng, seed, self.steps)
            recorded = [smp for d in group for smp in d.recorded]
            firsts = [sum(len(x.recorded) for x in group[:i]) for i in range(len(group))]
            for d, keep in zip(group, keeps):
                for c in keep:
                    d.recorded[c].kept = True
                del self._decoding[d.branch.view.branch_id]
            nxt = eng._advance(branches, outcomes, keeps, leaf_of, firsts, recorded, episodes)
            self._ready += eng._retire_done(nxt, episodes)
        return lags, waits

    def _generator(self, pid: str, role: str, n: int, seed: int) -> SegmentedGenerator:
        key = (pid, role)
        if key not in self._generators:
            assert self.segments is not None
            params = self.engine.generation.params(role, n, seed=seed)
            self._generators[key] = SegmentedGenerator(
                self.engine.policies[pid],
                params,
                self.segments.segment_tokens,
                self.segments.max_segments,
            )
        return self._generators[key]
