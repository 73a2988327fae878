"""Getting raw rows from the Hugging Face hub, a local copy, or memory, with helpful errors.

Every hub loader in :mod:`envs.data` accepts exactly one row source:

* ``rows=...``: an iterable of dicts in the dataset's schema (tests, custom pipelines);
* ``path=...``: a local file (``.jsonl``, ``.json``, ``.parquet``, ``.csv``; read with
  ``datasets.load_dataset(<format>, data_files=path)``), a directory written by
  ``Dataset.save_to_disk``, or a directory holding a downloaded hub repository;
* nothing: ``datasets.load_dataset(hub_name, config, split=split)``, which uses the local cache
  (``HF_DATASETS_CACHE`` / ``HF_HOME``) and the network.

When the hub cannot be reached (no DNS), the call is made in offline mode so it fails at once
instead of retrying for half a minute; a dataset that is neither cached nor reachable raises
:class:`DatasetUnavailable` saying how to get it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["DatasetUnavailable", "iter_rows", "how_to_get"]

_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


class DatasetUnavailable(RuntimeError):
    """A dataset is neither cached nor downloadable here; the message says how to get it."""


def how_to_get(hub_name: str, config: str | None, split: str) -> str:
    """Instructions for making ``hub_name`` available on a machine without hub access."""
    cfg = f", {config!r}" if config else ""
    return (
        f"To use {hub_name!r} here: on a machine with internet access run\n"
        f'    python -c "import datasets; datasets.load_dataset({hub_name!r}{cfg}, '
        f'split={split!r})"\n'
        "then copy its datasets cache (HF_DATASETS_CACHE, default ~/.cache/huggingface/datasets)"
        " to this machine and point HF_DATASETS_CACHE at it (with HF_HUB_OFFLINE=1); or save the"
        " rows there with ds.to_json('rows.jsonl') / ds.save_to_disk('dir') and pass"
        " path='rows.jsonl' (or the directory) to the loader."
    )


@functools.lru_cache(maxsize=1)
def _hub_resolvable() -> bool:
    old = socket.getdefaulttimeout()
    try:
        socket.setdefaulttimeout(2.0)
        socket.getaddrinfo("huggingface.co", 443)
        return True
    except OSError:
        return False
    finally:
        socket.setdefaulttimeout(old)


@contextlib.contextmanager
def _offline_if_unreachable() -> Iterator[None]:
    import datasets

    if _hub_resolvable() or datasets.config.HF_HUB_OFFLINE:
        yield
        return
    saved: list[tuple[Any, bool]] = []  # (module, its HF_HUB_OFFLINE before)
    try:
        import huggingface_hub.constants as hub_constants

        saved.append((hub_constants, hub_constants.HF_HUB_OFFLINE))
        hub_constants.HF_HUB_OFFLINE = True
    except (ImportError, AttributeError):
        pass
    saved.append((datasets.config, datasets.config.HF_HUB_OFFLINE))
    datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for mod, value in saved:
            mod.HF_HUB_OFFLINE = value


def _load_local(path: str, split: str) -> Any:
    import datasets

    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "dataset_info.json")) or os.path.exists(
            os.path.join(path, "dataset_dict.json")
        ):
            ds = datasets.load_from_disk(path)
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise ValueError(f"{path} has splits {list(ds)}, not {split!r}")
                ds = ds[split]
            return ds
        return datasets.load_dataset(path, split=split)
    ext = next((e for e in _FORMATS if path.endswith(e)), None)
    if ext is None:
        raise ValueError(f"unsupported data file {path!r}; use one of {sorted(_FORMATS)}")
    return datasets.load_dataset(_FORMATS[ext], data_files=path, split="train")


def iter_rows(
    hub_name: str,
    *,
    config: str | None = None,
    split: str = "test",
    path: str | os.PathLike[str] | None = None,
    rows: Iterable[dict[str, Any]] | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield raw rows from ``rows``, ``path`` or the hub (see the module docstring)."""
    if rows is not None and path is not None:
        raise ValueError("pass rows= or path=, not both")
    if rows is not None:
        for row in rows:
            if not isinstance(row, dict):
                raise TypeError(f"rows must be dicts, got {type(row).__name__}")
            yield row
        return
    if path is not None:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no such data file or directory: {path}")
        yield from _load_local(path, split)
        return
    try:
        import datasets
    except ImportError as exc:  # the train extra is not installed
        raise DatasetUnavailable(
            f"loading {hub_name!r} needs the 'datasets' package (pip install datasets).\n"
            + how_to_get(hub_name, config, split)
        ) from exc
    try:
        with _offline_if_unreachable():
            ds = datasets.load_dataset(hub_name, config, split=split)
    except Exception as exc:
        raise DatasetUnavailable(
            f"could not load {hub_name!r} (config {config!r}, split {split!r}): "
            f"{type(exc).__name__}: {str(exc)[:300]}\n" + how_to_get(hub_name, config, split)
        ) from exc
    yield from ds
