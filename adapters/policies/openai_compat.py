"""A policy that calls any OpenAI-compatible ``/v1/chat/completions`` endpoint.

Works with vLLM / SGLang / llama.cpp servers, hosted APIs, and this project's own
``python -m adapters.serve``. Only the standard library is used (``urllib``).

What is sent: ``model, messages, n, temperature, top_p, max_tokens, stop, seed`` (prompt ``i`` of a
``generate`` call is sent ``seed + i``, or its own ``prompt_seeds[i]``, so prompts of one call do
not share a random stream) plus
``logprobs: true`` (``request_logprobs``), ``top_k`` only when it is set (a vLLM extension), and
``return_token_ids: true`` only with ``request_token_ids=True`` (vLLM's extension; strict servers
such as OpenAI's reject unknown fields). ``extra_body`` adds anything else.

What comes back: the text (stop strings already removed by the server, and removed again here in
case a server ignores ``stop``), ``finish_reason`` (``"length"`` or ``"stop"``; other reasons such
as ``"tool_calls"`` map to ``"stop"``), per-token log-probs when the server returns them
(``choices[i].logprobs.content[j].logprob``), completion token ids when the server returns them
(``choices[i].token_ids``) and prompt ids (``prompt_token_ids`` at the top level or per choice).
Whatever is missing is an empty list: such completions are for **benchmarking only, not training**
(a trainer needs token ids and their log-probs under the sampling policy).

Errors: :meth:`OpenAIPolicy.check_reachable` answers in seconds whether a server listens at
all (:class:`ServerUnreachable`); during generation, connection failures, timeouts, HTTP 5xx
and 429 are retried with exponential backoff
(``backoff_s * 2**attempt``, at most ``max_retries`` retries); any other 4xx raises
:class:`OpenAIAPIError` at once with the server's message. A server that returns fewer than ``n``
choices (some ignore ``n``) is asked again for the rest. Prompts of one ``generate`` call are sent
concurrently (``max_concurrency`` requests in flight).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPException
from typing import Any

from adapters.policies.base import Completion, Policy, SamplingParams, truncate_stop
from adapters.policies.chat import ChatPrompt, check_prompts


class OpenAIAPIError(RuntimeError):
    """The server rejected a request (4xx) or kept failing after all retries."""

    def __init__(self, message: str, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ServerUnreachable(OpenAIAPIError, ConnectionError):
    """No server answers at the base URL (refused, unknown host, or no answer in time)."""


def _normalize_base_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    parsed = urllib.parse.urlparse(base)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"base_url must look like http://host:port/v1, got {base_url!r}")
    if parsed.path in ("", "/"):
        base += "/v1"
    return base


def _error_message(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body[:500]
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and "message" in err:
        return str(err["message"])
    if isinstance(err, str):
        return err
    return body[:500]


def http_json(
    method: str,
    url: str,
    payload: dict[str, Any] | None = None,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 300.0,
    max_retries: int = 5,
    backoff_s: float = 0.5,
    text_ok: bool = False,
) -> Any:
    """One JSON request with the retry policy of the module docstring; returns the parsed reply
    (``None`` for an empty body; the text itself when it is not JSON and ``text_ok``). Raises
    :class:`OpenAIAPIError`."""
    data = json.dumps(payload).encode() if payload is not None else None
    hdrs = headers or {"Content-Type": "application/json", "Accept": "application/json"}
    last_error = "no attempt made"
    for attempt in range(max_retries + 1):
        if attempt:
            time.sleep(min(30.0, backoff_s * 2 ** (attempt - 1)))
        req = urllib.request.Request(url, data=data, headers=hdrs, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                raw = resp.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as e:
            body = e.read().decode("utf-8", errors="replace")
            msg = _error_message(body)
            if e.code == 429 or e.code >= 500:
                last_error = f"HTTP {e.code}: {msg}"
                continue
            raise OpenAIAPIError(
                f"{method} {url} was rejected with HTTP {e.code}: {msg}", e.code, body
            ) from None
        except (TimeoutError, urllib.error.URLError, HTTPException, ConnectionError) as e:
            last_error = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            continue
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            if text_ok:
                return raw
            raise OpenAIAPIError(f"{url} returned invalid JSON: {raw[:200]!r}") from None
    raise OpenAIAPIError(
        f"{method} {url} failed after {max_retries + 1} attempts; last error: {last_error}"
    )


class OpenAIPolicy(Policy):
    """:class:`Policy` over an OpenAI-compatible chat completions server (see module docstring).

    Args:
        base_url: e.g. ``"http://127.0.0.1:8000/v1"`` (``/v1`` is added when the URL has no path).
        model: the model name sent in each request.
        api_key: bearer token; ``None`` reads ``OPENAI_API_KEY`` from the environment if set.
        timeout_s: per-request timeout in seconds.
        max_retries: retries after a connection error, timeout, 429 or 5xx.
        backoff_s: first retry delay; doubles each retry (capped at 30 s).
        max_concurrency: requests in flight during one ``generate`` call.
        request_logprobs: send ``logprobs: true``.
        request_token_ids: send vLLM's ``return_token_ids: true``.
        extra_body: extra JSON fields merged into every request.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        *,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        max_concurrency: int = 8,
        request_logprobs: bool = True,
        request_token_ids: bool = False,
        extra_body: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        self.base_url = _normalize_base_url(base_url)
        self.model = model
        self.name = name or model
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_concurrency = max(1, max_concurrency)
        self.request_logprobs = request_logprobs
        self.request_token_ids = request_token_ids
        self.extra_body = dict(extra_body or {})
        self.tokenizer = None

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIPolicy(base_url={self.base_url!r}, model={self.model!r})"

    # ----------------------------------------------------------------------------------------
    # HTTP

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        return http_json(
            method,
            self.base_url + path,
            payload,
            headers=self._headers(),
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            backoff_s=self.backoff_s,
        )

    def check_reachable(self, timeout_s: float = 5.0) -> None:
        """Raise :class:`ServerUnreachable` unless a server answers ``GET /models`` within
        ``timeout_s`` (one try; any HTTP answer, an error status included, counts as an
        answer). Command lines call it before their work starts, so that a wrong URL is
        reported in seconds instead of after the retries of a generation."""
        url = self.base_url + "/models"
        req = urllib.request.Request(url, headers=self._headers(), method="GET")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s):
                return
        except urllib.error.HTTPError:
            return
        except (TimeoutError, urllib.error.URLError, HTTPException, ConnectionError) as e:
            reason = getattr(e, "reason", e)
            raise ServerUnreachable(
                f"no OpenAI-compatible server answers at {self.base_url} ({reason}; waited "
                f"{timeout_s:g} s): check that the server is running and that the host, the "
                "port and the /v1 path are right"
            ) from None

    def list_models(self) -> list[str]:
        """Model ids reported by ``GET /v1/models``."""
        data = self._call("GET", "/models")
        return [m.get("id", "") for m in (data or {}).get("data", [])]

    # ----------------------------------------------------------------------------------------
    # generation

    def _body(
        self, messages: list[dict[str, str]], params: SamplingParams, n: int, seed: int | None
    ) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "n": n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
            "stream": False,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if seed is not None:
            body["seed"] = seed
        if params.top_k > 0:
            body["top_k"] = params.top_k
        if self.request_logprobs:
            body["logprobs"] = True
        if self.request_token_ids:
            body["return_token_ids"] = True
        body.update(self.extra_body)
        return body

    @staticmethod
    def _parse_choice(
        choice: dict[str, Any], prompt_ids: list[int], stop: Sequence[str]
    ) -> Completion:
        message = choice.get("message") or {}
        text = message.get("content") or ""
        text, matched = truncate_stop(text, stop)
        reason = choice.get("finish_reason")
        finish = "length" if reason == "length" and not matched else "stop"
        logprobs: list[float] = []
        lp = choice.get("logprobs")
        if isinstance(lp, dict) and isinstance(lp.get("content"), list):
            logprobs = [float(item.get("logprob", 0.0)) for item in lp["content"]]
        token_ids = [int(t) for t in (choice.get("token_ids") or [])]
        own_prompt = choice.get("prompt_token_ids")
        return Completion(
            text=text,
            token_ids=token_ids,
            logprobs=logprobs,
            prompt_ids=[int(t) for t in own_prompt] if own_prompt else list(prompt_ids),
            finish_reason=finish,  # type: ignore[arg-type]
        )

    def _complete(
        self, messages: list[dict[str, str]], params: SamplingParams, index: int
    ) -> list[Completion]:
        out: list[Completion] = []
        for attempt in range(params.n):  # at most n rounds, in case a server ignores n
            base = params.seed + index if params.seed is not None else None
            if params.prompt_seeds is not None:
                base = params.prompt_seeds[index]
            seed = None if base is None else base + attempt * 1_000_003
            data = self._call(
                "POST", "/chat/completions", self._body(messages, params, params.n - len(out), seed)
            )
            choices = data.get("choices") if isinstance(data, dict) else None
            if not choices:
                raise OpenAIAPIError(f"the server returned no choices: {str(data)[:300]}")
            choices = sorted(choices, key=lambda c: c.get("index", 0))
            prompt_ids = data.get("prompt_token_ids") or []
            out.extend(self._parse_choice(c, prompt_ids, params.stop) for c in choices)
            if len(out) >= params.n:
                break
        return out[: params.n]

    def generate(
        self, prompts: Sequence[ChatPrompt], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        params = params or SamplingParams()
        batch = check_prompts(prompts)
        if len(batch) <= 1 or self.max_concurrency == 1:
            return [self._complete(m, params, i) for i, m in enumerate(batch)]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(batch))) as pool:
            return list(pool.map(lambda im: self._complete(im[1], params, im[0]), enumerate(batch)))
