"""One registry of settings with string entry points (imported lazily on ``make``)."""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["EnvSpec", "register", "make", "make_raw", "list_envs", "spec"]


@dataclass(frozen=True)
class EnvSpec:
    id: str
    entry_point: str  # "module:callable" returning a wrapped AEC env
    aliases: tuple[str, ...] = ()
    description: str = ""

    def load(self) -> Any:
        module_name, _, attr = self.entry_point.partition(":")
        module = importlib.import_module(module_name)
        return getattr(module, attr or "env")


_REGISTRY: dict[str, EnvSpec] = {}
_ALIASES: dict[str, str] = {}


def register(
    id: str, entry_point: str, aliases: tuple[str, ...] = (), description: str = ""
) -> None:
    """Register a setting. Re-registering an id replaces it."""
    _REGISTRY[id] = EnvSpec(id, entry_point, tuple(aliases), description)
    for alias in aliases:
        _ALIASES[alias] = id


def spec(env_id: str) -> EnvSpec:
    """The spec of ``env_id`` (an id or an alias), with a did-you-mean error for typos."""
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a string, got {type(env_id).__name__}")
    key = _ALIASES.get(env_id, env_id)
    if key not in _REGISTRY:
        known = sorted([*_REGISTRY, *_ALIASES])
        close = difflib.get_close_matches(env_id, known, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown env id {env_id!r}.{hint} Known ids: {', '.join(list_envs())}")
    return _REGISTRY[key]


def make(env_id: str, **config: Any) -> Any:
    """Build a ready (wrapped) AEC env: ``make("sokoban", num_boxes=2, mode="single")``.

    Keyword arguments are the setting's config fields (see its module docstring), plus
    ``render_mode`` and ``sandbox``. ``env.unwrapped`` is the raw env.
    """
    return spec(env_id).load()(**config)


def make_raw(env_id: str, **config: Any) -> Any:
    """Like :func:`make` but returns the unwrapped env (what rollout engines clone)."""
    return make(env_id, **config).unwrapped


def list_envs(include_aliases: bool = False) -> list[str]:
    """Registered env ids in registration order (optionally followed by aliases)."""
    ids = list(_REGISTRY)
    return ids + sorted(_ALIASES) if include_aliases else ids
