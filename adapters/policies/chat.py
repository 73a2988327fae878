"""Chat prompts: validation, and rendering with a tokenizer's chat template.

* A :data:`ChatPrompt` is either a list of ``{"role": ..., "content": ...}`` messages or a plain
  string, which means a single user message; :func:`to_messages` / :func:`check_prompts`
  normalise and validate them (a malformed prompt is an API misuse and raises).
* :class:`ChatTemplatePrompts` is the one place where a prompt becomes token ids for the backends
  that hold a tokenizer (transformers, vLLM): the tokenizer's chat template with the generation
  prompt, plus ``chat_template_kwargs``. That is where model-specific template switches go, e.g.
  Qwen3's no-thinking mode used by the AT-GRPO paper: ``chat_template_kwargs={"enable_thinking":
  False}`` (``TrainConfig.chat_template_kwargs``, ``--chat-template-kwargs`` on the command line).
  Without a template the prompt is rendered as ``role: content`` lines and ``assistant:``.
* Prompts longer than a backend's maximum prompt length are left-truncated (the most recent
  context is kept) with a logged warning (:func:`left_truncate`); they never raise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Union

logger = logging.getLogger(__name__)

__all__ = [
    "ChatPrompt",
    "ChatTemplatePrompts",
    "Message",
    "check_prompts",
    "left_truncate",
    "template_reads",
    "to_messages",
]

Message = Mapping[str, Any]


ChatPrompt = Union[str, Sequence[Message]]  # noqa: UP007 (a runtime alias, kept readable)


_ROLES = ("system", "user", "assistant", "tool", "developer")


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


def template_reads(policy: Any, key: str) -> bool | None:
    """Whether the chat template a policy renders reads ``key`` (e.g. Qwen3's
    ``enable_thinking`` switch); ``None`` when the template cannot be read here (an HTTP server,
    a scripted policy).

    >>> class Tok:
    ...     chat_template = "{% if enable_thinking is defined and not enable_thinking %}..."
    >>> class P:
    ...     tokenizer = Tok()
    >>> template_reads(P(), "enable_thinking"), template_reads(P(), "tools"), template_reads(1, "x")
    (True, False, None)
    """
    tok = getattr(policy, "tokenizer", None)
    if tok is None:
        return None
    template = getattr(tok, "chat_template", None) or ""
    if isinstance(template, Mapping):  # named templates
        template = " ".join(str(t) for t in template.values())
    return key in str(template)


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
