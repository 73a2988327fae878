"""Compiled decode steps over a static KV cache: CUDA graphs for the transformers backend.

On a GPU a small model's decode step is bound by kernel launches and Python, not arithmetic: one
step of the 135M model over 128 rows with a 1,000-token cache took 24 ms eagerly on an H200 where
its arithmetic is well under a millisecond. A recorded CUDA graph replays every kernel of the step
in one launch; it needs every tensor it touches at a fixed address with a fixed shape, which
transformers' ``StaticCache`` provides (keys and values preallocated, written in place). This
module compiles the step with ``torch.compile`` (``fullgraph=True``: a step that cannot be traced
whole is an error, never a silent fallback) and feeds it from fixed buffers.

:class:`~adapters.policies.transformers_policy.TransformersPolicy` uses it when its
``compile_decode`` is not ``"off"`` (the training knob ``generation.compile_decode``):

* the prompts are prefilled as before (eagerly, the shared prefix once, each distinct prompt
  once) and their cache is copied into a ``StaticCache`` of ``R`` rows and ``L`` positions: ``R``
  the chunk's rows rounded up to a power of two (at least :data:`MIN_ROWS`), ``L`` the prompt
  width plus the token budget rounded up to a multiple of :data:`LENGTH_STEP`. Each ``(R, L)`` is
  compiled once and keeps its cache and buffers (the four most recently used shapes), so a
  recorded graph's addresses stay valid across calls;
* every step writes the new tokens and positions into those buffers and runs the compiled step;
  rows that finished stay in the batch (their outputs are ignored) where the eager loop drops
  them from its cache: a fixed shape is what a graph replays, and on a launch-bound GPU a row
  costs almost nothing. The static attention reads all ``L`` positions (masked), the eager one
  only the filled ones;
* the logits are the eager step's up to kernel rounding (same weights, same mask, same
  positions), so the sampled tokens are the eager loop's except where a draw lies within rounding
  of a boundary (``tests/adapters/policies/test_graphs.py`` pins greedy and sampled tokens on
  the tiny model in float32).

Modes (``compile_decode``):

* ``"on"``: ``torch.compile(mode="reduce-overhead")``: inductor's kernels, recorded as CUDA
  graphs on CUDA. On a CPU it compiles inductor's C++ kernels (no graphs); it is not the CPU
  default, whose decode path (:mod:`adapters.policies.decoding`) is measured beside it by
  ``benchmarks/generation.py``.
* ``"cudagraphs"``: CUDA graphs of the traced step without inductor (a shorter compile).
* any other ``torch.compile`` backend name (``"eager"``, ``"aot_eager"``, ``"inductor"``) is
  passed through; ``"eager"`` traces the step without compiling it, which is what the CPU tests
  use to check that the step traces whole.

Models whose cache is not all full attention (sliding-window layers) keep the eager loop
(:func:`supports`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = [
    "CompileMode",
    "LENGTH_STEP",
    "MIN_ROWS",
    "MODES",
    "GraphDecoder",
    "GraphSteps",
    "cache_shape",
    "check_mode",
    "supports",
]

MIN_ROWS = 8
"""The fewest rows a compiled step is built for (smaller chunks are padded up to it)."""

LENGTH_STEP = 256
"""Static caches are this many positions long, or a multiple of it."""

CompileMode = Literal["off", "on", "cudagraphs", "eager", "aot_eager", "inductor"]
"""What ``compile_decode`` accepts (the module page says what each does)."""

MODES: tuple[str, ...] = get_args(CompileMode)

RECOMPILE_LIMIT = 64
"""Compiled entries of the step function dynamo keeps (shapes x dtypes x models in a process)."""


def check_mode(mode: str, cuda: bool | None = None) -> str:
    """``mode`` if :data:`MODES` holds it and it can run (``cuda=False``: no CUDA device, where
    ``cudagraphs`` cannot), else a ``ValueError`` that says why."""
    if mode not in MODES:
        raise ValueError(f"compile_decode must be one of {', '.join(MODES)}; got {mode!r}")
    if mode == "cudagraphs" and cuda is False:
        raise ValueError(
            "compile_decode 'cudagraphs' needs a CUDA device ('on' compiles the steps anywhere)"
        )
    return mode


def cache_shape(rows: int, positions: int) -> tuple[int, int]:
    """``(R, L)``: the static cache a chunk of ``rows`` rows needing ``positions`` positions
    decodes in (fewer shapes, fewer compilations).

    >>> cache_shape(5, 700), cache_shape(9, 256), cache_shape(128, 1257)
    ((8, 768), (16, 256), (128, 1280))
    """
    if rows < 1 or positions < 1:
        raise ValueError(f"need rows and positions >= 1, got {rows}, {positions}")
    r = max(MIN_ROWS, 1 << (rows - 1).bit_length())
    return r, -(-positions // LENGTH_STEP) * LENGTH_STEP


def supports(model: Any) -> bool:
    """Whether ``model``'s static cache is all full-attention layers (what :class:`GraphDecoder`
    copies a prefilled cache into)."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    try:
        cache = StaticCache(config=model.config, max_cache_len=LENGTH_STEP)
    except (TypeError, ValueError):
        return False
    return all(type(layer) is StaticLayer for layer in cache.layers)


@dataclass
class _Graph:
    """One compiled step with its static cache and input buffers (``rows`` x ``length``)."""

    rows: int
    length: int
    cache: Any
    tokens: Any  # (R, 1) long
    positions: Any  # (R, 1) long
    mask: Any  # (R, L) long
    step: Any  # compiled (tokens, positions, mask) -> (R, vocab) float32 logits
    calls: int = 0


class GraphDecoder:
    """Compiled decode steps of one model, one per static-cache shape (see the module page).

    Args:
        model: a transformers causal LM (a plain model: a LoRA adapter is merged first,
            :class:`~adapters.training.backends.GenerationCopy`).
        mode: a :data:`MODES` entry other than ``"off"``.
        cache_kw: the keyword ``model.forward`` takes its cache by
            (:func:`~adapters.policies.models.cache_keyword`).
        keep_kw: whether ``model.forward`` takes ``logits_to_keep``.
        max_shapes: the static caches kept (the most recently used; each holds ``R x L``
            positions of every layer, several GB for a large model at 128 rows). A shape evicted
            and needed again is rebuilt; its compiled code is reused.
    """

    def __init__(
        self, model: Any, mode: str, cache_kw: str, keep_kw: bool, max_shapes: int = 4
    ) -> None:
        if check_mode(mode) == "off":
            raise ValueError("GraphDecoder needs a compile mode other than 'off'")
        if max_shapes < 1:
            raise ValueError(f"max_shapes must be >= 1, got {max_shapes}")
        self.model = model
        self.max_shapes = max_shapes
        self.mode = mode
        self._cache_kw = cache_kw
        self._keep_kw = keep_kw
        self._graphs: dict[tuple[int, int], _Graph] = {}

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The ``(R, L)`` shapes compiled so far."""
        return list(self._graphs)

    def start(self, cache: Any, index: Any, attn: Any, next_pos: Any, budget: int) -> GraphSteps:
        """Begin decoding ``index.numel()`` rows: row ``i`` continues row ``index[i]`` of the
        prefilled ``cache`` (all its positions), with attention mask ``attn`` (rows, width) and
        next position ``next_pos`` (rows,); at most ``budget`` tokens each."""
        import torch

        n, width = attn.shape
        key = cache_shape(n, width + budget)
        g = self._graphs.pop(key, None) or self._build(*key, cache)
        self._graphs[key] = g  # most recently used last
        while len(self._graphs) > self.max_shapes:  # its cache and buffers are freed
            self._graphs.pop(next(iter(self._graphs)))
        with torch.no_grad():
            for src, dst in zip(cache.layers, g.cache.layers):
                dst.keys[:n, :, :width].copy_(src.keys.index_select(0, index))
                dst.values[:n, :, :width].copy_(src.values.index_select(0, index))
                dst.cumulative_length.fill_(width)
            g.mask.zero_()
            g.mask[:n, :width].copy_(attn)
            g.mask[n:, 0] = 1  # padding rows attend to something (no all-masked row)
            g.positions.zero_()
            g.positions[:n, 0].copy_(next_pos)
            g.tokens.zero_()
        return GraphSteps(self, g, torch.arange(n, device=attn.device), width)

    def _build(self, rows: int, length: int, prefilled: Any) -> _Graph:
        import torch
        from transformers import StaticCache

        model, kw, keep = self.model, self._cache_kw, self._keep_kw
        cache = StaticCache(config=model.config, max_cache_len=length)
        layers: list[Any] = list(cache.layers)  # StaticLayer each (supports())
        for src, dst in zip(prefilled.layers, layers):
            k, v = src.keys, src.values
            # allocate now, outside the compiled region: the cache's tensors get fixed addresses
            dst.lazy_initialization(
                k.new_empty((rows, k.shape[1], 1, k.shape[3])),
                v.new_empty((rows, v.shape[1], 1, v.shape[3])),
            )
        dev = prefilled.layers[0].keys.device
        extra = {"logits_to_keep": 1} if keep else {}

        def step(tokens: Any, positions: Any, mask: Any) -> Any:
            out = model(
                input_ids=tokens,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                **{kw: cache},
                **extra,
            )
            return out.logits[:, -1, :].float()

        if self.mode == "on":
            compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True, dynamic=False)
        else:
            compiled = torch.compile(step, backend=self.mode, fullgraph=True, dynamic=False)
        return _Graph(
            rows=rows,
            length=length,
            cache=cache,
            tokens=torch.zeros((rows, 1), dtype=torch.long, device=dev),
            positions=torch.zeros((rows, 1), dtype=torch.long, device=dev),
            mask=torch.zeros((rows, length), dtype=torch.long, device=dev),
            step=compiled,
        )

    def run(self, g: _Graph) -> Any:
        """One compiled step of ``g``. Its first calls compile (and record the graphs) with
        dynamo's recompile limit raised to :data:`RECOMPILE_LIMIT`: every shape, of every
        policy in the process, is an entry of the same step function, and past the default
        limit (8) dynamo would stop compiling it."""
        import torch

        g.calls += 1
        if g.calls > 3:
            return g.step(g.tokens, g.positions, g.mask)
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return g.step(g.tokens, g.positions, g.mask)


class GraphSteps:
    """The decode steps of one chunk on a :class:`GraphDecoder` graph: the same interface as the
    eager loop's (:meth:`keep` the rows still decoding, :meth:`step` the next tokens)."""

    def __init__(self, decoder: GraphDecoder, graph: _Graph, slots: Any, width: int) -> None:
        self.decoder = decoder
        self.graph = graph
        self.slots = slots  # the graph row of each row still decoding
        self.filled = width  # cache positions written

    def keep(self, kidx: Any) -> None:
        """Only rows ``kidx`` (indices into the rows still decoding) go on."""
        self.slots = self.slots.index_select(0, kidx)

    def step(self, tokens: Any) -> Any:
        """Feed ``tokens`` (one per row still decoding); returns their rows' next logits."""
        g = self.graph
        if self.filled >= g.length:
            raise RuntimeError(f"static cache of {g.length} positions is full")
        g.tokens[self.slots, 0] = tokens
        g.mask[:, self.filled] = 1
        logits = self.decoder.run(g)
        self.filled += 1
        g.positions += 1
        return logits.index_select(0, self.slots)
