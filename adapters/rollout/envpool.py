"""Environment worker pools: where env instances live while the rollout engine drives them.

The rollout engine never touches env objects directly; it talks to a pool in terms of *branch
ids*. A branch is one live copy of an episode. The pool can

- ``reset(specs)``: start one root branch per ``EpisodeSpec`` (env id, config, seed, options);
- ``expand(requests)``: for each ``(branch_id, completions)``, clone the branch once per
  completion, step each clone with its completion, flush dead steps, and register every clone as
  a new branch (so whichever the engine keeps is *exactly* the env that was stepped);
- ``oracle(branch_ids)``: the env's scripted oracle completion for the acting agent;
- ``release(branch_ids)``: forget branches.

``LocalEnvPool`` keeps envs in this process and steps clones on a thread pool (the sandbox runs
programs in other processes, so threads overlap code execution); the clones of a setting with
run-wide shared objects (a question pool) are stepped one at a time in request order, so what
an episode draws from the pool does not depend on the threads' interleaving. It also keeps each
branch's *recipe*, its spec and the completions stepped since the reset: ``rebuild`` makes the same
env again from it (how a checkpoint keeps envs in flight without pickling them).
:mod:`adapters.rollout.ray_pool` provides the same interface over Ray actors.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EpisodeSpec", "BranchView", "StepOutcome", "LocalEnvPool", "flush_dead_steps"]


@dataclass(frozen=True)
class EpisodeSpec:
    """What to reset: ``envs.make(env_id, **config).reset(seed=seed, options=options)``."""

    env_id: str
    seed: int
    config: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] | None = None


@dataclass
class BranchView:
    """What the engine needs to know about a branch before the next action."""

    branch_id: int
    agent: str | None  # the acting agent (None when done)
    prompt: str
    turn: int
    step: int
    done: bool
    success: bool
    instance_id: str
    preference: str = "high"  # which candidates an adaptive keep rule prefers from this agent
    progress: float = 0.0  # the task's own progress measure (env.progress(): boxes on goals, ...)
    budget: int | None = None  # at most this many agent steps in the episode (env.step_budget())


@dataclass
class StepOutcome:
    """The result of stepping one clone with one completion."""

    branch: BranchView  # the new branch (the stepped clone)
    agent: str
    reward: float
    reward_parts: dict[str, Any]
    info: dict[str, Any]
    awards: list[dict[str, Any]] = field(default_factory=list)  # delayed rewards for earlier steps


def flush_dead_steps(raw: Any) -> None:
    """Step ``None`` for every terminated/truncated agent until a live agent acts or none is
    left."""
    while raw.agents:
        a = raw.agent_selection
        if raw.terminations[a] or raw.truncations[a]:
            raw.step(None)
        else:
            return


def view_of(branch_id: int, raw: Any) -> BranchView:
    done = not raw.agents
    agent = None if done else raw.agent_selection
    pref = "high"
    if agent is not None and hasattr(raw, "adaptive_preference"):
        pref = raw.adaptive_preference(agent)
    return BranchView(
        branch_id=branch_id,
        agent=agent,
        prompt="" if done else raw.observe(agent)["prompt"],
        turn=raw.turn,
        step=raw.num_steps,
        done=done,
        success=bool(raw.success),
        instance_id=raw.instance_id,
        preference=pref,
        progress=float(raw.progress()) if hasattr(raw, "progress") else float(raw.success),
        budget=raw.step_budget() if hasattr(raw, "step_budget") else None,
    )


def make_raw_env(spec: EpisodeSpec, sandbox: Any = None) -> Any:
    import envs

    config = dict(spec.config)
    if sandbox is not None:
        config["sandbox"] = sandbox
    raw = envs.make(spec.env_id, **config).unwrapped
    raw.reset(seed=spec.seed, options=spec.options)
    return raw


def step_clone(raw: Any, completion: str) -> tuple[Any, str, dict[str, Any], list[dict[str, Any]]]:
    clone = raw.clone()
    agent = clone.agent_selection
    clone.step(completion)
    info = dict(clone.infos.get(agent, {}))
    awards = list(getattr(clone, "last_awards", []))
    flush_dead_steps(clone)
    return clone, agent, info, awards


class LocalEnvPool:
    """In-process pool; clones are stepped on ``workers`` threads."""

    def __init__(self, workers: int = 2, sandbox: Any = None) -> None:
        self._envs: dict[int, Any] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(
            max_workers=max(1, workers), thread_name_prefix="envpool"
        )
        self._sandbox = sandbox
        self._recipes: dict[int, tuple[EpisodeSpec, tuple[str, ...]]] = {}

    def _register(self, raw: Any, recipe: tuple[EpisodeSpec, tuple[str, ...]]) -> int:
        with self._lock:
            bid = next(self._ids)
            self._envs[bid] = raw
            self._recipes[bid] = recipe
        return bid

    def reset(self, specs: Sequence[EpisodeSpec]) -> list[BranchView]:
        # resets only read shared objects (a pool draw is a function of the seed and the
        # pool's content), so they may run in any order
        raws = list(self._executor.map(lambda s: make_raw_env(s, self._sandbox), specs))
        views = []
        for spec, raw in zip(specs, raws):
            flush_dead_steps(raw)
            views.append(view_of(self._register(raw, (spec, ())), raw))
        return views

    def recipe(self, branch_id: int) -> tuple[EpisodeSpec, tuple[str, ...]]:
        """How a branch's env was made: its spec and the completions stepped since the reset."""
        return self._recipes[branch_id]

    def rebuild(self, spec: EpisodeSpec, completions: Sequence[str]) -> BranchView:
        """Make a branch's env again from its :meth:`recipe` (reset, then every completion
        stepped as :meth:`expand` steps it) and register it as a new branch."""
        raw = make_raw_env(spec, self._sandbox)
        flush_dead_steps(raw)
        for text in completions:
            raw.step(text)
            flush_dead_steps(raw)
        return view_of(self._register(raw, (spec, tuple(completions))), raw)

    def expand(self, requests: Sequence[tuple[int, Sequence[str]]]) -> list[list[StepOutcome]]:
        jobs = [(bid, text) for bid, texts in requests for text in texts]
        step = lambda job: step_clone(self._envs[job[0]], job[1])  # noqa: E731
        if any(type(self._envs[bid]).has_shared_objects() for bid, _ in requests):
            # a step may add to a run-wide pool that another episode's step draws from: one
            # at a time, in request order, so the threads' interleaving decides nothing
            results = [step(job) for job in jobs]
        else:
            results = list(self._executor.map(step, jobs))
        out: list[list[StepOutcome]] = []
        it = iter(results)
        for bid, texts in requests:
            spec, done = self._recipes[bid]
            row = []
            for text in texts:
                clone, agent, info, awards = next(it)
                parts = info.get("reward_parts") or {}
                recipe = (spec, (*done, text))
                row.append(
                    StepOutcome(
                        branch=view_of(self._register(clone, recipe), clone),
                        agent=agent,
                        reward=float(parts.get("reward", 0.0)),
                        reward_parts=parts,
                        info=info,
                        awards=awards,
                    )
                )
            out.append(row)
        return out

    def oracle(self, branch_ids: Sequence[int]) -> list[str]:
        return [self._envs[b].oracle(self._envs[b].agent_selection) for b in branch_ids]

    def release(self, branch_ids: Sequence[int]) -> None:
        with self._lock:
            for b in branch_ids:
                self._envs.pop(b, None)
                self._recipes.pop(b, None)

    def raw(self, branch_id: int) -> Any:
        """The raw env of a branch (local pools only; for tests and debugging)."""
        return self._envs[branch_id]

    def __len__(self) -> int:
        return len(self._envs)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._envs.clear()
        self._recipes.clear()

    def __enter__(self) -> LocalEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
