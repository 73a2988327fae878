"""The rollout layer: drive many env instances with policies and record what happened.

==================  ===========================================================================
module              what lives there
==================  ===========================================================================
``engine``          :class:`RolloutEngine` (batched generation per agent-turn, tree or parallel
                    sampling, group keys, delayed awards) and :class:`RolloutConfig`
``keep``            keep rules: which of K candidates continue (:func:`select_candidates`)
``records``         :class:`Sample`, :class:`Episode`, :class:`RolloutResult`, :func:`write_jsonl`
``progress``        :class:`RolloutProgress` (agent steps taken and left, the engine's
                    ``on_progress``) and the bars that follow it (:func:`follow_steps`,
                    :func:`follow_share`)
``envpool``         where env instances live: :class:`LocalEnvPool` (threads), branch ids, clones
``ray_pool``        :class:`RayEnvPool`: the same interface over Ray actors (needs ``ray``)
``episodes``        a setting's roles and shared objects, episode specs, seeds, oracle demos
==================  ===========================================================================

>>> from adapters.rollout import RolloutConfig, RolloutEngine
>>> from adapters.policies import ScriptedPolicy
>>> engine = RolloutEngine("plan_path", ScriptedPolicy(lambda p: "U"), RolloutConfig(candidates=2))
>>> result = engine.run([EpisodeSpec("plan_path", seed=0)])
>>> len({s.group for s in result.samples}) >= 1
True
>>> engine.close()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adapters.rollout.engine import RolloutConfig, RolloutEngine
from adapters.rollout.envpool import (
    BranchView,
    EpisodeSpec,
    LocalEnvPool,
    StepOutcome,
    flush_dead_steps,
)
from adapters.rollout.episodes import (
    create_shared_objects,
    derive_seed,
    env_roles,
    episode_specs,
    has_team_reward,
    oracle_demos,
    progress_measure,
)
from adapters.rollout.keep import KEEP_RULES, KeepRule, select_candidates
from adapters.rollout.progress import RolloutProgress, follow_share, follow_steps
from adapters.rollout.records import Episode, RolloutResult, Sample, write_jsonl

if TYPE_CHECKING:  # pragma: no cover
    from adapters.rollout.ray_pool import RayEnvPool

__all__ = [
    "KEEP_RULES",
    "BranchView",
    "Episode",
    "EpisodeSpec",
    "KeepRule",
    "LocalEnvPool",
    "RayEnvPool",
    "RolloutConfig",
    "RolloutEngine",
    "RolloutProgress",
    "RolloutResult",
    "Sample",
    "StepOutcome",
    "create_shared_objects",
    "derive_seed",
    "env_roles",
    "episode_specs",
    "flush_dead_steps",
    "follow_share",
    "follow_steps",
    "has_team_reward",
    "progress_measure",
    "oracle_demos",
    "select_candidates",
    "write_jsonl",
]


def __getattr__(name: str) -> Any:
    if name == "RayEnvPool":  # imports ray only when asked for
        from adapters.rollout.ray_pool import RayEnvPool

        return RayEnvPool
    raise AttributeError(f"module 'adapters.rollout' has no attribute {name!r}")
