"""The training layer: configuration, recipes, the trainer loop, the update and its estimators.

==================  ===========================================================================
module              what lives there
==================  ===========================================================================
``config``          :class:`TrainConfig`: a run as sections; knob names, auto values, YAML
``sections``        the training layer's sections (policy, update, schedule, eval, output,
                    compute), each knob declared once with its default and its help
``recipes``         the papers' recipes and the settings' values that fill auto knobs
``flags``           command-line flags generated from the knobs
``trainer``         :class:`Trainer`: the loop (rollout, update, logs, evaluation, checkpoints)
``policy_models``   the trainable models: LoRA adapters per policy, reference model, optimizers
``backends``        how those models generate during rollouts (transformers in place, or vLLM)
``update``          advantages for a step's samples; per policy, mini-batches, gradient
                    accumulation and optimizer steps
``advantages``      GRPO / AT-GRPO group advantages, REINFORCE++, Task-Relative REINFORCE++
``losses``          a micro-batch's loss, one function per term: PPO clip, Eq. 3's weights,
                    truncated importance weights, KL loss, entropy bonus
``logprobs``        log-probs of completions (shared-prompt forward, chunked log-softmax)
``batch``           samples -> train items, minibatches and token-budget micro-batches
``masking``         padding and masks of per-token tensors
``checkpoints``     what a checkpoint holds; atomic save, exact resume, final export
``distributed``     torchrun ranks, DDP / FSDP2 wrapping, sharded checkpoints, step reductions
``metrics``         JSONL + TensorBoard metrics and the training-curve PNG
==================  ===========================================================================

``Trainer`` and ``TrainConfig`` are importable from here (lazily: importing this package does not
import torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from adapters.training.config import TrainConfig
    from adapters.training.trainer import Trainer

__all__ = ["TrainConfig", "Trainer"]


def __getattr__(name: str) -> Any:
    if name == "TrainConfig":
        from adapters.training.config import TrainConfig

        return TrainConfig
    if name == "Trainer":
        from adapters.training.trainer import Trainer

        return Trainer
    raise AttributeError(f"module 'adapters.training' has no attribute {name!r}")
