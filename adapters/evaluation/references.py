"""Scripted reference policies, evaluated on the same instances as a trained team.

A gain in shaped reward says little on its own: a constant answer can earn format and shaping
terms on every step. So an evaluation table shows, beside the team, where trivial and perfect
play land on the same validation instances:

* ``no-op`` - every role answers nothing (``constant:``);
* ``constant`` - every role repeats one fixed, correct-looking answer: the oracle's completion
  at its first turn of one train-split instance (:func:`oracle_constants`; for a grid tool, a
  search program with that level's map; for a planner, that level's solution). A cold-started
  team that copies what its fine-tuning examples look like, without reading the instance,
  scores like this;
* ``demo answer`` - every role repeats the answer of its in-context demonstration (when the run
  shows demonstrations: a team that only learned to copy it scores the same);
* ``oracle`` - the setting's scripted correct answers (the ceiling);
* ``open loop`` (:func:`open_loop_reference`, after training) - the trained team's own most
  frequent answer at each of a role's turns, replayed as a script that never looks at the
  instance. A team that scores no more than it has not learned to read the instance: a
  12-step CPU run on one-box Sokoban raised success from 0.125 to 0.234 over 64 unseen levels,
  beating the no-op and the demonstration's answer, but its greedy planner answered ``[U,R,D,L]``
  at the first turn and ``[D,D]`` at the next ones on every level, and that script alone scores
  0.234 (``docs/learning.md``).

None of them needs a model; :func:`evaluate_references` plays them with
:func:`~adapters.evaluation.runner.evaluate` and the same seeds, so each is paired with the
team instance by instance (:func:`~adapters.evaluation.runner.compare_reports`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from adapters.evaluation.runner import EvalReport, evaluate
from adapters.policies.base import Policy
from adapters.policies.oracle import OraclePolicy
from adapters.policies.specs import constant_policy

__all__ = [
    "evaluate_references",
    "open_loop_reference",
    "oracle_constants",
    "reference_policies",
]


def oracle_constants(env_id: str, env_config: Mapping[str, Any], seed: int = 0) -> dict[str, str]:
    """Each role's oracle completion at its first turn of one train-split instance (the
    ``constant`` reference's answers); ``{}`` for a setting without an oracle.

    >>> c = oracle_constants("plan_path", {"height": 5, "width": 5})
    >>> sorted(c), c["planner"].split("####")[1].strip().startswith("[")
    (['planner', 'tool'], True)
    """
    import envs
    from adapters.rollout import derive_seed
    from adapters.rollout.envpool import flush_dead_steps

    raw = envs.make(env_id, **dict(env_config)).unwrapped
    out: dict[str, str] = {}
    try:
        raw.reset(seed=derive_seed(seed, "constant"), options={"split": "train"})
        flush_dead_steps(raw)
        while raw.agents and len(out) < len(raw.possible_agents):
            agent = raw.agent_selection
            answer = raw.oracle(agent)
            out.setdefault(agent, answer)
            raw.step(answer)
            flush_dead_steps(raw)
    except NotImplementedError:
        return {}
    finally:
        raw.close()
    return out


def reference_policies(
    roles: Sequence[str],
    demos: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    constants: Mapping[str, str] | None = None,
) -> dict[str, tuple[dict[str, Policy], dict[str, str]]]:
    """``name -> (policies, role_policy)`` of the references (see the module docstring).

    ``demos`` are the per-role demonstration messages (user, assistant, ...); a role's demo
    answer is its first demonstration's answer ("" for a role without one). ``constants``:
    each role's constant answer (:func:`oracle_constants`; "" for a role it does not name).

    >>> refs = reference_policies(["tool", "planner"], {"planner": [
    ...     {"role": "user", "content": "level"}, {"role": "assistant", "content": "#### [U]"}]})
    >>> list(refs), refs["demo answer"][1]
    (['no-op', 'demo answer', 'oracle'], {'tool': 'constant:', 'planner': 'constant:#### [U]'})
    """
    out: dict[str, tuple[dict[str, Policy], dict[str, str]]] = {
        "no-op": ({"constant:": constant_policy("")}, {r: "constant:" for r in roles})
    }
    answers = {
        r: next((m["content"] for m in (demos or {}).get(r, []) if m["role"] == "assistant"), "")
        for r in roles
    }
    for name, fixed in (("constant", dict(constants or {})), ("demo answer", answers)):
        if any(fixed.get(r) for r in roles):
            pols: dict[str, Policy] = {}
            for r in roles:
                text = fixed.get(r, "")
                pols.setdefault(f"constant:{text}", constant_policy(text))
            out[name] = (pols, {r: f"constant:{fixed.get(r, '')}" for r in roles})
    out["oracle"] = ({"oracle": OraclePolicy()}, {r: "oracle" for r in roles})
    return out


def evaluate_references(
    env_id: str,
    roles: Sequence[str],
    demos: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    constants: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> dict[str, EvalReport]:
    """Each reference's :class:`EvalReport`; ``kwargs`` go to :func:`evaluate` (episodes,
    env_config, split, seed, ...: pass the team's, so the instances are the same)."""
    out: dict[str, EvalReport] = {}
    for name, (pols, mapping) in reference_policies(roles, demos, constants).items():
        try:
            out[name] = evaluate(env_id, pols, role_policy=mapping, **kwargs)
        except NotImplementedError:  # a setting without an oracle
            continue
    return out


def open_loop_reference(team: EvalReport | Mapping[str, Any]) -> EvalReport:
    """The ``open loop`` reference of an evaluated team (see the module docstring): for each role
    and each of its turns (its k-th step in an episode), the completion the team wrote most often
    there over all episodes (ties: the first written), replayed on the same instances; a role's
    turn the team never reached repeats its last modal answer. Played from the records'
    reproduction fields (:func:`~adapters.evaluation.replay.play`), no model."""
    from adapters.evaluation.replay import REPRODUCTION_FIELDS, play

    rep = team.to_dict() if isinstance(team, EvalReport) else dict(team)
    counts: dict[tuple[str, int], Counter[str]] = {}
    for rec in rep["per_episode"]:
        seen: dict[str, int] = {}
        for entry in rec["transcript"]:
            k = seen.get(entry["role"], 0)
            seen[entry["role"]] = k + 1
            counts.setdefault((entry["role"], k), Counter())[entry["completion"]] += 1
    modal = {key: c.most_common(1)[0][0] for key, c in counts.items()}

    def answer(agent: str, k: int, i: int) -> str:
        while k > 0 and (agent, k) not in modal:
            k -= 1
        return modal.get((agent, k), "")

    episodes: list[dict[str, Any]] = []
    for rec in rep["per_episode"]:
        steps: list[tuple[str, str]] = []

        def played(agent: str, k: int, i: int, steps: list[tuple[str, str]] = steps) -> str:
            steps.append((agent, answer(agent, k, i)))
            return steps[-1][1]

        rewards, raw, final_team = play(rec, played)
        by_role: dict[str, list[float]] = {}
        for (role, _text), r in zip(steps, rewards):
            by_role.setdefault(role, []).append(r)
        episodes.append(
            {
                "index": rec.get("index", len(episodes)),
                "instance_id": rec["instance_id"],
                "success": bool(raw.success),
                "turns": int(raw.turn),
                "steps": len(rewards),
                "team": final_team,
                "progress": float(raw.progress()),
                "reward": sum(rewards) / max(len(rewards), 1),
                "returns": {role: sum(xs) for role, xs in by_role.items()},
                "role_reward": {role: sum(xs) / len(xs) for role, xs in by_role.items()},
                "completion_tokens": 0,
                **{k: rec[k] for k in REPRODUCTION_FIELDS if k in rec},
                "transcript": [
                    {"role": role, "step": i, "completion": text, "reward": r}
                    for i, ((role, text), r) in enumerate(zip(steps, rewards))
                ],
            }
        )
    n = max(len(episodes), 1)
    roles = list(dict.fromkeys(r for e in episodes for r in e["role_reward"]))
    return EvalReport(
        env=rep["env"],
        split=rep["split"],
        episodes=len(episodes),
        success_rate=sum(e["success"] for e in episodes) / n,
        team_reward=sum(e["team"] for e in episodes) / n,
        mean_turns=sum(e["turns"] for e in episodes) / n,
        mean_steps=sum(e["steps"] for e in episodes) / n,
        reward_per_agent={r: _mean(e["role_reward"].get(r) for e in episodes) for r in roles},
        return_per_agent={r: _mean(e["returns"].get(r) for e in episodes) for r in roles},
        policies={r: "open loop" for r in roles},
        seconds=0.0,
        per_episode=episodes,
        progress=sum(e["progress"] for e in episodes) / n,
        progress_label=str(rep.get("progress_label", "solved")),
    )


def _mean(values: Iterable[float | None]) -> float:
    xs = [float(v) for v in values if v is not None]
    return sum(xs) / len(xs) if xs else 0.0
