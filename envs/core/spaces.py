"""Text spaces for LLM observations and actions.

gymnasium's ``Text`` space only admits characters from a fixed charset (alphanumeric by default),
which rejects ordinary prompts and completions. ``UnicodeText`` admits any ``str`` up to
``max_length`` characters; ``sample()`` draws short random strings from a mixed charset (ASCII,
whitespace, a few non-ASCII characters and code-fence/marker fragments) so random-action tests
exercise the environments' parsers.
"""

from __future__ import annotations

import string
from typing import Any

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

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length


def prompt_space(max_length: int) -> Dict:
    """Observation space: ``{"prompt": str}``."""
    return Dict({"prompt": UnicodeText(max_length)})


def completion_space(max_length: int) -> UnicodeText:
    """Action space: the raw completion string."""
    return UnicodeText(max_length)
