"""Evaluation records replay (issue 22, item 2): a record's env id, config, reset seed and
options and its transcript of completions reproduce the recorded rewards on a fresh env."""

from __future__ import annotations

import json

import pytest

from adapters.evaluation import evaluate
from adapters.evaluation.replay import replay
from adapters.policies.specs import build_policies

SMALL = {"height": 5, "width": 5, "min_distance": 3, "wall_density": 0.1}


@pytest.mark.parametrize(
    "specs",
    [
        ["tool=constant:print('[R,R]')", "planner=oracle"],
        ["tool=oracle", "planner=constant:#### [U,L]"],
    ],
)
def test_plan_path_records_replay_to_the_recorded_rewards(specs):
    roles = ["tool", "planner"]
    policies, mapping = build_policies(specs, roles)
    rep = evaluate("plan_path", policies, role_policy=mapping, episodes=3, env_config=SMALL, seed=4)
    records = json.loads(json.dumps(rep.to_dict()))["per_episode"]  # as eval_*.json holds them
    rewards = []
    for rec in records:
        assert rec["env"] == "plan_path" and rec["env_config"] == SMALL
        assert rec["reset_options"] == {"split": "val"} and isinstance(rec["reset_seed"], int)
        assert [t["role"] for t in rec["transcript"]][:2] == roles
        assert len(rec["transcript"]) == rec["steps"]
        recorded = [t["reward"] for t in rec["transcript"]]
        assert replay(rec) == pytest.approx(recorded, abs=1e-12)
        rewards += recorded
    assert len(set(rewards)) > 1  # the transcripts differ in what they earn: a real comparison


def test_replay_of_a_doctored_record_differs():
    """Changing a completion changes the replayed reward: the replay really steps the env
    (1 x 3 corridor, single mode, r = 0.5 team + 0.5 local: ``[R,R]`` reaches the goal, team 1
    and local 1, so 1.0; ``[L]`` leaves the grid: team 0, local = the format term 0.2, so 0.1;
    plan_path's docstring, AT-GRPO A.1)."""
    from adapters.policies.specs import parse_policy_spec

    corridor = {"grid": ["..."], "start": [0, 0], "goal": [0, 2]}
    cfg = {"mode": "single", "max_turns": 1}
    rep = evaluate(
        "plan_path",
        parse_policy_spec("constant:#### [R,R]"),
        episodes=1,
        env_config=cfg,
        instance=corridor,
    )
    rec = rep.per_episode[0]
    assert rec["reset_options"] == {"instance": corridor}
    assert replay(rec) == [1.0]
    rec["transcript"][0]["completion"] = "#### [L]"
    assert replay(rec) == [pytest.approx(0.1)]
