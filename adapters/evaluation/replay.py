"""Replayable evaluation records: what reproduces an episode, and the replay itself.

Every per-episode record of an evaluation (``eval_before.json`` / ``eval_after.json`` of a
training run, each row of a suite's ``results.json``) carries

* ``env`` and ``env_config`` - the setting id and the keyword arguments of ``envs.make`` (the
  run-wide shared objects, e.g. MAE/SAGE question pools, are not JSON: ``shared`` names them, and
  :func:`replay` creates fresh ones, as an evaluation does);
* ``reset_seed`` and ``reset_options`` - the arguments of ``reset``;
* ``transcript`` - every step in order: the acting ``role``, its ``turn`` and env ``step``, the
  ``prompt`` the env showed it (the observation; a policy's system message and demonstrations
  come before it), the ``completion`` it wrote and the ``reward`` it was credited (delayed awards
  included). Records written before prompts were kept have no ``prompt``; :func:`replay`
  rebuilds it (the env's observation before the step).

**A record is data, and data never names code.** :func:`play` (and so :func:`replay`, the episode
viewer and the open-loop reference) resolves a record's ``env`` with
:func:`envs.registered_spec`, which imports nothing: a ``"module:id"`` whose module is not loaded
is refused (:class:`envs.ModuleNotLoadedError`; ``python -m adapters.view --import MODULE`` loads
the module of a setting registered outside the repository), so a record planted in a shared run
directory cannot make the reader import a module of its choosing. Its ``env_config`` is checked
against the setting's config class (:func:`envs.check_env_config`: the setting's options only,
of their types), and ``reset_seed``, ``reset_options`` and ``shared`` must have their shapes,
before anything is built (:func:`checked_setting`).

:func:`replay` makes the env, resets it with the recorded seed and options and steps it with the
recorded completions (flushing terminated agents as the rollout engine does; a reset that does
not make the record's ``instance_id`` is refused, as from a version whose generator or split rule
differs); it returns the
rewards the env pays, which equal the recorded ones. That is how a reader audits what a model
did on an instance without the model. :func:`play` takes hooks called before and after every
step with the raw env, which is how the episode viewer (:mod:`adapters.evaluation.viewer`) reads
each step's prompt, reward parts and board from the env itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from adapters.rollout import Sample
from adapters.rollout.envpool import EpisodeSpec, flush_dead_steps

__all__ = [
    "REPRODUCTION_FIELDS",
    "checked_setting",
    "jsonable_config",
    "play",
    "replay",
    "reproduction",
    "transcript",
]


def jsonable_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Split an env config into its JSON part and the names of the values that are not JSON
    (shared objects, sandboxes).

    >>> jsonable_config({"size": 4, "pool": object()})
    ({'size': 4}, ['pool'])
    """
    plain: dict[str, Any] = {}
    other: list[str] = []
    for k, v in config.items():
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            other.append(k)
        else:
            plain[k] = v
    return plain, other


# the fields of a record that reproduce its episode's reset (:func:`reproduction`)
REPRODUCTION_FIELDS = ("env", "env_config", "shared", "reset_seed", "reset_options")


def reproduction(spec: EpisodeSpec, shared: Sequence[str] = ()) -> dict[str, Any]:
    """The record fields that reproduce an episode's reset (see the module docstring)."""
    config, other = jsonable_config({k: v for k, v in spec.config.items() if k not in shared})
    return {
        "env": spec.env_id,
        "env_config": config,
        "shared": sorted({*shared, *other}),
        "reset_seed": spec.seed,
        "reset_options": spec.options,
    }


def transcript(samples: Sequence[Sample]) -> list[dict[str, Any]]:
    """The steps of one episode (its samples, K = 1) in env-step order."""
    return [
        {
            "role": s.role,
            "turn": s.turn,
            "step": s.step,
            "prompt": s.prompt,
            "completion": s.completion,
            "reward": s.reward,
        }
        for s in sorted(samples, key=lambda s: s.step)
    ]


def checked_setting(record: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The registered id of a record's setting and its env config, checked as data (module
    docstring); ``ValueError`` (:class:`envs.ModuleNotLoadedError` for an id whose module is not
    loaded) names what is wrong.

    >>> checked_setting({"env": "sokoban", "env_config": {"height": 6}, "reset_seed": 1})
    ('sokoban', {'height': 6})
    """
    import envs

    env = record.get("env")
    if not isinstance(env, str):
        raise ValueError(f"the record's env must be a setting id, got {env!r:.80}")
    env_id = envs.registered_spec(env).id
    config = envs.check_env_config(env_id, record.get("env_config") or {})
    shared = record.get("shared") or []
    if not (isinstance(shared, list) and all(isinstance(x, str) for x in shared)):
        raise ValueError(f"the record's shared must be a list of names, got {shared!r:.80}")
    seed = record.get("reset_seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError(f"the record's reset_seed must be an int, got {seed!r:.80}")
    options = record.get("reset_options")
    if options is not None and not isinstance(options, dict):
        raise ValueError(f"the record's reset_options must be a mapping, got {options!r:.80}")
    return env_id, config


def replay(
    record: Mapping[str, Any],
    *,
    before_step: Callable[[Any, str, int], None] | None = None,
    after_step: Callable[[Any, str, int], None] | None = None,
) -> list[float]:
    """Step a fresh env through a record's transcript; the reward of each step, delayed awards
    added to the step they reward (as the rollout engine credits them). The hooks are
    :func:`play`'s."""
    entries = list(record["transcript"])

    def recorded(agent: str, k: int, i: int) -> str:
        if i >= len(entries):
            raise ValueError(f"the record ends at step {i} while {agent!r} still acts")
        entry = entries[i]
        if agent != entry["role"]:
            raise ValueError(
                f"step {entry['step']}: {agent!r} acts, the record says {entry['role']!r}"
            )
        return str(entry["completion"])

    rewards, _raw, _team = play(
        record, recorded, stop_after=len(entries), before_step=before_step, after_step=after_step
    )
    if len(rewards) < len(entries):
        raise ValueError(f"the episode ended before step {entries[len(rewards)]['step']}")
    return rewards


def play(
    record: Mapping[str, Any],
    answer: Callable[[str, int, int], str],
    stop_after: int | None = None,
    *,
    before_step: Callable[[Any, str, int], None] | None = None,
    after_step: Callable[[Any, str, int], None] | None = None,
) -> tuple[list[float], Any, float]:
    """Reset a fresh env as ``record`` says and step it with ``answer(agent, k, i)`` (the
    agent's ``k``-th turn, the episode's ``i``-th step) until it ends (or ``stop_after``
    steps). Returns the reward of each step (delayed awards added to the step they reward), the
    raw env at the end and the last team reward paid (the episode's final team reward, as the
    rollout engine records it). ``before_step(raw, agent, i)`` and ``after_step(raw, agent, i)``
    see the raw env around step ``i`` (after it: its infos and ``last_awards``)."""
    import envs
    from adapters.rollout import create_shared_objects

    env_id, config = checked_setting(record)
    if record.get("shared"):
        config.update(create_shared_objects(env_id, config))
    raw = envs.make(env_id, **config).unwrapped
    raw.reset(seed=record["reset_seed"], options=record["reset_options"])
    want = record.get("instance_id")
    if isinstance(want, str) and want and raw.instance_id != want:
        raise ValueError(
            f"the record's instance {want} is not what this reset makes here "
            f"({raw.instance_id}): it was recorded by a version that generated or split "
            "instances differently; a record whose reset_options name the instance "
            '({"instance": ...}) replays on any version'
        )
    flush_dead_steps(raw)
    rewards: list[float] = []
    at_step: dict[int, int] = {}
    turns: dict[str, int] = {}
    team = 0.0
    while raw.agents and (stop_after is None or len(rewards) < stop_after):
        agent = raw.agent_selection
        i = len(rewards)
        if before_step is not None:
            before_step(raw, agent, i)
        completion = answer(agent, turns.get(agent, 0), i)
        turns[agent] = turns.get(agent, 0) + 1
        at_step[int(raw.num_steps)] = i
        raw.step(completion)
        if after_step is not None:
            after_step(raw, agent, i)
        parts = raw.infos.get(agent, {}).get("reward_parts") or {}
        rewards.append(float(parts.get("reward", 0.0)))
        team = float(parts.get("team", team))
        for award in getattr(raw, "last_awards", []):
            idx = at_step.get(int(award["step"]))
            if idx is not None:
                rewards[idx] = float(award["reward_parts"]["reward"])
        flush_dead_steps(raw)
    return rewards, raw, team
