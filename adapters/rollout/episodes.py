"""What to roll out: a setting's roles and shared objects, episode specs, seeds, demonstrations.

These helpers describe an environment to the layers above (the trainer, the evaluation, the
integrations) without stepping it:

* :func:`env_roles` - the setting's agents in turn order for a config;
* :func:`delayed_rewards` - whether some of its rewards arrive later (``award()``);
* :func:`progress_measure` - what its ``progress()`` measures (boxes on goals, ...);
* :func:`has_team_reward` - whether its rewards mix in a team reward (``mixing != "none"``);
* :func:`create_shared_objects` - its run-wide shared objects (``create_shared``: the MAE/SAGE
  question pools), created once per run and handed to every env instance;
* :func:`episode_specs` - ``n`` :class:`~adapters.rollout.envpool.EpisodeSpec` with seeds derived
  from ``(seed, tag, i)`` (or one explicit instance); ``distinct=True`` (evaluations) skips seeds
  whose instance repeats an earlier one, so ``n`` episodes are ``n`` different instances;
* :func:`derive_seed` - every random choice of a run (env instances, generation, minibatch
  order) uses a seed derived from the run seed and where it happens, so a resumed run needs no
  hidden RNG state;
* :func:`oracle_demos` - in-context demonstrations from the setting's scripted oracle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from adapters.rollout.envpool import EpisodeSpec, flush_dead_steps

__all__ = [
    "award_lookahead",
    "create_shared_objects",
    "delayed_rewards",
    "derive_seed",
    "env_roles",
    "episode_specs",
    "has_team_reward",
    "oracle_demos",
    "progress_measure",
]

logger = logging.getLogger(__name__)


def derive_seed(*keys: Any) -> int:
    """A 31-bit seed from any keys, e.g. ``derive_seed(seed, "env", step, i)``.

    Every random choice of a run (env instances, generation, minibatch order) uses a seed derived
    from the run seed and where it happens, so a resumed run needs no hidden RNG state.

    >>> derive_seed(0, "env", 3, 1) == derive_seed(0, "env", 3, 1) != derive_seed(0, "env", 3, 2)
    True
    """
    import hashlib

    digest = hashlib.blake2b(repr(keys).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (2**31 - 1)


def _raw_env(env_id: str, env_config: Mapping[str, Any]) -> Any:
    import envs

    return envs.make(env_id, **dict(env_config)).unwrapped


def delayed_rewards(env_id: str, env_config: Mapping[str, Any] | None = None) -> bool:
    """Whether the setting pays some step rewards later (``award()``; its spec's
    ``delayed_rewards``). ``env_config`` does not change it."""
    import envs

    return envs.spec(env_id).delayed_rewards


def award_lookahead(env_id: str, env_config: Mapping[str, Any] | None = None) -> int:
    """How many steps after a step its award can arrive in this configuration (0: never): the
    env's ``award_lookahead()``, built only when the spec's bound is not 0."""
    import envs

    if envs.spec(env_id).award_lookahead == 0:
        return 0
    return int(_raw_env(env_id, env_config or {}).award_lookahead())


def has_team_reward(env_id: str, env_config: Mapping[str, Any] | None = None) -> bool:
    """Whether the setting's rewards mix in a team reward: its spec has one (``team_reward``)
    and this configuration's ``rewards.mixing`` is not ``"none"``; MAE, SAGE, CoMAS and MarsRL
    pay per-role rewards only."""
    import envs

    if not envs.spec(env_id).team_reward:
        return False
    rewards = _raw_env(env_id, env_config or {}).config.rewards
    return str(getattr(rewards, "mixing", "none")) != "none"


def env_roles(env_id: str, env_config: Mapping[str, Any] | None = None) -> list[str]:
    """The setting's agents (roles) in turn order for this config."""
    return list(_raw_env(env_id, env_config or {}).possible_agents)


def progress_measure(env_id: str, env_config: Mapping[str, Any] | None = None) -> str:
    """What the setting's ``progress()`` measures (its ``PROGRESS``: "boxes on goals", ...)."""
    return str(getattr(_raw_env(env_id, env_config or {}), "PROGRESS", "solved"))


def create_shared_objects(env_id: str, env_config: Mapping[str, Any] | None = None) -> dict:
    """The setting's run-wide shared objects (``create_shared``), e.g. MAE/SAGE question pools."""
    raw = _raw_env(env_id, env_config or {})
    return dict(type(raw).create_shared(**dict(env_config or {})))


def episode_specs(
    env_id: str,
    n: int,
    *,
    seed: int,
    tag: str,
    env_config: Mapping[str, Any],
    split: str | None = None,
    instance: Any = None,
    start: int = 0,
    distinct: bool = False,
) -> list[EpisodeSpec]:
    """``n`` specs with seeds derived from ``(seed, tag, i)`` for ``i`` in
    ``start .. start + n - 1`` (so episodes ``start ..`` of a longer run); an explicit instance
    wins.

    ``distinct=True`` numbers instances instead of seeds: the seeds ``(seed, tag, 0), (seed, tag,
    1), ...`` are reset in turn and a seed whose instance (``instance_id``) repeats an earlier one
    is skipped, so the specs are instances ``start .. start + n - 1`` of that sequence of distinct
    instances. A small split can hold few distinct instances (a 5x5 one-box Sokoban validation
    split has about 50): an evaluation of 64 episodes there would count some levels two or three
    times and its intervals would claim more evidence than it has. When the split runs out (no new
    instance in :data:`DISTINCT_PATIENCE` draws in a row) fewer specs are returned and a warning
    says how many. Settings with run-wide shared objects (question pools), or whose instances
    have no id, are not checked (their resets may consume the pools).
    """
    options: dict[str, Any] | None
    if instance is not None:
        options = {"instance": instance}
    else:
        options = {"split": split} if split else None
    if not distinct or instance is not None:
        seeds = [derive_seed(seed, tag, i) for i in range(start, start + n)]
    else:
        seeds = _distinct_seeds(env_id, env_config, options, seed, tag, start + n)[start:]
    return [EpisodeSpec(env_id, seed=s, config=dict(env_config), options=options) for s in seeds]


DISTINCT_PATIENCE = 500  # draws without a new instance before a split counts as exhausted


def _distinct_seeds(
    env_id: str,
    env_config: Mapping[str, Any],
    options: dict[str, Any] | None,
    seed: int,
    tag: str,
    want: int,
) -> list[int]:
    """The seeds of the first ``want`` distinct instances (see :func:`episode_specs`)."""
    raw = _raw_env(env_id, env_config)
    if type(raw).has_shared_objects():  # question pools: resets would draw from them
        return [derive_seed(seed, tag, i) for i in range(want)]
    seen: set[str] = set()
    seeds: list[int] = []
    i = misses = 0
    while len(seeds) < want and misses < DISTINCT_PATIENCE:
        s = derive_seed(seed, tag, i)
        i += 1
        raw.reset(seed=s, options=options)
        key = str(getattr(raw, "instance_id", "") or "")
        if not key:  # no instance ids: nothing to compare
            return [derive_seed(seed, tag, j) for j in range(want)]
        if key in seen:
            misses += 1
            continue
        seen.add(key)
        seeds.append(s)
        misses = 0
    if len(seeds) < want:
        logger.warning(
            "%s: the %s split gave only %d distinct instances in %d draws (%d asked for); "
            "evaluating those",
            env_id,
            (options or {}).get("split", "default"),
            len(seeds),
            i,
            want,
        )
    return seeds


def oracle_demos(
    env_id: str,
    env_config: dict[str, Any],
    roles: Sequence[str],
    n: int,
    seed: int,
    fits: Callable[[str], bool] | None = None,
) -> dict[str, list[dict[str, str]]]:
    """In-context demonstrations from the setting's oracle: per role, ``n`` pairs of messages
    (the role's first prompt in a train-split episode, the oracle's answer to it).

    Earlier agents in each demo episode act with the oracle too. A role whose oracle answer does
    not pass ``fits`` (e.g. longer than ``max_new_tokens``: the policy could never write it)
    gets no demonstration. Settings without an oracle give none (a warning is logged).
    """
    import envs

    out: dict[str, list[dict[str, str]]] = {r: [] for r in roles}
    if n <= 0:
        return {}
    for j in range(n):
        raw = envs.make(env_id, **env_config).unwrapped
        raw.reset(seed=derive_seed(seed, "demo", j), options={"split": "train"})
        flush_dead_steps(raw)
        seen: set[str] = set()
        try:
            while raw.agents and len(seen) < len(roles):
                agent = raw.agent_selection
                answer = raw.oracle(agent)
                if agent not in seen:
                    seen.add(agent)
                    prompt = raw.observe(agent)["prompt"]
                    out.setdefault(agent, []).extend(
                        [
                            {"role": "user", "content": prompt},
                            {"role": "assistant", "content": answer},
                        ]
                    )
                raw.step(answer)
                flush_dead_steps(raw)
        except NotImplementedError:
            logger.warning("%s has no oracle: training without demonstrations", env_id)
            return {}
    return {
        r: msgs
        for r, msgs in out.items()
        if msgs and (fits is None or all(fits(m["content"]) for m in msgs[1::2]))
    }
