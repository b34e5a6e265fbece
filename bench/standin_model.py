"""A deterministic stand-in summary model behind an OpenAI-compatible
``POST /v1/chat/completions`` on loopback (stdlib ``http.server``).

It summarises the way a model with a bounded answer does, the same way for
every caller: of the transcript it is shown (ctxd's excerpt, or the
``<messages>`` of LangChain's summary prompt), it keeps the first sentence
of each line (at most :data:`SENTENCE_WORDS` words), spread evenly over the
transcript when they exceed :data:`ANSWER_WORDS` words. Asked for JSON
(``response_format``, as ctxd's ``openai`` summariser asks), it answers the
summary object (the first sentence as the goal, the rest as facts);
otherwise plain text. No artifact is looked for: what survives is what the
sentences happen to hold.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SENTENCE_WORDS = 20
ANSWER_WORDS = 200
_TAG = re.compile(r"<[^>]{1,80}>")
_PREFIX = re.compile(r"^\[[^\]]{0,80}\]\s*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def transcript(body: dict[str, Any]) -> str:
    """The part of the request to summarise."""
    text = str(body.get("messages", [{}])[-1].get("content") or "")
    start = text.find("Messages to summarize:")
    if start >= 0:
        end = text.find("</messages>", start)
        text = text[start + len("Messages to summarize:") : end if end > 0 else None]
    return text


def gist(text: str) -> list[str]:
    """The sentences the stand-in keeps of ``text`` (see the module docstring)."""
    out: list[str] = []
    seen: set[str] = set()
    for line in _TAG.sub(" ", text).splitlines():
        line = _PREFIX.sub("", line.strip())
        if len(line) < 12 or line[0] in '{}[]"':
            continue
        words = _SENTENCE.split(line, maxsplit=1)[0].split()[:SENTENCE_WORDS]
        sentence = " ".join(words)
        if sentence not in seen:
            seen.add(sentence)
            out.append(sentence)
    total = sum(len(s.split()) for s in out)
    if total > ANSWER_WORDS:
        keep = max(1, len(out) * ANSWER_WORDS // total)
        out = [out[i * len(out) // keep] for i in range(keep)]
    return out


def answer(body: dict[str, Any]) -> str:
    sentences = gist(transcript(body)) or ["Nothing to summarise."]
    if body.get("response_format") is not None:
        return json.dumps(
            {"goals": sentences[:1], "decisions": [], "open": [], "facts": sentences[1:]}
        )
    return "\n".join(f"- {s}" for s in sentences)


class StandinModel:
    """The server; ``with StandinModel() as m: m.base_url`` (``.../v1``)."""

    def __init__(self) -> None:
        self.requests = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> StandinModel:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body go in two writes: without this a kept-alive
                # connection waits for the client's delayed ACK per reply.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                # The headers arrived; acknowledge them now, or a client that
                # writes the body separately waits for the delayed ACK.
                quickack = getattr(socket, "TCP_QUICKACK", None)
                if quickack is not None:
                    self.connection.setsockopt(socket.IPPROTO_TCP, quickack, 1)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                model.requests += 1
                content = answer(body)
                prompt = sum(len(str(m.get("content") or "")) for m in body["messages"]) // 4
                data = json.dumps(
                    {
                        "id": f"chatcmpl-{model.requests}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", "stand-in"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": prompt,
                            "completion_tokens": len(content) // 4,
                            "total_tokens": prompt + len(content) // 4,
                        },
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        return Handler
