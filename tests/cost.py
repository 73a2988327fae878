"""The host CPU time a block of test code costs, without the garbage collector's pauses.

A long test session holds millions of objects left by earlier tests (models, tokenizers, syntax
trees). A full collection that happens to fall inside a measured block walks all of them, which
on a slow machine is a second of CPU that the code under test did not cause. :func:`cpu_cost`
freezes what exists (``gc.freeze``: constant time, no collection), so only the block's own
objects are ever walked while it runs; ``gc.unfreeze`` hands the rest back afterwards."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["Spent", "cpu_cost"]


@dataclass
class Spent:
    seconds: float = 0.0


@contextlib.contextmanager
def cpu_cost(clock: Callable[[], float] = time.process_time) -> Iterator[Spent]:
    """``with cpu_cost() as spent: ...`` then ``spent.seconds``: ``clock``'s seconds (this
    process's CPU time by default; ``time.thread_time`` for the calling thread's) spent in the
    block."""
    gc.freeze()
    spent = Spent()
    start = clock()
    try:
        yield spent
    finally:
        spent.seconds = clock() - start
        gc.unfreeze()
