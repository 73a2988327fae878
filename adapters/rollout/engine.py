"""Rollout engine: many env instances at once, generation batched per agent-turn, tree sampling.

Tree sampling (AT-GRPO Algorithm 1). At every agent's turn, for every live branch, the engine
samples ``K`` candidate completions from the same observation, steps each on its own clone of the
branch (inside the env pool, :mod:`adapters.rollout.envpool`), and records the ``K`` samples as
one group keyed by ``(instance, branch, agent, turn, step)``. A keep rule
(:mod:`adapters.rollout.keep`) then picks the candidates that continue.

Plain parallel sampling (``sampling="parallel"``): ``K`` independent episodes per instance, one
sample per step; groups are keyed by ``(instance, agent, turn, step)`` across the ``K`` episodes.

Trajectory-level groups (``group_by="trajectory"``, parallel sampling only): the ``K`` episodes of
an instance form one group, and every sample of an episode carries that episode's reward (the
final team reward, or with ``trajectory_reward="return"`` the acting role's episode return), so
GRPO ranks whole trajectories as a single-agent GRPO run ranks answers. This is the baseline
AT-GRPO's agent- and turn-wise grouping is measured against (``benchmarks/learning.py``, row
``mas-grpo``).

Generation is batched: at each wave, the prompts of all live branches are grouped by the policy
that serves the acting agent's role and sent in one ``generate`` call per policy. The result is a
:class:`~adapters.rollout.records.RolloutResult` (samples and finished episodes).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from adapters.policies.base import Completion, GenerationConfig, Policy
from adapters.policies.knobs import ConfigError, Section, knob
from adapters.rollout.envpool import BranchView, EpisodeSpec, LocalEnvPool, StepOutcome
from adapters.rollout.episodes import award_lookahead, delayed_rewards, derive_seed
from adapters.rollout.keep import KEEP_RULES, KeepRule, select_candidates
from adapters.rollout.progress import RolloutProgress
from adapters.rollout.records import Episode, RolloutResult, Sample

__all__ = ["RolloutConfig", "RolloutEngine"]


@dataclass(frozen=True)
class RolloutConfig(Section):
    """How episodes are rolled out: the rollout section of a training run
    (:class:`~adapters.training.config.TrainConfig`).

    ``keep_scope`` says where the keep rule chooses: ``"branch"`` keeps ``keep_n`` of each
    branch's K candidates (with ``keep_n = 2`` the live branches double every turn, up to
    ``max_branches``); ``"instance"`` pools the candidates of all live branches of an instance at
    that turn and keeps ``keep_n`` of them (MarsRL's "each subsequent agent selects two outputs
    from the preceding agent": 1, 2, 2, 2, 2 groups over Solver, V1, C1, V2, C2). With
    ``keep_n = 1`` (AT-GRPO) the two are the same. How completions are sampled is the
    generation section (:class:`~adapters.policies.base.GenerationConfig`).
    """

    sampling: Literal["tree", "parallel"] = knob(
        "tree",
        "tree (K candidates per agent-turn) | parallel (K episodes per instance); default: the "
        "algorithm's",
        auto=True,
    )
    candidates: int = knob(
        4, "K: candidates per agent-turn (tree) or episodes per instance (parallel)", auto=True
    )
    keep: KeepRule = knob(
        "best",
        "tree sampling keep rule: best | random | balanced | adaptive",
        auto=True,
        why="suite default (unused without tree sampling)",
    )
    keep_n: int = knob(
        1, "tree sampling: candidates that continue per branch (or per instance)", auto=True
    )
    keep_scope: Literal["branch", "instance"] = knob(
        "branch",
        "tree sampling: keep per branch, or per instance across branches (MarsRL)",
        auto=True,
    )
    group_by: Literal["turn", "trajectory"] = knob(
        "turn",
        "turn: one group per (instance, agent, turn) (AT-GRPO) | trajectory: one group per "
        "instance over its K parallel episodes, each sample rewarded with its episode's reward",
    )
    trajectory_reward: Literal["team", "return"] = knob(
        "team",
        "group_by=trajectory: an episode's reward is its final team reward (team) or the acting "
        "role's episode return (return)",
    )
    max_branches: int = knob(16, "tree sampling: cap on live branches per instance when keep_n > 1")
    max_steps: int = knob(64, "safety cap on agent steps per episode")

    def __post_init__(self) -> None:
        for name in ("candidates", "keep_n", "max_branches", "max_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        if self.sampling not in (None, "tree", "parallel"):
            raise ConfigError(f"sampling must be 'tree' or 'parallel', got {self.sampling!r}")
        if self.keep not in (None, *KEEP_RULES):
            raise ConfigError(f"keep must be one of {KEEP_RULES}, got {self.keep!r}")
        if self.group_by not in (None, "turn", "trajectory"):
            raise ConfigError(f"group_by must be 'turn' or 'trajectory', got {self.group_by!r}")
        if self.trajectory_reward not in (None, "team", "return"):
            raise ConfigError(
                f"trajectory_reward must be 'team' or 'return', got {self.trajectory_reward!r}"
            )
        if self.group_by == "trajectory" and self.sampling == "tree":
            raise ConfigError(
                "group_by='trajectory' needs sampling='parallel' (K whole episodes per instance)"
            )
        if self.keep_scope not in (None, "branch", "instance"):
            raise ConfigError(f"keep_scope must be 'branch' or 'instance', got {self.keep_scope!r}")
        if (
            self.keep_n is not None
            and self.candidates is not None
            and self.keep_n > self.candidates
        ):
            raise ConfigError(
                f"keep_n ({self.keep_n}) cannot exceed candidates ({self.candidates})"
            )


@dataclass
class _Branch:
    view: BranchView
    instance: int
    path: str
    returns: dict[str, float] = field(default_factory=dict)
    last_team: float = 0.0
    sample_at_step: dict[int, int] = field(default_factory=dict)  # env step -> kept sample index
    # unkept candidates of the step that led here, waiting for a one-step award lookahead:
    # (sample index, branch id)
    siblings: list[tuple[int, int]] = field(default_factory=list)


class RolloutEngine:
    """Drives episodes for any registered setting with one policy per role (or shared).

    ``policies`` maps policy ids to :class:`Policy` objects; ``role_policy`` maps each role to a
    policy id (default: every role uses the only policy, i.e. role sharing). Policies with
    ``env_aware = True`` (the oracle) are answered by the env itself through the pool.
    """

    def __init__(
        self,
        env_id: str,
        policies: Mapping[str, Policy] | Policy,
        config: RolloutConfig | None = None,
        *,
        generation: GenerationConfig | None = None,
        env_config: Mapping[str, Any] | None = None,
        role_policy: Mapping[str, str] | None = None,
        pool: Any = None,
        prompt_seeds: bool = False,
    ) -> None:
        self.env_id = env_id
        self.env_config = dict(env_config or {})
        self.policies = {"shared": policies} if isinstance(policies, Policy) else dict(policies)
        if not self.policies:
            raise ValueError("at least one policy is required")
        self.role_policy = dict(role_policy or {})
        self.config = (config or RolloutConfig()).filled()
        self.generation = (generation or GenerationConfig()).filled()
        self.prompt_seeds = prompt_seeds
        self._lookahead = False
        if self.config.sampling == "tree":
            lookahead = award_lookahead(env_id, self.env_config)
            if lookahead > 1 or (lookahead == 1 and self.config.keep_n > 1):
                raise ValueError(
                    f"{env_id!r} pays awards up to {lookahead} steps later; tree sampling "
                    "supports a one-step lookahead with keep_n = 1 only"
                )
            self._lookahead = lookahead == 1
        if self.config.sampling == "tree" and delayed_rewards(env_id, self.env_config):
            raise ValueError(
                f"{env_id!r} pays some rewards later (env.award(): a step's reward is known only "
                "after other agents have acted), so tree sampling would rank the K candidates of "
                "such a step while their rewards are all still pending and train only the kept "
                "one on its award. Use sampling='parallel' (the setting's paper recipe does)."
            )
        self.pool = pool if pool is not None else LocalEnvPool()
        self._owns_pool = pool is None
        self._on_episode: Callable[[Episode], None] | None = None

    def policy_id_for(self, role: str) -> str:
        if role in self.role_policy:
            return self.role_policy[role]
        if len(self.policies) == 1:
            return next(iter(self.policies))
        if role in self.policies:
            return role
        raise KeyError(
            f"no policy for role {role!r}; set role_policy (policies: {list(self.policies)})"
        )

    # ------------------------------------------------------------------ generation
    def _generate(self, branches: list[_Branch], n: int, seed: int) -> list[list[Completion]]:
        by_policy: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, b in enumerate(branches):
            role = b.view.agent or ""
            by_policy[(self.policy_id_for(role), role)].append(i)
        out: list[list[Completion]] = [[] for _ in branches]
        for k, ((pid, role), idxs) in enumerate(sorted(by_policy.items())):
            policy = self.policies[pid]
            if getattr(policy, "env_aware", False):
                texts = self.pool.oracle([branches[i].view.branch_id for i in idxs])
                for i, t in zip(idxs, texts):
                    out[i] = [Completion(text=t) for _ in range(n)]
                continue
            params = self.generation.params(role, n, seed=(seed * 1_000_003 + k) % 2**31)
            if self.prompt_seeds:
                keys = [(branches[i].instance, branches[i].path) for i in idxs]
                params = replace(
                    params, prompt_seeds=tuple(derive_seed(seed, *key) for key in keys)
                )
            prompts = [[{"role": "user", "content": branches[i].view.prompt}] for i in idxs]
            results = policy.generate(prompts, params)
            for i, comps in zip(idxs, results):
                out[i] = list(comps)
        return out

    # ------------------------------------------------------------------ main loop
    def run(
        self,
        specs: Sequence[EpisodeSpec],
        seed: int = 0,
        instance_offset: int = 0,
        on_episode: Callable[[Episode], None] | None = None,
        on_wave: Callable[[int, int], None] | None = None,
        on_progress: Callable[[RolloutProgress], None] | None = None,
    ) -> RolloutResult:
        """Roll out one episode tree (or K parallel episodes) per spec.

        ``instance_offset`` numbers the instances from there (``Sample.instance``, group keys):
        a process that rolls out instances ``[a, b)`` of a larger batch passes ``a``.
        ``on_episode`` is called with each episode as it finishes, ``on_wave(wave, live)`` after
        each generation wave with the number of branches still live, ``on_progress`` after the
        reset and after each wave with the agent steps taken and left
        (:class:`~adapters.rollout.progress.RolloutProgress`: what moves a progress bar within
        the first wave's episodes).
        """
        self._on_episode = on_episode
        try:
            return self._run(specs, seed, instance_offset, on_wave, on_progress)
        finally:
            self._on_episode = None

    def _run(
        self,
        specs: Sequence[EpisodeSpec],
        seed: int,
        instance_offset: int,
        on_wave: Callable[[int, int], None] | None = None,
        on_progress: Callable[[RolloutProgress], None] | None = None,
    ) -> RolloutResult:
        """AT-GRPO Algorithm 1, lines 5-19 (the rollout phase), one wave per loop:

        * lines 5-7: reset one root branch per instance (K per instance with parallel sampling);
        * lines 8-9: every live branch's acting agent moves in the same wave;
        * line 10: K candidates per branch (:meth:`_generate`), each stepped on its own clone of
          the branch for its reward, Eq. 4 (:meth:`_step_candidates`, which also replays the
          wave for candidates waiting on a one-step award);
        * line 13: the keep rule picks the candidates that continue (:meth:`_keep`);
        * lines 11-12: the K samples are recorded under one group key (:meth:`_record`);
        * lines 15-16: the kept candidates become the next wave's branches, finished ones become
          episodes (:meth:`_advance`, :meth:`_retire_done`).

        Lines 10-16 of a wave are :meth:`_finish_wave`.
        """
        cfg = self.config
        parallel = cfg.sampling == "parallel"
        rng = random.Random(seed)
        sibling_rng = random.Random(seed * 31 + 7)  # keeps the main keep-rule stream unchanged
        samples: list[Sample] = []
        episodes: list[Episode] = []
        live = self._retire_done(self._roots(specs, instance_offset, parallel), episodes)
        wave = steps = tokens = 0
        if on_progress is not None:
            on_progress(self._progress(0, live, episodes, 0, 0))
        while live:
            n = 1 if parallel else cfg.candidates
            completions = self._generate(live, n, seed=seed * 7919 + wave)
            steps += len(live)
            tokens += sum(_tokens(c) for comps in completions for c in comps)
            live = self._finish_wave(
                live, completions, seed, wave, rng, sibling_rng, samples, episodes
            )
            if on_wave is not None:
                on_wave(wave, len(live))
            if on_progress is not None:
                on_progress(self._progress(wave + 1, live, episodes, steps, tokens))
            wave += 1
        episodes.sort(key=lambda e: (e.instance, e.branch))
        if cfg.group_by == "trajectory":
            _trajectory_groups(samples, episodes, cfg.trajectory_reward)
        return RolloutResult(samples=samples, episodes=episodes)

    def _progress(
        self, wave: int, live: list[_Branch], episodes: list[Episode], steps: int, tokens: int
    ) -> RolloutProgress:
        """The rollout's state for ``on_progress``: each live branch has at most its episode's
        step budget left, or, when the setting has none, the most steps a finished episode took
        (the ``max_steps`` cap before one has finished; :mod:`adapters.rollout.progress`)."""
        cap = self.config.max_steps
        seen = max((e.steps for e in episodes), default=cap)
        left = 0
        for b in live:
            budget = min(cap, b.view.budget if b.view.budget is not None else seen)
            left += max(1, budget - b.view.step)  # a live branch has a step to take
        return RolloutProgress(
            wave=wave,
            live=len(live),
            episodes=len(episodes),
            steps=steps,
            steps_left=left,
            tokens=tokens,
        )

    def _finish_wave(
        self,
        live: list[_Branch],
        completions: list[list[Completion]],
        seed: int,
        wave: int,
        rng: random.Random,
        sibling_rng: random.Random,
        samples: list[Sample],
        episodes: list[Episode],
    ) -> list[_Branch]:
        """Lines 10-16 for one wave's ``completions``: step the candidates, keep, record,
        advance. Returns the branches that go on (the agent pipeline,
        :mod:`adapters.rollout.pipeline`, calls this on its own schedule)."""
        parallel = self.config.sampling == "parallel"
        outcomes = self._step_candidates(live, completions, samples, sibling_rng)
        keeps, leaf_of = self._keep(live, outcomes, parallel, rng, seed, wave)
        firsts = self._record(live, completions, outcomes, keeps, parallel, samples)
        next_live = self._advance(live, outcomes, keeps, leaf_of, firsts, samples, episodes)
        return self._retire_done(next_live, episodes)

    def _roots(
        self, specs: Sequence[EpisodeSpec], instance_offset: int, parallel: bool
    ) -> list[_Branch]:
        """One root branch per instance, or K copies of it for parallel sampling."""
        copies = self.config.candidates if parallel else 1
        views = self.pool.reset([s for s in specs for _ in range(copies)])
        return [
            _Branch(
                view=v,
                instance=instance_offset + i // copies,
                path=str(i % copies) if parallel else "0",
            )
            for i, v in enumerate(views)
        ]

    def _step_candidates(
        self,
        live: list[_Branch],
        completions: list[list[Completion]],
        samples: list[Sample],
        rng: random.Random,
    ) -> list[list[StepOutcome]]:
        """Each branch's candidates stepped on clones of the branch (their rewards). The previous
        step's unkept candidates that wait for a one-step award play this wave's completions of
        their kept sibling too, and get the award that replay earns (:meth:`_award_siblings`)."""
        texts = [[c.text for c in comps] for comps in completions]
        requests = [(b.view.branch_id, t) for b, t in zip(live, texts)]
        sib = [(i, idx, bid) for i, b in enumerate(live) for idx, bid in b.siblings]
        requests += [(bid, texts[i]) for i, _, bid in sib]
        expanded = self.pool.expand(requests)
        self._award_siblings(live, sib, expanded[len(live) :], samples, rng)
        return expanded[: len(live)]

    def _record(
        self,
        live: list[_Branch],
        completions: list[list[Completion]],
        outcomes: list[list[StepOutcome]],
        keeps: list[list[int]],
        parallel: bool,
        samples: list[Sample],
    ) -> list[int]:
        """Append each branch's K samples under its group key; returns the index of each
        branch's first sample."""
        firsts = []
        for b, comps, outs, keep in zip(live, completions, outcomes, keeps):
            group = self._group_key(b, parallel)
            firsts.append(len(samples))
            for c, (comp, out) in enumerate(zip(comps, outs)):
                samples.append(self._sample(b, group, c, c in keep, comp, out))
        return firsts

    def _advance(
        self,
        live: list[_Branch],
        outcomes: list[list[StepOutcome]],
        keeps: list[list[int]],
        leaf_of: dict[int, int],
        firsts: list[int],
        samples: list[Sample],
        episodes: list[Episode],
    ) -> list[_Branch]:
        """The next wave's branches: a child per kept candidate (up to ``max_branches`` per
        instance; one that reached ``max_steps`` is recorded as an episode instead).

        Bookkeeping per branch: the kept candidates' delayed awards go to the samples they
        reward (:meth:`_apply_awards`); unkept candidates that wait for a one-step award travel
        with the first child (:attr:`_Branch.siblings`); every other clone is released, and so
        is the parent. A branch none of whose candidates continues records its leaf episode."""
        cfg = self.config
        parallel = cfg.sampling == "parallel"
        next_live: list[_Branch] = []
        per_instance: dict[int, int] = defaultdict(int)
        for i, (b, outs) in enumerate(zip(live, outcomes)):
            keep, first = keeps[i], firsts[i]
            self._apply_awards(b, [outs[c] for c in keep], samples)
            unkept = [c for c in range(len(outs)) if c not in keep]
            waiting = [
                (first + c, outs[c].branch.branch_id)
                for c in unkept
                if self._lookahead and not outs[c].branch.done
            ]
            waiting_ids = {bid for _, bid in waiting}
            released = [outs[c].branch.branch_id for c in unkept]
            released = [bid for bid in released if bid not in waiting_ids]
            for c in keep:
                out = outs[c]
                if per_instance[b.instance] >= cfg.max_branches or out.branch.step >= cfg.max_steps:
                    released.append(out.branch.branch_id)
                    if out.branch.step >= cfg.max_steps:
                        episodes.append(self._episode(self._child(b, c, out, parallel)))
                    continue
                per_instance[b.instance] += 1
                child = self._child(b, c, out, parallel)
                child.sample_at_step[b.view.step] = first + c
                child.siblings, waiting = waiting, []
                next_live.append(child)
            released += [bid for _, bid in waiting]  # no child waits for them
            if i in leaf_of:  # nothing of its pool goes on: the best candidate is the leaf
                best = leaf_of[i]
                episodes.append(self._episode(self._child(b, best, outs[best], parallel)))
            self.pool.release([*released, b.view.branch_id])
        return next_live

    def _keep(
        self,
        live: list[_Branch],
        outcomes: list[list[StepOutcome]],
        parallel: bool,
        rng: random.Random,
        seed: int = 0,
        wave: int = 0,
    ) -> tuple[list[list[int]], dict[int, int]]:
        """Per live branch, the candidates that continue; and, for branches whose whole pool
        stops, the candidate whose episode is recorded as the leaf.

        The keep rule chooses within each branch (``keep_scope="branch"``) or within the pool of
        all branches of one instance whose same agent acted this wave (``"instance"``). With
        ``prompt_seeds`` a random rule draws from the pool's own stream (seeded by instance and
        branch), so the choice does not depend on which other instances share the batch."""
        cfg = self.config
        if parallel:
            return [[0] for _ in live], {}
        pools: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for i, b in enumerate(live):
            key = (b.instance, b.view.agent) if cfg.keep_scope == "instance" else (i,)
            pools[key].append(i)
        keeps: list[list[int]] = [[] for _ in live]
        leaf_of: dict[int, int] = {}
        for members in pools.values():
            flat = [(i, c) for i in members for c in range(len(outcomes[i]))]
            rewards = [outcomes[i][c].reward for i, c in flat]
            done = [outcomes[i][c].branch.done for i, c in flat]
            first = live[members[0]]
            pool_rng = (
                random.Random(derive_seed(seed, wave, first.instance, first.path, first.view.agent))
                if self.prompt_seeds
                else rng
            )
            pref = first.view.preference
            chosen = select_candidates(rewards, done, cfg.keep, cfg.keep_n, pool_rng, pref)
            for j in chosen:
                i, c = flat[j]
                keeps[i].append(c)
            if not chosen:  # no candidate goes on
                j = select_candidates(rewards, [True] * len(flat), "best", 1, rng)[0]
                leaf_of[flat[j][0]] = flat[j][1]
        return keeps, leaf_of

    def _child(self, parent: _Branch, c: int, out: StepOutcome, parallel: bool) -> _Branch:
        returns = dict(parent.returns)
        returns[out.agent] = returns.get(out.agent, 0.0) + out.reward
        for award in out.awards:
            who = award["agent"]
            # an award replaces its step's provisional reward: add the difference
            delta = award.get("delta", award["reward_parts"]["reward"])
            returns[who] = returns.get(who, 0.0) + float(delta)
        path = parent.path if parallel else f"{parent.path}.{c}"
        team = (
            float(out.reward_parts.get("team", parent.last_team))
            if out.reward_parts
            else parent.last_team
        )
        return _Branch(
            view=out.branch,
            instance=parent.instance,
            path=path,
            returns=returns,
            last_team=team,
            sample_at_step=dict(parent.sample_at_step),
        )

    @staticmethod
    def _apply_awards(b: _Branch, kept: list[StepOutcome], samples: list[Sample]) -> None:
        """Attach delayed rewards (``env.award``) to the samples of the steps they reward.

        Only the continuing candidates' awards count (they are the episode that goes on); when
        several continue (keep_n > 1) and reward the same earlier sample, their awards are
        averaged. Awards for samples the engine did not keep are ignored (use parallel sampling
        for settings whose rewards are mostly delayed)."""
        collected: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for out in kept:
            for award in out.awards:
                idx = b.sample_at_step.get(int(award["step"]))
                if idx is not None:
                    collected[idx].append(award["reward_parts"])
        for idx, parts_list in collected.items():
            sample = samples[idx]
            sample.reward = sum(float(p["reward"]) for p in parts_list) / len(parts_list)
            if len(parts_list) == 1:
                sample.reward_parts = parts_list[0]
            else:
                sample.reward_parts = {
                    **parts_list[0],
                    "reward": sample.reward,
                    "averaged_over": len(parts_list),
                }

    def _award_siblings(
        self,
        live: list[_Branch],
        sib: list[tuple[int, int, int]],
        outcomes: list[list[StepOutcome]],
        samples: list[Sample],
        rng: random.Random,
    ) -> None:
        """Counterfactual awards for the candidates tree sampling did not keep.

        In a setting whose awards arrive one step later (``award_lookahead() == 1``: the math
        reasoner's team reward comes with the tool's agreeing step), only the kept candidate's
        episode reaches that step. Each unkept candidate therefore also plays the K completions
        the next agent wrote on the kept branch; the same keep rule picks one of them, and its
        award (if any) becomes the candidate's reward. When the next agent does not see the
        previous agent's answer of the same turn (AT-GRPO's math), this is exactly the award the
        candidate would have earned had it been kept, so the K candidates' rewards stay
        comparable (otherwise only the kept one could ever be credited). The grid settings'
        tool (AT-GRPO A.1.3-A.1.5) gets its team term, the turn's value, the same way with the
        planner's step; there the planner sees the tool's proposal, so the replay credits each
        tool candidate with the turn's value given the kept branch's planner answers (the
        tool never changes the state, so that value is the same for all K)."""
        cfg = self.config
        for (i, idx, bid), outs in zip(sib, outcomes):
            pref = live[i].view.preference
            rewards, done = [o.reward for o in outs], [o.branch.done for o in outs]
            chosen = select_candidates(rewards, done, cfg.keep, 1, rng, pref) or (
                select_candidates(rewards, [True] * len(outs), "best", 1, rng)
            )
            step = samples[idx].step
            parts = [a["reward_parts"] for a in outs[chosen[0]].awards if int(a["step"]) == step]
            if parts:
                samples[idx].reward = float(parts[-1]["reward"])
                samples[idx].reward_parts = {**parts[-1], "counterfactual": True}
            self.pool.release([bid, *(o.branch.branch_id for o in outs)])
        for b in live:
            b.siblings = []

    def _retire_done(self, branches: list[_Branch], episodes: list[Episode]) -> list[_Branch]:
        live = []
        for b in branches:
            if b.view.done:
                episodes.append(self._episode(b))
                self.pool.release([b.view.branch_id, *(bid for _, bid in b.siblings)])
            else:
                live.append(b)
        return live

    def _episode(self, b: _Branch) -> Episode:
        episode = Episode(
            instance=b.instance,
            instance_id=b.view.instance_id,
            branch=b.path,
            success=b.view.success,
            steps=b.view.step,
            turns=b.view.turn,
            returns=dict(b.returns),
            final_team=b.last_team,
            progress=b.view.progress,
        )
        if self._on_episode is not None:
            self._on_episode(episode)
        return episode

    def _group_key(self, b: _Branch, parallel: bool) -> str:
        v = b.view
        where = f"{b.instance}" if parallel else f"{b.instance}:{b.path}"
        return f"{where}:{v.agent}:t{v.turn}:s{v.step}"

    def _sample(
        self, b: _Branch, group: str, c: int, kept: bool, comp: Completion, out: StepOutcome
    ) -> Sample:
        role = out.agent
        return Sample(
            group=group,
            instance=b.instance,
            instance_id=b.view.instance_id,
            branch=b.path,
            role=role,
            policy_id=self.policy_id_for(role),
            turn=b.view.turn,
            step=b.view.step,
            candidate=c,
            kept=kept,
            prompt=b.view.prompt,
            completion=comp.text,
            prompt_ids=list(comp.prompt_ids),
            completion_ids=list(comp.token_ids),
            logprobs=list(comp.logprobs),
            reward=out.reward,
            reward_parts=out.reward_parts,
            success=out.branch.success,
            done=out.branch.done,
            finish_reason=comp.finish_reason,
            trainable=bool(out.info.get("trainable", True)),
        )

    def close(self) -> None:
        if self._owns_pool:
            self.pool.close()


def _trajectory_groups(
    samples: list[Sample], episodes: list[Episode], reward: Literal["team", "return"]
) -> None:
    """``group_by="trajectory"``: each sample joins its instance's group and carries its
    episode's reward (the step's own reward stays in ``reward_parts``)."""
    of = {(e.instance, e.branch): e for e in episodes}
    for s in samples:
        e = of[(s.instance, s.branch)]
        s.group = f"{s.instance}"
        s.reward = e.final_team if reward == "team" else float(e.returns.get(s.role, 0.0))


def _tokens(c: Completion) -> int:
    """Tokens of a completion: its ids, or its log-probs (a server that sends no ids)."""
    return len(c.token_ids) or len(c.logprobs)
