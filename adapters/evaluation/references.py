"""Scripted reference policies, evaluated on the same instances as a trained team.

A gain in shaped reward says little on its own: a constant answer can earn format and shaping
terms on every step. So an evaluation table shows, beside the team, where trivial and perfect
play land on the same validation instances:

* ``no-op`` - every role answers nothing (``constant:``);
* ``demo answer`` - every role repeats the answer of its in-context demonstration (when the run
  shows demonstrations: a team that only learned to copy it scores the same);
* ``oracle`` - the setting's scripted correct answers (the ceiling).

None of them needs a model; :func:`evaluate_references` plays them with
:func:`~adapters.evaluation.runner.evaluate` and the same seeds, so each is paired with the
team instance by instance (:func:`~adapters.evaluation.runner.compare_reports`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adapters.evaluation.runner import EvalReport, evaluate
from adapters.policies.base import Policy
from adapters.policies.oracle import OraclePolicy
from adapters.policies.specs import constant_policy

__all__ = ["evaluate_references", "reference_policies"]


def reference_policies(
    roles: Sequence[str], demos: Mapping[str, Sequence[Mapping[str, str]]] | None = None
) -> dict[str, tuple[dict[str, Policy], dict[str, str]]]:
    """``name -> (policies, role_policy)`` of the references (see the module docstring).

    ``demos`` are the per-role demonstration messages (user, assistant, ...); a role's constant
    answer is its first demonstration's answer ("" for a role without one).

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
    if any(answers.values()):
        pols: dict[str, Policy] = {}
        for text in answers.values():
            pols.setdefault(f"constant:{text}", constant_policy(text))
        out["demo answer"] = (pols, {r: f"constant:{a}" for r, a in answers.items()})
    out["oracle"] = ({"oracle": OraclePolicy()}, {r: "oracle" for r in roles})
    return out


def evaluate_references(
    env_id: str,
    roles: Sequence[str],
    demos: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    **kwargs: Any,
) -> dict[str, EvalReport]:
    """Each reference's :class:`EvalReport`; ``kwargs`` go to :func:`evaluate` (episodes,
    env_config, split, seed, ...: pass the team's, so the instances are the same)."""
    out: dict[str, EvalReport] = {}
    for name, (pols, mapping) in reference_policies(roles, demos).items():
        try:
            out[name] = evaluate(env_id, pols, role_policy=mapping, **kwargs)
        except NotImplementedError:  # a setting without an oracle
            continue
    return out
