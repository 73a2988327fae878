"""Generation on running ``vllm serve`` processes: replicas over HTTP, weights pushed to them.

``VLLMServerPolicy(["http://host:8000", "http://host:8001"], tokenizer=tok)`` implements
:class:`~adapters.policies.base.Policy` on separately started vLLM OpenAI-compatible servers
(several replicas of one model), with the same conventions and the same samples as the
colocated engine (:class:`~adapters.policies.vllm_policy.VLLMPolicy`): prompts are rendered with
the chat template and tokenised *here*, each (prompt, sample) pair is one ``POST
/v1/completions`` request with the token ids as ``prompt``, ``n = 1`` and its own seed
(:meth:`~adapters.policies.base.SamplingParams.row_seeds`), ``logprobs: 0`` and
``return_token_ids: true``; the reply's ``token_ids``, ``logprobs.token_logprobs``,
``finish_reason`` and ``stop_reason`` become a :class:`~adapters.policies.base.Completion` by the
same code as the engine's output (:func:`~adapters.policies.vllm_policy.make_completion`).
Sampling settings are sent explicitly (also ``repetition_penalty = 1``, ``min_p = 0``), so a
model's ``generation_config`` defaults on the server do not apply.

Requests go to the replica with the fewest requests in flight (ties: round robin), from a thread
pool (``max_concurrency``). Failed requests are retried with backoff
(:func:`~adapters.policies.openai_compat.http_json`); a replica that keeps failing fails the
call with its URL in the message (its weights could not be kept in sync anyway).

Weight updates (the trainer calls them after every optimizer step, see
:mod:`adapters.training.backends`), on every replica:

* LoRA: :meth:`update_adapter` ``(name, path)`` -> ``POST /v1/load_lora_adapter`` with
  ``load_inplace: true`` (the path must be readable by the servers and new for every version:
  vLLM's prefix cache is keyed by the adapter path, so cached blocks of the previous version are
  never reused); requests then use ``"model": name``.
* Full weights: :meth:`update_weights` writes safetensors chunks into ``sync_dir`` (readable by
  the servers) and calls the worker extension
  :class:`~adapters.policies.vllm_policy.VLLMWorkerExtension` through ``POST /collective_rpc``
  (``{"method": "mas_reload_weights", "args": [path]}``), then ``POST /reset_prefix_cache``.

How to start a replica (what this module needs from it)::

    VLLM_SERVER_DEV_MODE=1 VLLM_ALLOW_RUNTIME_LORA_UPDATING=True \\
    vllm serve MODEL --port 8000 --logprobs-mode processed_logprobs --generation-config vllm \\
        --worker-extension-cls adapters.policies.vllm_policy.VLLMWorkerExtension \\
        [--enable-lora --max-lora-rank 8 --max-loras 2] [--dtype float32 --seed 0]

``--logprobs-mode processed_logprobs`` makes the log-probs those of ``softmax(logits / T)`` (the
trainer's convention; vLLM's default ``raw_logprobs`` ignores the temperature);
``VLLM_SERVER_DEV_MODE`` enables ``/collective_rpc`` and ``/reset_prefix_cache``;
``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` enables ``/v1/load_lora_adapter``; the project must be
importable by the server (installed in its environment) for the worker extension. On GPUs,
vLLM's NCCL weight-transfer endpoints (``/init_weight_transfer_engine``, ``/update_weights``)
avoid the file system; they are not used here (this module is tested on CPU, where vLLM has
no NCCL).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import threading
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from adapters.policies.base import Completion, Policy, SamplingParams
from adapters.policies.chat import ChatPrompt, ChatTemplatePrompts
from adapters.policies.openai_compat import OpenAIAPIError, http_json
from adapters.policies.vllm_policy import (
    VLLMAdapterPolicy,
    VLLMPolicy,
    make_completion,
    weight_chunks,
)

__all__ = ["VLLMServerAdapterPolicy", "VLLMServerPolicy", "server_root"]


def server_root(url: str) -> str:
    """``scheme://host:port`` of a server URL (a trailing ``/v1`` or path is dropped).

    >>> server_root("http://10.0.0.2:8000/v1/")
    'http://10.0.0.2:8000'
    """
    parsed = urllib.parse.urlparse(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"a vLLM server URL looks like http://host:port, got {url!r}")
    return f"{parsed.scheme}://{parsed.netloc}"


class VLLMServerPolicy(ChatTemplatePrompts, Policy):
    """A :class:`Policy` on ``vllm serve`` replicas (see the module docstring).

    Args:
        servers: base URLs of the replicas (all serving the same model).
        tokenizer: the model's Hugging Face tokenizer (prompts are encoded here).
        sync_dir: a directory the servers can read, for weight files (default: a temp dir,
            fine when servers and trainer share a machine).
        max_prompt_tokens: left-truncation limit (default: context minus ``max_new_tokens``).
        chat_template_kwargs: extra ``apply_chat_template`` arguments.
        timeout_s / max_retries / backoff_s: per request (generation can take minutes).
        max_concurrency: requests in flight over all replicas.
    """

    def __init__(
        self,
        servers: Sequence[str],
        *,
        tokenizer: Any,
        sync_dir: str | os.PathLike[str] | None = None,
        max_prompt_tokens: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        timeout_s: float = 900.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        max_concurrency: int = 64,
        name: str | None = None,
    ) -> None:
        if isinstance(servers, str) or not servers:
            raise ValueError("servers must be a non-empty list of URLs")
        self.servers = [server_root(u) for u in servers]
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.max_prompt_tokens = max_prompt_tokens
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self._own_dir = sync_dir is None
        self.sync_dir = Path(sync_dir or tempfile.mkdtemp(prefix="mas-vllm-server-sync-"))
        self.sync_dir.mkdir(parents=True, exist_ok=True)
        self._pool = ThreadPoolExecutor(max_workers=max(1, max_concurrency))
        self._lock = threading.Lock()
        self._inflight = [0] * len(self.servers)
        self._turn = itertools.count()
        self._adapters: dict[str, str] = {}  # name -> path of the loaded version
        self._weight_version = 0
        listed = [self._models(u) for u in self.servers]
        cards = [base for base, _ in listed]
        roots = {c.get("root") or c.get("id") for c in cards}
        if len(roots) != 1:
            raise ValueError(f"the replicas serve different models: {sorted(map(str, roots))}")
        self.model = str(cards[0]["id"])
        self.max_model_len = min(int(c.get("max_model_len") or 1 << 30) for c in cards)
        self.name = name or self.model
        # adapters loaded on every replica already (e.g. by an earlier training run)
        common = set.intersection(*(set(adapters) for _, adapters in listed))
        self._adapters.update({k: listed[0][1][k] for k in common})

    def __repr__(self) -> str:
        return f"VLLMServerPolicy(servers={self.servers!r}, model={self.model!r})"

    # ----------------------------------------------------------------------------------------
    # HTTP

    def _request(self, server: str, method: str, path: str, payload: Any = None) -> Any:
        return http_json(
            method,
            server + path,
            payload,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            backoff_s=self.backoff_s,
            text_ok=not path.startswith("/v1/completions"),  # the LoRA endpoints answer text
        )

    def _models(self, server: str) -> tuple[dict[str, Any], dict[str, str]]:
        """The base model's card and the loaded adapters (name -> path) of one replica."""
        try:
            data = self._request(server, "GET", "/v1/models")
        except OpenAIAPIError as exc:
            raise OpenAIAPIError(f"vLLM server {server} does not answer: {exc}") from None
        models = (data or {}).get("data") or []
        base = [m for m in models if not m.get("parent")]  # LoRA adapters have a parent
        if not base:
            raise OpenAIAPIError(f"{server}/v1/models lists no model: {str(data)[:300]}")
        adapters = {str(m["id"]): str(m.get("root")) for m in models if m.get("parent")}
        return dict(base[0]), adapters

    def _pick(self) -> int:
        with self._lock:
            turn = next(self._turn)
            n = len(self.servers)
            best = min(range(n), key=lambda i: (self._inflight[i], (i - turn) % n))
            self._inflight[best] += 1
            return best

    def _post_balanced(self, path: str, payload: dict[str, Any]) -> Any:
        i = self._pick()
        try:
            return self._request(self.servers[i], "POST", path, payload)
        except OpenAIAPIError as exc:
            raise OpenAIAPIError(f"vLLM server {self.servers[i]}: {exc}", exc.status) from None
        finally:
            with self._lock:
                self._inflight[i] -= 1

    def _post_all(self, path: str, payload: dict[str, Any] | None, hint: str) -> list[Any]:
        out = []
        for server in self.servers:
            try:
                out.append(self._request(server, "POST", path, payload))
            except OpenAIAPIError as exc:
                if exc.status == 404:
                    raise OpenAIAPIError(f"{server}{path} is not served: {hint}", 404) from None
                raise OpenAIAPIError(f"vLLM server {server}{path}: {exc}", exc.status) from None
        return out

    # ----------------------------------------------------------------------------------------
    # generation

    _prompt_limit = VLLMPolicy._prompt_limit  # the same left-truncation as the engine

    def generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        return self._generate(prompts, params, None)

    def _body(self, ids: list[int], params: SamplingParams, seed: int, model: str) -> dict:
        greedy = params.greedy
        body: dict[str, Any] = {
            "model": model,
            "prompt": ids,
            "n": 1,
            "max_tokens": max(1, min(params.max_new_tokens, self.max_model_len - len(ids))),
            "temperature": params.temperature,
            "top_p": params.top_p if not greedy else 1.0,
            "top_k": params.top_k if params.top_k > 0 and not greedy else 0,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "seed": seed,
            "logprobs": 0,
            "skip_special_tokens": False,
            "return_token_ids": True,
            "stream": False,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        return body

    def _one(self, ids: list[int], params: SamplingParams, seed: int, model: str) -> Completion:
        data = self._post_balanced("/v1/completions", self._body(ids, params, seed, model))
        choices = (data or {}).get("choices") or []
        if len(choices) != 1:
            raise OpenAIAPIError(f"expected one choice from the server, got {str(data)[:300]}")
        c = choices[0]
        tokens = [int(t) for t in (c.get("token_ids") or [])]
        lp = (c.get("logprobs") or {}).get("token_logprobs") or []
        if tokens and len(lp) != len(tokens):
            raise OpenAIAPIError(
                f"the server returned {len(tokens)} token ids but {len(lp)} log-probs; is it "
                "vLLM (return_token_ids, logprobs=0)?"
            )
        return make_completion(
            self.tokenizer,
            ids,
            tokens,
            [float(x) for x in lp],
            c.get("finish_reason"),
            c.get("stop_reason"),
            params,
        )

    def _generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None, adapter: str | None
    ) -> list[list[Completion]]:
        params = params or SamplingParams()
        encoded = self.encode_prompts(prompts, params.max_new_tokens)
        if not encoded:
            return []
        rows = [(p, s) for p in range(len(encoded)) for s in range(params.n)]
        seeds = params.row_seeds(len(encoded))
        if seeds is None:
            import random

            seeds = [random.getrandbits(62) for _ in rows]
        model = self.model if adapter is None else adapter
        futures = [
            self._pool.submit(self._one, encoded[p], params, seed, model)
            for (p, _), seed in zip(rows, seeds)
        ]
        flat = [f.result() for f in futures]
        return [flat[p * params.n : (p + 1) * params.n] for p in range(len(encoded))]

    # ----------------------------------------------------------------------------------------
    # LoRA adapters

    def update_adapter(self, name: str, path: str | os.PathLike[str]) -> str:
        """(Re)load the peft adapter directory ``path`` as ``name`` on every replica.

        ``path`` must be readable by the servers, and a new directory for every version."""
        path = Path(path).resolve()
        if not (path / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{path} is not a peft adapter directory")
        self._post_all(
            "/v1/load_lora_adapter",
            {"lora_name": name, "lora_path": str(path), "load_inplace": True},
            "start vllm serve with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
        )
        self._adapters[name] = str(path)
        return name

    def remove_adapter(self, name: str) -> None:
        if name not in self._adapters:
            raise KeyError(f"no adapter {name!r} loaded (loaded: {sorted(self._adapters)})")
        self._post_all("/v1/unload_lora_adapter", {"lora_name": name}, "see update_adapter")
        del self._adapters[name]

    @property
    def adapters(self) -> list[str]:
        return sorted(self._adapters)

    def for_adapter(self, name: str) -> VLLMServerAdapterPolicy:
        """A :class:`Policy` view that generates with adapter ``name``."""
        return VLLMServerAdapterPolicy(self, name)

    # ----------------------------------------------------------------------------------------
    # full weights

    def update_weights(
        self, weights: Mapping[str, Any] | Iterable[tuple[str, Any]], *, chunk_gb: float = 1.0
    ) -> int:
        """Load new weights into every replica (see the module docstring); returns the number
        of tensors sent."""
        from safetensors.torch import save_file

        self._weight_version += 1
        folder = self.sync_dir / f"weights-v{self._weight_version}-{os.getpid()}"
        folder.mkdir(parents=True, exist_ok=True)
        hint = (
            "start vllm serve with VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls "
            "adapters.policies.vllm_policy.VLLMWorkerExtension"
        )
        sent = 0
        try:
            for k, chunk in enumerate(weight_chunks(weights, chunk_gb)):
                path = folder / f"chunk-{k:04d}.safetensors"
                save_file(chunk, str(path))
                replies = self._post_all(
                    "/collective_rpc", {"method": "mas_reload_weights", "args": [str(path)]}, hint
                )
                counts = [int(r["results"][0]) for r in replies if r and r.get("results")]
                if counts != [len(chunk)] * len(self.servers):
                    raise OpenAIAPIError(f"weight reload answered {replies!r}, not {len(chunk)}")
                sent += len(chunk)
                path.unlink()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self._post_all("/reset_prefix_cache", None, hint)
        return sent

    @property
    def weight_version(self) -> int:
        return self._weight_version

    def close(self) -> None:
        """Stop the request threads (the servers keep running: they were started elsewhere)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._own_dir:
            shutil.rmtree(self.sync_dir, ignore_errors=True)


class VLLMServerAdapterPolicy(VLLMAdapterPolicy):
    """A view of a :class:`VLLMServerPolicy` that generates with one LoRA adapter."""

    def generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        # an adapter the servers do not hold is their 404 ("model ... does not exist"); it may
        # have been loaded by another process (rank 0 of a torchrun job), so no local check
        return self.base._generate(prompts, params, self.adapter)
