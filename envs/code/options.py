"""The code setting's configuration and reward weights (the setting's page is :mod:`envs.code`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from envs.code.problems import DATASETS
from envs.core.config import RewardConfig
from envs.core.program import ProgramConfig

__all__ = ["CODER_MASKS", "CodeConfig", "CodeRewards"]


@dataclass(frozen=True)
class CodeRewards(RewardConfig):
    lam: float = 0.5  # A.1.2 gives none for code: the suite's default mixing coefficient
    coder_build: float = 0.10
    coder_run: float = 0.10
    coder_nr: float = 0.80
    tester_valid: float = 0.20
    tester_cov: float = 0.80
    roles: ClassVar[tuple[str, ...]] = ("coder", "tester")


CODER_MASKS = ("ran", "found", "always")


@dataclass(frozen=True)
class CodeConfig(ProgramConfig):
    """dataset: see the module docstring. wall_s / memory_mb: limits of one test run.
    max_tester_tests: tests counted per tester answer (A.2.2: one; more is a format violation).
    smoke_tests: golden tests in the smoke subset when a problem has no public examples.
    max_mutants / mutant_seed / mutant_floor_s / tau_mut: mutation analysis (mutants get
    max(mutant_floor_s, 5 x the golden run time)). float_tol: numeric tolerance for stdin
    outputs (None: exact text after normalising). coder_mask: when the coder's A.1.2 mask is 1
    (``"ran"``, ``"found"`` or ``"always"``; see the module docstring)."""

    dataset: str = "humaneval"
    wall_s: float = 2.0
    max_tester_tests: int = 1
    coder_mask: str = "ran"
    smoke_tests: int = 2
    max_mutants: int = 16
    mutant_seed: int = 0
    mutant_floor_s: float = 0.15
    tau_mut: float = 0.60
    float_tol: float | None = None
    rewards: CodeRewards = field(default_factory=CodeRewards)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {DATASETS}, got {self.dataset!r}")
        for name in ("max_tester_tests", "smoke_tests"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an int >= 1")
        if not isinstance(self.max_mutants, int) or self.max_mutants < 1:
            raise ValueError("max_mutants must be an int >= 1")
        if not 0 < self.tau_mut <= 1:
            raise ValueError("tau_mut must lie in (0, 1]")
        if self.coder_mask not in CODER_MASKS:
            raise ValueError(f"coder_mask must be one of {CODER_MASKS}, got {self.coder_mask!r}")
