"""Rollout progress in agent steps, as it happens: what progress bars show during a rollout.

A rollout's episodes are played together, one generation wave per agent turn
(:mod:`adapters.rollout.engine`), and a wave of 64 episodes can take minutes on a CPU. A bar that
counts finished episodes stands still for most of the rollout (the first episodes finish after
several waves, most of them at the last ones) and has no ETA until then. So the engine reports
**agent steps** instead: after the reset and after every wave it calls ``on_progress`` with a
:class:`RolloutProgress`, which counts the steps taken (one per live branch and wave; the K
candidates of a tree-sampling step count once) and estimates the steps still to take: for each
live branch, its episode's step budget (:meth:`envs.core.base.TurnBasedEnv.step_budget`: turns
times agents) minus the steps it has taken. That estimate is an upper bound that tightens as
episodes end early, so an ETA on it is an upper bound too, which holds from the end of the first
wave on. A setting whose budget is unknown (``step_budget() is None``: MAE, SAGE, CoMAS, MarsRL,
whose schedules depend on what the agents write) is estimated with the most steps a finished
episode of the rollout took, and the engine's ``max_steps`` cap before one has finished.

Two ways to move a ``tqdm`` bar with it (any object with ``n``, ``total``, ``update`` and
``set_postfix_str``; a disabled bar is fine):

* :func:`follow_steps`: a bar over one rollout, counted in steps, whose total is re-estimated at
  every wave (``python -m adapters.evaluate --env``, the trainer's evaluations);
* :func:`follow_share`: a bar over many rollouts counted in episodes (a suite's chunks, a
  benchmark pass's): a rollout of ``size`` episodes moves it by ``size`` times its share of
  steps done (:attr:`RolloutProgress.share`), the training bar likewise by the step's share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["RolloutProgress", "follow_share", "follow_steps"]


@dataclass(frozen=True)
class RolloutProgress:
    """Where a rollout stands after ``wave`` generation waves (module docstring)."""

    wave: int  # generation waves done (0: just reset)
    live: int  # branches still playing
    episodes: int  # episodes finished
    steps: int  # agent steps taken
    steps_left: int  # agent steps still to take, at most (estimated)
    tokens: int  # completion tokens generated, every candidate's

    @property
    def share(self) -> float:
        """The share of the rollout's steps done, in [0, 1].

        >>> RolloutProgress(wave=2, live=3, episodes=1, steps=10, steps_left=30, tokens=0).share
        0.25
        """
        total = self.steps + self.steps_left
        return self.steps / total if total else 1.0

    def describe(self) -> str:
        """A bar's postfix.

        >>> RolloutProgress(wave=2, live=29, episodes=35, steps=99, steps_left=9, tokens=45210
        ...                 ).describe()
        'wave 2, 29 live, 35 ep done, 45.2k tok'
        """
        tok = f"{self.tokens / 1000:.1f}k" if self.tokens >= 1000 else str(self.tokens)
        return f"wave {self.wave}, {self.live} live, {self.episodes} ep done, {tok} tok"


def follow_steps(bar: Any) -> Callable[[RolloutProgress], None]:
    """An ``on_progress`` that moves ``bar`` (counted in steps) to the steps taken, sets its
    total to the steps taken plus those left, and shows the wave, live branches, finished
    episodes and tokens after it."""

    def update(p: RolloutProgress) -> None:
        bar.total = p.steps + p.steps_left
        bar.set_postfix_str(p.describe(), refresh=False)
        _move(bar, p.steps)

    return update


def follow_share(
    bar: Any, size: float, label: str = "", start: float | None = None
) -> Callable[[RolloutProgress], None]:
    """An ``on_progress`` that moves ``bar`` to ``start + size * share`` (``start``: where the
    bar stands now), with ``label`` and the rollout's state after it."""
    base = float(bar.n) if start is None else start
    prefix = f"{label}: " if label else ""

    def update(p: RolloutProgress) -> None:
        bar.set_postfix_str(prefix + p.describe(), refresh=False)
        _move(bar, base + size * p.share)

    return update


def _move(bar: Any, n: float) -> None:
    """Move ``bar`` to ``n`` and redraw it (``update(0)`` would not)."""
    if n != bar.n:
        bar.update(n - bar.n)
    else:
        bar.refresh()
