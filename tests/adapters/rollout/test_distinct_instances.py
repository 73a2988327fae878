"""An evaluation's n episodes are n different instances (issue 22: intervals over validation
instances must not count a level twice). The CPU-sized 5 x 5 one-box Sokoban validation split
holds about 50 levels, so seed-numbered draws repeat levels well before 40 episodes."""

from __future__ import annotations

import logging

import envs
from adapters.evaluation import evaluate
from adapters.policies.specs import constant_policy
from adapters.rollout.episodes import episode_specs

SMALL_SOKOBAN = {"height": 5, "width": 5, "num_boxes": 1}
TINY_SOKOBAN = {**SMALL_SOKOBAN, "min_optimal_moves": 1, "max_optimal_moves": 2}


def _ids(specs, cfg):
    out = []
    for s in specs:
        e = envs.make("sokoban", **cfg)
        e.reset(seed=s.seed, options=s.options)
        out.append(e.unwrapped.instance_id)
    return out


def test_seed_numbered_draws_repeat_levels_and_distinct_draws_do_not():
    kw = {"seed": 0, "tag": "eval", "env_config": SMALL_SOKOBAN, "split": "val"}
    plain = _ids(episode_specs("sokoban", 40, **kw), SMALL_SOKOBAN)
    assert len(set(plain)) < 35  # the premise: a small split repeats levels
    distinct = _ids(episode_specs("sokoban", 40, distinct=True, **kw), SMALL_SOKOBAN)
    assert len(distinct) == 40 and len(set(distinct)) == 40
    # numbering by distinct instance: episodes 10.. of the same sequence are its tail
    tail = _ids(episode_specs("sokoban", 30, distinct=True, start=10, **kw), SMALL_SOKOBAN)
    assert tail == distinct[10:]


def test_an_exhausted_split_gives_fewer_episodes_and_says_so(caplog):
    kw = {"seed": 0, "tag": "eval", "env_config": TINY_SOKOBAN, "split": "val"}
    with caplog.at_level(logging.WARNING):
        specs = episode_specs("sokoban", 40, distinct=True, **kw)
    ids = _ids(specs, TINY_SOKOBAN)
    assert 0 < len(ids) < 40 and len(set(ids)) == len(ids)
    assert f"only {len(ids)} distinct instances" in caplog.text


def test_evaluate_plays_distinct_instances():
    pol = {"p": constant_policy("#### [D]"), "t": constant_policy("```python\nprint('[D]')\n```")}
    rep = evaluate(
        "sokoban",
        pol,
        role_policy={"tool": "t", "planner": "p"},
        episodes=40,
        env_config=SMALL_SOKOBAN,
    )
    ids = [e["instance_id"] for e in rep.per_episode]
    assert rep.episodes == 40 and len(set(ids)) == 40
