"""Knobs: how a configuration section declares each of its values once.

A *section* is a frozen dataclass whose fields are knobs (:func:`knob`): the field's type, its one
default, its one ``--help`` line, and, for an *auto* knob, where its value comes from when nobody
sets it. The training configuration (:class:`adapters.training.config.TrainConfig`) is a
composition of sections; every layer reads the section it is given. This module sits in the
lowest layer of :mod:`adapters` so that each section can live beside the code that reads it (the
generation section in :mod:`adapters.policies.base`, the rollout section in
:mod:`adapters.rollout.engine`, ...).

An auto knob holds ``None`` until it is filled: a training run fills it from the user, then its
recipe and setting (:mod:`adapters.training.recipes`), then the knob's own default (its CPU value
without a GPU, when it declares one); a section built by hand fills it from the declared default
(:meth:`Section.filled`). Consumers read filled sections only, so an auto knob is typed with its
value's type, not ``X | None``.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Demo(Section):
...     size: int = knob(8, "rows per batch", auto=True, cpu=2)
>>> Demo().size is None, Demo().filled().size, Demo().filled(cuda=False).size, Demo(3).filled().size
(True, 8, 2, 3)
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import MISSING, field, fields
from typing import Any, TypeVar

__all__ = ["ConfigError", "Section", "declared_default", "knob"]

S = TypeVar("S", bound="Section")


class ConfigError(ValueError):
    """A bad configuration value or key (the message says which and why)."""


def knob(
    default: Any = MISSING,
    doc: str = "",
    *,
    auto: bool = False,
    cpu: Any = MISSING,
    why: str = "suite default",
    factory: Any = MISSING,
    compare: bool = True,
) -> Any:
    """A section field: its default, its ``--help`` line (``doc``) and, with ``auto=True``, the
    fact that a recipe or setting may fill it (the field then starts as ``None`` and ``default``
    is what fills it when nothing else does; ``cpu`` is the value used instead without a GPU;
    ``why`` is the source shown by ``--print-config``)."""
    meta: dict[str, Any] = {"help": doc}
    if auto:
        meta.update(auto=True, default=default, cpu=cpu, why=why)
        if factory is not MISSING:
            meta["default"] = factory()
        return field(default=None, compare=compare, metadata=meta)
    if factory is not MISSING:
        return field(default_factory=factory, compare=compare, metadata=meta)
    return field(default=default, compare=compare, metadata=meta)


def _declared(f: dataclasses.Field[Any]) -> Any:
    if f.metadata.get("auto"):
        return f.metadata["default"]
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def declared_default(cls: type, name: str) -> Any:
    """The default a section declares for knob ``name`` (an auto knob's fill value)."""
    for f in fields(cls):
        if f.name == name:
            value = _declared(f)
            if value is MISSING:
                raise KeyError(f"{cls.__name__}.{name} has no default")
            return value
    raise KeyError(f"{cls.__name__} has no knob {name!r}")


class Section:
    """Base of a configuration section (a frozen dataclass of :func:`knob` fields)."""

    @classmethod
    def knobs(cls) -> tuple[dataclasses.Field[Any], ...]:
        return fields(cls)  # type: ignore[arg-type]

    @classmethod
    def auto_knobs(cls) -> tuple[str, ...]:
        """The names of the knobs a recipe, a setting or the device may fill."""
        return tuple(f.name for f in cls.knobs() if f.metadata.get("auto"))

    def unset(self) -> list[str]:
        """Auto knobs still ``None``."""
        return [n for n in self.auto_knobs() if getattr(self, n) is None]

    def filled(self: S, *, cuda: bool = True) -> S:
        """A copy with every unset auto knob at its declared default (``cuda=False``: its CPU
        value where it declares one)."""
        missing = self.unset()
        if not missing:
            return self
        return dataclasses.replace(  # type: ignore[type-var]
            self, **{n: self.default_for(n, cuda=cuda)[0] for n in missing}
        )

    @classmethod
    def default_for(cls, name: str, *, cuda: bool) -> tuple[Any, str]:
        """``(value, source)`` an auto knob takes when neither the user nor a recipe sets it."""
        f = next(f for f in cls.knobs() if f.name == name)
        cpu = f.metadata["cpu"]
        value = f.metadata["default"]
        if not cuda and cpu is not MISSING and cpu != value:
            return copy.deepcopy(cpu), f"{f.metadata['why']} (CPU scale-down; CUDA: {value!r})"
        return copy.deepcopy(value), f.metadata["why"]
