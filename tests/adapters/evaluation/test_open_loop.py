"""The open-loop reference (adapters.evaluation.references.open_loop_reference): the team's own
most frequent answer at each of a role's turns, replayed without looking at the instance. A team
whose answers do not depend on the instance scores exactly its open loop; one that reads the
instance scores more."""

from __future__ import annotations

import json

import pytest

from adapters.evaluation import compare_reports, evaluate
from adapters.evaluation.references import open_loop_reference
from adapters.policies.oracle import OraclePolicy
from adapters.policies.scripted import ScriptedPolicy
from adapters.policies.specs import constant_policy

EASY = {"height": 6, "width": 6, "num_boxes": 1, "min_optimal_moves": 1, "max_optimal_moves": 3}
ROLES = {"tool": "t", "planner": "p"}


def _team(planner, episodes=24):
    pols = {"t": constant_policy("```python\nprint('[D]')\n```"), "p": planner}
    return evaluate("sokoban", pols, role_policy=ROLES, episodes=episodes, env_config=EASY)


def test_a_team_that_ignores_the_instance_scores_its_open_loop():
    # a scripted "team" answering [U,R,D,L] then [D,D]: the plan the CPU run converged to
    def plan(prompt: str) -> str:
        return "#### [D,D]" if "History of earlier turns" in prompt else "#### [U,R,D,L]"

    team = _team(ScriptedPolicy(plan, name="plan"))
    ref = open_loop_reference(json.loads(json.dumps(team.to_dict())))  # as eval_after.json
    assert [e["instance_id"] for e in ref.per_episode] == [
        e["instance_id"] for e in team.per_episode
    ]
    assert ref.values("success") == team.values("success")
    assert ref.values("team") == pytest.approx(team.values("team"))
    assert ref.values("reward") == pytest.approx(team.values("reward"))
    assert 0 < team.success_rate < 1  # a real mix of solved and unsolved levels


def test_a_team_that_reads_the_instance_beats_its_open_loop():
    team = _team(OraclePolicy())
    assert team.success_rate == 1.0
    ref = open_loop_reference(team)
    assert ref.success_rate < 0.5  # the oracle's first answer differs from level to level
    table = compare_reports(team, team, references={"open loop": ref})
    assert "open loop" in table
