"""``TrainConfig``: a training run as a composition of sections (CLI flags and/or a YAML file).

Each section is a frozen dataclass declared beside the code that reads it, and each knob is
declared once in its section with its default and its ``--help`` line
(:func:`~adapters.policies.knobs.knob`):

==============  ===============================================  ===========================
attribute       section                                          declared in
==============  ===============================================  ===========================
``policy``      :class:`~.sections.PolicyConfig`                 :mod:`.sections`
``generation``  :class:`~adapters.policies.base.GenerationConfig` :mod:`adapters.policies.base`
``rollout``     :class:`~adapters.rollout.engine.RolloutConfig`   :mod:`adapters.rollout.engine`
``update``      :class:`~.sections.UpdateConfig`                 :mod:`.sections`
``schedule``    :class:`~.sections.ScheduleConfig`               :mod:`.sections`
``eval``        :class:`~.sections.EvalConfig`                   :mod:`.sections`
``output``      :class:`~.sections.OutputConfig`                 :mod:`.sections`
``compute``     :class:`~.sections.ComputeConfig`                :mod:`.sections`
==============  ===============================================  ===========================

The setting itself (``env``, ``recipe``, ``env_config``, ``instance``, the prompt:
``system_prompt``, ``prompt_prefix``, ``demos``) and the run ``seed`` are fields of ``TrainConfig``.
Knob names are unique across sections, so every knob is a flag of ``python -m adapters.train``
(``lora_rank`` -> ``--lora-rank``), a keyword of the constructor (``TrainConfig(env="sokoban",
lr=1e-3)`` puts ``lr`` in ``update``) and a key of a flat YAML file (the format before sections;
it still loads, with a note). A YAML file written by a run is by section
(``update: {lr: ...}``). Flags override the file key by key; unknown keys are an error that names
the closest valid key.

Auto knobs (``None`` until resolved) are filled once by :meth:`TrainConfig.resolved`, which lays
an ordered list of layers (:func:`layers`), each knob -> ``(value, source)``, over the config, the
lowest first: the knob's own declared default (its CPU value without a GPU), the recipe
(:mod:`adapters.training.recipes`), the setting's values, without a GPU the recipe's CPU
scale-down and the setting's CPU values, and the user's. The knobs that follow others
(:data:`DERIVED`: ``lora_alpha`` = 2 x rank, ``sampling`` the algorithm's) are computed after
them. It records where each value came from (``sources``, keyed by knob name, shown by
``--print-config`` and written as comments into ``config.yaml``) and returns a config whose
sections every consumer reads as they are.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import functools
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from adapters.policies.base import GenerationConfig
from adapters.policies.graphs import check_mode
from adapters.policies.knobs import ConfigError, Section, knob
from adapters.rollout.engine import RolloutConfig
from adapters.training import recipes
from adapters.training.advantages import ESTIMATORS
from adapters.training.sections import (
    BACKENDS,
    ComputeConfig,
    EvalConfig,
    OutputConfig,
    PolicyConfig,
    ScheduleConfig,
    UpdateConfig,
    at_least,
    one_step_update,
    reads_logprobs,
)

__all__ = [
    "BACKENDS",
    "SECTIONS",
    "ConfigError",
    "Layer",
    "TrainConfig",
    "UpdateConfig",
    "config_from_dict",
    "knob_types",
    "layers",
    "load_yaml",
]

SECTIONS: dict[str, type[Section]] = {
    "policy": PolicyConfig,
    "generation": GenerationConfig,
    "rollout": RolloutConfig,
    "update": UpdateConfig,
    "schedule": ScheduleConfig,
    "eval": EvalConfig,
    "output": OutputConfig,
    "compute": ComputeConfig,
}

# mapping knobs that the user's value extends rather than replaces: the user's keys go over the
# resolved mapping's (role_sampling role by role); each with its source when no layer sets one
MERGED_KNOBS: dict[str, str] = {
    "chat_template_kwargs": "suite default",
    "role_sampling": "suite default: the same sampling for every role",
}


@dataclass(frozen=True, init=False)
class TrainConfig(Section):
    """A training run: the setting, the prompt, the seed, and one section per consumer.

    Build it from knob names (``TrainConfig(env="sokoban", lr=1e-3, candidates=2)``: each goes to
    its section), from sections (``TrainConfig(update=UpdateConfig(lr=1e-3))``), or both.
    :meth:`resolved` fills the auto knobs."""

    env: str = knob(
        "sokoban",
        "setting id (see envs.list_envs()), or package.module:id for one registered elsewhere",
    )
    recipe: str | None = knob(
        None, "training recipe (default: the setting's paper recipe); see the list below"
    )
    env_config: dict[str, Any] = knob(
        doc="setting option KEY=VALUE (repeatable), e.g. --env-config mode=single", factory=dict
    )
    instance: dict[str, Any] | None = knob(
        None, "explicit instance as JSON for every train/eval episode"
    )
    system_prompt: str | None = knob(None, "system message prepended to every prompt")
    prompt_prefix: list[dict[str, str]] = knob(
        doc="few-shot messages as JSON: [{role, content}, ...]", factory=list
    )
    demos: int = knob(
        0,
        "worked examples per role from the setting's oracle, shown before each prompt",
        auto=True,
        why=(
            "suite default: no demonstrations (a demonstration's answer is one a constant policy "
            "can copy for credit; a cold start, --init, gives a small model its start instead)"
        ),
    )
    seed: int = knob(
        0, "run seed (instances, sampling, LoRA initialisation and minibatch order derive from it)"
    )
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    # where each resolved value came from (filled by resolved(); not a flag)
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def __init__(self, **values: Any) -> None:
        own = {f.name for f in fields(TrainConfig)}
        by_section: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
        where = _knob_sections()
        unknown = [k for k in values if k not in own and k not in where]
        if unknown:
            raise _unknown_key_error(unknown, "TrainConfig")
        for key in [k for k in values if k not in own]:
            by_section[where[key]][key] = _coerced(key, values.pop(key))
        for f in fields(TrainConfig):
            if f.name in SECTIONS:
                cls = SECTIONS[f.name]
                given = values.get(f.name)
                if isinstance(given, dict):
                    given = _section_from_dict(f.name, given)
                section = given if given is not None else cls()
                if not isinstance(section, cls):
                    raise ConfigError(f"{f.name} must be a {cls.__name__}, got {given!r}")
                if by_section[f.name]:
                    section = replace(section, **by_section[f.name])  # type: ignore[type-var]
                object.__setattr__(self, f.name, section)
            elif f.name in values:
                value = values[f.name] if f.name == "sources" else _coerced(f.name, values[f.name])
                object.__setattr__(self, f.name, value)
            elif f.default_factory is not dataclasses.MISSING:
                object.__setattr__(self, f.name, f.default_factory())
            else:
                object.__setattr__(self, f.name, f.default)
        self.__post_init__()

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("env_config", dict(self.env_config or {}))
        put("prompt_prefix", [dict(m) for m in (self.prompt_prefix or [])])
        put("sources", dict(self.sources or {}))
        at_least(self, 0, ("demos",))
        if self.recipe is not None and self.recipe not in recipes.RECIPES:
            close = difflib.get_close_matches(self.recipe, list(recipes.RECIPES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"unknown recipe {self.recipe!r}{hint}; recipes: {', '.join(recipes.RECIPES)}"
            )
        for i, m in enumerate(self.prompt_prefix):
            if set(m) != {"role", "content"} or m["role"] not in ("system", "user", "assistant"):
                raise ConfigError(
                    f"prompt_prefix[{i}] must be {{'role': system|user|assistant, 'content': str}}"
                )

    # ------------------------------------------------------------------ knobs by name
    @classmethod
    def knob_names(cls) -> list[str]:
        """Every knob, flag and flat key: the top-level fields, then each section's."""
        top = [f.name for f in fields(cls) if f.name not in SECTIONS and f.name != "sources"]
        return top + [f.name for s in SECTIONS.values() for f in s.knobs()]

    def get(self, name: str) -> Any:
        """The value of knob ``name``, wherever its section is."""
        section = _knob_sections().get(name)
        return getattr(getattr(self, section) if section else self, name)

    def flat(self) -> dict[str, Any]:
        """Knob name -> value (the form of flags and of flat YAML files)."""
        return {name: copy.deepcopy(self.get(name)) for name in self.knob_names()}

    # ------------------------------------------------------------------ auto values
    def recipe_obj(self) -> recipes.Recipe:
        """The recipe this run follows: ``recipe``, or the setting's paper recipe."""
        if self.recipe is not None:
            return recipes.RECIPES[self.recipe]
        try:
            return recipes.recipe_for(self.env)
        except ValueError as exc:  # an unknown env id
            raise ConfigError(str(exc)) from None

    @property
    def is_resolved(self) -> bool:
        """True for the result of :meth:`resolved` (every auto knob set, sources recorded)."""
        return bool(self.sources) and not self.unresolved()

    def unresolved(self) -> list[str]:
        """Auto knobs still unset, in any section."""
        return self.unset() + [n for s in SECTIONS for n in getattr(self, s).unset()]

    def resolved(self, cuda: bool | None = None) -> TrainConfig:
        """A copy with every auto knob filled in from the layers (:func:`layers`) and the
        derived knobs computed (:data:`DERIVED`).

        ``sources`` of the copy says where each value came from: ``"user"``, the recipe's
        paper section, its CPU scale-down, the setting, or a suite default."""
        if self.sources:  # already resolved (e.g. loaded from a run directory)
            if self.unresolved():
                if self.schedule.pipeline is None:  # a run directory older than the knob
                    return replace(self, schedule=replace(self.schedule, pipeline="none"))
                raise ConfigError(f"a resolved config lacks {self.unresolved()}")
            return self
        if cuda is None:
            cuda = self.compute.cuda
        return _resolve(self, cuda)

    def cpu_scale_down(self) -> dict[str, Any]:
        """The resolved values a CPU run took from a CPU scale-down (a recipe's ``cpu`` values,
        the setting's CPU instance options, a knob's CPU value), by knob (``env_config.KEY`` for
        an env option). Their sources are the ones that name the CPU; on CUDA there are none."""
        out: dict[str, Any] = {}
        for name, why in self.sources.items():
            if "CPU" in why:
                key = name.removeprefix("env_config.")
                out[name] = self.env_config.get(key) if key != name else self.get(name)
        return out

    def described(self) -> str:
        """The config as YAML by section, with the source of every resolved value as a line
        comment."""
        import yaml

        def dump(key: str, value: Any, indent: str) -> list[str]:
            text = yaml.safe_dump({key: value}, sort_keys=False, width=1000).rstrip("\n")
            why = self.sources.get(key)
            if key == "env_config":
                subs = [
                    f"{k}: {self.sources[f'env_config.{k}']}"
                    for k in value
                    if f"env_config.{k}" in self.sources
                ]
                why = "; ".join(subs) or None
            lines = [indent + line for line in text.split("\n")]
            if why:
                lines[0] += f"  # {why}"
            return lines

        out: list[str] = []
        for key, value in self.to_dict().items():
            if key == "sources":
                continue
            if key in SECTIONS:
                out.append(f"{key}:")
                out.extend(line for k, v in value.items() for line in dump(k, v, "  "))
            else:
                out.extend(dump(key, value, ""))
        return "\n".join(out) + "\n"

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        """Write the config as YAML by section (with each value's source as a comment once
        resolved)."""
        import yaml

        text = self.described() if self.sources else yaml.safe_dump(self.to_dict(), sort_keys=False)
        Path(path).write_text(text)

    @classmethod
    def load(cls, path: str | Path) -> TrainConfig:
        return config_from_dict(load_yaml(path), where=str(path))

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with knobs changed by name (``cfg.replace(lr=1e-3, steps=2)``)."""
        return config_from_dict({**self.flat(), "sources": dict(self.sources), **changes})


# ---------------------------------------------------------------------------------------------
# resolution: an ordered list of layers, then the derived knobs


@dataclass(frozen=True)
class Layer:
    """One level of a run's configuration: knob -> ``(value, source)``. A later layer overrides an
    earlier one knob by knob; a layer that ``merges`` (the user's) puts a merged knob's mapping over
    the one below key by key (:data:`MERGED_KNOBS`). A setting's option is the knob
    ``env_config.KEY``."""

    name: str
    values: Mapping[str, recipes.Sourced]
    merges: bool = False


def layers(raw: TrainConfig, cuda: bool) -> list[Layer]:
    """The layers that resolve ``raw``, lowest first: each auto knob's declared default, the
    recipe, the setting's values under any recipe, without CUDA the recipe's CPU scale-down and
    the setting's CPU values, and the user's."""
    import envs

    recipe, setting = raw.recipe_obj(), envs.spec(raw.env)
    of_recipe, of_setting = f"recipe {recipe.name}", f"setting {setting.id}"
    cpu_setting: dict[str, recipes.Sourced] = {}
    if not cuda:  # the setting's CPU sizes, and its values for the embedded model (a cold start)
        cpu_setting = {f"env_config.{k}": v for k, v in setting.cpu_train_options.items()}
        if str(raw.policy.model).lower() in recipes.EMBEDDED_MODELS:
            cpu_setting |= _attributed(of_setting, setting.cpu_train_values)
    return [
        Layer("knob default", _declared_defaults(cuda)),
        Layer("recipe", _attributed(of_recipe, recipe.values)),
        Layer("setting", _attributed(of_setting, setting.train_values)),
        Layer("recipe CPU scale-down", {} if cuda else _attributed(of_recipe, recipe.cpu)),
        Layer("setting CPU values", cpu_setting),
        Layer("user", _user_values(raw), merges=True),
    ]


@functools.cache
def _auto_knobs() -> tuple[str, ...]:
    """Every auto knob: the top-level ones, then each section's."""
    return tuple(name for name, f in knob_fields().items() if f.metadata.get("auto"))


def _attributed(owner: str, values: Mapping[str, recipes.Sourced]) -> dict[str, recipes.Sourced]:
    """A recipe's or a setting's values with ``owner`` ahead of each source. They set auto and
    merged knobs only: any other knob keeps the value the user gave or its default."""
    stray = [name for name in values if name not in (*_auto_knobs(), *MERGED_KNOBS)]
    if stray:
        raise ConfigError(
            f"{owner} sets {stray}: a recipe or setting sets auto and merged knobs only"
        )
    return {name: (value, f"{owner}: {why}") for name, (value, why) in values.items()}


def _declared_defaults(cuda: bool) -> dict[str, recipes.Sourced]:
    """The knob-default layer: each auto knob's declared default (its CPU value without CUDA)
    but a derived knob's, and a merged knob's empty mapping."""
    out = {n: _owner(n).default_for(n, cuda=cuda) for n in _auto_knobs() if n not in DERIVED}
    return out | {name: ({}, why) for name, why in MERGED_KNOBS.items()}


def _user_values(raw: TrainConfig) -> dict[str, recipes.Sourced]:
    """The user's layer: every auto knob set, a merged knob or ``role_policies`` not empty, every
    setting option. Two choices reach further: the user's algorithm brings its own sampling, and
    a segment knob given as 0 turns both off."""
    given = raw.flat()
    out = {name: (given[name], "user") for name in _auto_knobs() if given[name] is not None}
    out |= {name: (given[name], "user") for name in (*MERGED_KNOBS, "role_policies") if given[name]}
    out |= {f"env_config.{k}": (v, "user") for k, v in raw.env_config.items()}
    if "algorithm" in out and "sampling" not in out:
        algorithm = given["algorithm"]
        out["sampling"] = (ESTIMATORS[algorithm].sampling, f"follows algorithm {algorithm}")
    if 0 in (given["segment_tokens"], given["max_segments"]):
        out["segment_tokens"] = out["max_segments"] = (0, "user (0: off)")
    return out


def _stack(ordered: list[Layer], values: dict[str, Any]) -> dict[str, str]:
    """Lay the layers over ``values`` in order; the source of each value they set."""
    sources: dict[str, str] = {}
    for layer in ordered:
        for name, (value, why) in layer.values.items():
            if layer.merges and name in MERGED_KNOBS:
                value = _merged(name, values[name], value)
            values[name], sources[name] = copy.deepcopy(value), why
    return sources


def _merged(name: str, below: dict[str, Any], above: dict[str, Any]) -> dict[str, Any]:
    if name == "role_sampling":  # role by role
        return {r: {**below.get(r, {}), **above.get(r, {})} for r in {**below, **above}}
    return {**below, **above}


def _segments_need_the_agent_pipeline(values: dict[str, Any], sources: dict[str, str]) -> None:
    """Segment rollouts run inside the agent pipeline: without it both segment knobs are off,
    whichever layer set them, unless the user did (then the schedule section refuses them)."""
    if values["pipeline"] == "none" and sources.get("segment_tokens") != "user":
        values["segment_tokens"] = values["max_segments"] = 0
        sources["segment_tokens"] = sources["max_segments"] = "off without --pipeline agent"


def _dtype(v: dict[str, Any], cuda: bool) -> recipes.Sourced:
    lora = v["lora_rank"] > 0
    return "bfloat16" if cuda and lora else "float32", "bfloat16 for LoRA on CUDA, else float32"


def _update_precision(v: dict[str, Any], cuda: bool) -> recipes.Sourced:
    from adapters.policies.models import native_bf16

    if not cuda and v["dtype"] == "float32" and native_bf16("cpu"):
        return "bfloat16", (
            "bfloat16 autocast on a CPU with native bfloat16 "
            "(docs/scaling.md#generation-and-update-speed-on-a-cpu)"
        )
    return "float32", "the model's dtype"


def _old_logprobs(v: dict[str, Any], cuda: bool) -> recipes.Sourced:
    copy_samples = v["backend"] == "transformers" and v["generation_model"] == "merged"
    exact = v["dtype"] == "float32" and v["update_precision"] == "float32" and not copy_samples
    single = one_step_update(v["ppo_epochs"], v["ppo_minibatches"], v["minibatch_size"])
    forward = single and not reads_logprobs(v["algorithm"], v["kl_reward_coef"])
    return "rollout" if exact else "forward" if forward else "recompute", (
        "the sampler's in float32; in lower precision or when a merged generation copy samples, "
        "the training model's: from the update's own forward when it is one optimizer step, "
        "else a pass before it"
    )


# knobs that follow others when no layer sets them (None, or "auto"), computed in this order
# after the layers: knob -> its rule (the resolved values, cuda) -> (value, source)
DERIVED: dict[str, Callable[[dict[str, Any], bool], recipes.Sourced]] = {
    "sampling": lambda v, cuda: (
        ESTIMATORS[v["algorithm"]].sampling,
        f"follows algorithm {v['algorithm']}",
    ),
    "lora_alpha": lambda v, cuda: (float(2 * v["lora_rank"]), "2 x lora_rank"),
    "dtype": _dtype,
    "update_precision": _update_precision,
    "old_logprobs": _old_logprobs,
}


def _derive(values: dict[str, Any], sources: dict[str, str], cuda: bool) -> None:
    """Fill the derived knobs (:data:`DERIVED`) and gather the setting's options into
    ``env_config`` (the user's first, in their order)."""
    _segments_need_the_agent_pipeline(values, sources)
    for name, rule in DERIVED.items():
        if values[name] is None or values[name] == "auto":
            values[name], sources[name] = rule(values, cuda)
    options = [k for k in values if k.startswith("env_config.")]
    values["env_config"] |= {k.removeprefix("env_config."): values.pop(k) for k in options}


def _check(values: dict[str, Any], cuda: bool) -> None:
    """What no section can check alone: the estimator's KL reward, the decode mode's device."""
    reason = ESTIMATORS[values["algorithm"]].kl_reward_error
    if reason and values["kl_reward_coef"] > 0:
        raise ConfigError(reason)
    try:
        check_mode(values["compile_decode"], cuda)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _resolve(raw: TrainConfig, cuda: bool) -> TrainConfig:
    """:meth:`TrainConfig.resolved` for an unresolved config: the layers, then the derived knobs."""
    values = {**raw.flat(), "recipe": raw.recipe_obj().name}
    sources = _stack(layers(raw, cuda), values)
    _derive(values, sources, cuda)
    _check(values, cuda)
    out = TrainConfig(**values, sources=sources)
    if out.unresolved():  # pragma: no cover - every auto knob declares a default
        raise ConfigError(f"no recipe or suite default sets {out.unresolved()} for {raw.env!r}")
    return out


# ---------------------------------------------------------------------------------------------
# knob types and flat / by-section mappings


@functools.cache
def _knob_sections() -> dict[str, str]:
    """Knob name -> the attribute of its section (top-level knobs are absent)."""
    return {f.name: name for name, cls in SECTIONS.items() for f in cls.knobs()}


def _owner(name: str) -> type[Section]:
    """The section that declares knob ``name`` (``TrainConfig`` for a top-level knob)."""
    section = _knob_sections().get(name)
    return SECTIONS[section] if section else TrainConfig


def _knob_field(name: str) -> dataclasses.Field[Any]:
    return next(f for f in fields(_owner(name)) if f.name == name)  # type: ignore[arg-type]


def knob_fields() -> dict[str, dataclasses.Field[Any]]:
    """Knob name -> its dataclass field (its ``metadata["help"]`` is the ``--help`` line)."""
    return {name: _knob_field(name) for name in TrainConfig.knob_names()}


@functools.cache
def knob_types() -> dict[str, Any]:
    """Knob name -> its type; an auto knob's type admits ``None`` (auto)."""
    out: dict[str, Any] = {}
    owners: list[type] = [TrainConfig, *SECTIONS.values()]
    for cls in owners:
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            if cls is TrainConfig and (f.name in SECTIONS or f.name == "sources"):
                continue
            tp = hints[f.name]
            out[f.name] = tp | None if f.metadata.get("auto") else tp
    return out


def strip_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> ``(X, True)``; any other type -> ``(type, False)``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def type_ok(value: Any, tp: Any) -> bool:
    """Whether ``value`` fits the knob type ``tp`` (Literals, numbers, str, dict, list)."""
    base, optional = strip_optional(tp)
    if value is None:
        return optional
    origin = typing.get_origin(base)
    if origin is Literal:
        return value in typing.get_args(base)
    if base is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if base is bool:
        return isinstance(value, bool)
    if base is str:
        return isinstance(value, str)
    if origin is dict or base is dict:
        return isinstance(value, dict)
    if origin is list or base is list:
        return isinstance(value, list)
    return True


def _coerced(name: str, value: Any) -> Any:
    """``value`` checked against knob ``name``'s type (a float read from YAML as a string, an int
    for a float knob, a list of URLs as one string, converted)."""
    tp = knob_types()[name]
    base, _ = strip_optional(tp)
    if base is float and isinstance(value, str):  # YAML reads 1e-4 as a string
        with contextlib.suppress(ValueError):
            value = float(value)
    if name == "vllm_servers" and isinstance(value, str):  # "URL,URL" from a flag or YAML scalar
        value = [u.strip() for u in value.split(",") if u.strip()]
    if not type_ok(value, tp):
        if typing.get_origin(base) is Literal:
            raise ConfigError(f"{name} must be one of {typing.get_args(base)}, got {value!r}")
        raise ConfigError(f"{name} has the wrong type: {value!r} (expected {tp})")
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, dict):
        value = copy.deepcopy(value)
    if isinstance(value, list):
        value = list(value)
    return value


def _section_from_dict(section: str, data: dict[str, Any]) -> Section:
    cls = SECTIONS[section]
    names = {f.name for f in cls.knobs()}
    unknown = [k for k in data if k not in names]
    if unknown:
        raise _unknown_key_error(unknown, f"section {section!r}", sorted(names))
    return cls(**{k: _coerced(k, v) for k, v in data.items()})


def _unknown_key_error(keys: list[str], where: str, names: list[str] | None = None) -> ConfigError:
    names = names or sorted([*TrainConfig.knob_names(), *SECTIONS])
    parts = []
    for k in keys:
        close = difflib.get_close_matches(str(k).replace("-", "_"), names, n=1)
        parts.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ConfigError(
        f"unknown key(s) in {where}: {', '.join(parts)}. Valid keys: {', '.join(names)}"
    )


def flatten(data: dict[str, Any]) -> dict[str, Any]:
    """A mapping by section (``{update: {lr: ...}}``) as knob name -> value; flat keys pass
    through, so a mix of both reads too."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS and isinstance(value, dict):
            known = {f.name for f in SECTIONS[key].knobs()}
            unknown = [k for k in value if k not in known]
            if unknown:
                raise _unknown_key_error(unknown, f"section {key!r}", sorted(known))
            out.update(value)
        else:
            out[key] = value
    return out


def config_from_dict(data: dict[str, Any], where: str = "the configuration") -> TrainConfig:
    """Build a :class:`TrainConfig` from a mapping by section or by knob name (flat, the format
    of older ``config.yaml`` files and of flags), with a clear error for unknown keys."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping of knob names to values")
    values = flatten(data)
    names = {*TrainConfig.knob_names(), "sources"}
    unknown = [k for k in values if k not in names]
    if unknown:
        raise _unknown_key_error(unknown, where)
    return TrainConfig(**values)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML (or JSON) config mapping from ``path`` (a flat one, the format before
    sections, with a note)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    data = yaml.safe_load(p.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p} must contain a mapping of knob names to values")
    own = {f.name for f in fields(TrainConfig)}
    flat = [k for k in data if k not in own]
    if flat and not any(k in SECTIONS for k in data):
        warnings.warn(
            f"{p} lists knobs without their sections (the format before sections, e.g. "
            f"{flat[0]!r}); it still loads. Write it by section (`update: {{lr: ...}}`), as "
            "`python -m adapters.train --config OLD --print-config` prints it.",
            FutureWarning,
            stacklevel=2,
        )
    return data
