"""One registry of settings: every fact the layers above need about a setting, in one spec.

A setting is registered once, Gymnasium style, with everything a trainer, an evaluation suite
or a server must know without building an env::

    register(
        "sokoban",
        "envs.sokoban:env",
        roles=("tool", "planner"),
        modes=("multi", "single"),
        recipe="at-grpo",
        cpu_options={"height": 6, "width": 6, "num_boxes": 1},
        cpu_train_options={"oracle_tool": ("answer", "CPU: a one-line tool demonstration")},
    )

* ``entry_point`` - ``"module:callable"`` returning a wrapped AEC env, imported on ``make``;
* ``roles`` - the agents in turn order under the default config (multi-agent mode), declared
  here once: the setting's class takes them from its spec (:func:`roles_of`), and each role gets
  a Gymnasium id when the setting is registered (:mod:`envs.core.gymnasium_ids`);
* ``modes`` - the modes the setting supports (``"multi"``, and ``"single"`` where its paper
  compares one agent against the team; the class's ``SINGLE_AGENTS`` says which role acts then);
* ``recipe`` - the name of its paper's training recipe (:mod:`adapters.training.recipes`), the
  one it trains with by default; ``None`` for a setting whose paper has none (it trains with
  AT-GRPO's, the suite's general-purpose recipe);
* ``cpu_options`` - options that make instances small enough to evaluate on a CPU (the
  evaluation suite's ``default`` sizes); they never change the protocol (agents, turns, rewards);
* ``cpu_train_options`` - options a training run on a CPU changes, each with the reason that the
  run's ``config.yaml`` records;
* ``cpu_note`` - what a training run of the setting on a CPU can and cannot show (its header
  prints it);
* ``delayed_rewards`` - some step rewards arrive later through ``award()`` (so a trainer must not
  rank candidates on the placeholder: tree sampling refuses such settings);
* ``award_lookahead`` - awards arrive at most this many steps after the step they pay (0: none);
  the env's ``award_lookahead()`` may lower it for a configuration;
* ``team_reward`` - whether the setting has a team reward at all (its ``rewards.mixing`` can
  still turn it off for one configuration);
* ``sandbox_roles`` - the roles whose steps run a program in the sandbox (a tool's program, a
  coder's tests, a code question's answer, an oracle judge's check of one): a run whose agents
  include one needs bubblewrap (the command lines check it before loading a model,
  :mod:`adapters.preflight`); ``()``: the setting runs no program;
* ``answer_kind`` - what its benchmark answers are: ``"text"`` (a final answer, which an LLM
  judge can compare with a reference) or ``"program"`` (decided by running tests);
* ``problem_loader`` - ``"module:callable"`` with the signature of
  ``(dataset, data_path, data_split, options) -> problems`` that loads a benchmark's problems
  for the setting (the paper evaluations; ``""``: the dataset registry's records);
* ``evaluation_options`` - ``"module:attribute"`` naming the env options the paper's own
  evaluation runs the setting with (``""``: none);
* ``train_values`` - training values (``TrainConfig`` field -> ``(value, reason)``) this setting
  needs under any recipe (AT-GRPO's 8,192-token prompts for math and code); a recipe's CPU
  scale-down still applies over them on a CPU;
* ``cpu_train_values`` - training values of a CPU run of the embedded model, ahead of every
  recipe value (the grid settings' cold start, level counts and completion lengths, which
  ``docs/learning.md`` measured).

The layers above read these facts and never import a setting's module themselves.

``make`` also accepts ``"package.module:id"``: it imports ``package.module`` (which calls
:func:`register`) and then looks ``id`` up, so a setting can live outside this repository.

**Data never names code.** That import is for ids a person gives: a command-line flag
(``--env package.module:id``, ``--import package.module``) or an explicit call such as
``make("package.module:id")``. An id read from data (an evaluation record, a suite's
``results.json``, a run's ``config.yaml`` on ``--resume``, a prompt of a dataset) is resolved with
:func:`registered_spec`, which imports nothing: it finds only settings registered already, and an
id whose module is not loaded yet is refused with :class:`ModuleNotLoadedError` (which names the
module, so a command can say which flag loads it). Otherwise a file planted in a shared run
directory could name a module of its own (``runs.<dir>.payload:sokoban``) or a standard-library
module with side effects, and reading the file would run it. Likewise a record's ``env_config``
is data: :func:`check_env_config` checks it against the setting's config class (known options,
their types and values) before it reaches a constructor.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "MODES",
    "EnvSpec",
    "ModuleNotLoadedError",
    "check_env_config",
    "list_envs",
    "make",
    "make_raw",
    "register",
    "registered_spec",
    "roles_of",
    "spec",
]

MODES = ("multi", "single")


@dataclass(frozen=True)
class EnvSpec:
    """Everything registered about one setting (see the module docstring)."""

    id: str
    entry_point: str  # "module:callable" returning a wrapped AEC env
    roles: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    description: str = ""
    modes: tuple[str, ...] = ("multi",)
    recipe: str | None = None
    cpu_options: Mapping[str, Any] = field(default_factory=dict)
    cpu_train_options: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    cpu_note: str = ""
    delayed_rewards: bool = False
    award_lookahead: int = 0
    team_reward: bool = False
    sandbox_roles: tuple[str, ...] = ()
    answer_kind: str = "text"
    problem_loader: str = ""
    evaluation_options: str = ""
    train_values: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    cpu_train_values: Mapping[str, tuple[Any, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [m for m in self.modes if m not in MODES]
        if not self.modes or bad:
            raise ValueError(f"{self.id}: modes must be a non-empty subset of {MODES}, got {bad}")
        if self.award_lookahead < 0:
            raise ValueError(f"{self.id}: award_lookahead must be >= 0")
        if self.answer_kind not in ("text", "program"):
            raise ValueError(f"{self.id}: answer_kind must be 'text' or 'program'")
        unknown = [r for r in self.sandbox_roles if self.roles and r not in self.roles]
        if unknown:
            raise ValueError(f"{self.id}: sandbox_roles {unknown} are not among its roles")
        object.__setattr__(self, "sandbox_roles", tuple(self.sandbox_roles))
        object.__setattr__(self, "cpu_options", MappingProxyType(dict(self.cpu_options)))
        for name in ("cpu_train_options", "train_values", "cpu_train_values"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def load(self) -> Any:
        return _import(self.entry_point, "env")

    def sandbox_agents(self, agents: Sequence[str]) -> list[str]:
        """Those of ``agents`` (a configuration's agents) whose steps run programs in the sandbox.

        >>> spec("sokoban").sandbox_agents(["tool", "planner"]), spec("sokoban").sandbox_agents(
        ...     ["planner"])
        (['tool'], [])
        """
        return [a for a in agents if a in self.sandbox_roles]

    def load_problems(
        self, dataset: str, data_path: str | None = None, options: Mapping[str, Any] | None = None
    ) -> list[Any] | None:
        """The problems of ``dataset`` as this setting reads them (``problem_loader``); ``None``
        when the setting has no loader of its own (the dataset registry's records apply)."""
        if not self.problem_loader:
            return None
        return list(_import(self.problem_loader)(dataset, data_path, None, dict(options or {})))

    def paper_evaluation_options(self) -> dict[str, Any]:
        """The env options of the paper's own evaluation (``evaluation_options``; ``{}``)."""
        return dict(_import(self.evaluation_options)) if self.evaluation_options else {}


def _import(ref: str, default_attr: str = "") -> Any:
    """The object ``"module:attribute"`` names (the module imported on first use)."""
    module_name, _, attr = ref.partition(":")
    if not (attr or default_attr):
        raise ValueError(f"{ref!r} names no attribute: use 'module:attribute'")
    return getattr(importlib.import_module(module_name), attr or default_attr)


_REGISTRY: dict[str, EnvSpec] = {}
_ALIASES: dict[str, str] = {}


def register(
    id: str,
    entry_point: str,
    roles: tuple[str, ...] = (),
    aliases: tuple[str, ...] = (),
    **facts: Any,
) -> EnvSpec:
    """Register a setting (``facts`` are :class:`EnvSpec` fields) and the Gymnasium ids of its
    ``roles``. Re-registering an id replaces it. Returns the spec.

    >>> s = register("_doc_toy", "envs.sokoban:env", modes=("multi", "single"))
    >>> s.recipe, spec("_doc_toy").modes
    (None, ('multi', 'single'))
    >>> _ = _REGISTRY.pop("_doc_toy")
    """
    if ":" in id:
        raise ValueError(f"a setting id cannot contain ':' (it separates module and id): {id!r}")
    entry = EnvSpec(id, entry_point, tuple(roles), tuple(aliases), **facts)
    _REGISTRY[id] = entry
    for alias in aliases:
        _ALIASES[alias] = id
    if entry.roles:
        from envs.core.gymnasium_ids import register_gymnasium_ids

        register_gymnasium_ids(entry.id, entry.roles)
    return entry


def roles_of(env_id: str) -> tuple[str, ...]:
    """The roles ``env_id`` registered (its class's agents under the default config).

    >>> roles_of("sokoban")
    ('tool', 'planner')
    """
    return spec(env_id, allow_import=False).roles


class ModuleNotLoadedError(ValueError):
    """An id read from data names a module that is not loaded (:func:`registered_spec`):
    ``env_id`` as given and ``module``, its module part, which a command's flag can load."""

    def __init__(self, env_id: str, module: str) -> None:
        self.env_id = env_id
        self.module = module
        super().__init__(
            f"env id {env_id!r} names module {module!r}, which is not loaded; an id read from "
            f"data resolves only against settings already registered and never imports code: "
            f"import {module!r} first (the commands' --import {module}) if you trust it"
        )


def spec(env_id: str, *, allow_import: bool = True) -> EnvSpec:
    """The spec of ``env_id`` (an id, an alias, or ``"module:id"`` which imports ``module``
    first), with a did-you-mean error for typos. ``allow_import=False`` is
    :func:`registered_spec`."""
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a string, got {type(env_id).__name__}")
    module_name, sep, name = env_id.rpartition(":")
    if sep:
        if not allow_import:
            if sys.modules.get(module_name) is None:
                raise ModuleNotLoadedError(env_id, module_name)
        else:
            try:
                importlib.import_module(module_name)
            except ImportError as exc:
                raise ValueError(
                    f"env id {env_id!r}: cannot import {module_name!r}: {exc}"
                ) from exc
        env_id = name
    key = _ALIASES.get(env_id, env_id)
    if key not in _REGISTRY:
        known = sorted([*_REGISTRY, *_ALIASES])
        close = difflib.get_close_matches(env_id, known, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        where = f" (after importing {module_name!r})" if sep else ""
        aliases = ", ".join(f"{a} ({_ALIASES[a]})" for a in sorted(_ALIASES))
        raise ValueError(
            f"unknown env id {env_id!r}{where}.{hint} Known ids: {', '.join(list_envs())}"
            + (f"; aliases: {aliases}" if aliases else "")
        )
    return _REGISTRY[key]


def registered_spec(env_id: str) -> EnvSpec:
    """The spec of an id read from data: like :func:`spec`, but it imports nothing. A
    ``"module:id"`` resolves only when ``module`` is loaded already (a flag or the caller
    imported it); otherwise :class:`ModuleNotLoadedError` (module docstring).

    >>> registered_spec("sokoban").id, registered_spec("envs:sokoban").id  # envs: loaded
    ('sokoban', 'sokoban')
    >>> registered_spec("this:sokoban")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    envs.core.registry.ModuleNotLoadedError: env id 'this:sokoban' names module 'this', ...
    """
    return spec(env_id, allow_import=False)


_CONFIG_CLASSES: dict[tuple[str, str], type] = {}


def config_class(env_id: str) -> type:
    """The config dataclass of a registered setting (its raw env's ``config_cls``), learnt
    from one env built with the defaults and kept. ``env_id`` is resolved by
    :func:`registered_spec`."""
    entry = registered_spec(env_id)
    key = (entry.id, entry.entry_point)
    if key not in _CONFIG_CLASSES:
        env = entry.load()()
        try:
            cls = getattr(getattr(env, "unwrapped", env), "config_cls", None)
        finally:
            close = getattr(env, "close", None)
            if callable(close):
                close()
        if not isinstance(cls, type):
            raise ValueError(f"setting {entry.id!r} declares no config class (config_cls)")
        _CONFIG_CLASSES[key] = cls
    return _CONFIG_CLASSES[key]


def check_env_config(env_id: str, data: Any, what: str = "env_config") -> dict[str, Any]:
    """``data``, an env config read from a file or a request, checked against the setting's
    config class (:func:`~envs.core.config.check_config_data`: only its options, of their
    types, with valid values; never ``sandbox``, ``render_mode`` or a shared object); a copy
    to pass to :func:`make`. ``env_id`` is resolved by :func:`registered_spec`.

    >>> check_env_config("sokoban", {"height": 6, "rewards": {"lam": 0.5}})
    {'height': 6, 'rewards': {'lam': 0.5}}
    >>> check_env_config("sokoban", {"sandbox": "docker"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: env_config: unknown option(s) for SokobanConfig: 'sandbox'; ...
    """
    from envs.core.config import check_config_data

    return check_config_data(config_class(env_id), data, what)


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
