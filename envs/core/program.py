"""Pieces shared by the settings whose agents write programs that the env runs (``code``,
``math``): sandbox limits from the config, one-program runs with a plain-words verdict,
dataset pools with content-hash splits, a small thread-safe LRU cache, and prompt helpers.

Nothing here is specific to one setting; the settings keep their own rules and rewards.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from envs.core.base import TurnBasedEnv
from envs.core.config import EnvConfig
from envs.core.splits import SPLITS, check_split, split_for
from verifiers.extract import clip_text

__all__ = [
    "ProgramConfig",
    "ProgramEnv",
    "RunVerdict",
    "verdict",
    "LRU",
    "ProblemPool",
    "fence",
    "indent",
]

T = TypeVar("T")


@dataclass(frozen=True)
class ProgramConfig(EnvConfig):
    """Options of settings that run agents' programs (on top of :class:`EnvConfig`).

    wall_s / memory_mb / max_output_bytes: sandbox limits of one program run (per test case
    in ``code``). history_turns: how many earlier turns the prompts show.
    dataset / data_path / data_split / data_options: where problems come from (see the setting).
    single_turns: the horizon of ``mode="single"`` (AT-GRPO 5.1: the single-agent baselines of
    code and math are single-turn, 1); ``None`` uses ``max_turns`` (a multi-turn self-refining
    single agent, not the paper's baseline).
    """

    single_turns: int | None = 1
    wall_s: float = 5.0
    memory_mb: int = 512
    max_output_bytes: int = 65_536
    history_turns: int = 3
    dataset: str = ""
    data_path: str | None = None
    data_split: str | None = None
    data_options: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.wall_s, int | float) and 0.01 <= self.wall_s <= 3600):
            raise ValueError(
                f"wall_s must be a number of seconds in [0.01, 3600], got {self.wall_s!r}"
            )
        if (
            isinstance(self.memory_mb, bool)
            or not isinstance(self.memory_mb, int)
            or self.memory_mb < 32
        ):
            raise ValueError(f"memory_mb must be an int >= 32, got {self.memory_mb!r}")
        if not isinstance(self.max_output_bytes, int) or self.max_output_bytes < 1:
            raise ValueError(
                f"max_output_bytes must be a positive int, got {self.max_output_bytes!r}"
            )
        if not isinstance(self.history_turns, int) or self.history_turns < 0:
            raise ValueError(f"history_turns must be an int >= 0, got {self.history_turns!r}")
        if self.single_turns is not None and (
            isinstance(self.single_turns, bool)
            or not isinstance(self.single_turns, int)
            or self.single_turns < 1
        ):
            raise ValueError(f"single_turns must be an int >= 1 or None, got {self.single_turns!r}")
        if self.data_options is not None and not isinstance(self.data_options, dict):
            raise ValueError("data_options must be a dict of loader keyword arguments or None")

    def data_key(self) -> tuple:
        """Everything that decides which problems the dataset holds (a cache key)."""
        opts = tuple(sorted((self.data_options or {}).items(), key=lambda kv: kv[0]))
        return (self.dataset, self.data_path, self.data_split, repr(opts))


@dataclass(frozen=True)
class RunVerdict:
    """A program run in words: ``ok`` (exit 0 within limits), ``infra`` (the sandbox itself
    failed: not the program's fault), ``within_budget`` (no time, memory or output limit hit)."""

    ok: bool
    infra: bool
    within_budget: bool
    reason: str


def verdict(result: Any) -> RunVerdict:
    """Classify a :class:`sandboxes.ExecResult`.

    >>> from sandboxes import ExecResult
    >>> verdict(ExecResult(0, "4\\n")).ok
    True
    >>> verdict(ExecResult(1, "", "Traceback ...\\nZeroDivisionError: division by zero\\n")).reason
    'the program crashed: ZeroDivisionError: division by zero'
    >>> verdict(ExecResult(None, timed_out=True)).within_budget
    False
    """
    if getattr(result, "error", None):
        return RunVerdict(
            False, True, True, f"sandbox failure: {clip_text(str(result.error), 200)}"
        )
    if result.timed_out:
        return RunVerdict(False, False, False, "the program timed out")
    if result.memory_exceeded:
        return RunVerdict(False, False, False, "the program exceeded its memory limit")
    if result.output_truncated:
        return RunVerdict(False, False, False, "the program printed more than the output limit")
    if result.exit_code != 0:
        lines = [ln.strip() for ln in (result.stderr or "").strip().splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit code {result.exit_code}"
        return RunVerdict(False, False, True, "the program crashed: " + clip_text(last, 300))
    return RunVerdict(True, False, True, "ok")


class ProgramEnv(TurnBasedEnv):
    """A :class:`TurnBasedEnv` that runs agents' programs in the sandbox."""

    config: ProgramConfig

    def _limits(self) -> Any:
        import sandboxes

        cfg = self.config
        return sandboxes.Limits(
            wall_s=cfg.wall_s,
            cpu_s=cfg.wall_s,
            memory_mb=cfg.memory_mb,
            max_output_bytes=cfg.max_output_bytes,
        )

    def _run_program(self, code: str, stdin: str = "") -> Any:
        """Run one program under the config's limits; never raises for a bad program."""
        return self.sandbox.run(code, stdin=stdin, limits=self._limits())

    @property
    def horizon(self) -> int:
        """Turns in an episode: ``max_turns``, or ``single_turns`` (when set) in single mode."""
        cfg = self.config
        if cfg.mode == "single" and cfg.single_turns is not None:
            return cfg.single_turns
        return cfg.max_turns

    def _horizon_reached(self) -> bool:
        return self.turn >= self.horizon

    def step_budget(self) -> int | None:
        """Every agent once per turn, up to :attr:`horizon` turns."""
        return self.horizon * len(self.possible_agents)

    def _is_last_step(self, agent: str) -> bool:
        """Is this the final step before the horizon (the last agent of the last turn)?"""
        return self.turn >= self.horizon - 1 and agent == self.possible_agents[-1]


class LRU(Generic[T]):
    """A small thread-safe least-recently-used cache (``get_or_compute``)."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> T | None:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        return None

    def put(self, key: Hashable, value: T) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def get_or_compute(self, key: Hashable, compute: Callable[[], T]) -> T:
        hit = self.get(key)
        if hit is not None:
            return hit
        value = compute()
        self.put(key, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


class ProblemPool(Generic[T]):
    """Dataset problems grouped by split (each record's ``key`` decides its split).

    >>> from envs.data.records import MathProblem
    >>> qs = [MathProblem(str(i), f"What is {i} + {i}?", str(2 * i), "demo") for i in range(40)]
    >>> pool = ProblemPool(qs, "demo")
    >>> sum(pool.count(s) for s in ("train", "val", "test"))
    40
    >>> pool.pick("train", 7) == pool.pick("train", 7)
    True
    """

    def __init__(self, problems: Sequence[T], name: str) -> None:
        self.name = name
        self.problems = tuple(problems)
        self.by_split: dict[str, list[int]] = {s: [] for s in SPLITS}
        for i, p in enumerate(self.problems):
            self.by_split[split_for(p)].append(i)

    def count(self, split: str) -> int:
        return len(self.by_split[check_split(split)])

    def pick(self, split: str, seed: int) -> T:
        """The problem of ``split`` that ``seed`` selects (uniformly, deterministically)."""
        idx = self.by_split[check_split(split)]
        if not idx:
            raise ValueError(
                f"dataset {self.name!r} has no problem in the {split!r} split "
                f"({len(self.problems)} problems in all; splits are by content hash)"
            )
        return self.problems[idx[int(np.random.default_rng(seed).integers(len(idx)))]]


def fence(code: str | None, limit: int = 4000, lang: str = "python") -> str:
    """``code`` in a fenced block (clipped), or ``(none)``.

    >>> print(fence("print(1)"))
    ```python
    print(1)
    ```
    """
    if code is None:
        return "(none)"
    body = clip_text(code, limit)
    ticks = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", body)), default=0))
    return f"{ticks}{lang}\n{body}\n{ticks}"


def indent(text: str, n: int = 2) -> str:
    pad = " " * n
    return "\n".join(pad + line if line else line for line in text.splitlines())
