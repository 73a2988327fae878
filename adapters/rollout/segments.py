"""Segment rollouts: long completions are decoded in fixed-length stages (UloRL section 2.3).

MarsRL (section 2.3) adopts UloRL's segment rollout for its 64k-token reasoning: the maximum
completion length is split into ``M`` segments of ``L`` tokens (the paper: 4 x 16k). At every
stage the generation backend decodes at most ``L`` new tokens for each unfinished completion.
A completion that ends inside the stage (EOS, a stop string, or the ``L * M`` token cap) is
returned at once, so the trainer can learn from it while the long tail is still being written;
an unfinished one keeps its prefix (token ids, behaviour log-probs, the sampler's random state)
and resumes in the next stage. Nothing is re-tokenised: the backend prefills the prompt ids and
the generated ids as they are (:meth:`~adapters.policies.base.Policy.extend`).

Every segment records the policy version that wrote it (``PartialCompletion.versions``), because
in an asynchronous trainer the weights may change between the stages of one completion; the
behaviour log-probs stored per token are those of the version that sampled the token, which is
what an importance-ratio correction needs.

:class:`SegmentedGenerator` keeps the in-flight completions between calls::

    gen = SegmentedGenerator(policy, params, segment_tokens=L, max_segments=M)
    gen.submit(prompts, keys)          # new prompts join the next stage
    for key, sample, completion, partial in gen.stage(version=v):
        ...                            # finished completions, ready to train
    state = gen.state_dict()           # the completions in flight, for a checkpoint

A checkpoint keeps the in-flight completions with :meth:`SegmentedGenerator.state_dict`: every
partial as it stands (prompt ids, the tokens and behaviour log-probs so far, the sampler's random
state, the policy version of each segment) with its key, sample index and submission stage, in
order, and the generator's sampling parameters and stage count.
:meth:`SegmentedGenerator.load_state_dict` puts them back, so a resumed run decodes the next
segment of each from exactly where the killed run stopped: the same tokens, log-probs and
versions as an uninterrupted run (the transformers backend restores the saved random stream; vLLM
seeds a segment from the partial's seed and length, both saved). The trainer saves them with the
agent pipeline's state (:mod:`adapters.training.schedule`).

:func:`generate_in_segments` runs stages until every completion has finished and returns what
``policy.generate`` returns (used by tests and benchmarks).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from adapters.policies.base import Completion, PartialCompletion, Policy, SamplingParams
from adapters.policies.chat import ChatPrompt

__all__ = ["SegmentConfig", "SegmentedGenerator", "FinishedSegment", "generate_in_segments"]


@dataclass(frozen=True)
class SegmentConfig:
    """``segment_tokens`` (L) new tokens per stage, at most ``max_segments`` (M) stages.

    >>> SegmentConfig(16384, 4).max_tokens
    65536
    """

    segment_tokens: int
    max_segments: int

    def __post_init__(self) -> None:
        if self.segment_tokens < 1 or self.max_segments < 1:
            raise ValueError(
                f"segment_tokens and max_segments must be >= 1, got "
                f"{self.segment_tokens} and {self.max_segments}"
            )

    @property
    def max_tokens(self) -> int:
        return self.segment_tokens * self.max_segments


@dataclass
class FinishedSegment:
    """A completion that finished in a stage: its key and sample index, the completion, and the
    partial it came from (for the per-segment policy versions)."""

    key: Hashable
    sample: int
    completion: Completion
    partial: PartialCompletion
    submitted_stage: int
    finished_stage: int


class SegmentedGenerator:
    """Decode completions in stages of at most ``segment_tokens`` new tokens (module docstring).

    ``params.max_new_tokens`` is capped at ``segment_tokens * max_segments``, so no completion
    needs more than ``max_segments`` stages.
    """

    def __init__(
        self, policy: Policy, params: SamplingParams, segment_tokens: int, max_segments: int
    ) -> None:
        self.policy = policy
        self.segments = SegmentConfig(segment_tokens, max_segments)
        cap = min(params.max_new_tokens, self.segments.max_tokens)
        self.params = replace(params, max_new_tokens=cap)
        self._pending: list[tuple[Hashable, int, int, PartialCompletion]] = []
        self.stages = 0

    @property
    def in_flight(self) -> int:
        """Completions submitted and not finished yet."""
        return len(self._pending)

    def submit(
        self,
        prompts: Sequence[ChatPrompt],
        keys: Sequence[Hashable],
        params: SamplingParams | None = None,
    ) -> None:
        """Queue ``n`` completions per prompt for the next stage; ``params`` may override the
        seeds of this submission (e.g. ``prompt_seeds``); the length cap stays the
        generator's."""
        if len(keys) != len(prompts):
            raise ValueError(f"{len(keys)} keys for {len(prompts)} prompts")
        call = self.params
        if params is not None:
            call = replace(params, max_new_tokens=self.params.max_new_tokens)
        for key, partials in zip(keys, self.policy.start_partials(prompts, call)):
            for s, p in enumerate(partials):
                self._pending.append((key, s, self.stages, p))

    def stage(self, version: int = 0) -> list[FinishedSegment]:
        """Decode one segment for every in-flight completion (tagged with policy ``version``);
        return the completions that finished, keep the others."""
        if not self._pending:
            return []
        partials = [p for *_, p in self._pending]
        for p in partials:
            p.versions.append((len(p.token_ids), version))
        grown = self.policy.extend(partials, self.params, self.segments.segment_tokens)
        finished: list[FinishedSegment] = []
        pending = []
        for (key, s, submitted, _), p in zip(self._pending, grown):
            if p.finished:
                completion = self.policy.finish_partial(p, self.params)
                finished.append(FinishedSegment(key, s, completion, p, submitted, self.stages))
            else:
                pending.append((key, s, submitted, p))
        self._pending = pending
        self.stages += 1
        return finished

    def state_dict(self) -> dict[str, Any]:
        """What continues the in-flight completions exactly (see the module docstring): the
        call's sampling parameters, the stage count and, in order, every unfinished
        completion's key, sample index, submission stage and partial (its prefix ids, behaviour
        log-probs, sampler state and per-segment policy versions). The policy is not in it."""
        return {
            "params": self.params,
            "stages": self.stages,
            "pending": list(self._pending),
        }

    def load_state_dict(
        self, state: dict[str, Any], keys: Mapping[Hashable, Hashable] | None = None
    ) -> None:
        """Restore :meth:`state_dict`; ``keys`` maps every saved key to its new name (e.g. env
        branch ids, which a restored env pool numbers anew)."""
        self.params = state["params"]
        self.stages = int(state["stages"])
        pending = state["pending"]
        if keys is not None:
            pending = [(keys[key], s, at, p) for key, s, at, p in pending]
        self._pending = list(pending)


def generate_in_segments(
    policy: Policy,
    prompts: Sequence[ChatPrompt],
    params: SamplingParams,
    segment_tokens: int,
    max_segments: int,
) -> list[list[Completion]]:
    """``policy.generate(prompts, params)`` decoded in stages of ``segment_tokens`` tokens.

    The length cap is ``min(params.max_new_tokens, segment_tokens * max_segments)``.
    """
    gen = SegmentedGenerator(policy, params, segment_tokens, max_segments)
    gen.submit(prompts, list(range(len(prompts))))
    out: list[list[Any]] = [[None] * params.n for _ in prompts]
    while gen.in_flight:
        for f in gen.stage():
            out[cast(int, f.key)][f.sample] = f.completion
    return out
