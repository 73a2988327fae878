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
``import envs`` imports neither the settings nor the policies. The roles come from the registry
(each setting declares them once, in ``envs.register(..., roles=...)``, which registers their ids
here), so a setting registered outside this package gets its ids the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ENTRY_POINT", "NAMESPACE", "gym_id", "register_gymnasium_ids"]

NAMESPACE = "mas_rl_envs"
ENTRY_POINT = "adapters.integrations.gymnasium_env:RoleEnv"
VERSION = 0


def gym_id(setting: str, role: str) -> str:
    """The Gymnasium id of ``role`` of ``setting`` (see the module docstring)."""
    name = "".join(part.capitalize() for part in setting.split("_"))
    return f"{NAMESPACE}/{name}-{role}-v{VERSION}"


def register_gymnasium_ids(setting: str, roles: Iterable[str]) -> list[str]:
    """Register ``gym_id(setting, role)`` for every role of ``setting``; the ids."""
    from gymnasium.envs.registration import register, registry

    ids = []
    for role in roles:
        env_id = gym_id(setting, role)
        if env_id not in registry:
            register(id=env_id, entry_point=ENTRY_POINT, kwargs={"setting": setting, "role": role})
        ids.append(env_id)
    return ids
