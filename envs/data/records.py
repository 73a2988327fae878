"""Typed records for dataset problems: :class:`CodeProblem` and :class:`MathProblem`.

Every loader in :mod:`envs.data` maps its dataset's raw rows to these. Records are frozen
dataclasses, round-trip through plain dicts (``to_dict`` / ``from_dict``, e.g. for JSONL caches),
and have a ``key`` (a stable hash of their text, independent of the dataset they came from, so
the same problem lands in the same split everywhere) that decides their train/val/test split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from verifiers.code_tests import TestCase

__all__ = ["CodeProblem", "MathProblem"]


@dataclass(frozen=True)
class CodeProblem:
    """A programming problem.

    ``style`` is ``"stdin"`` (a full program reading stdin; tests are stdio cases) or
    ``"function"`` (define ``entry_point``; tests are assert code). ``golden_solution`` is a
    complete program that passes ``tests`` (``None`` when the dataset has none, e.g.
    LiveCodeBench). ``public_tests`` are the examples shown in the statement, when known.
    ``prelude`` is code to put before any candidate program when running it (e.g. the
    ``from typing import *`` that LiveCodeBench's LeetCode problems assume).
    """

    id: str
    prompt: str
    style: Literal["stdin", "function"]
    golden_solution: str | None
    tests: tuple[TestCase, ...]
    entry_point: str | None = None
    public_tests: tuple[TestCase, ...] = ()
    starter_code: str = ""
    source: str = ""
    difficulty: str = ""
    prelude: str = ""
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.style not in ("stdin", "function"):
            raise ValueError(f"style must be 'stdin' or 'function', got {self.style!r}")
        object.__setattr__(self, "tests", tuple(self.tests))
        object.__setattr__(self, "public_tests", tuple(self.public_tests))

    @property
    def key(self) -> str:
        """Stable hash of the whitespace-normalised statement (decides the split)."""
        from envs.data.dataset_splits import text_key

        return text_key(self.prompt)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "prompt": self.prompt,
            "style": self.style,
            "golden_solution": self.golden_solution,
            "tests": [t.to_dict() for t in self.tests],
            "entry_point": self.entry_point,
            "public_tests": [t.to_dict() for t in self.public_tests],
            "starter_code": self.starter_code,
            "source": self.source,
            "difficulty": self.difficulty,
            "prelude": self.prelude,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CodeProblem:
        data = dict(d)
        data["tests"] = tuple(TestCase(**t) for t in data.get("tests", ()))
        data["public_tests"] = tuple(TestCase(**t) for t in data.get("public_tests", ()))
        return cls(**data)


@dataclass(frozen=True)
class MathProblem:
    """A question with its reference final answer.

    ``answer_format`` says how an answer is checked: ``"math"`` (default; ``answer`` is a string
    math-verify can parse) or one of :data:`verifiers.answer_formats.FORMATS` (``"choice"``:
    ``answer`` is an option letter and ``choices`` the options' texts, already listed in
    ``question``; ``"qa"``: ``answer`` and ``aliases`` are accepted answers; ``"bbh"``;
    ``"yesno"``).
    """

    id: str
    question: str
    answer: str
    source: str
    solution: str = ""
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)
    answer_format: str = "math"
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from verifiers.answer_formats import FORMATS

        if self.answer_format not in ("math", *FORMATS):
            raise ValueError(f"answer_format must be 'math' or one of {FORMATS}")
        object.__setattr__(self, "choices", tuple(str(c) for c in self.choices))
        object.__setattr__(self, "aliases", tuple(str(a) for a in self.aliases))

    @property
    def key(self) -> str:
        """Stable hash of the whitespace-normalised question (decides the split)."""
        from envs.data.dataset_splits import text_key

        return text_key(self.question)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "answer": self.answer,
            "source": self.source,
            "solution": self.solution,
            "metadata": dict(self.metadata),
            "answer_format": self.answer_format,
            "choices": list(self.choices),
            "aliases": list(self.aliases),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MathProblem:
        return cls(**d)
