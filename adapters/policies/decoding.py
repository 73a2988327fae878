"""The KV cache and the attention of CPU decoding: what a decode step costs on a CPU.

A decode step of a small model on a CPU is not its matrix products. Profiled on the embedded
135M model, the linear layers were a small part of a step; the rest was

* **the cache's growth**: transformers' ``DynamicLayer`` concatenates every new position onto
  its keys and values, copying the whole cache of every layer at every step
  (:func:`growing_layer` writes into spare capacity instead, grown geometrically); and
* **the one-query attention**: without a padding mask (rows of equal length, e.g. the
  candidates of one prompt), transformers' ``sdpa`` hands a decode step with grouped key/value
  heads to PyTorch's CPU kernel for grouped-query attention, which is slow on bfloat16 inputs;
  with a mask it attends each key/value head's query group as one (its ``pack_gqa`` path),
  several times faster. :func:`decode_attention` gives a maskless decode step an all-true mask:
  the same ``sdpa`` arithmetic, the fast path (in float32 the logits agree with transformers' to
  1e-5, ``tests/adapters/policies/test_decoding.py``).

Both change only decoding: prompt prefill (several query positions) and every training forward
run transformers' ``sdpa`` attention unchanged. ``benchmarks/generation.py`` measures them
against transformers' defaults in the same run (its "CPU decoding" rows); what they gain with
the transformers release in use, and the profile, are in docs/scaling.md ("Generation and update
speed on a CPU"). Re-measure with another release: the gain depends on it.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["ATTENTION", "decode_attention", "decode_cache", "growing_layer", "use_decode_attention"]

ATTENTION = "mas_decode"
"""The name :func:`decode_attention` is registered under (transformers' ``AttentionInterface``)."""


def decode_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' ``sdpa`` attention, except that a decode step (one query position per row)
    without a mask gets an all-true one: ``sdpa`` then attends each key/value head's query group
    as one (its ``pack_gqa`` path) instead of dispatching to the grouped-query kernel, which on a
    CPU with bfloat16 inputs was the slowest part of a step. Same arithmetic, same result."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is None and query.shape[2] == 1:
        attention_mask = torch.ones(
            (query.shape[0], 1, 1, key.shape[2]), dtype=torch.bool, device=query.device
        )
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, decode_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def use_decode_attention(model: Any, on: bool = True) -> bool:
    """Switch a transformers model that uses ``sdpa`` attention to :func:`decode_attention`
    (registered on first use), or with ``on=False`` back to ``sdpa``; returns whether the model
    now uses :func:`decode_attention`. Other implementations (flash attention, eager, a custom
    one) are left as they are."""
    if hasattr(model, "get_base_model"):  # a peft model: its base holds the config
        model = model.get_base_model()
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if not hasattr(model, "set_attn_implementation"):
        return current == ATTENTION
    if on and current == "sdpa":
        _register()
        model.set_attn_implementation(ATTENTION)
    elif not on and current == ATTENTION:
        model.set_attn_implementation("sdpa")
    return getattr(config, "_attn_implementation", None) == ATTENTION


@functools.cache
def growing_layer() -> type:
    """The ``GrowingLayer`` class (built on first use: transformers is a heavy import)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):  # type: ignore[misc]
        """A ``DynamicLayer`` whose keys and values are views into buffers with spare capacity:
        a new position is written in place; a full buffer is reallocated half as large again.
        Every other method of ``DynamicLayer`` works on the views (a method that replaces them,
        e.g. ``crop``, makes the next update copy them into a fresh buffer)."""

        _kbuf: Any = None
        _vbuf: Any = None

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            new = key_states.shape[-2]
            keys: Any = self.keys
            have = keys.shape[-2] if keys.dim() == 4 else 0
            buf = self._kbuf
            fits = (
                have > 0
                and self._in_buffer()
                and buf.shape[0] == key_states.shape[0]
                and have + new <= buf.shape[-2]
            )
            if not fits:
                b, h, _, d = key_states.shape
                capacity = have + new + max(64, (have + new) // 2)
                self._kbuf = key_states.new_empty((b, h, capacity, d))
                self._vbuf = value_states.new_empty((b, value_states.shape[1], capacity, d))
                if have:
                    self._kbuf[:, :, :have].copy_(self.keys)
                    self._vbuf[:, :, :have].copy_(self.values)
            self._kbuf[:, :, have : have + new].copy_(key_states)
            self._vbuf[:, :, have : have + new].copy_(value_states)
            self.keys = self._kbuf[:, :, : have + new]
            self.values = self._vbuf[:, :, : have + new]
            return self.keys, self.values

        def _in_buffer(self) -> bool:
            """Whether the keys and values are still the views :meth:`update` made."""
            keys: Any = self.keys
            values: Any = self.values
            return (
                self._kbuf is not None
                and keys.data_ptr() == self._kbuf.data_ptr()
                and values.data_ptr() == self._vbuf.data_ptr()
            )

        def reorder_cache(self, beam_idx: Any) -> None:
            if self.get_seq_length() > 0 and self._in_buffer():
                keys: Any = self.keys
                have = keys.shape[-2]
                idx = beam_idx.to(self._kbuf.device)
                self._kbuf = self._kbuf.index_select(0, idx)
                self._vbuf = self._vbuf.index_select(0, idx)
                self.keys = self._kbuf[:, :, :have]
                self.values = self._vbuf[:, :, :have]
            else:
                super().reorder_cache(beam_idx)

    return GrowingLayer


def decode_cache(config: Any) -> Any:
    """A ``DynamicCache`` for ``config`` whose full-attention layers grow in place
    (:func:`growing_layer`; sliding-window layers stay as transformers makes them)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    grow = growing_layer()
    cache = DynamicCache(config=config)
    cache.layers = [grow() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
