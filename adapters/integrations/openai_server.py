"""An OpenAI-compatible HTTP server backed by any local :class:`~adapters.policies.Policy`.

The command line is ``python -m adapters.serve`` (:mod:`adapters.serve`);
:func:`start_in_thread` serves a policy from Python (tests, notebooks).

Endpoints:

* ``POST /v1/chat/completions`` - ``model, messages, n, temperature, top_p, top_k (extension),
  max_tokens | max_completion_tokens, stop, seed, logprobs``. The reply follows the OpenAI schema
  (``choices[i].message.content``, ``finish_reason``, ``logprobs.content[j].logprob`` when asked,
  ``usage``) plus vLLM's extensions: ``choices[i].token_ids`` and top-level ``prompt_token_ids``,
  always included when the policy has them. ``stream`` and ``top_logprobs > 0`` are not supported
  (HTTP 400).
* ``GET /v1/models`` and ``GET /health``.

Requests are served by a thread per connection; generation itself is serialised by a lock (one
batch at a time on the model), so concurrent clients queue. The server prints
``serving MODEL at http://HOST:PORT/v1`` once it listens, which is how a parent process learns
the port chosen with ``--port 0``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from adapters.policies.base import MAX_NEW_TOKENS, Policy, SamplingParams
from adapters.policies.chat import to_messages

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = MAX_NEW_TOKENS  # a request without max_tokens: the suite's completion budget
MAX_BODY_BYTES = 16 * 1024 * 1024


class BadRequest(ValueError):
    """A client error reported as HTTP 400."""


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


def parse_request(body: dict[str, Any]) -> tuple[list[dict[str, str]], SamplingParams, bool]:
    """Validate a chat completion request: ``(messages, params, want_logprobs)``."""
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

    max_tokens = get("max_completion_tokens", get("max_tokens", DEFAULT_MAX_TOKENS))
    seed = body.get("seed")
    try:
        params = SamplingParams(
            n=int(get("n", 1)),
            temperature=float(get("temperature", 1.0)),
            top_p=float(get("top_p", 1.0)),
            top_k=int(get("top_k", -1)),
            max_new_tokens=int(max_tokens),
            stop=stop,
            seed=int(seed) if seed is not None else None,
        )
    except (TypeError, ValueError) as e:
        raise BadRequest(str(e)) from None
    return messages, params, bool(body.get("logprobs"))


class PolicyServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` holding the policy, its public name and the generation lock."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], policy: Policy, model_name: str | None = None):
        super().__init__(address, _Handler)
        self.policy = policy
        self.model_name = model_name or policy.name
        self.lock = threading.Lock()
        self.created = int(time.time())

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        if isinstance(host, bytes):
            host = host.decode()
        return f"http://{host}:{port}/v1"

    def completion_response(self, body: dict[str, Any]) -> dict[str, Any]:
        messages, params, want_logprobs = parse_request(body)
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


class _Handler(BaseHTTPRequestHandler):
    server: PolicyServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quieter than stderr per request
        logger.debug("%s - %s", self.address_string(), format % args)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self._send(status, {"error": {"message": message, "type": kind, "code": status}})

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            model = {
                "id": self.server.model_name,
                "object": "model",
                "created": self.server.created,
                "owned_by": "mas-rl-envs",
            }
            self._send(200, {"object": "list", "data": [model]})
        elif path in ("/health", "/v1/health"):
            self._send(200, {"status": "ok"})
        else:
            self._error(404, f"no route for GET {self.path}", "not_found_error")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no route for POST {self.path}", "not_found_error")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length <= 0 or length > MAX_BODY_BYTES:
            self._error(400, "a JSON body with a valid Content-Length is required")
            return
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            self._error(400, "the body is not valid JSON")
            return
        try:
            reply = self.server.completion_response(body)
        except BadRequest as e:
            self._error(400, str(e))
            return
        except Exception as e:  # a server bug must not kill the thread silently
            logger.exception("generation failed")
            self._error(500, f"{type(e).__name__}: {e}", "server_error")
            return
        self._send(200, reply)


def make_server(
    policy: Policy, host: str = "127.0.0.1", port: int = 0, model_name: str | None = None
) -> PolicyServer:
    """Create (but do not start) a server; ``port=0`` picks a free port (see ``server.url``)."""
    return PolicyServer((host, port), policy, model_name)


def start_in_thread(
    policy: Policy, host: str = "127.0.0.1", port: int = 0, model_name: str | None = None
) -> PolicyServer:
    """Start a server on a daemon thread; stop it with ``server.shutdown(); server.server_close()``."""
    server = make_server(policy, host, port, model_name)
    threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.05},
        name="policy-server",
        daemon=True,
    ).start()
    return server
