"""Gymnasium ids for one role of each setting: ``mas_rl_envs/<Setting>-<role>-v0``.

``import envs`` registers, for every setting of this package and every role it has under its
default config, a Gymnasium id whose env is that role alone, the other roles being played by a
policy chosen at ``gymnasium.make`` time (the oracle by default):
:class:`adapters.integrations.gymnasium_env.RoleEnv`, which documents the spaces, the step
semantics and the ``make`` options. ``<Setting>`` is the setting id in CamelCase:

>>> gym_id("plan_path", "planner")
'mas_rl_envs/PlanPath-planner-v0'
>>> gym_id("discussion", "agent_0")
'mas_rl_envs/Discussion-agent_0-v0'

Registration is lazy in the Gymnasium way: only names and a string entry point are recorded, so
``import envs`` imports neither the settings nor the policies. The roles are therefore listed
here (:data:`ROLES`) rather than read from the settings' classes;
``tests/integrations/test_gymnasium_env.py`` checks the list against every registered setting,
so a setting added without its roles here fails there. A setting registered outside this package
gets ids by calling :func:`register_gymnasium_ids` with its own roles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["ENTRY_POINT", "NAMESPACE", "ROLES", "gym_id", "register_gymnasium_ids"]

NAMESPACE = "mas_rl_envs"
ENTRY_POINT = "adapters.integrations.gymnasium_env:RoleEnv"
VERSION = 0

ROLES: Mapping[str, tuple[str, ...]] = {
    "sudoku": ("tool", "planner"),
    "sokoban": ("tool", "planner"),
    "plan_path": ("tool", "planner"),
    "code": ("coder", "tester"),
    "math": ("reasoner", "tool"),
    "propose_solve_judge": ("proposer", "solver", "judge"),
    "challenge_plan_solve": ("challenger", "planner", "solver", "critic"),
    "discussion": ("agent_0", "agent_1", "agent_2", "agent_3"),
    "solver_verifier_corrector": ("solver", "verifier", "corrector"),
}
"""Each setting's roles under its default config (multi-agent mode), in turn order."""


def gym_id(setting: str, role: str) -> str:
    """The Gymnasium id of ``role`` of ``setting`` (see the module docstring)."""
    name = "".join(part.capitalize() for part in setting.split("_"))
    return f"{NAMESPACE}/{name}-{role}-v{VERSION}"


def register_gymnasium_ids(roles: Mapping[str, Iterable[str]] = ROLES) -> list[str]:
    """Register ``gym_id(setting, role)`` for every setting and role of ``roles``; the ids."""
    from gymnasium.envs.registration import register, registry

    ids = []
    for setting, names in roles.items():
        for role in names:
            env_id = gym_id(setting, role)
            if env_id not in registry:
                register(
                    id=env_id,
                    entry_point=ENTRY_POINT,
                    kwargs={"setting": setting, "role": role},
                )
            ids.append(env_id)
    return ids
