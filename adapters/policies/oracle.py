"""The oracle policy: every completion is the env's own scripted correct answer.

It needs no model; the rollout engine asks the env pool for ``raw_env.oracle(agent)`` whenever
the acting role is served by a policy with ``env_aware = True``. Used for tests, upper bounds in
benchmarks (``python -m adapters.evaluate --policy oracle``) and env throughput measurements.
"""

from __future__ import annotations

from collections.abc import Sequence

from adapters.policies.base import Completion, Policy, SamplingParams
from adapters.policies.chat import ChatPrompt

__all__ = ["OraclePolicy"]


class OraclePolicy(Policy):
    name = "oracle"
    env_aware = True

    def generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        raise RuntimeError(
            "OraclePolicy answers from the env's state, not from prompts: use it through "
            "adapters.rollout.RolloutEngine (or adapters.evaluate)"
        )
