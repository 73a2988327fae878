"""The policy interface: chat prompts in, completions with token ids and log-probs out.

Every backend (transformers, OpenAI-compatible HTTP, scripted; vLLM elsewhere) implements
:class:`Policy`::

    policy.generate(prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=256))
    -> [[Completion, ...n], ...one list per prompt, in prompt order]

Conventions shared by all backends
----------------------------------
* A :data:`ChatPrompt` is either a list of ``{"role": ..., "content": ...}`` messages or a plain
  string, which means a single user message.
* :class:`SamplingParams` follows the AT-GRPO appendix defaults (temperature 1.0, top-p 1.0,
  top-k -1 = off). ``temperature == 0`` means greedy decoding.
* :class:`Completion.text` never contains the end-of-sequence token nor the stop string that ended
  generation. :attr:`Completion.token_ids` holds the tokens actually generated, *including* the EOS
  token when the model emitted one and the tokens that spell a matched stop string (they were
  sampled, so a trainer must see them); nothing after that point.
* :attr:`Completion.logprobs` has one entry per completion token: the log-probability of that token
  under ``softmax(logits / T)`` where ``T`` is the sampling temperature (``T = 1`` for greedy
  decoding). Top-p / top-k truncation is *not* renormalised into these numbers, so they are the
  quantities a PPO ratio against ``sequence_logprobs(..., temperature=T)`` needs.
* Backends that cannot provide token ids or log-probs (a scripted function, an HTTP server that
  does not return them) return empty lists; such completions are for benchmarking, not training.
* Prompts longer than a backend's maximum prompt length are left-truncated (the most recent
  context is kept) with a logged warning; they never raise.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

logger = logging.getLogger(__name__)

Message = Mapping[str, Any]
ChatPrompt = Union[str, Sequence[Message]]  # noqa: UP007 (a runtime alias, kept readable)
FinishReason = Literal["stop", "length"]

_ROLES = ("system", "user", "assistant", "tool", "developer")


@dataclass(frozen=True)
class SamplingParams:
    """How to sample completions.

    Attributes:
        n: completions per prompt.
        temperature: softmax temperature; 0 means greedy (argmax) decoding.
        top_p: nucleus sampling mass in (0, 1]; 1 disables it.
        top_k: keep the k most likely tokens; -1 (or 0) disables it.
        max_new_tokens: maximum completion length in tokens.
        stop: strings that end a completion; the matched string is removed from the text.
        seed: makes sampling reproducible: the same seed and inputs give the same completions.
            ``None`` draws from torch's global generator.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        stop = self.stop
        if isinstance(stop, str):
            stop = (stop,)
        elif stop is None:
            stop = ()
        stop = tuple(stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop must be non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", stop)
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be a positive int, got {self.n!r}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise ValueError(
                f"top_k must be -1 (off), 0 (off) or a positive int, got {self.top_k!r}"
            )
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {self.max_new_tokens!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int or None, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Completion:
    """One sampled completion. See the module docstring for the exact conventions."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)
    finish_reason: FinishReason = "stop"

    @property
    def trainable(self) -> bool:
        """True when token ids and one log-prob per token are present (usable for RL updates)."""
        return bool(self.token_ids) and len(self.token_ids) == len(self.logprobs)


class Policy(abc.ABC):
    """A text policy: ``generate(prompts, params) -> n completions per prompt``.

    Subclasses set :attr:`name` and implement :meth:`generate`; :attr:`tokenizer` is the
    Hugging Face tokenizer when the backend has one (``None`` otherwise).
    """

    name: str = "policy"
    tokenizer: Any = None

    @abc.abstractmethod
    def generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        """Return ``params.n`` completions for every prompt, in prompt order."""

    def __call__(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        return self.generate(prompts, params)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def to_messages(prompt: ChatPrompt) -> list[dict[str, str]]:
    """Normalise a prompt to a list of ``{"role", "content"}`` dicts (a str is one user turn).

    Raises TypeError/ValueError for malformed prompts (an API misuse, not a model output).
    """
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, Mapping) or not isinstance(prompt, Sequence):
        raise TypeError(
            "a prompt must be a str or a list of {'role': ..., 'content': ...} messages, "
            f"got {type(prompt).__name__}"
        )
    messages: list[dict[str, str]] = []
    for i, msg in enumerate(prompt):
        if not isinstance(msg, Mapping) or "role" not in msg or "content" not in msg:
            raise ValueError(f"message {i} must be a mapping with 'role' and 'content': {msg!r}")
        role, content = msg["role"], msg["content"]
        if not isinstance(role, str) or role not in _ROLES:
            raise ValueError(f"message {i} has unknown role {role!r}; expected one of {_ROLES}")
        if not isinstance(content, str):
            raise TypeError(f"message {i} content must be a str, got {type(content).__name__}")
        messages.append({"role": role, "content": content})
    if not messages:
        raise ValueError("a prompt needs at least one message")
    return messages


def check_prompts(prompts: Sequence[ChatPrompt]) -> list[list[dict[str, str]]]:
    """Validate a batch of prompts and return them as message lists."""
    if isinstance(prompts, (str, Mapping)) or not isinstance(prompts, Sequence):
        raise TypeError(
            "generate() takes a sequence of prompts (wrap a single prompt in a list), "
            f"got {type(prompts).__name__}"
        )
    return [to_messages(p) for p in prompts]


def truncate_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` at the earliest occurrence of any stop string.

    Returns ``(text_before_stop, matched)``.

    >>> truncate_stop("a, b. c.", [".", ","])
    ('a', True)
    >>> truncate_stop("abc", ["x"])
    ('abc', False)
    """
    best = -1
    for s in stop:
        i = text.find(s)
        if i != -1 and (best == -1 or i < best):
            best = i
    if best == -1:
        return text, False
    return text[:best], True


def left_truncate(ids: list[int], max_len: int, what: str = "prompt") -> list[int]:
    """Keep the last ``max_len`` ids, logging a warning when anything is dropped."""
    if max_len > 0 and len(ids) > max_len:
        logger.warning(
            "%s has %d tokens, more than the maximum of %d: dropping the first %d tokens",
            what,
            len(ids),
            max_len,
            len(ids) - max_len,
        )
        return ids[-max_len:]
    return ids


class ChatTemplatePrompts:
    """Prompt encoding for backends that hold a tokenizer (transformers, vLLM).

    A prompt is rendered with the tokenizer's chat template (plus ``chat_template_kwargs``;
    without a template, ``role: content`` lines and ``assistant:``), tokenized without special
    tokens and left-truncated to ``_prompt_limit(max_new_tokens)``, which each backend defines.
    """

    tokenizer: Any
    chat_template_kwargs: dict[str, Any]

    def _prompt_limit(self, max_new_tokens: int) -> int:
        raise NotImplementedError

    def render(self, messages: list[dict[str, str]]) -> str:
        """The chat-templated prompt text (with the assistant generation prompt)."""
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
            )
        lines = [f"{m['role']}: {m['content']}" for m in messages]
        return "\n".join([*lines, "assistant:"])

    def _encode(self, messages: list[dict[str, str]], limit: int, what: str) -> list[int]:
        ids = list(self.tokenizer(self.render(messages), add_special_tokens=False)["input_ids"])
        return left_truncate(ids, limit, what=what)

    def encode_prompt(self, prompt: ChatPrompt, max_new_tokens: int = 0) -> list[int]:
        """Token ids of the templated prompt, left-truncated to the maximum prompt length."""
        (messages,) = check_prompts([prompt])
        return self._encode(messages, self._prompt_limit(max_new_tokens), "prompt")

    def encode_prompts(self, prompts: Sequence[ChatPrompt], max_new_tokens: int) -> list[list[int]]:
        """:meth:`encode_prompt` for a batch; a prompt that encodes to no token is a ValueError."""
        limit = self._prompt_limit(max_new_tokens)
        encoded = [
            self._encode(m, limit, f"prompt {i}") for i, m in enumerate(check_prompts(prompts))
        ]
        for i, ids in enumerate(encoded):
            if not ids:
                raise ValueError(f"prompt {i} encodes to zero tokens")
        return encoded
