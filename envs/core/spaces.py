"""Text spaces for LLM observations and actions.

gymnasium's ``Text`` space only admits characters from a fixed charset (alphanumeric by default),
which rejects ordinary prompts and completions. ``UnicodeText`` admits any ``str`` up to
``max_length`` characters; ``sample()`` draws short random strings from a mixed charset (ASCII,
whitespace, a few non-ASCII characters and code-fence/marker fragments) so random-action tests
exercise the environments' parsers.
"""

from __future__ import annotations

import copy
import string
from typing import Any

import numpy as np
from gymnasium.spaces import Dict, Text

__all__ = ["UnicodeText", "prompt_space", "completion_space"]

_SAMPLE_CHARS = (
    string.ascii_letters + string.digits + string.punctuation + " \n\t" + "éß中文😀\u200b"
)
_FRAGMENTS = (
    "```python\n",
    "\n```",
    "####",
    "[U,R]",
    "print(1)",
    "<score>",
    "</answer>",
    "\\boxed{",
)


class UnicodeText(Text):
    """Any Unicode string of at most ``max_length`` characters."""

    def __init__(
        self, max_length: int, *, sample_max_length: int = 64, seed: int | None = None
    ) -> None:
        super().__init__(max_length=max_length, min_length=0, charset=_SAMPLE_CHARS, seed=seed)
        self.sample_max_length = int(min(sample_max_length, max_length))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        rng = self.np_random
        length = int(rng.integers(0, self.sample_max_length + 1))
        chars = [self.character_list[i] for i in rng.integers(0, len(self.character_list), length)]
        if length and rng.random() < 0.3:
            pos = int(rng.integers(0, length + 1))
            chars.insert(pos, _FRAGMENTS[int(rng.integers(0, len(_FRAGMENTS)))])
        return "".join(chars)

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length})"

    def __deepcopy__(self, memo: dict) -> UnicodeText:
        # Env clones copy their spaces; gymnasium's generic deepcopy of the RNG is slow (~0.5 ms),
        # so share the immutable charset tables and copy only the RNG state, if any.
        new = copy.copy(self)
        # gymnasium annotates _np_random as Generator but keeps None there until first use.
        new._np_random = _copy_rng(self._np_random)  # type: ignore[assignment]
        memo[id(self)] = new
        return new

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length


class PromptSpace(Dict):
    """``Dict({"prompt": UnicodeText})`` with a cheap deepcopy (see ``UnicodeText``)."""

    def __deepcopy__(self, memo: dict) -> PromptSpace:
        new = copy.copy(self)
        new.spaces = {k: copy.deepcopy(v, memo) for k, v in self.spaces.items()}
        # gymnasium annotates _np_random as Generator but keeps None there until first use.
        new._np_random = _copy_rng(self._np_random)  # type: ignore[assignment]
        memo[id(self)] = new
        return new


def _copy_rng(rng: np.random.Generator | None) -> np.random.Generator | None:
    if rng is None:
        return None
    new = np.random.Generator(type(rng.bit_generator)())
    new.bit_generator.state = rng.bit_generator.state
    return new


def prompt_space(max_length: int) -> Dict:
    """Observation space: ``{"prompt": str}``."""
    return PromptSpace({"prompt": UnicodeText(max_length)})


def completion_space(max_length: int) -> UnicodeText:
    """Action space: the raw completion string."""
    return UnicodeText(max_length)
