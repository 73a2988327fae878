"""An int8 generation copy for CPUs that compute bfloat16 only by emulation.

Where a CPU lacks AVX512-BF16 and AMX (:func:`~adapters.policies.models.native_bf16`), a policy
generates in float32, and a decode step of a few rows is then bound by reading the weights: a
135M model reads 540 MB of float32 weights per step. :func:`quantize_linears` replaces every
``nn.Linear`` of a model with an :class:`Int8Linear`: weights quantized per output channel
(symmetric, int8, scale ``max |w| / 127``), activations quantized per call (dynamic, uint8 with
the reduced range fbgemm needs without VNNI), products in fbgemm's int8 kernels with int32
accumulation. The model reads a quarter of the bytes per step and its prefill runs on int8
products. What it gains is in docs/scaling.md ("A CPU without native bfloat16").

The copy generates only. Its log-probs differ from the training weights' by the quantization
error, as a bfloat16 generation copy's do: the update recomputes the PPO ratio's denominator
under the training weights (``old_logprobs``) and clips the ratio
(:class:`~adapters.training.backends.GenerationCopy`).

Each :class:`Int8Linear` keeps its float weight (the parameter the trainer's generation copy
refreshes after an update) beside the packed int8 one; :func:`repack` quantizes again from it.

``quantize`` choices, everywhere they are offered (``--quantize`` of ``python -m
adapters.evaluate``, ``compute.generation_quant`` of the trainer):

* ``none`` (default): the model as it is;
* ``int8``: always (CPU only: fbgemm's kernels);
* ``auto``: ``int8`` for a model that generates in float32 on a CPU without native bfloat16,
  else ``none``.

``none`` stays the default until the effect of int8 weights on the shipped cold start's greedy
success is measured against float32 on the 64 validation levels (docs/scaling.md says what was
measured so far: the speed).
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = [
    "QUANTIZE_CHOICES",
    "Int8Linear",
    "available",
    "quantize_linears",
    "repack",
    "resolve_quantize",
]

QUANTIZE_CHOICES = ("auto", "int8", "none")


def resolve_quantize(choice: str, device: Any, dtype: Any) -> str:
    """``int8`` or ``none`` for a model generating on ``device`` in ``dtype`` (module
    docstring); ``int8`` asked for off a CPU is a ``ValueError``.

    >>> import torch
    >>> resolve_quantize("none", torch.device("cpu"), torch.float32)
    'none'
    >>> resolve_quantize("auto", torch.device("cpu"), torch.bfloat16)
    'none'
    """
    if choice not in QUANTIZE_CHOICES:
        raise ValueError(f"quantize {choice!r}: use one of {QUANTIZE_CHOICES}")
    on_cpu = getattr(device, "type", str(device)) == "cpu"
    if choice == "int8" and not on_cpu:
        raise ValueError("quantize 'int8' runs on a CPU only (fbgemm's kernels)")
    if choice == "int8" and not available():
        raise ValueError("quantize 'int8': this torch build has no fbgemm int8 kernels")
    if choice != "auto":
        return choice
    import torch

    from adapters.policies.models import native_bf16

    if on_cpu and dtype == torch.float32 and not native_bf16(device) and available():
        return "int8"
    return "none"


def available() -> bool:
    """Whether this torch build has fbgemm's dynamic int8 linear kernels (torch marks its
    quantized tensors deprecated; ``auto`` falls back to ``none`` once they are gone)."""
    import torch

    try:
        return "fbgemm" in torch.backends.quantized.supported_engines and hasattr(
            torch.ops.quantized, "linear_dynamic"
        )
    except (AttributeError, RuntimeError):
        return False


def _int8_class() -> type:
    import torch

    class _Int8Linear(torch.nn.Module):
        """``nn.Linear`` with int8 weights and dynamically quantized activations (fbgemm).

        ``weight`` (and ``bias``) stay the float parameters they were, in the order
        ``nn.Linear`` registers them, so a copy's parameters still pair with its source's;
        :meth:`repack` quantizes ``weight`` again after it changed."""

        def __init__(self, linear: Any) -> None:
            super().__init__()
            self.in_features = linear.in_features
            self.out_features = linear.out_features
            self.weight = linear.weight
            self.bias = linear.bias
            self._packed: Any = None
            self.repack()

        def repack(self) -> None:
            with torch.no_grad(), warnings.catch_warnings():
                # torch marks its quantized tensors deprecated (available() checks the kernels)
                warnings.simplefilter("ignore", UserWarning)
                w = self.weight.detach().float()
                scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
                zero = torch.zeros(w.shape[0], dtype=torch.long)
                q = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
                bias = None if self.bias is None else self.bias.detach().float()
                self._packed = torch.ops.quantized.linear_prepack(q, bias)

        def forward(self, x: Any) -> Any:
            if x.dtype == torch.float32:
                return torch.ops.quantized.linear_dynamic(x, self._packed, reduce_range=True)
            # a bfloat16 model's activations: the kernels take float32
            y = torch.ops.quantized.linear_dynamic(x.float(), self._packed, reduce_range=True)
            return y.to(x.dtype)

        def extra_repr(self) -> str:
            return f"in_features={self.in_features}, out_features={self.out_features}, int8"

    return _Int8Linear


_CLASS: type | None = None


def Int8Linear(linear: Any) -> Any:
    """An int8 replacement for ``linear`` (an ``nn.Linear``), sharing its parameters."""
    global _CLASS
    if _CLASS is None:
        _CLASS = _int8_class()
    return _CLASS(linear)


def quantize_linears(model: Any) -> Any:
    """Replace every ``nn.Linear`` of ``model`` (in place) with :func:`Int8Linear`; returns
    ``model``. Embeddings, norms and anything else stay as they are; a tied output head gets
    its own int8 copy while the embedding keeps the float table.

    >>> import torch
    >>> lin = torch.nn.Linear(64, 32)
    >>> net = quantize_linears(torch.nn.Sequential(lin))
    >>> x = torch.randn(3, 64)
    >>> bool((net(x) - lin(x)).abs().max() < 0.05), type(net[0]).__name__
    (True, '_Int8Linear')
    """
    import torch

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, Int8Linear(child))
    return model


def repack(model: Any) -> int:
    """Quantize every :func:`Int8Linear` of ``model`` again from its float weight (after the
    weights changed); returns how many."""
    n = 0
    for mod in model.modules():
        if _CLASS is not None and isinstance(mod, _CLASS):
            mod.repack()  # type: ignore[attr-defined]
            n += 1
    return n
