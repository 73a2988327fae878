"""Batched generation with a Hugging Face causal LM, on CPU or CUDA.

``TransformersPolicy(model, tokenizer)`` implements :class:`~adapters.policies.base.Policy` with
its own KV-cached decoding loop rather than ``model.generate``, so that every number it returns is
exactly what a trainer needs:

* **Log-probs from the sampling logits.** At each step the loop computes
  ``log_softmax(logits / T)`` (``T = 1`` when greedy) and records the chosen token's entry, before
  any top-p / top-k truncation (see the base module for why). ``sequence_logprobs`` in
  :mod:`adapters.training.logprobs` recomputes the same numbers from a full forward pass; in
  float32 they agree to about 1e-5.
* **Per-sample seeds.** Each (prompt index, sample index) pair gets its own random stream derived
  from ``SamplingParams.seed`` (or from the prompt's own seed, ``SamplingParams.prompt_seeds``;
  :meth:`~adapters.policies.base.SamplingParams.row_seeds`); a row's t-th token reads the t-th
  group of :data:`DRAWS_PER_TOKEN` uniforms of its stream (:func:`token_draws`) and is drawn
  down a tree over the vocabulary, one inverse-CDF pick among at most 64 children per level
  (:func:`tree_draw`, :func:`sample_next`): a few random numbers per row and step, where a
  Gumbel-max draw needs one per vocabulary entry (measured: that draw cost as much as the
  forward pass of a 135M model on a CPU). The same seed and inputs therefore give the same
  completions, and a completion does not depend on which other prompts share its batch, nor
  on which rank or device draws it, nor on what the prefix cache held (floating-point
  differences between batch shapes move a token only when a draw lies within about 1e-6 of one
  of the few boundaries on its path down the tree; one inverse CDF over the whole vocabulary
  has 49,151 boundaries and moved about one draw in seventy of a confident model). With
  ``seed=None`` the streams are seeded from torch's global generator, so ``torch.manual_seed``
  still makes runs repeatable.
* **Left padding with explicit position ids** (cumulative sum of the attention mask), so a padded
  row computes the same thing as the unpadded sequence. Each distinct prompt is prefilled once
  for all ``n`` samples, and the tokens all prompts of a batch start with (system message,
  demonstrations, task preamble) are prefilled once for the whole batch (:func:`prompt_batch`);
  the KV cache is then expanded per sample.
* **Early exit per row.** Rows that emit EOS or a stop string leave the batch (the cache is
  compacted), so one long completion does not make the others pay for padding steps.
* **CPU decode steps** always take ``sdpa``'s grouped path (a maskless step gets an all-true
  mask) and write into a cache with spare capacity (:mod:`adapters.policies.decoding`): the
  kernel a maskless step went to and the concatenating cache made a 135M model's decode step
  several times slower than its linear layers. Prefill and training forwards are unchanged.
* **Compiled decode steps** (``compile_decode``, off by default): the steps run compiled over a
  static cache, as CUDA graphs on CUDA (:mod:`adapters.policies.graphs`); prefill stays eager.
* **Profiling.** A :class:`GenerationStats` put in :attr:`TransformersPolicy.stats` sums the
  wall time of the calls, of their prefills and of their decoding loops, and the tokens each
  computed (``benchmarks/cpu_profile.py``); ``None``, the default, times nothing.
* **Segments.** :meth:`TransformersPolicy.extend` continues partial completions (segment
  rollouts): prompt and generated prefix are prefilled from their token ids and each row's
  random stream is read on from the prefix's length, so a completion decoded in segments has
  the tokens of the unsegmented decode (log-probs agree to float rounding: the prefix goes
  through one prefill instead of token-by-token steps).

The model's own ``generation_config`` (e.g. a hub model's default top-k) is ignored: only
:class:`SamplingParams` decides how to sample. The chat template is applied with
``tokenizer.apply_chat_template(messages, add_generation_prompt=True)``; extra template arguments
(e.g. ``{"enable_thinking": False}`` for Qwen3) go in ``chat_template_kwargs``. A tokenizer
without a chat template gets a plain ``role: content`` rendering.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from adapters.policies.base import (
    Completion,
    PartialCompletion,
    SamplingParams,
    TokenLevelPolicy,
    decoded_completion,
    row_seed,  # noqa: F401  (re-exported: it lived here before)
)
from adapters.policies.chat import ChatPrompt
from adapters.policies.decoding import decode_cache, use_decode_attention
from adapters.policies.graphs import GraphDecoder, GraphSteps, check_mode, supports
from adapters.policies.quantize import quantize_linears, resolve_quantize

logger = logging.getLogger(__name__)


@dataclass
class PromptBatch:
    """Prompts laid out for one prefill: each distinct prompt once, their common prefix once.

    ``index`` maps each row to its distinct prompt. ``prefix`` (1, P) holds the tokens every
    distinct prompt starts with (``None`` when that is shorter than ``min_shared``); ``ids``
    (D, W) holds the rest of each distinct prompt, left-padded; ``attn`` (D, P + W) is the
    attention mask over prefix and rest; ``positions`` (D, W) are the rest's position ids (they
    continue after the prefix, padding excluded), so every row computes exactly what its
    unpadded prompt would.
    """

    index: list[int]
    prefix: Any
    ids: Any
    attn: Any
    positions: Any

    @property
    def prefix_len(self) -> int:
        return 0 if self.prefix is None else int(self.prefix.shape[1])

    def prefill(self, forward: Any, cache: Any, store: PrefixCache | None = None) -> Any:
        """Run ``forward(input_ids, attention_mask, position_ids, cache)`` over the prefix (once,
        then its cache is copied to every distinct prompt) and the rests; returns the rests'
        output. The cache then holds (D, P + W) positions.

        With a ``store`` (:class:`PrefixCache`), the longest stored prefix of the prefix is copied
        in instead of recomputed, only the prefix's remaining tokens run, and the whole prefix's
        cache is stored for later calls."""
        import torch

        if self.prefix is not None:
            p = self.prefix_len
            dev = self.prefix.device
            key = tuple(self.prefix[0].tolist())
            start = store.restore(key, cache) if store is not None else 0
            if start < p:
                forward(
                    self.prefix[:, start:],
                    torch.ones((1, p), dtype=torch.long, device=dev),
                    torch.arange(start, p, device=dev)[None],
                    cache,
                )
                if store is not None:
                    store.save(key, cache)
            cache.reorder_cache(torch.zeros(self.ids.shape[0], dtype=torch.long, device=dev))
        return forward(self.ids, self.attn, self.positions, cache)


@dataclass
class GenerationStats:
    """Where a policy's generation time goes, summed over its calls while
    :attr:`TransformersPolicy.stats` holds this object (on CUDA the device is synchronised at
    each boundary).

    ``generate_s``: wall time inside ``generate`` and ``extend``; within it ``prefill_s``, the
    prompts' forward passes (and the cache laid out for the rows), and ``decode_s``, the decoding
    loop (one-token forward steps, sampling, stop checks); the rest is chat templates,
    tokenizing and detokenizing. ``prefill_tokens``: the prompt tokens those passes computed
    (a prefix restored from an evaluation's prefix cache and padding excluded; ``padding``
    counts the padded positions they computed too); ``generated``: the tokens drawn;
    ``decode_rows``: the rows of the decode steps' forward passes, summed over the steps, and
    ``decode_steps`` those passes (rows per step: their ratio).
    """

    generate_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    prefill_tokens: int = 0
    padding: int = 0
    generated: int = 0
    decode_rows: int = 0
    decode_steps: int = 0


class PrefixCache:
    """KV caches of shared prompt prefixes, kept between ``generate`` calls while the weights do
    not change (an evaluation, :meth:`TransformersPolicy.evaluation_scope`).

    An evaluation's waves send each role's prompts again and again with the same system message,
    demonstrations and task preamble; their cache is computed once and copied in afterwards, up to
    the longest common prefix of the stored tokens and the new ones (a later turn's prompt may
    differ from an earlier one's before the earlier shared prefix ends).
    Entries are keyed by ``(namespace, tokens)`` (the namespace names the active LoRA adapter, so
    two roles' adapters on one model never share an entry); the ``capacity`` most recent stay.

    >>> import torch
    >>> from transformers import DynamicCache
    >>> store, c = PrefixCache(), DynamicCache()
    >>> _ = c.update(torch.ones(1, 2, 3, 4), torch.zeros(1, 2, 3, 4), 0)
    >>> store.save((5, 6, 7), c)
    >>> fresh = DynamicCache()
    >>> store.restore((5, 6, 7, 8), fresh), fresh.get_seq_length()  # 3 of 4 tokens cached
    (3, 3)
    >>> fresh = DynamicCache()
    >>> store.restore((5, 6, 9), fresh), fresh.get_seq_length()  # the common (5, 6) only
    (2, 2)
    >>> store.restore((4, 9), DynamicCache()), store.hits
    (0, 2)
    """

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self.namespace = ""
        self.hits = 0
        self._entries: dict[tuple[str, tuple[int, ...]], list[tuple[Any, Any]]] = {}

    def restore(self, tokens: tuple[int, ...], cache: Any) -> int:
        """Fill the empty ``cache`` with the stored entry sharing the longest prefix with
        ``tokens``, cut to that prefix; returns its length (0: nothing restored)."""
        best: tuple[str, tuple[int, ...]] | None = None
        best_len = 0
        for key in self._entries:
            ns, stored = key
            if ns != self.namespace:
                continue
            n = 0
            for a, b in zip(stored, tokens):
                if a != b:
                    break
                n += 1
            if n > best_len:
                best, best_len = key, n
        if best is None:
            return 0
        self._entries[best] = self._entries.pop(best)  # most recently used last
        for layer, (k, v) in enumerate(self._entries[best]):
            cache.update(k[:, :, :best_len].clone(), v[:, :, :best_len].clone(), layer)
        self.hits += 1
        return best_len

    def save(self, tokens: tuple[int, ...], cache: Any) -> None:
        """Store the cache of ``tokens`` (one row: before it is expanded to the batch)."""
        self._entries[(self.namespace, tokens)] = [
            (layer.keys.clone(), layer.values.clone()) for layer in cache.layers
        ]
        while len(self._entries) > self.capacity:
            self._entries.pop(next(iter(self._entries)))


def prompt_batch(
    prompts: Sequence[Sequence[int]], pad_id: int, device: Any, min_shared: int | None = 32
) -> PromptBatch:
    """Lay out ``prompts`` for one prefill (see :class:`PromptBatch`).

    A common prefix shorter than ``min_shared`` tokens is not split off (``None``: never).

    The K candidates of a tree-sampling group share their whole prompt, and the prompts of one
    role share their system message, demonstrations and task preamble; both are computed once.

    >>> b = prompt_batch([[5, 6], [7], [5, 6]], pad_id=0, device="cpu")
    >>> b.index, b.prefix, b.ids.tolist(), b.attn.tolist(), b.positions.tolist()
    ([0, 1, 0], None, [[5, 6], [0, 7]], [[1, 1], [0, 1]], [[0, 1], [0, 0]])
    >>> b = prompt_batch([[1, 2, 3, 4], [1, 2, 3, 9, 9]], pad_id=0, device="cpu", min_shared=2)
    >>> b.prefix.tolist(), b.ids.tolist(), b.attn.tolist(), b.positions.tolist()
    ([[1, 2, 3]], [[0, 4], [9, 9]], [[1, 1, 1, 0, 1], [1, 1, 1, 1, 1]], [[3, 3], [3, 4]])
    """
    import torch

    unique: dict[tuple[int, ...], int] = {}
    index = [unique.setdefault(tuple(p), len(unique)) for p in prompts]
    distinct = list(unique)
    shared = 0
    if len(distinct) > 1:
        first, shortest = distinct[0], min(len(p) for p in distinct)
        while shared < shortest - 1 and all(p[shared] == first[shared] for p in distinct):
            shared += 1
    if min_shared is None or shared < min_shared:
        shared = 0
    rests = [p[shared:] for p in distinct]
    width = max(len(r) for r in rests)
    ids = torch.full((len(rests), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rests), width), dtype=torch.long)
    for i, r in enumerate(rests):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = 1
    positions = shared + (mask.cumsum(-1) - 1).clamp_(min=0)
    attn = torch.cat([torch.ones((len(rests), shared), dtype=torch.long), mask], dim=1)
    prefix = torch.tensor([list(distinct[0][:shared])], dtype=torch.long) if shared else None
    return PromptBatch(
        index=index,
        prefix=prefix.to(device) if prefix is not None else None,
        ids=ids.to(device),
        attn=attn.to(device),
        positions=positions.to(device),
    )


_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64(x: Any) -> Any:
    """SplitMix64's output function on a uint64 array (wrapping arithmetic)."""
    import numpy as np

    x = x + np.uint64(_GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniform_draws(seeds: Sequence[int] | Any, positions: Sequence[int] | Any) -> Any:
    """One uniform draw in [0, 1) per row: draw number ``positions[i]`` of the stream keyed by
    ``seeds[i]`` (float64 numpy array).

    A stream is SplitMix64 started from a state derived from the seed, read at an index, so a
    row's draw for its t-th token depends on its seed and t only: not on the other rows, the
    device, or whether the completion was decoded in one call or in segments (no generator
    state to carry).

    >>> a = uniform_draws([7, 7, 8], [0, 1, 0])
    >>> bool(((a >= 0) & (a < 1)).all()), len(set(a.tolist()))
    (True, 3)
    >>> float(uniform_draws([7], [1])[0]) == float(a[1])
    True
    """
    import numpy as np

    with np.errstate(over="ignore"):
        key = _splitmix64(np.asarray(seeds, dtype=np.uint64))
        x = _splitmix64(key + np.asarray(positions, dtype=np.uint64) * np.uint64(_GOLDEN))
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53


DRAWS_PER_TOKEN = 4
"""Uniform draws each sampled token reads from its row's stream: one per level of the
vocabulary tree (:func:`tree_shape`), enough for vocabularies of up to ``64**4`` tokens."""


def token_draws(seeds: Sequence[int], positions: Sequence[int]) -> Any:
    """The draws for token number ``positions[i]`` of the row seeded ``seeds[i]``: a
    ``(rows, DRAWS_PER_TOKEN)`` float64 array, draws ``t * DRAWS_PER_TOKEN + j`` of the stream
    (:func:`uniform_draws`).

    >>> d = token_draws([5, 5], [0, 1])
    >>> d.shape, float(d[1, 0]) == float(uniform_draws([5], [DRAWS_PER_TOKEN])[0])
    ((2, 4), True)
    """
    import numpy as np

    k = DRAWS_PER_TOKEN
    pos = np.asarray(positions, dtype=np.uint64)[:, None] * np.uint64(k) + np.arange(
        k, dtype=np.uint64
    )
    seeds_k = np.repeat(np.asarray(seeds, dtype=np.uint64), k)
    return uniform_draws(seeds_k, pos.reshape(-1)).reshape(-1, k)


def tree_shape(n: int) -> tuple[int, int]:
    """``(levels, branching)`` of the tree the sampler lays ``n`` tokens out in: the fewest
    levels whose branching is at most 64, and the smallest branching ``b`` with ``b**levels
    >= n``.

    >>> tree_shape(3), tree_shape(64), tree_shape(300), tree_shape(49152)
    ((1, 3), (1, 64), (2, 18), (3, 37))
    """
    levels = 1
    while 64**levels < n:
        levels += 1
    b = max(1, round(n ** (1 / levels)))
    while b**levels < n:
        b += 1
    while b > 1 and (b - 1) ** levels >= n:
        b -= 1
    return levels, b


def _inverse_cdf(weights: Any, u: Any) -> Any:
    """Index of the inverse-CDF draw at ``u`` (rows,) from each row of nonnegative ``weights``
    (rows, b) with a positive sum; a zero-weight entry is never chosen."""
    import torch

    cdf = weights.cumsum(-1)
    total = cdf[:, -1:]
    target = torch.minimum(u[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
    pick = torch.searchsorted(cdf, target, right=True).clamp_(max=cdf.shape[-1] - 1)
    return pick.squeeze(-1)


def tree_draw(probs: Any, u: Any) -> Any:
    """One token per row from the (unnormalised, nonnegative) ``probs`` (rows, n), with the
    uniform draws ``u`` (rows, >= levels).

    The tokens are the leaves of a tree of :func:`tree_shape` (49,152 tokens: 37 x 37 x 37); at
    each level the child is the inverse-CDF draw at that level's uniform among the children's
    masses (float32 sums, picked in float64). The token is distributed as ``probs``, exactly as
    a plain inverse CDF over the vocabulary would draw it, but float rounding in the logits
    (another batch layout, a prefix restored from a cache) moves a draw only when it lies near
    one of ~3 x 37 boundaries instead of one of 49,151: a plain inverse CDF moves about 1 in 70
    draws of a confident model under relative noise of 1e-6, the tree none in thousands.
    """
    import torch

    rows, n = probs.shape
    levels, b = tree_shape(n)
    if u.dim() == 1:
        u = u[:, None]
    if u.shape[1] < levels:
        raise ValueError(f"{n} tokens need {levels} uniform draws per row, got {u.shape[1]}")
    u = u.to(device=probs.device, dtype=torch.float64)
    if b**levels > n:
        probs = torch.nn.functional.pad(probs, (0, b**levels - n))
    sums = [probs.reshape(rows, *([b] * levels))]
    for _ in range(levels - 1):
        sums.append(sums[-1].sum(-1))
    node = torch.zeros(rows, dtype=torch.long, device=probs.device)
    row_idx = torch.arange(rows, device=probs.device)
    for level, mass in enumerate(reversed(sums)):
        children = mass.reshape(rows, -1, b)[row_idx, node].double()
        node = node * b + _inverse_cdf(children, u[:, level])
    return node


def sample_next(logits: Any, u: Any, params: SamplingParams) -> tuple[Any, Any]:
    """Choose one token per row and return ``(tokens, logprobs)``.

    ``logits``: (rows, vocab) float32; ``u``: (rows, DRAWS_PER_TOKEN) uniform draws in [0, 1)
    (:func:`token_draws`; a vocabulary of at most 64 tokens also takes one draw per row, shape
    (rows,)), ignored when greedy. The token is drawn from ``softmax(logits / T)`` restricted to
    the tokens top-k / top-p keep (renormalised) by :func:`tree_draw`: a few random numbers per
    row and step, computed in the logits' dtype on their device. The returned log-probs are
    ``log_softmax(logits / T)`` at the chosen tokens (untruncated), with ``T = 1`` when greedy.
    A zero-probability token is never drawn.

    >>> import torch
    >>> logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    >>> [
    ...     sample_next(logits, torch.tensor([x]), SamplingParams())[0].item()
    ...     for x in (0.1, 0.6, 0.9)
    ... ]
    [0, 1, 2]
    >>> sample_next(logits, torch.tensor([0.9]), SamplingParams(top_k=2))[0].item()
    1
    """
    import torch

    if params.greedy:
        logp = torch.log_softmax(logits, dim=-1)
        tokens = logits.argmax(dim=-1)
        return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits / params.temperature, dim=-1)
    top_k = params.top_k if 0 < params.top_k < logp.shape[-1] else 0
    cand_idx = None
    if top_k or params.top_p < 1.0:
        if top_k:
            cand_lp, cand_idx = logp.topk(top_k, dim=-1)  # sorted, descending
        else:
            cand_lp, cand_idx = logp.sort(dim=-1, descending=True)
        probs = cand_lp.exp()
        if params.top_p < 1.0:
            keep = (probs.cumsum(-1) - probs) < params.top_p  # the first token is always kept
            probs = probs * keep
    else:
        probs = logp.exp()
    pick = tree_draw(probs, u)
    tokens = cand_idx.gather(-1, pick[:, None]).squeeze(-1) if cand_idx is not None else pick
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


class _EagerSteps:
    """The eager decode loop's steps: the cache holds only the rows still decoding (finished
    rows are dropped from it) and grows by one position per step."""

    def __init__(self, forward: Any, cache: Any, attn: Any, next_pos: Any) -> None:
        self.forward, self.cache, self.attn, self.next_pos = forward, cache, attn, next_pos

    def keep(self, kidx: Any) -> None:
        """Only rows ``kidx`` (indices into the rows still decoding) go on."""
        self.cache.reorder_cache(kidx)
        self.attn = self.attn.index_select(0, kidx)
        self.next_pos = self.next_pos.index_select(0, kidx)

    def step(self, tokens: Any) -> Any:
        """Feed ``tokens`` (one per row still decoding); returns their next logits."""
        import torch

        self.attn = torch.cat([self.attn, self.attn.new_ones((len(tokens), 1))], dim=1)
        logits = self.forward(tokens[:, None], self.attn, self.next_pos[:, None], self.cache)
        self.next_pos = self.next_pos + 1
        return logits


class TransformersPolicy(TokenLevelPolicy):
    """A :class:`Policy` over a transformers causal LM (see the module docstring).

    Args:
        model: a ``*ForCausalLM`` model (any dtype/device).
        tokenizer: its tokenizer (a pad token is added if missing).
        device: where to run; ``None`` keeps a model that is already on CUDA, else uses CUDA when
            available, else CPU. The model is moved there.
        batch_size: sequences (prompts x samples) decoded together.
        max_prompt_tokens: prompts longer than this are left-truncated with a warning; ``None``
            means the model's ``max_position_embeddings`` minus ``max_new_tokens`` (but at
            least half the context).
        name: reported in completions' metadata and by the HTTP server.
        chat_template_kwargs: extra arguments for ``apply_chat_template``.
        cpu_decoding: on a CPU, decode with :mod:`adapters.policies.decoding` (``False``:
            transformers' own attention and cache, e.g. to compare them).
        compile_decode: decode steps compiled over a static cache, CUDA graphs on CUDA
            (:mod:`adapters.policies.graphs`: ``"on"``, ``"cudagraphs"`` or a ``torch.compile``
            backend); ``"off"``: the eager loop. A model with sliding-window layers keeps the
            eager loop (logged).
        quantize: ``"fp16"`` or ``"int8"`` replaces the model's linear layers (in place) with
            float16-weight or int8 ones (:mod:`adapters.policies.quantize`; CPU only);
            ``"auto"``: fp16 for a float32 model on a CPU without native bfloat16; ``"none"``
            (default): the model as given.

    Attributes:
        stats: a :class:`GenerationStats` that the calls add their phases' times and tokens
            to (profiling), or ``None`` (the default: nothing timed).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        device: Any = None,
        batch_size: int = 16,
        max_prompt_tokens: int | None = None,
        name: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        cpu_decoding: bool = True,
        compile_decode: str = "off",
        quantize: str = "none",
    ) -> None:
        import torch

        from adapters.policies.models import cache_keyword, prepare_tokenizer, resolve_device

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        current = next(model.parameters()).device
        if device is None and current.type == "cuda":
            self.device = current  # already placed by the caller
        else:
            self.device = resolve_device(device)
        self.model = model.to(self.device)
        self.model.eval()
        self.quantize = resolve_quantize(
            quantize, self.device, next(model.parameters()).dtype, compiled=compile_decode != "off"
        )
        if self.quantize != "none":
            quantize_linears(self.model, self.quantize)
        self.tokenizer = prepare_tokenizer(tokenizer)
        self.batch_size = batch_size
        self.max_prompt_tokens = max_prompt_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        cfg = model.config
        self.name = name or str(getattr(cfg, "_name_or_path", "") or cfg.model_type)
        eos: set[int] = set()
        for source in (
            tokenizer.eos_token_id,
            getattr(model.generation_config, "eos_token_id", None),
        ):
            if isinstance(source, int):
                eos.add(source)
            elif isinstance(source, (list, tuple)):
                eos.update(int(x) for x in source)
        self.eos_ids = frozenset(eos)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self._vocab = cfg.get_text_config().vocab_size
        self._keep_kw = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._cache_kw = cache_keyword(model)
        self._torch = torch
        self._prefix_store: PrefixCache | None = None
        self.stats: GenerationStats | None = None
        # on a CPU, decode steps take sdpa's grouped path and the cache grows in place
        # (adapters.policies.decoding); elsewhere transformers' own attention and cache
        on_cpu = self.device.type == "cpu" and cpu_decoding
        self._cpu_decoding = use_decode_attention(self.model, on_cpu) and on_cpu
        self._graphs: GraphDecoder | None = None
        if check_mode(compile_decode, cuda=self.device.type == "cuda") != "off":
            if supports(self.model):
                self._graphs = GraphDecoder(
                    self.model, compile_decode, self._cache_kw, self._keep_kw
                )
            else:
                logger.info(
                    "compile_decode=%s: the model's cache has non-full-attention "
                    "layers; decoding eagerly",
                    compile_decode,
                )

    @contextlib.contextmanager
    def evaluation_scope(self, batch_size: int | None = None) -> Iterator[None]:
        """While the weights stay fixed: decode up to ``batch_size`` sequences together (never
        fewer than :attr:`batch_size`) and keep prompt prefixes' KV caches between calls
        (:class:`PrefixCache`); both end with the scope."""
        saved, self.batch_size = self.batch_size, max(self.batch_size, batch_size or 0)
        outer, self._prefix_store = self._prefix_store, PrefixCache()
        try:
            yield
        finally:
            self.batch_size, self._prefix_store = saved, outer

    def _adapter_name(self) -> str:
        """The active LoRA adapter(s) of a peft model ("" for a plain model)."""
        try:
            active = getattr(self.model, "active_adapters", None)
            return str(active() if callable(active) else active or "")
        except (AttributeError, ValueError):  # transformers' mixin raises without adapters
            return ""

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | None = None, device: Any = None, dtype: Any = None, **kwargs: Any
    ) -> TransformersPolicy:
        """Load a model with :func:`adapters.policies.models.load_policy_model` and wrap it."""
        from adapters.policies.models import EMBEDDED_DIRNAME, EMBEDDED_NAMES, load_policy_model

        model, tokenizer = load_policy_model(name_or_path, device=device, dtype=dtype)
        embedded = name_or_path is None or name_or_path.lower() in EMBEDDED_NAMES
        kwargs.setdefault("name", EMBEDDED_DIRNAME if embedded else name_or_path)
        return cls(model, tokenizer, device=device, **kwargs)

    # ----------------------------------------------------------------------------------------
    # prompts

    def _prompt_limit(self, max_new_tokens: int) -> int:
        if self.max_prompt_tokens is not None:
            return self.max_prompt_tokens
        max_pos = getattr(self.model.config.get_text_config(), "max_position_embeddings", None)
        if not max_pos:
            return 0
        return max(int(max_pos) - max_new_tokens, int(max_pos) // 2)

    # ----------------------------------------------------------------------------------------
    # generation

    def generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        torch = self._torch
        t0 = self._now() if self.stats is not None else 0.0
        params = params or SamplingParams()
        encoded = self.encode_prompts(prompts, params.max_new_tokens)
        rows = [(p, s) for p in range(len(encoded)) for s in range(params.n)]
        seeds = params.row_seeds(len(encoded))
        if seeds is None:
            seeds = torch.randint(0, 2**62, (len(rows),)).tolist()
        # longest prompts first: less padding inside each chunk, and memory peaks early
        order = sorted(range(len(rows)), key=lambda r: -len(encoded[rows[r][0]]))
        results: list[Completion | None] = [None] * len(rows)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            outs = self._decode_chunk(
                [encoded[rows[r][0]] for r in chunk], [seeds[r] for r in chunk], params
            )
            for r, (tokens, logprobs, finish) in zip(chunk, outs):
                assert finish is not None  # no budget: every row ends
                results[r] = self._finish(encoded[rows[r][0]], tokens, logprobs, finish, params)
        if self.stats is not None:
            self.stats.generate_s += self._now() - t0
        return [[results[p * params.n + s] for s in range(params.n)] for p in range(len(encoded))]  # type: ignore[misc]

    def _finish(
        self,
        prompt_ids: list[int],
        tokens: list[int],
        logprobs: list[float],
        finish: str,
        params: SamplingParams,
    ) -> Completion:
        ends = bool(tokens) and tokens[-1] in self.eos_ids
        return decoded_completion(
            self.tokenizer, prompt_ids, tokens, logprobs, finish, params, drop_last=ends
        )

    # ----------------------------------------------------------------------------------------
    # segment rollouts (see adapters.policies.base)

    def extend(
        self, partials: Sequence[PartialCompletion], params: SamplingParams, max_tokens: int
    ) -> list[PartialCompletion]:
        """Decode up to ``max_tokens`` more tokens for every unfinished partial. The prompt and
        the tokens already generated are prefilled as they are and each row's random stream is
        read on from the prefix's length (:func:`uniform_draws`), so the tokens are those an
        unsegmented call draws; the transformers backend keeps no ``sampler_state``."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        t0 = self._now() if self.stats is not None else 0.0
        out = [replace(p) for p in partials]
        todo = sorted(
            (i for i, p in enumerate(out) if not p.finished),
            key=lambda i: -(len(out[i].prompt_ids) + len(out[i].token_ids)),
        )
        for start in range(0, len(todo), self.batch_size):
            chunk = [out[i] for i in todo[start : start + self.batch_size]]
            rows = self._decode_chunk(
                [p.prompt_ids for p in chunk],
                [p.seed for p in chunk],
                params,
                prefixes=[p.token_ids for p in chunk],
                budget=max_tokens,
            )
            for p, (tokens, logprobs, finish) in zip(chunk, rows):
                p.token_ids = p.token_ids + tokens
                p.logprobs = p.logprobs + logprobs
                p.finish_reason = finish  # type: ignore[assignment]
        if self.stats is not None:
            self.stats.generate_s += self._now() - t0
        return out

    def finish_partial(self, partial: PartialCompletion, params: SamplingParams) -> Completion:
        finish = partial.finish_reason or "length"
        return self._finish(partial.prompt_ids, partial.token_ids, partial.logprobs, finish, params)

    def _now(self) -> float:
        """``time.perf_counter()`` once the device's queued work is done (profiling only)."""
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _counted_forward(self, stats: GenerationStats) -> Any:
        """:meth:`_forward` that adds the tokens of each pass to ``stats`` (prefill)."""

        def forward(input_ids: Any, attention_mask: Any, position_ids: Any, cache: Any) -> Any:
            real = int(attention_mask[:, -input_ids.shape[1] :].sum())
            stats.prefill_tokens += real
            stats.padding += int(input_ids.numel()) - real
            return self._forward(input_ids, attention_mask, position_ids, cache)

        return forward

    def _forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, cache: Any) -> Any:
        kwargs: dict[str, Any] = {"logits_to_keep": 1} if self._keep_kw else {}
        kwargs[self._cache_kw] = cache
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **kwargs,
        )
        return out.logits[:, -1, :].float()

    def _decode_chunk(
        self,
        prompts: list[list[int]],
        seeds: list[int],
        params: SamplingParams,
        prefixes: list[list[int]] | None = None,
        budget: int | Sequence[int] | None = None,
    ) -> list[tuple[list[int], list[float], str | None]]:
        """Decode one chunk of rows; identical prompts are prefilled once.

        Returns ``(new tokens, their log-probs, finish reason)`` per row. With ``prefixes``
        (tokens already generated) the rows resume after them: the prompt and the prefix are
        prefilled together, each row's random stream is read on from the prefix's length, and at
        most
        ``budget`` new tokens (one for all rows, or one per row) are decoded; a row that stops at
        its budget before ``params.max_new_tokens`` tokens has finish reason ``None``
        (unfinished)."""
        torch = self._torch
        from transformers import DynamicCache

        dev = self.device
        done = [list(x) for x in prefixes] if prefixes is not None else [[] for _ in prompts]
        contexts = [p + d for p, d in zip(prompts, done)] if prefixes is not None else prompts
        limits = [params.max_new_tokens - len(d) for d in done]
        if budget is not None:
            per_row = [budget] * len(prompts) if isinstance(budget, int) else list(budget)
            limits = [min(b, x) for b, x in zip(per_row, limits)]
        batch = prompt_batch(contexts, self.pad_id, dev)
        row_prompt, attn, positions = batch.index, batch.attn, batch.positions
        n_unique = batch.ids.shape[0]
        cache = (
            decode_cache(self.model.config)
            if self._cpu_decoding
            else DynamicCache(config=self.model.config)
        )
        stop_window = 4 * max((len(s) for s in params.stop), default=0) + 4
        tokens_out: list[list[int]] = [list(d) for d in done]
        lps_out: list[list[float]] = [[] for _ in prompts]
        finish: list[str | None] = [
            "length" if len(d) + lim >= params.max_new_tokens else None
            for d, lim in zip(done, limits)
        ]
        stop_mask = self._stop_candidates(params.stop) if params.stop else None
        active = [r for r in range(len(prompts)) if limits[r] > 0]
        stats = self.stats
        t_prefill = self._now() if stats is not None else 0.0
        with torch.inference_mode():
            if self._prefix_store is not None:
                self._prefix_store.namespace = self._adapter_name()
            forward = self._forward if stats is None else self._counted_forward(stats)
            logits = batch.prefill(forward, cache, self._prefix_store)
            # each active row continues its distinct prompt's row of the prefilled cache
            rows_of = [row_prompt[r] for r in active]
            index = torch.tensor(rows_of, dtype=torch.long, device=dev)
            attn = attn.index_select(0, index)
            next_pos = positions[:, -1].index_select(0, index) + 1
            if rows_of != list(range(n_unique)):
                logits = logits.index_select(0, index)
            steps: _EagerSteps | GraphSteps
            if self._graphs is not None and active:
                budget = max(limits[r] for r in active)
                steps = self._graphs.start(cache, index, attn, next_pos, budget)
            else:
                if rows_of != list(range(n_unique)):
                    cache.reorder_cache(index)
                steps = _EagerSteps(self._forward, cache, attn, next_pos)
            if stats is not None:
                t_decode = self._now()
                stats.prefill_s += t_decode - t_prefill
            while active:
                # row r's draws for its t-th token come from the stream of its seed at t
                u = (
                    None
                    if params.greedy
                    else torch.from_numpy(
                        token_draws(
                            [seeds[r] for r in active], [len(tokens_out[r]) for r in active]
                        )
                    )
                )
                tokens, lps = sample_next(logits, u, params)
                tok_list, lp_list = tokens.tolist(), lps.tolist()
                maybe_stop = stop_mask[tokens.cpu()].tolist() if stop_mask is not None else None
                keep: list[int] = []
                for j, r in enumerate(active):
                    tokens_out[r].append(tok_list[j])
                    lps_out[r].append(lp_list[j])
                    ended = tok_list[j] in self.eos_ids or (
                        maybe_stop is not None
                        and maybe_stop[j]
                        and self._hit_stop(tokens_out[r], params.stop, stop_window)
                    )
                    if ended:
                        finish[r] = "stop"
                    elif len(lps_out[r]) < limits[r]:
                        keep.append(j)
                if not keep:
                    break
                if len(keep) < len(active):
                    kidx = torch.tensor(keep, device=dev)
                    steps.keep(kidx)
                    tokens = tokens.index_select(0, kidx)
                    active = [active[j] for j in keep]
                logits = steps.step(tokens)
                if stats is not None:
                    stats.decode_rows += len(active)
                    stats.decode_steps += 1
        if stats is not None:
            stats.decode_s += self._now() - t_decode
            stats.generated += sum(len(lps) for lps in lps_out)
        return [(tokens_out[r][len(done[r]) :], lps_out[r], finish[r]) for r in range(len(prompts))]

    def _stop_candidates(self, stop: tuple[str, ...]) -> Any:
        """(vocab,) bool: the tokens whose text could complete a stop string (it holds a stop
        string's last character, or is a partial UTF-8 byte). Only rows that just drew one of
        them decode their tail; cached per stop tuple."""
        cache = self.__dict__.setdefault("_stop_cache", {})
        if stop not in cache:
            torch = self._torch
            ends = {s[-1] for s in stop}
            vocab = len(self.tokenizer)
            texts = self.tokenizer.batch_decode([[i] for i in range(vocab)])
            mask = torch.zeros(max(vocab, self._vocab), dtype=torch.bool)
            for i, t in enumerate(texts):
                if "\ufffd" in t or any(c in t for c in ends):
                    mask[i] = True
            cache[stop] = mask
        return cache[stop]

    def _hit_stop(self, tokens: list[int], stop: Sequence[str], window: int) -> bool:
        tail = self.tokenizer.decode(tokens[-window:], skip_special_tokens=False)
        return any(s in tail for s in stop)
