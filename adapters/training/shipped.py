"""The cold starts the project ships (``adapters/training/coldstarts/NAME``), by name.

Each directory is a peft adapter that ``python -m adapters.sft`` made, with its ``coldstart.json``
(the command, the data's hash, the losses). A run finds one by the key of its own configuration
(:func:`adapters.training.coldstart.shipped_cold_start`), or names one: ``--init shipped:NAME``
(:func:`shipped_init`). This module imports nothing of the trainer, so the configuration's
checks can use it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CARD", "SHIPPED", "SHIPPED_INIT", "shipped_init"]

CARD = "coldstart.json"
SHIPPED = Path(__file__).resolve().parent / "coldstarts"

SHIPPED_INIT = "shipped:"


def shipped_init(init: str) -> Path | None:
    """The directory an ``init`` of the form ``shipped:NAME`` names (``None`` for another
    form): a cold start the project ships, chosen by name rather than by the run's key (a run
    may start from one made on other instances, e.g. the CPU Sokoban run's 8 x 8 levels from
    the one made on 6 x 6 levels)."""
    if not init.startswith(SHIPPED_INIT):
        return None
    name = init.removeprefix(SHIPPED_INIT)
    where = SHIPPED / name
    if "/" in name or not name or not (where / "adapter_config.json").is_file():
        known = sorted(p.name for p in SHIPPED.iterdir() if (p / CARD).is_file())
        raise ValueError(f"init {init!r}: no shipped cold start of that name; shipped: {known}")
    return where
