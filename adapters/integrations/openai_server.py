"""An OpenAI-compatible HTTP server backed by any local :class:`~adapters.policies.Policy`.

The command line is ``python -m adapters.serve`` (:mod:`adapters.serve`); :func:`make_server`
and :func:`start_in_thread` serve a policy from Python (tests, notebooks). The server runs on
uvicorn, so it needs the ``serve`` extra (``pip install -e ".[serve]"``) besides what the policy
needs (``train`` for a model).

Endpoints:

* ``POST /v1/chat/completions`` - ``model, messages, n, temperature, top_p, top_k (extension),
  max_tokens | max_completion_tokens, stop, seed, logprobs``. The reply follows the OpenAI schema
  (``choices[i].message.content``, ``finish_reason``, ``logprobs.content[j].logprob`` when asked,
  ``usage``) plus vLLM's extensions: ``choices[i].token_ids`` and top-level ``prompt_token_ids``,
  always included when the policy has them. ``stream`` and ``top_logprobs > 0`` are not supported
  (HTTP 400).
* ``GET /v1/models`` and ``GET /health``.

Exposure limits. The server binds 127.0.0.1 by default; one exposed with ``--host 0.0.0.0``
serves clients it does not control, so every request passes the guard that all of this
project's services share (:mod:`adapters.integrations._guard` has the threat model), and the
request itself is bounded before any generation starts:

=================  =================================================================================
bearer token       when ``$MAS_SERVICE_TOKEN`` is set, every request but ``GET /health`` must carry
                   ``Authorization: Bearer TOKEN`` - what OpenAI clients send as their API key
                   (``OpenAI(api_key=TOKEN)``, ``OPENAI_API_KEY``, ``OpenAIPolicy(api_key=...)``) -
                   or use the base URL ``http://HOST:PORT/t/TOKEN/v1``; others get 401
request body       at most ``--max-body-mb`` (20 MiB): more is refused with 413 before it is read;
                   the whole body must arrive within ``--body-timeout`` (30 s), else 408
headers            within ``--header-timeout`` (10 s) of opening a connection (or of the previous
                   answer plus ``--keep-alive``), else the connection is closed
connections        at most ``--max-connections`` (256) open at once; more are closed on accept
``n``              at most ``--max-n`` completions per request (default 128: the generation
                   section's ``gen_batch_size``, the sequences of one ``generate`` call)
``max_tokens``     at most ``--max-tokens`` per completion (default 256: the generation section's
                   ``max_new_tokens``, :data:`~adapters.policies.base.MAX_NEW_TOKENS`); a request
                   without ``max_tokens`` gets 256 or the cap, whichever is smaller
=================  =================================================================================

A request over the ``n`` or ``max_tokens`` cap is **refused, not clamped**: HTTP 400 with
OpenAI's error object (``{"error": {"message", "type": "invalid_request_error", "param": "n",
"code": 400}}``) whose message names the cap and the flag that raises it. A clamp would hand the
client fewer or shorter completions than it asked for with nothing in the reply to say so (a
trainer would count a cut completion as the model's own ``"length"`` finish). The guard's own
refusals (401, 408, 413) carry ``{"detail": ...}``, as on the other services. From Python the
limits are :class:`~adapters.integrations._guard.GuardConfig` (``guard=``; by default the token
comes from ``$MAS_SERVICE_TOKEN``) and :class:`RequestLimits` (``limits=``).

Concurrency: uvicorn's event loop reads requests (a slow client holds a socket, not a thread);
each complete request is answered on a worker thread, and generation is serialised by a lock (one
batch at a time on the model), so concurrent clients queue. The server prints
``serving MODEL at http://HOST:PORT/v1`` once it listens, which is how a parent process learns
the port chosen with ``--port 0``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from adapters.integrations._guard import GuardConfig
from adapters.policies.base import MAX_NEW_TOKENS, GenerationConfig, Policy, SamplingParams
from adapters.policies.chat import to_messages
from adapters.policies.knobs import declared_default

__all__ = [
    "DEFAULT_MAX_N",
    "BadRequest",
    "PolicyServer",
    "RequestLimits",
    "make_server",
    "parse_request",
    "start_in_thread",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_N: int = declared_default(GenerationConfig, "gen_batch_size")  # the cap on n
SHUTDOWN_GRACE_S = 5  # shutdown() waits this long for requests in flight


class BadRequest(ValueError):
    """A client error reported as HTTP 400 (``param``: the request field at fault, if one)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class RequestLimits:
    """The most one request may ask for (module docstring): ``n`` completions of
    ``max_tokens`` tokens each."""

    max_n: int = DEFAULT_MAX_N
    max_tokens: int = MAX_NEW_TOKENS

    def __post_init__(self) -> None:
        for name in ("max_n", "max_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise BadRequest("only text content parts are supported")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    if content is None:
        return ""
    raise BadRequest(f"unsupported message content of type {type(content).__name__}")


def parse_request(
    body: dict[str, Any], limits: RequestLimits | None = None
) -> tuple[list[dict[str, str]], SamplingParams, bool]:
    """Validate a chat completion request: ``(messages, params, want_logprobs)``; a request
    asking for more than ``limits`` (default: :class:`RequestLimits`) is a :class:`BadRequest`."""
    limits = limits or RequestLimits()
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if body.get("stream"):
        raise BadRequest("streaming is not supported by this server")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("'messages' must be a non-empty list")
    plain = []
    for m in raw:
        if not isinstance(m, dict):
            raise BadRequest("each message must be a JSON object")
        plain.append({"role": m.get("role"), "content": _content_text(m.get("content"))})
    try:
        messages = to_messages(plain)
    except (TypeError, ValueError) as e:
        raise BadRequest(str(e)) from None
    if body.get("top_logprobs"):
        raise BadRequest("top_logprobs > 0 is not supported")
    stop = body.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stop = tuple(s for s in stop if s)
    else:
        raise BadRequest("'stop' must be a string or a list of strings")

    def get(key: str, default: Any) -> Any:
        value = body.get(key)
        return default if value is None else value

    tokens_field = (
        "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    )
    seed = body.get("seed")
    try:
        n = int(get("n", 1))
        asked = body.get(tokens_field)
        max_tokens = min(MAX_NEW_TOKENS, limits.max_tokens) if asked is None else int(asked)
    except (TypeError, ValueError, OverflowError) as e:
        raise BadRequest(str(e)) from None
    if n > limits.max_n:
        raise BadRequest(
            f"n={n} is more than this server allows: at most {limits.max_n} completions per "
            "request (its operator sets the cap with --max-n)",
            "n",
        )
    if max_tokens > limits.max_tokens:
        raise BadRequest(
            f"{tokens_field}={max_tokens} is more than this server allows: at most "
            f"{limits.max_tokens} tokens per completion (its operator sets the cap with "
            "--max-tokens)",
            tokens_field,
        )
    try:
        params = SamplingParams(
            n=n,
            temperature=float(get("temperature", 1.0)),
            top_p=float(get("top_p", 1.0)),
            top_k=int(get("top_k", -1)),
            max_new_tokens=max_tokens,
            stop=stop,
            seed=int(seed) if seed is not None else None,
        )
    except (TypeError, ValueError, OverflowError) as e:
        raise BadRequest(str(e)) from None
    return messages, params, bool(body.get("logprobs"))


class PolicyServer:
    """The policy, its public name and generation lock, the request limits and the listening
    socket (bound and listening from construction, so ``url`` holds at once).

    :meth:`serve_forever` serves the ASGI app :meth:`app` with uvicorn behind the services'
    guard until :meth:`shutdown` (from another thread) or Ctrl-C; :meth:`server_close` closes
    the socket. These are the methods of a ``socketserver`` server, which this class replaced.
    """

    def __init__(
        self,
        address: tuple[str, int],
        policy: Policy,
        model_name: str | None = None,
        *,
        guard: GuardConfig | None = None,
        limits: RequestLimits | None = None,
    ) -> None:
        self.policy = policy
        self.model_name = model_name or policy.name
        self.guard = guard if guard is not None else GuardConfig.from_env()
        self.limits = limits or RequestLimits()
        self.lock = threading.Lock()
        self.created = int(time.time())
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        backlog = max(128, self.guard.max_connections)
        self.socket = socket.create_server((host, port), family=family, backlog=backlog)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self._state = threading.Lock()
        self._uvicorn: Any = None
        self._closing = False
        self._stopped = threading.Event()
        self._stopped.set()

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until :meth:`shutdown` (``poll_interval`` is kept for ``socketserver``'s
        signature; uvicorn checks every 0.1 s)."""
        import uvicorn

        from adapters.integrations._uvicorn import guarded_config

        host, port = self.server_address
        config = guarded_config(
            self.app,
            self.guard,
            host,
            port,
            log_config=None,  # leave the host program's logging alone
            lifespan="off",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
        with self._state:
            if self._closing:
                return
            server = self._uvicorn = uvicorn.Server(config)
            self._stopped.clear()
        try:
            asyncio.run(server.serve(sockets=[self.socket]))
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait until it has returned (for good: the server
        does not serve again)."""
        with self._state:
            self._closing = True
            server = self._uvicorn
        if server is not None:
            server.should_exit = True
            self._stopped.wait()

    def server_close(self) -> None:
        with self._state:
            self._closing = True
        self.socket.close()

    def completion_response(self, body: dict[str, Any]) -> dict[str, Any]:
        messages, params, want_logprobs = parse_request(body, self.limits)
        with self.lock:
            (completions,) = self.policy.generate([messages], params)
        tok = getattr(self.policy, "tokenizer", None)
        choices = []
        for i, c in enumerate(completions):
            choice: dict[str, Any] = {
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "finish_reason": c.finish_reason,
                "logprobs": None,
            }
            if want_logprobs and c.logprobs:
                choice["logprobs"] = {
                    "content": [
                        {
                            "token": tok.decode([t]) if tok is not None else "",
                            "logprob": lp,
                            "bytes": list(tok.decode([t]).encode()) if tok is not None else None,
                            "top_logprobs": [],
                        }
                        for t, lp in zip(c.token_ids, c.logprobs)
                    ]
                }
            if c.token_ids:
                choice["token_ids"] = c.token_ids
            choices.append(choice)
        prompt_ids = completions[0].prompt_ids if completions else []
        n_completion = sum(len(c.token_ids) for c in completions)
        reply: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": n_completion,
                "total_tokens": len(prompt_ids) + n_completion,
            },
        }
        if prompt_ids:
            reply["prompt_token_ids"] = prompt_ids
        return reply

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The ASGI app (behind the guard, which has read the body within its limits)."""
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1003})
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"].rstrip("/")
        if method == "GET" and path in ("/v1/models", "/models"):
            model = {
                "id": self.model_name,
                "object": "model",
                "created": self.created,
                "owned_by": "mas-rl-envs",
            }
            await _send(send, 200, json.dumps({"object": "list", "data": [model]}).encode())
        elif method == "GET" and path in ("/health", "/v1/health"):
            await _send(send, 200, b'{"status": "ok"}')
        elif method == "POST" and path in ("/v1/chat/completions", "/chat/completions"):
            body = await _read_body(receive)
            if body is not None:  # None: the client went away
                loop = asyncio.get_running_loop()
                await _send(send, *await loop.run_in_executor(None, self._answer, body))
        else:
            where = f"{method} {scope['path']}"
            await _send(send, *_error(404, f"no route for {where}", "not_found_error"))

    def _answer(self, body: bytes) -> tuple[int, bytes]:
        """The status and JSON of the answer to a chat completion request (a worker thread)."""
        if not body.strip():
            return _error(400, "a JSON body is required")
        try:
            request = json.loads(body)
        except (ValueError, RecursionError):
            return _error(400, "the body is not valid JSON")
        try:
            reply = self.completion_response(request)
        except BadRequest as e:
            return _error(400, str(e), param=e.param)
        except Exception as e:  # a server bug answers 500 and leaves the server up
            logger.exception("generation failed")
            return _error(500, f"{type(e).__name__}: {e}", "server_error")
        return 200, json.dumps(reply).encode()


def _error(
    status: int, message: str, kind: str = "invalid_request_error", param: str | None = None
) -> tuple[int, bytes]:
    error = {"message": message, "type": kind, "param": param, "code": status}
    return status, json.dumps({"error": error}).encode()


async def _send(send: Any, status: int, data: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _read_body(receive: Any) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def make_server(
    policy: Policy,
    host: str = "127.0.0.1",
    port: int = 0,
    model_name: str | None = None,
    *,
    guard: GuardConfig | None = None,
    limits: RequestLimits | None = None,
) -> PolicyServer:
    """Create (but do not start) a server; ``port=0`` picks a free port (see ``server.url``).
    ``guard``: the exposure limits (default: :meth:`GuardConfig.from_env`, the token of
    ``$MAS_SERVICE_TOKEN``); ``limits``: the caps on ``n`` and ``max_tokens``."""
    return PolicyServer((host, port), policy, model_name, guard=guard, limits=limits)


def start_in_thread(
    policy: Policy,
    host: str = "127.0.0.1",
    port: int = 0,
    model_name: str | None = None,
    *,
    guard: GuardConfig | None = None,
    limits: RequestLimits | None = None,
) -> PolicyServer:
    """Start a server on a daemon thread; stop it with
    ``server.shutdown(); server.server_close()``."""
    server = make_server(policy, host, port, model_name, guard=guard, limits=limits)
    threading.Thread(target=server.serve_forever, name="policy-server", daemon=True).start()
    return server
