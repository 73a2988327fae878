"""Keep rules: which of an agent-turn's K candidates continue the episode (tree sampling).

At every agent's turn the rollout engine samples K candidates, steps each on its own clone of the
branch and scores it with the env's reward; :func:`select_candidates` then picks the candidates
whose clones go on:

- ``best`` (AT-GRPO, Algorithm 1, greedy): the highest-reward candidate continues (ties go to the
  lowest index);
- ``random`` / ``balanced`` / ``adaptive`` (MarsRL's grouped agentic rollouts, usually with
  ``keep_n=2``): among candidates whose episode goes on, two random ones; one positive
  (reward >= 0.5) and one negative; or those the env prefers for the acting role (MarsRL: the
  verifier's inputs are preferably wrong solutions, the corrector's inputs preferably reports that
  correctly found errors — ``raw_env.adaptive_preference(agent)`` gives ``"low"`` or ``"high"``).

The kept candidate *is* the clone that was stepped, so the episode continues from exactly the
state that earned the reward (the reference implementation copies the best branch over the
others, which gives the next agent's candidates identical rewards and advances the wrong env).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

__all__ = ["KEEP_RULES", "KeepRule", "select_candidates"]

KeepRule = Literal["best", "random", "balanced", "adaptive"]
KEEP_RULES: tuple[KeepRule, ...] = ("best", "random", "balanced", "adaptive")


def select_candidates(
    rewards: Sequence[float],
    done: Sequence[bool],
    rule: KeepRule,
    keep_n: int,
    rng: random.Random,
    preference: str = "high",
) -> list[int]:
    """Indices of the candidates that continue.

    >>> select_candidates([0.1, 0.9, 0.5], [False] * 3, "best", 1, random.Random(0))
    [1]
    >>> select_candidates([1, 0, 1, 0], [False] * 4, "balanced", 2, random.Random(0))
    [2, 3]
    >>> select_candidates(
    ...     [1, 0, 1, 0], [False, False, True, True], "adaptive", 2, random.Random(0), "low"
    ... )
    [1, 0]
    >>> select_candidates([1, 1], [True, True], "random", 2, random.Random(0))
    []
    """
    idx = list(range(len(rewards)))
    if rule == "best":
        return sorted(idx, key=lambda i: (-rewards[i], i))[:keep_n]
    live = [i for i in idx if not done[i]]
    if rule == "random":
        return sorted(rng.sample(live, min(keep_n, len(live))))
    if rule == "balanced":
        pos = [i for i in live if rewards[i] >= 0.5]
        neg = [i for i in live if rewards[i] < 0.5]
        rng.shuffle(pos)
        rng.shuffle(neg)
        chosen: list[int] = []
        while len(chosen) < keep_n and (pos or neg):
            for bucket in (pos, neg):
                if bucket and len(chosen) < keep_n:
                    chosen.append(bucket.pop())
        return sorted(chosen)
    if rule == "adaptive":
        sign = 1.0 if preference == "low" else -1.0
        return sorted(live, key=lambda i: (sign * rewards[i], i))[:keep_n]
    raise ValueError(f"unknown keep rule {rule!r}")
