"""Rollout engine: many env instances at once, generation batched per agent-turn, tree sampling.

Tree sampling (AT-GRPO Algorithm 1). At every agent's turn, for every live branch, the engine
samples ``K`` candidate completions from the same observation, steps each on its own clone of the
branch (inside the env pool), and records the ``K`` samples as one group keyed by
``(instance, branch, agent, turn, step)``. Then it keeps candidates:

- ``best`` (AT-GRPO, greedy): the highest-reward candidate continues;
- ``random`` / ``balanced`` / ``adaptive`` (MarsRL's grouped agentic rollouts, usually with
  ``keep_n=2``): among candidates whose episode goes on, two random ones; one positive
  (reward >= 0.5) and one negative; or those the env prefers for the acting role (MarsRL: the
  verifier's inputs are preferably wrong solutions, the corrector's inputs preferably reports
  that correctly found errors — ``raw_env.adaptive_preference(agent)``).

The kept candidate *is* the clone that was stepped, so the episode continues from exactly the
state that earned the reward (the reference implementation copies the best branch over the
others, which gives the next agent's candidates identical rewards and advances the wrong env).

Plain parallel sampling (``sampling="parallel"``): ``K`` independent episodes per instance, one
sample per step; groups are keyed by ``(instance, agent, turn, step)`` across the ``K`` episodes.

Generation is batched: at each wave, the prompts of all live branches are grouped by the policy
that serves the acting agent's role and sent in one ``generate`` call per policy.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Literal

from adapters.envpool import BranchView, EpisodeSpec, LocalEnvPool, StepOutcome
from adapters.policies.base import Completion, Policy, SamplingParams

__all__ = [
    "RolloutConfig",
    "Sample",
    "RolloutResult",
    "RolloutEngine",
    "select_candidates",
    "write_jsonl",
]

KeepRule = Literal["best", "random", "balanced", "adaptive"]


@dataclass(frozen=True)
class RolloutConfig:
    """How to roll out.

    candidates: K, samples per agent-turn (tree) or episodes per instance (parallel).
    sampling: ``"tree"`` or ``"parallel"``.
    keep / keep_n: which candidates continue in tree sampling (see module docstring).
    max_branches: cap on live branches per instance when ``keep_n > 1``.
    max_steps: safety cap on agent steps per episode.
    temperature / top_p / top_k / max_new_tokens / stop: sampling settings for every role;
    ``role_sampling`` overrides them per role, e.g. ``{"verifier": {"temperature": 0.6}}``.
    """

    candidates: int = 4
    sampling: Literal["tree", "parallel"] = "tree"
    keep: KeepRule = "best"
    keep_n: int = 1
    max_branches: int = 16
    max_steps: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    role_sampling: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.candidates < 1:
            raise ValueError("candidates must be >= 1")
        if self.sampling not in ("tree", "parallel"):
            raise ValueError(f"sampling must be 'tree' or 'parallel', got {self.sampling!r}")
        if self.keep not in ("best", "random", "balanced", "adaptive"):
            raise ValueError(f"unknown keep rule {self.keep!r}")
        if not 1 <= self.keep_n <= self.candidates:
            raise ValueError("keep_n must lie in [1, candidates]")

    def sampling_params(self, role: str, n: int, seed: int | None) -> SamplingParams:
        base: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_new_tokens": self.max_new_tokens,
            "stop": tuple(self.stop),
        }
        base.update(self.role_sampling.get(role, {}))
        return SamplingParams(n=n, seed=seed, **base)


@dataclass
class Sample:
    """One trajectory record: a completion, what it was conditioned on, and what it earned."""

    group: str
    instance: int
    instance_id: str
    branch: str
    role: str
    policy_id: str
    turn: int
    step: int
    candidate: int
    kept: bool
    prompt: str
    completion: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    reward: float
    reward_parts: dict[str, Any]
    success: bool
    done: bool
    finish_reason: str = "stop"
    advantage: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Episode:
    """A finished leaf: one complete path through an instance."""

    instance: int
    instance_id: str
    branch: str
    success: bool
    steps: int
    turns: int
    returns: dict[str, float]
    final_team: float


@dataclass
class RolloutResult:
    samples: list[Sample]
    episodes: list[Episode]

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.episodes:
            n = len(self.episodes)
            out["success_rate"] = sum(e.success for e in self.episodes) / n
            out["team_reward"] = sum(e.final_team for e in self.episodes) / n
            out["turns"] = sum(e.turns for e in self.episodes) / n
        by_role: dict[str, list[float]] = defaultdict(list)
        for s in self.samples:
            by_role[s.role].append(s.reward)
        for role, rs in by_role.items():
            out[f"reward/{role}"] = sum(rs) / len(rs)
        if self.samples:
            out["reward/mean"] = sum(s.reward for s in self.samples) / len(self.samples)
            out["samples"] = float(len(self.samples))
            out["completion_tokens"] = float(sum(len(s.completion_ids) for s in self.samples))
        return out


def select_candidates(
    rewards: Sequence[float],
    done: Sequence[bool],
    rule: KeepRule,
    keep_n: int,
    rng: random.Random,
    preference: str = "high",
) -> list[int]:
    """Indices of the candidates that continue.

    >>> select_candidates([0.1, 0.9, 0.5], [False] * 3, "best", 1, random.Random(0))
    [1]
    >>> select_candidates([1, 0, 1, 0], [False] * 4, "balanced", 2, random.Random(0))
    [2, 3]
    >>> select_candidates([1, 0, 1, 0], [False, False, True, True], "adaptive", 2, random.Random(0), "low")
    [1, 0]
    >>> select_candidates([1, 1], [True, True], "random", 2, random.Random(0))
    []
    """
    idx = list(range(len(rewards)))
    if rule == "best":
        return sorted(idx, key=lambda i: (-rewards[i], i))[:keep_n]
    live = [i for i in idx if not done[i]]
    if rule == "random":
        return sorted(rng.sample(live, min(keep_n, len(live))))
    if rule == "balanced":
        pos = [i for i in live if rewards[i] >= 0.5]
        neg = [i for i in live if rewards[i] < 0.5]
        rng.shuffle(pos)
        rng.shuffle(neg)
        chosen: list[int] = []
        while len(chosen) < keep_n and (pos or neg):
            for bucket in (pos, neg):
                if bucket and len(chosen) < keep_n:
                    chosen.append(bucket.pop())
        return sorted(chosen)
    if rule == "adaptive":
        sign = 1.0 if preference == "low" else -1.0
        return sorted(live, key=lambda i: (sign * rewards[i], i))[:keep_n]
    raise ValueError(f"unknown keep rule {rule!r}")


@dataclass
class _Branch:
    view: BranchView
    instance: int
    path: str
    returns: dict[str, float] = field(default_factory=dict)
    last_team: float = 0.0
    sample_at_step: dict[int, int] = field(default_factory=dict)  # env step -> kept sample index


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
        env_config: Mapping[str, Any] | None = None,
        role_policy: Mapping[str, str] | None = None,
        pool: Any = None,
    ) -> None:
        self.env_id = env_id
        self.env_config = dict(env_config or {})
        self.policies = {"shared": policies} if isinstance(policies, Policy) else dict(policies)
        if not self.policies:
            raise ValueError("at least one policy is required")
        self.role_policy = dict(role_policy or {})
        self.config = config or RolloutConfig()
        self.pool = pool if pool is not None else LocalEnvPool()
        self._owns_pool = pool is None

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
            params = self.config.sampling_params(role, n, seed=(seed * 1_000_003 + k) % 2**31)
            prompts = [[{"role": "user", "content": branches[i].view.prompt}] for i in idxs]
            results = policy.generate(prompts, params)
            for i, comps in zip(idxs, results):
                out[i] = list(comps)
        return out

    # ------------------------------------------------------------------ main loop
    def run(self, specs: Sequence[EpisodeSpec], seed: int = 0) -> RolloutResult:
        """Roll out one episode tree (or K parallel episodes) per spec."""
        cfg = self.config
        rng = random.Random(seed)
        parallel = cfg.sampling == "parallel"
        copies = cfg.candidates if parallel else 1
        root_specs = [s for s in specs for _ in range(copies)]
        views = self.pool.reset(root_specs)
        live = [
            _Branch(view=v, instance=i // copies, path=str(i % copies) if parallel else "0")
            for i, v in enumerate(views)
        ]
        samples: list[Sample] = []
        episodes: list[Episode] = []
        wave = 0
        live = self._retire_done(live, episodes)
        while live:
            n = 1 if parallel else cfg.candidates
            completions = self._generate(live, n, seed=seed * 7919 + wave)
            outcomes = self.pool.expand(
                [(b.view.branch_id, [c.text for c in comps]) for b, comps in zip(live, completions)]
            )
            next_live: list[_Branch] = []
            per_instance: dict[int, int] = defaultdict(int)
            for b, comps, outs in zip(live, completions, outcomes):
                keep = (
                    [0]
                    if parallel
                    else select_candidates(
                        [o.reward for o in outs],
                        [o.branch.done for o in outs],
                        cfg.keep,
                        cfg.keep_n,
                        rng,
                        b.view.preference,
                    )
                )
                group = self._group_key(b, parallel)
                first = len(samples)
                for c, (comp, out) in enumerate(zip(comps, outs)):
                    samples.append(self._sample(b, group, c, c in keep, comp, out))
                self._apply_awards(b, [outs[c] for c in keep], samples)
                released = [outs[c].branch.branch_id for c in range(len(outs)) if c not in keep]
                for c in keep:
                    out = outs[c]
                    if (
                        per_instance[b.instance] >= cfg.max_branches
                        or out.branch.step >= cfg.max_steps
                    ):
                        released.append(out.branch.branch_id)
                        if out.branch.step >= cfg.max_steps:
                            episodes.append(self._episode(self._child(b, c, out, parallel)))
                        continue
                    per_instance[b.instance] += 1
                    child = self._child(b, c, out, parallel)
                    child.sample_at_step[b.view.step] = first + c
                    next_live.append(child)
                if not keep:  # no candidate goes on: the best one's episode is the leaf
                    best = select_candidates(
                        [o.reward for o in outs], [True] * len(outs), "best", 1, rng
                    )[0]
                    episodes.append(self._episode(self._child(b, best, outs[best], parallel)))
                self.pool.release([*released, b.view.branch_id])
            live = self._retire_done(next_live, episodes)
            wave += 1
        episodes.sort(key=lambda e: (e.instance, e.branch))
        return RolloutResult(samples=samples, episodes=episodes)

    def _child(self, parent: _Branch, c: int, out: StepOutcome, parallel: bool) -> _Branch:
        returns = dict(parent.returns)
        returns[out.agent] = returns.get(out.agent, 0.0) + out.reward
        for award in out.awards:
            who = award["agent"]
            returns[who] = returns.get(who, 0.0) + float(award["reward_parts"]["reward"])
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

    def _retire_done(self, branches: list[_Branch], episodes: list[Episode]) -> list[_Branch]:
        live = []
        for b in branches:
            if b.view.done:
                episodes.append(self._episode(b))
                self.pool.release([b.view.branch_id])
            else:
                live.append(b)
        return live

    def _episode(self, b: _Branch) -> Episode:
        return Episode(
            instance=b.instance,
            instance_id=b.view.instance_id,
            branch=b.path,
            success=b.view.success,
            steps=b.view.step,
            turns=b.view.turn,
            returns=dict(b.returns),
            final_team=b.last_team,
        )

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
        )

    def close(self) -> None:
        if self._owns_pool:
            self.pool.close()


def write_jsonl(samples: Sequence[Sample], fh: IO[str], **extra: Any) -> int:
    """Append samples as JSON lines (with ``extra`` fields such as the training step)."""
    for s in samples:
        fh.write(json.dumps({**extra, **s.to_dict()}, ensure_ascii=False) + "\n")
    fh.flush()
    return len(samples)
