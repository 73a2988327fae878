"""What a rollout produces: one :class:`Sample` per completion, one :class:`Episode` per leaf.

A :class:`Sample` is also one line of a training run's ``trajectories.jsonl``
(:func:`write_jsonl`): the prompt and completion (text and token ids), the sampling log-probs, the
reward and every reward part the env reported, the group key its advantage is computed in,
whether the engine kept it (tree sampling), and whether it may be trained on: a setting marks a
step it only needs for a reward (MAE's and SAGE's difficulty samples) with
``infos[agent]["trainable"] = False``, and the trainer leaves such samples out of the update.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import IO, Any

__all__ = ["Episode", "RolloutResult", "Sample", "write_jsonl"]


@dataclass
class Sample:
    """One trajectory record: a completion, what it was conditioned on, and what it earned."""

    group: str
    instance: int
    instance_id: str
    branch: str
    role: str
    policy_id: str
    turn: int
    step: int
    candidate: int
    kept: bool
    prompt: str
    completion: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    reward: float
    reward_parts: dict[str, Any]
    success: bool
    done: bool
    finish_reason: str = "stop"
    trainable: bool = True  # False: the env marked this step as not for training (info)
    advantage: float | None = None
    policy_version: int = 0  # updates the generating policy had made (its oldest token's)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Episode:
    """A finished leaf: one complete path through an instance."""

    instance: int
    instance_id: str
    branch: str
    success: bool
    steps: int
    turns: int
    returns: dict[str, float]
    final_team: float
    progress: float = 0.0  # the setting's own progress measure at the end (env.progress())


@dataclass
class RolloutResult:
    samples: list[Sample]
    episodes: list[Episode]

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.episodes:
            n = len(self.episodes)
            out["success_rate"] = sum(e.success for e in self.episodes) / n
            out["team_reward"] = sum(e.final_team for e in self.episodes) / n
            out["turns"] = sum(e.turns for e in self.episodes) / n
        by_role: dict[str, list[float]] = defaultdict(list)
        for s in self.samples:
            by_role[s.role].append(s.reward)
        for role, rs in by_role.items():
            out[f"reward/{role}"] = sum(rs) / len(rs)
        if self.samples:
            out["reward/mean"] = sum(s.reward for s in self.samples) / len(self.samples)
            out["samples"] = float(len(self.samples))
            out["completion_tokens"] = float(sum(len(s.completion_ids) for s in self.samples))
        return out


def write_jsonl(samples: Sequence[Sample], fh: IO[str], **extra: Any) -> int:
    """Append samples as JSON lines (with ``extra`` fields such as the training step)."""
    for s in samples:
        fh.write(json.dumps({**extra, **s.to_dict()}, ensure_ascii=False) + "\n")
    fh.flush()
    return len(samples)
