"""The policies layer: one interface for every way of writing a completion.

==========================  =====================================================================
module                      what lives there
==========================  =====================================================================
``base``                    :class:`Policy`, :class:`SamplingParams`, :class:`Completion` and
                            the conventions every backend follows (EOS, stop strings, log-probs);
                            ``TokenLevelPolicy``, the base of the backends that decode token by
                            token (segments: ``start_partials``)
``chat``                    prompt validation and chat-template rendering
                            (``chat_template_kwargs``, e.g. Qwen3's ``enable_thinking``)
``transformers_policy``     :class:`TransformersPolicy` (CPU/GPU, trainable)
``vllm_policy``             :class:`VLLMPolicy` (needs ``vllm``; LoRA views, weight sync)
``openai_compat``           :class:`OpenAIPolicy` (any OpenAI-compatible server; benchmarking)
``scripted`` / ``oracle``   :class:`ScriptedPolicy` (a function), :class:`OraclePolicy` (the env's
                            own correct answer)
``wrappers``                :class:`ManagedPolicy` (prompt prefixes, adapter activation, timing)
``models``                  loading models: the embedded SmolLM2, tiny test models, configs
``quantize``                float16-weight or int8 linear layers for generating on a CPU
``specs``                   policies from ``--policy`` spec strings
==========================  =====================================================================

>>> from adapters.policies import ScriptedPolicy, SamplingParams
>>> ScriptedPolicy(lambda text: "42").generate(["6 * 7?"], SamplingParams(n=1))[0][0].text
'42'

The transformers and vLLM backends are imported lazily, so importing this package does not
import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adapters.policies.base import (
    EVAL_TEMPERATURE,
    MAX_NEW_TOKENS,
    Completion,
    FinishReason,
    GenerationConfig,
    Policy,
    SamplingParams,
    truncate_stop,
)
from adapters.policies.chat import ChatPrompt, check_prompts, to_messages
from adapters.policies.openai_compat import OpenAIAPIError, OpenAIPolicy
from adapters.policies.oracle import OraclePolicy
from adapters.policies.scripted import ScriptedPolicy
from adapters.policies.wrappers import GenerationTimer, ManagedPolicy

if TYPE_CHECKING:  # pragma: no cover
    from adapters.policies.transformers_policy import TransformersPolicy
    from adapters.policies.vllm_policy import VLLMPolicy

__all__ = [
    "EVAL_TEMPERATURE",
    "MAX_NEW_TOKENS",
    "ChatPrompt",
    "Completion",
    "FinishReason",
    "GenerationConfig",
    "GenerationTimer",
    "ManagedPolicy",
    "OpenAIAPIError",
    "OpenAIPolicy",
    "OraclePolicy",
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
