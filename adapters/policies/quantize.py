"""Generation copies with smaller weights, for CPUs that compute bfloat16 only by emulation.

Where a CPU lacks AVX512-BF16 and AMX (:func:`~adapters.policies.models.native_bf16`), a policy
generates in float32, and a decode step of a few rows is then bound by reading the weights: a
135M model reads 540 MB of float32 weights per step. :func:`quantize_linears` replaces every
``nn.Linear`` of a model with one of two packed layers:

* :func:`Fp16Linear` (``fp16``): the weights stored as float16 and widened to float32 inside
  fbgemm's kernel, activations and sums in float32. Half the bytes per decode step; the
  products differ from float32's by the weights' float16 rounding (a relative error near 1e-4),
  so greedy decoding almost always picks the same tokens. The kernel beats float32 only for
  small calls (:data:`FP16_MAX_ROWS`): a prompt's prefill and any call of more rows run
  ``F.linear`` on the float weight, unchanged.
* :func:`Int8Linear` (``int8``): weights quantized per output channel (symmetric, int8, scale
  ``max |w| / 127``), activations quantized per call (dynamic, uint8 with the reduced range
  fbgemm needs without VNNI), products in fbgemm's int8 kernels with int32 accumulation. A
  quarter of the bytes and int8 prefill, but the activations' rounding changes what a small
  model writes.

What each gains, and what it does to the shipped cold start's success, is in docs/scaling.md
("A CPU without native bfloat16").

The copy generates only. Its log-probs differ from the training weights' by the rounding, as a
bfloat16 generation copy's do: the update recomputes the PPO ratio's denominator under the
training weights (``old_logprobs``) and clips the ratio
(:class:`~adapters.training.backends.GenerationCopy`).

Each packed layer keeps its float weight (the parameter the trainer's generation copy refreshes
after an update) beside the packed one; :func:`repack` packs again from it.

``quantize`` choices, everywhere they are offered (``--quantize`` of ``python -m
adapters.evaluate``, ``compute.generation_quant`` of the trainer):

* ``auto`` (default): ``fp16`` for a model that generates in float32 on a CPU without native
  bfloat16, else ``none`` (bfloat16 CPUs and GPUs are unaffected);
* ``none``: the model as it is;
* ``fp16``, ``int8``: always (CPU only: fbgemm's kernels).

Packed layers and compiled decode steps (``compile_decode``) exclude each other:
``torch.compile`` cannot trace fbgemm's packed weights, so ``auto`` is ``none`` there and an
explicit ``fp16`` or ``int8`` is an error.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = [
    "FP16_MAX_ROWS",
    "QUANTIZE_CHOICES",
    "Fp16Linear",
    "Int8Linear",
    "available",
    "quantize_linears",
    "repack",
    "resolve_quantize",
]

QUANTIZE_CHOICES = ("auto", "fp16", "int8", "none")

FP16_MAX_ROWS = 16
"""The most rows (batch x positions) a :func:`Fp16Linear` call sends to the float16 kernels:
measured on an AVX2 CPU (docs/scaling.md), they are about 3x float32's speed at 1 to 4 rows,
1.9x at 8, 1.3x at 16 and slower than float32 from about 24 rows on."""


def resolve_quantize(choice: str, device: Any, dtype: Any, compiled: bool = False) -> str:
    """``fp16``, ``int8`` or ``none`` for a model generating on ``device`` in ``dtype`` (module
    docstring); ``fp16`` or ``int8`` asked for off a CPU, without the kernels, or for decode
    steps that ``torch.compile`` traces (``compiled``: fbgemm's packed weights cannot be
    traced), is a ``ValueError``; ``auto`` is then ``none``.

    >>> import torch
    >>> resolve_quantize("none", torch.device("cpu"), torch.float32)
    'none'
    >>> resolve_quantize("auto", torch.device("cpu"), torch.bfloat16)
    'none'
    """
    if choice not in QUANTIZE_CHOICES:
        raise ValueError(f"quantize {choice!r}: use one of {QUANTIZE_CHOICES}")
    on_cpu = getattr(device, "type", str(device)) == "cpu"
    if choice in ("int8", "fp16") and not on_cpu:
        raise ValueError(f"quantize {choice!r} runs on a CPU only (fbgemm's kernels)")
    if choice in ("int8", "fp16") and not available(choice):
        raise ValueError(f"quantize {choice!r}: this torch build has no fbgemm {choice} kernels")
    if choice in ("int8", "fp16") and compiled:
        raise ValueError(
            f"quantize {choice!r} and compiled decode steps (compile_decode) exclude each other: "
            "torch.compile cannot trace fbgemm's packed weights; turn one of them off"
        )
    if choice != "auto":
        return choice
    if compiled:
        return "none"
    import torch

    from adapters.policies.models import native_bf16

    if on_cpu and dtype == torch.float32 and not native_bf16(device) and available("fp16"):
        return "fp16"
    return "none"


def available(kind: str = "int8") -> bool:
    """Whether this torch build has fbgemm's kernels for ``kind`` (``"int8"``: dynamic int8
    linear layers; ``"fp16"``: float16-weight products). torch marks both deprecated;
    ``auto`` falls back to ``none`` once they are gone."""
    import torch

    try:
        if "fbgemm" not in torch.backends.quantized.supported_engines:
            return False
        if kind == "fp16":
            return hasattr(torch, "fbgemm_pack_gemm_matrix_fp16") and hasattr(
                torch, "fbgemm_linear_fp16_weight"
            )
        return hasattr(torch.ops.quantized, "linear_dynamic")
    except (AttributeError, RuntimeError):
        return False


def _quantized_classes() -> dict[str, type]:
    import torch

    class _QuantLinear(torch.nn.Module):
        """Shared part of the quantized replacements of ``nn.Linear``: ``weight`` (and
        ``bias``) stay the float parameters they were, in the order ``nn.Linear`` registers
        them, so a copy's parameters still pair with its source's; :meth:`repack` packs
        ``weight`` again after it changed."""

        kind = ""

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
                # torch marks these kernels deprecated (available() checks they exist)
                warnings.simplefilter("ignore", UserWarning)
                self._packed = self._pack(self.weight.detach().float())

        def _pack(self, w: Any) -> Any:
            raise NotImplementedError

        def extra_repr(self) -> str:
            return f"in_features={self.in_features}, out_features={self.out_features}, {self.kind}"

    class _Int8Linear(_QuantLinear):
        """int8 weights (per output channel) and dynamically quantized activations (fbgemm)."""

        kind = "int8"

        def _pack(self, w: Any) -> Any:
            scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
            zero = torch.zeros(w.shape[0], dtype=torch.long)
            q = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
            bias = None if self.bias is None else self.bias.detach().float()
            return torch.ops.quantized.linear_prepack(q, bias)

        def forward(self, x: Any) -> Any:
            if x.dtype == torch.float32:
                return torch.ops.quantized.linear_dynamic(x, self._packed, reduce_range=True)
            # a bfloat16 model's activations: the kernels take float32
            y = torch.ops.quantized.linear_dynamic(x.float(), self._packed, reduce_range=True)
            return y.to(x.dtype)

    class _Fp16Linear(_QuantLinear):
        """float16 weights, float32 activations and accumulation (fbgemm) for calls of at
        most :data:`FP16_MAX_ROWS` rows; larger calls (a prompt's prefill, a training forward)
        run ``F.linear`` on the float weight."""

        kind = "fp16"

        def _pack(self, w: Any) -> Any:
            # the kernel takes a bias tensor: zeros for a layer without one
            self._bias: Any = torch.zeros(w.shape[0]) if self.bias is None else self.bias
            packed = torch.fbgemm_pack_gemm_matrix_fp16(w)
            # one call under repack's warning filter: torch warns once, on the first call
            torch.fbgemm_linear_fp16_weight(w.new_zeros(1, w.shape[1]), packed, self._bias)
            return packed

        def forward(self, x: Any) -> Any:
            if x.dtype != torch.float32 or x.numel() > FP16_MAX_ROWS * self.in_features:
                return torch.nn.functional.linear(x, self.weight, self.bias)
            return torch.fbgemm_linear_fp16_weight(x, self._packed, self._bias)

    return {"int8": _Int8Linear, "fp16": _Fp16Linear}


_CLASSES: dict[str, type] = {}


def _classes() -> dict[str, type]:
    if not _CLASSES:
        _CLASSES.update(_quantized_classes())
    return _CLASSES


def Int8Linear(linear: Any) -> Any:
    """An int8 replacement for ``linear`` (an ``nn.Linear``), sharing its parameters."""
    return _classes()["int8"](linear)


def Fp16Linear(linear: Any) -> Any:
    """A float16-weight replacement for ``linear`` (an ``nn.Linear``), sharing its
    parameters: the float16 kernels for calls of at most :data:`FP16_MAX_ROWS` rows."""
    return _classes()["fp16"](linear)


def quantize_linears(model: Any, kind: str = "int8") -> Any:
    """Replace every ``nn.Linear`` of ``model`` (in place) with :func:`Int8Linear` (``kind``
    ``"int8"``) or :func:`Fp16Linear` (``"fp16"``); returns ``model``. Embeddings, norms and
    anything else stay as they are; a tied output head gets its own packed copy while the
    embedding keeps the float table.

    >>> import torch
    >>> lin = torch.nn.Linear(64, 32)
    >>> net = quantize_linears(torch.nn.Sequential(lin))
    >>> x = torch.randn(3, 64)
    >>> bool((net(x) - lin(x)).abs().max() < 0.05), type(net[0]).__name__
    (True, '_Int8Linear')
    """
    import torch

    if kind not in ("int8", "fp16"):
        raise ValueError(f"quantize_linears: kind {kind!r}: use 'int8' or 'fp16'")
    cls = _classes()[kind]
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, cls(child))
    return model


def repack(model: Any) -> int:
    """Pack every quantized linear layer of ``model`` again from its float weight (after the
    weights changed); returns how many."""
    n = 0
    kinds = tuple(_CLASSES.values())
    for mod in model.modules():
        if kinds and isinstance(mod, kinds):
            mod.repack()  # type: ignore[attr-defined]
            n += 1
    return n
