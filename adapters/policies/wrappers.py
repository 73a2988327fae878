"""Policy wrappers: prompt prefixes, adapter activation and generation timing around any policy.

:class:`ManagedPolicy` is how the trainer and the evaluation CLI turn a backend into the policy a
role sees: it prepends messages to every prompt (a system prompt, oracle demonstrations), calls an
``activate`` hook before generating (e.g. switch to the role's LoRA adapter) and adds the wall
time spent in ``generate`` to a shared :class:`GenerationTimer`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from adapters.policies.base import Completion, PartialCompletion, Policy, SamplingParams
from adapters.policies.chat import ChatPrompt, check_prompts

__all__ = ["GenerationTimer", "ManagedPolicy"]


class GenerationTimer:
    """Accumulates wall time spent inside ``generate`` calls."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def reset(self) -> float:
        s, self.seconds = self.seconds, 0.0
        return s


class ManagedPolicy(Policy):
    """Wraps a policy: activates an adapter, prepends messages, and times generation."""

    def __init__(
        self,
        inner: Policy,
        *,
        activate: Callable[[], None] | None = None,
        prefix: Sequence[dict[str, str]] = (),
        timer: GenerationTimer | None = None,
        name: str | None = None,
    ) -> None:
        self.inner = inner
        self.activate = activate
        self.prefix = [dict(m) for m in prefix]
        self.timer = timer
        self.name = name or inner.name
        self.tokenizer = inner.tokenizer
        self.env_aware = bool(getattr(inner, "env_aware", False))

    def evaluation_scope(self, batch_size: int | None = None) -> AbstractContextManager[Any]:
        return self.inner.evaluation_scope(batch_size)

    def generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        messages = [self.prefix + m for m in check_prompts(prompts)]
        if self.activate is not None:
            self.activate()
        t0 = time.perf_counter()
        try:
            return self.inner.generate(messages, params)
        finally:
            if self.timer is not None:
                self.timer.seconds += time.perf_counter() - t0

    # segment rollouts: the same prefix, adapter and timer around the inner policy's
    def start_partials(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams
    ) -> list[list[PartialCompletion]]:
        messages = [self.prefix + m for m in check_prompts(prompts)]
        return self.inner.start_partials(messages, params)

    def extend(
        self, partials: Sequence[PartialCompletion], params: SamplingParams, max_tokens: int
    ) -> list[PartialCompletion]:
        if self.activate is not None:
            self.activate()
        t0 = time.perf_counter()
        try:
            return self.inner.extend(partials, params, max_tokens)
        finally:
            if self.timer is not None:
                self.timer.seconds += time.perf_counter() - t0

    def finish_partial(self, partial: PartialCompletion, params: SamplingParams) -> Completion:
        return self.inner.finish_partial(partial, params)
