"""An OpenAI-compatible chat-completions server on loopback, for tests.

Real HTTP (stdlib ``http.server`` in a thread) speaking
``POST /v1/chat/completions`` the way vLLM, llama.cpp's server or Ollama do.
What it answers is chosen per server (``mode``) or per request (``script``,
consumed first):

===================== ==================================================
mode                  answer
===================== ==================================================
json                  a summary object (see :func:`default_answer`)
fenced                the same inside a ```json fence, after a line of prose
plain                 plain text (becomes the narrative)
malformed             broken JSON
empty                 an empty message
length                truncated JSON with ``finish_reason: length``
slow                  ``json`` after ``delay`` seconds
error500              HTTP 500 (``retry-after-ms: 1``)
rate_limited          HTTP 429 (``retry-after-ms: 1``)
unauthorized          HTTP 401
reject_response_format HTTP 400 when the request has ``response_format``
reject_json_schema    HTTP 400 when ``response_format`` is ``json_schema``
reject_max_tokens     HTTP 400 when the request has ``max_tokens``
===================== ==================================================

``answer`` (a string or a function of the request body) overrides the
content of ``json``-like modes. Every request is recorded in ``requests``.

``POST /v1/embeddings`` answers each input with :func:`word_vector` (words
hashed into ``embed_dims`` buckets, normalised: texts sharing words are
near), or the ``error500``/``rate_limited``/``unauthorized`` modes' errors.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ENTRY = re.compile(r"^\[(\S+) (user|assistant|tool|system|note)\b", re.MULTILINE)


@dataclass
class Recorded:
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def system(self) -> str:
        return self.body["messages"][0]["content"]

    @property
    def user(self) -> str:
        return self.body["messages"][-1]["content"]

    def message_ids(self) -> list[str]:
        """Ids of the transcript entries in this request's excerpt."""
        return [m.group(1) for m in _ENTRY.finditer(self.user)]


def default_answer(body: dict[str, Any]) -> str:
    """A summary naming the first and last transcript entry it was shown."""
    ids = [m.group(1) for m in _ENTRY.finditer(body["messages"][-1]["content"])]
    span = f"{ids[0]}..{ids[-1]}" if ids else "nothing"
    return json.dumps(
        {
            "goals": [f"goal seen in {span}"],
            "decisions": [f"decision about {span}"],
            "open": [],
            "facts": [f"covered {span}", f"{len(ids)} entries"],
        }
    )


def word_vector(text: str, dims: int = 32) -> list[float]:
    """A deterministic embedding: each word adds 1 to the bucket its hash picks."""
    vec = [0.0] * dims
    for word in re.findall(r"\w+", text.lower()):
        vec[int.from_bytes(hashlib.sha1(word.encode()).digest()[:4], "big") % dims] += 1.0
    n = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / n for x in vec]


class FakeOpenAI:
    def __init__(self, mode: str = "json", *, delay: float = 0.0) -> None:
        self.mode = mode
        #: Dimensions of the ``/v1/embeddings`` answers.
        self.embed_dims = 32
        self.delay = delay
        self.answer: str | Callable[[dict[str, Any]], str] | None = None
        #: When set, requests must carry ``Authorization: Bearer <key>``.
        self.require_key: str | None = None
        #: When set, usage reports this share of the prompt as read from a
        #: prompt cache (``prompt_tokens_details.cached_tokens``).
        self.cached_share: float | None = None
        self.script: deque[str] = deque()
        self.requests: list[Recorded] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- behaviour ----------------------------------------------------------------

    def _content(self, body: dict[str, Any]) -> str:
        answer = self.answer
        if answer is None:
            return default_answer(body)
        return answer(body) if callable(answer) else answer

    def _respond(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict, dict]:
        """(status, extra headers, JSON body) for one request."""
        with self._lock:
            self.requests.append(Recorded(body, headers))
            mode = self.script.popleft() if self.script else self.mode
        if self.require_key is not None:
            if headers.get("authorization") != f"Bearer {self.require_key}":
                return _error(401, "invalid api key", "invalid_api_key")
        retry_fast = {"retry-after-ms": "1"}
        if mode == "error500":
            return _error(500, "the model crashed", "server_error", retry_fast)
        if mode == "rate_limited":
            return _error(429, "slow down", "rate_limit_exceeded", retry_fast)
        if mode == "unauthorized":
            return _error(401, "invalid api key", "invalid_api_key")
        if "input" in body:
            return 200, {}, self._embeddings(body)
        fmt = body.get("response_format")
        if mode == "reject_response_format" and fmt is not None:
            return _error(400, "response_format is not supported by this server")
        if mode == "reject_json_schema" and fmt and fmt.get("type") == "json_schema":
            return _error(400, "json_schema: unsupported response format type")
        if mode == "reject_max_tokens" and "max_tokens" in body:
            return _error(
                400,
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
            )
        if mode == "slow":
            self._stopping.wait(self.delay)
        finish = "stop"
        if mode == "fenced":
            content = f"Here is the summary.\n```json\n{self._content(body)}\n```"
        elif mode == "plain":
            content = "The user is migrating the billing service; the agent read /srv/billing.py."
        elif mode == "malformed":
            content = '{"goals": ["migrate billing", "decisions": ['
        elif mode == "empty":
            content = ""
        elif mode == "length":
            content, finish = self._content(body)[:20], "length"
        else:
            content = self._content(body)
        return 200, {}, _completion(body, content, finish, self.cached_share)

    def _embeddings(self, body: dict[str, Any]) -> dict:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dims = int(body.get("dimensions") or self.embed_dims)
        data = [
            {"object": "embedding", "index": i, "embedding": word_vector(t, dims)}
            for i, t in enumerate(texts)
        ]
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        return {"object": "list", "data": data, "model": body.get("model", ""), "usage": usage}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/v1/embeddings"):
                    self._send(*_error(404, f"no route {self.path}"))
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(*_error(400, "body is not JSON"))
                    return
                headers = {k.lower(): v for k, v in self.headers.items()}
                self._send(*fake._respond(body, headers))

            def _send(self, status: int, headers: dict, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, *args) -> None:
                pass

        return Handler


def _error(
    status: int, message: str, code: str = "invalid_request_error", headers: dict | None = None
) -> tuple[int, dict, dict]:
    body = {"error": {"message": message, "type": code, "param": None, "code": code}}
    return status, headers or {}, body


def _completion(
    body: dict[str, Any], content: str, finish: str, cached_share: float | None = None
) -> dict:
    prompt = sum(len(m.get("content") or "") for m in body.get("messages", [])) // 4
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": len(content) // 4,
        "total_tokens": prompt + len(content) // 4,
    }
    if cached_share is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": int(prompt * cached_share)}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
        "usage": usage,
    }
