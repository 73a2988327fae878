"""The policy interface: chat prompts in, completions with token ids and log-probs out.

Every backend (transformers, OpenAI-compatible HTTP, scripted; vLLM elsewhere) implements
:class:`Policy`::

    policy.generate(prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=128))
    -> [[Completion, ...n], ...one list per prompt, in prompt order]

Conventions shared by all backends
----------------------------------
* A :data:`~adapters.policies.chat.ChatPrompt` is either a list of ``{"role": ..., "content":
  ...}`` messages or a plain string, which means a single user message
  (:mod:`adapters.policies.chat` validates and renders prompts).
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

Segment rollouts (UloRL section 2.3, used by MarsRL): a backend that can continue a completion
from its own tokens implements :meth:`Policy.start_partials`, :meth:`Policy.extend` and
:meth:`Policy.finish_partial` (a :class:`TokenLevelPolicy` has ``start_partials`` from its
chat-template encoding). A :class:`PartialCompletion` carries the prompt ids, the tokens and
behaviour log-probs generated so far and the sampler's state; ``extend`` decodes at most ``L``
more tokens from exactly that prefix (no re-tokenisation), so a completion decoded in segments is
the completion an unsegmented call would have produced. :mod:`adapters.rollout.segments` drives
it.
"""

from __future__ import annotations

import abc
import contextlib
import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

from adapters.policies.chat import ChatPrompt, ChatTemplatePrompts
from adapters.policies.knobs import ConfigError, Section, declared_default, knob

logger = logging.getLogger(__name__)

FinishReason = Literal["stop", "length"]


EVAL_TEMPERATURE = 0.0
"""The evaluations' sampling temperature wherever no paper protocol or flag sets one: greedy."""


@dataclass(frozen=True)
class GenerationConfig(Section):
    """How completions are sampled: the generation section of a training run
    (:class:`~adapters.training.config.TrainConfig`), and the defaults of
    :class:`SamplingParams`. ``role_sampling`` overrides the shared values per role, e.g.
    ``{"verifier": {"temperature": 0.6}}``."""

    temperature: float = knob(1.0, "sampling temperature of training rollouts", auto=True)
    top_p: float = knob(1.0, "nucleus sampling p", auto=True)
    top_k: int = knob(-1, "top-k sampling (-1: off)", auto=True)
    max_new_tokens: int = knob(256, "tokens per completion", auto=True)
    role_sampling: dict[str, dict[str, Any]] = knob(
        doc='per-role sampling as JSON, e.g. \'{"critic": {"temperature": 0.1}}\'', factory=dict
    )
    gen_batch_size: int = knob(
        128,
        "sequences per generate call",
        auto=True,
        cpu=16,
        why="suite default: sequences per generate call",
    )

    def __post_init__(self) -> None:
        if (self.temperature or 0.0) < 0:
            raise ConfigError("temperature must be >= 0")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError("top_p must lie in (0, 1]")
        for name in ("max_new_tokens", "gen_batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        for role, params in self.role_sampling.items():
            bad = sorted(set(params) - ROLE_SAMPLING_KEYS)
            if bad:
                raise ConfigError(
                    f"role_sampling[{role!r}] has unknown key(s) {bad}; allowed: "
                    f"{sorted(ROLE_SAMPLING_KEYS)}"
                )

    def params(self, role: str, n: int, seed: int | None, **extra: Any) -> SamplingParams:
        """The sampling parameters of one ``generate`` call for ``role`` (its
        ``role_sampling`` entries over the shared values)."""
        c = self.filled()
        base: dict[str, Any] = {
            "temperature": c.temperature,
            "top_p": c.top_p,
            "top_k": c.top_k,
            "max_new_tokens": c.max_new_tokens,
        }
        base.update(c.role_sampling.get(role, {}))
        base.update(extra)
        return SamplingParams(n=n, seed=seed, **base)

    def temperature_of(self, role: str) -> float:
        """The temperature ``role`` samples at, for scoring its log-probs (greedy decoding,
        temperature 0, is scored at 1)."""
        t = self.role_sampling.get(role, {}).get("temperature", self.filled().temperature)
        return float(t) if t else 1.0


ROLE_SAMPLING_KEYS = frozenset({"temperature", "top_p", "top_k", "max_new_tokens", "stop"})

MAX_NEW_TOKENS: int = declared_default(GenerationConfig, "max_new_tokens")
"""The token budget of a completion wherever no recipe, suite or flag sets one (the generation
section's default: the sampling parameters, the rollout engine and the evaluations read it)."""


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
        prompt_seeds: one seed per prompt of the call (overrides ``seed``): each prompt's samples
            then depend on its own seed only, not on its position in the batch (the trainer
            uses this under ``torch.distributed``, where a batch is split across processes).
    """

    n: int = 1
    temperature: float = declared_default(GenerationConfig, "temperature")
    top_p: float = declared_default(GenerationConfig, "top_p")
    top_k: int = declared_default(GenerationConfig, "top_k")
    max_new_tokens: int = declared_default(GenerationConfig, "max_new_tokens")
    stop: tuple[str, ...] = ()
    seed: int | None = None
    prompt_seeds: tuple[int, ...] | None = None

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
        if self.prompt_seeds is not None:
            seeds = tuple(self.prompt_seeds)
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds):
                raise ValueError(f"prompt_seeds must be ints, got {self.prompt_seeds!r}")
            object.__setattr__(self, "prompt_seeds", seeds)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def row_seeds(self, n_prompts: int) -> list[int] | None:
        """One seed per (prompt, sample) row, prompt-major; None when the call is unseeded.

        >>> SamplingParams(n=2, seed=7).row_seeds(1) == [row_seed(7, 0, 0), row_seed(7, 0, 1)]
        True
        >>> SamplingParams(prompt_seeds=(5, 7)).row_seeds(2)[1] == row_seed(7, 0, 0)
        True
        """
        if self.prompt_seeds is not None:
            if len(self.prompt_seeds) != n_prompts:
                raise ValueError(
                    f"prompt_seeds has {len(self.prompt_seeds)} seeds for {n_prompts} prompts"
                )
            return [row_seed(ps, 0, s) for ps in self.prompt_seeds for s in range(self.n)]
        if self.seed is None:
            return None
        return [row_seed(self.seed, p, s) for p in range(n_prompts) for s in range(self.n)]


_MIX_A = 0x9E3779B97F4A7C15
_MIX_B = 0xBF58476D1CE4E5B9
_MASK63 = (1 << 63) - 1


def row_seed(seed: int, prompt_index: int, sample_index: int) -> int:
    """Deterministic 63-bit seed for one (prompt, sample) pair of a seeded call."""
    x = (seed * _MIX_A + prompt_index * _MIX_B + sample_index) & ((1 << 64) - 1)
    x ^= x >> 31
    x = (x * _MIX_B) & ((1 << 64) - 1)
    x ^= x >> 29
    return x & _MASK63


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


@dataclass
class PartialCompletion:
    """A completion being decoded in segments (see the module docstring).

    ``finish_reason`` is ``None`` while the completion may go on; ``sampler_state`` is whatever
    the backend must carry between segments (vLLM: the last stop reason; the transformers
    backend needs none: its random streams are indexed by token position);
    ``versions`` holds, per segment, ``(first token index, policy version)`` as the driver
    recorded it, so a trainer can see which policy wrote which tokens.
    """

    prompt_ids: list[int]
    seed: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    sampler_state: Any = None
    versions: list[tuple[int, int]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


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

    def evaluation_scope(self, batch_size: int | None = None) -> AbstractContextManager[Any]:
        """A scope in which the weights do not change (an evaluation): a backend may decode up
        to ``batch_size`` sequences per batch and reuse prompt prefixes' KV caches between
        calls. The default changes nothing."""
        return contextlib.nullcontext()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    # segment rollouts (optional; the token-level backends implement them)
    def start_partials(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams
    ) -> list[list[PartialCompletion]]:
        """``params.n`` empty partial completions per prompt (prompt encoded, seed assigned)."""
        raise NotImplementedError(f"{type(self).__name__} cannot decode in segments")

    def extend(
        self, partials: Sequence[PartialCompletion], params: SamplingParams, max_tokens: int
    ) -> list[PartialCompletion]:
        """Decode at most ``max_tokens`` more tokens for each unfinished partial; a partial ends
        (``finish_reason`` set) on EOS / a stop string, or at ``params.max_new_tokens`` tokens."""
        raise NotImplementedError(f"{type(self).__name__} cannot decode in segments")

    def finish_partial(self, partial: PartialCompletion, params: SamplingParams) -> Completion:
        """The :class:`Completion` of a finished partial (text decoded as ``generate`` does)."""
        raise NotImplementedError(f"{type(self).__name__} cannot decode in segments")


class TokenLevelPolicy(ChatTemplatePrompts, Policy):
    """A backend that holds its tokenizer and decodes from token ids (transformers, in-process
    vLLM): prompts are encoded by :class:`~adapters.policies.chat.ChatTemplatePrompts`, and a
    segment rollout starts from those ids. Subclasses implement :meth:`Policy.extend` and
    :meth:`Policy.finish_partial`."""

    def start_partials(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams
    ) -> list[list[PartialCompletion]]:
        return empty_partials(self.encode_prompts(prompts, params.max_new_tokens), params)


def empty_partials(
    encoded: Sequence[list[int]], params: SamplingParams
) -> list[list[PartialCompletion]]:
    """``params.n`` fresh partials per encoded prompt, seeded as ``generate`` seeds its rows
    (:meth:`SamplingParams.row_seeds`; unseeded calls draw from torch's global generator)."""
    seeds = params.row_seeds(len(encoded))
    if seeds is None:
        import torch

        seeds = torch.randint(0, 2**62, (len(encoded) * params.n,)).tolist()
    return [
        [PartialCompletion(list(ids), seeds[p * params.n + s]) for s in range(params.n)]
        for p, ids in enumerate(encoded)
    ]


def decoded_completion(
    tokenizer: Any,
    prompt_ids: Sequence[int],
    tokens: list[int],
    logprobs: list[float],
    finish: str,
    params: SamplingParams,
    *,
    drop_last: bool,
) -> Completion:
    """The :class:`Completion` of generated ``tokens``: the text is decoded without the last
    token when it ended the sequence (``drop_last``: EOS or a stop token) and cut before the
    first stop string (which makes ``finish_reason`` ``"stop"``)."""
    text_ids = tokens[:-1] if drop_last and tokens else tokens
    text = tokenizer.decode(text_ids, skip_special_tokens=False)
    text, matched = truncate_stop(text, params.stop)
    if matched:
        finish = "stop"
    return Completion(
        text=text,
        token_ids=tokens,
        logprobs=logprobs,
        prompt_ids=list(prompt_ids),
        finish_reason=finish,  # type: ignore[arg-type]
    )


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
