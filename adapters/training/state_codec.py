"""Checkpoint state in data formats: the structure as JSON, tensors as safetensors, no pickle.

A run directory gets shared (downloaded checkpoints, shared storage), and ``--resume`` reads
it: a pickle there runs whatever ``__reduce__`` its author planted. So nothing a checkpoint
holds besides the weights (which ``torch.load(weights_only=True)`` reads) is pickled. The
setting's shared objects (question pools), the RNG states and the rollout schedule's state
(rollouts produced ahead, the agent pipeline's branches and partial completions) are written by
:func:`save` as two files, ``<stem>.json`` and ``<stem>.safetensors``, and read back by
:func:`load`, which builds nothing but data:

======================================  ==================================================
value                                   JSON
======================================  ==================================================
None, bool, int, float, str             themselves
list / tuple / dict                     ``["l", [...]]`` / ``["t", [...]]`` /
                                        ``["d", [[key, value], ...]]`` (any keys)
bytes                                   ``["b", hex]``
numpy array                             ``["n", dtype, shape, [values]]``
torch tensor                            ``["T", name]``: the tensor ``name`` of the
                                        ``.safetensors`` file
a dataclass of :func:`state_types`      ``["D", "module.Class", {field: value}]``
a shared object                         ``["S", name]``: the run's shared object ``name``
                                        (a question pool a schedule's episode config uses),
                                        resolved at load against the restored objects
======================================  ==================================================

Anything else cannot be saved (``TypeError``); a file that is not such a tree, a class that is
not one of :func:`state_types` (the checkpoint's record types: samples, episodes, branches,
sampling parameters, partial completions, ...), an unknown shared object or a tensor missing
from the safetensors file is refused with :class:`CheckpointError`, before anything is built
from it. Dataclasses are rebuilt through their constructor (their ``__post_init__`` checks run).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["CheckpointError", "decode", "encode", "load", "save", "state_type", "state_types"]


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be read as the data it should hold (nothing was built
    from it)."""


_REGISTERED: dict[str, type] = {}


def state_type(cls: type) -> type:
    """Class decorator: ``cls`` (a dataclass of the training layer, e.g. the schedule's
    ``Produced``) may be held by a checkpoint's state."""
    _REGISTERED[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return cls


@cache
def _record_types() -> dict[str, type]:
    from adapters.policies.base import Completion, PartialCompletion, SamplingParams
    from adapters.rollout.engine import _Branch
    from adapters.rollout.envpool import BranchView, EpisodeSpec
    from adapters.rollout.pipeline import _Decoding
    from adapters.rollout.records import Episode, RolloutResult, Sample

    types = (
        Completion, PartialCompletion, SamplingParams, _Branch, BranchView, EpisodeSpec,
        _Decoding, Episode, RolloutResult, Sample,
    )  # fmt: skip
    return {f"{t.__module__}.{t.__qualname__}": t for t in types}


def state_types() -> dict[str, type]:
    """The dataclasses a checkpoint's state may hold, by ``module.Class`` name: the rollout's
    and the policies' records, and those marked with :func:`state_type`."""
    return {**_record_types(), **_REGISTERED}


def encode(value: Any, tensors: dict[str, Any], shared: Mapping[str, Any] | None = None) -> Any:
    """The JSON tree of ``value`` (see the module docstring); tensors go into ``tensors``.

    >>> encode({"a": (1, b"\\x00")}, {})
    ['d', [['a', ['t', [1, ['b', '00']]]]]]
    """
    refs = {id(v): k for k, v in (shared or {}).items()}
    return _enc(value, tensors, refs)


def _enc(v: Any, tensors: dict[str, Any], refs: dict[int, str]) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if id(v) in refs:
        return ["S", refs[id(v)]]
    if isinstance(v, list | tuple):
        return ["l" if isinstance(v, list) else "t", [_enc(x, tensors, refs) for x in v]]
    if isinstance(v, dict):
        return ["d", [[_enc(k, tensors, refs), _enc(x, tensors, refs)] for k, x in v.items()]]
    if isinstance(v, bytes):
        return ["b", v.hex()]
    kind = f"{type(v).__module__}.{type(v).__qualname__}"
    if kind == "numpy.ndarray":
        return ["n", v.dtype.str, list(v.shape), v.ravel().tolist()]
    if kind == "torch.Tensor":
        name = str(len(tensors))
        tensors[name] = v.detach().cpu().contiguous().clone()
        return ["T", name]
    if dataclasses.is_dataclass(v) and state_types().get(kind) is type(v):
        fields = {f.name: _enc(getattr(v, f.name), tensors, refs) for f in dataclasses.fields(v)}
        return ["D", kind, fields]
    raise TypeError(f"a checkpoint cannot hold a {kind} (not a data type of state_types())")


def decode(tree: Any, tensors: Mapping[str, Any], shared: Mapping[str, Any] | None = None) -> Any:
    """The value of an :func:`encode` tree; :class:`CheckpointError` when it is not one.

    >>> decode(["d", [["a", ["t", [1, ["b", "00"]]]]]], {})
    {'a': (1, b'\\x00')}
    >>> decode(["D", "os.system", {}], {})
    Traceback (most recent call last):
    ...
    adapters.training.state_codec.CheckpointError: refusing os.system: not a checkpoint data type
    """
    try:
        return _dec(tree, tensors, shared or {})
    except CheckpointError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, RecursionError) as exc:
        raise CheckpointError(f"malformed checkpoint state ({type(exc).__name__}: {exc})") from None


def _dec(x: Any, tensors: Mapping[str, Any], shared: Mapping[str, Any]) -> Any:
    if x is None or isinstance(x, bool | int | float | str):
        return x
    if not isinstance(x, list) or not x or not isinstance(x[0], str):
        raise CheckpointError("malformed checkpoint state")
    tag, rest = x[0], x[1:]
    if tag in ("l", "t") and len(rest) == 1 and isinstance(rest[0], list):
        items = [_dec(y, tensors, shared) for y in rest[0]]
        return items if tag == "l" else tuple(items)
    if tag == "d" and len(rest) == 1 and isinstance(rest[0], list):
        return {_dec(k, tensors, shared): _dec(v, tensors, shared) for k, v in rest[0]}
    if tag == "b" and len(rest) == 1 and isinstance(rest[0], str):
        return bytes.fromhex(rest[0])
    if tag == "n" and len(rest) == 3:
        import numpy as np

        dtype = np.dtype(rest[0])
        if dtype.hasobject:
            raise CheckpointError("refusing a numpy array of objects")
        return np.array(rest[2], dtype=dtype).reshape(rest[1])
    if tag == "T" and len(rest) == 1 and rest[0] in tensors:
        return tensors[rest[0]]
    if tag == "S" and len(rest) == 1:
        if rest[0] not in shared:
            raise CheckpointError(f"the checkpoint refers to an unknown shared object {rest[0]!r}")
        return shared[rest[0]]
    if tag == "D" and len(rest) == 2 and isinstance(rest[1], dict):
        cls = state_types().get(rest[0])
        if cls is None:
            raise CheckpointError(f"refusing {rest[0]}: not a checkpoint data type")
        values = {k: _dec(v, tensors, shared) for k, v in rest[1].items()}
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if set(values) - set(fields):
            raise CheckpointError(f"{rest[0]} has no fields {sorted(set(values) - set(fields))}")
        obj = cls(**{k: v for k, v in values.items() if fields[k].init})
        for k, v in values.items():
            if not fields[k].init:
                object.__setattr__(obj, k, v)
        return obj
    raise CheckpointError(f"malformed checkpoint state (tag {tag!r})")


def save(value: Any, stem: Path, shared: Mapping[str, Any] | None = None) -> None:
    """Write ``value`` as ``<stem>.json`` and ``<stem>.safetensors``; values that are one of
    ``shared`` are written by name."""
    from safetensors.torch import save_file

    tensors: dict[str, Any] = {}
    tree = encode(value, tensors, shared)
    save_file(tensors, str(stem.with_suffix(".safetensors")))
    stem.with_suffix(".json").write_text(json.dumps(tree))


def load(stem: Path, shared: Mapping[str, Any] | None = None) -> Any:
    """The value :func:`save` wrote at ``stem``; :class:`CheckpointError` (naming the file) for
    anything else."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(stem.with_suffix(".safetensors")))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{stem.with_suffix('.safetensors')}: not a tensor file ({exc})"
        ) from None
    path = stem.with_suffix(".json")
    try:
        tree = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a JSON checkpoint state ({exc})") from None
    try:
        return decode(tree, tensors, shared)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
