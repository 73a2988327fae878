"""Policy backends behind one interface: prompts in, completions with token ids and log-probs out.

>>> from adapters.policies import ScriptedPolicy, SamplingParams
>>> ScriptedPolicy(lambda text: "42").generate(["6 * 7?"], SamplingParams(n=1))[0][0].text
'42'

Backends: :class:`TransformersPolicy` (CPU/GPU, trainable), :class:`OpenAIPolicy` (any
OpenAI-compatible server; benchmarking), :class:`ScriptedPolicy` (tests, oracles). The
transformers backend is imported lazily so that importing this package does not import torch.
See :mod:`adapters.policies.base` for the exact conventions (stop strings, EOS, log-probs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adapters.policies.base import (
    ChatPrompt,
    Completion,
    FinishReason,
    Policy,
    SamplingParams,
    check_prompts,
    to_messages,
    truncate_stop,
)
from adapters.policies.openai_compat import OpenAIAPIError, OpenAIPolicy
from adapters.policies.scripted import ScriptedPolicy

if TYPE_CHECKING:  # pragma: no cover
    from adapters.policies.transformers_policy import TransformersPolicy
    from adapters.policies.vllm_policy import VLLMPolicy

__all__ = [
    "ChatPrompt",
    "Completion",
    "FinishReason",
    "OpenAIAPIError",
    "OpenAIPolicy",
    "Policy",
    "SamplingParams",
    "ScriptedPolicy",
    "TransformersPolicy",
    "VLLMPolicy",
    "check_prompts",
    "to_messages",
    "truncate_stop",
]


def __getattr__(name: str) -> Any:
    if name == "TransformersPolicy":
        from adapters.policies.transformers_policy import TransformersPolicy

        return TransformersPolicy
    if name == "VLLMPolicy":  # needs the vllm package (scripts/setup_vllm.sh)
        from adapters.policies.vllm_policy import VLLMPolicy

        return VLLMPolicy
    raise AttributeError(f"module 'adapters.policies' has no attribute {name!r}")
