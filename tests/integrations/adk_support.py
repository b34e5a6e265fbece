"""What the ADK integration tests share: a chat-completions server that also
answers with tool calls, and ADK's OpenAI-compatible model pointed at it.

:class:`ToolCallingOpenAI` is the suite's :class:`FakeOpenAI` (real HTTP on
loopback) with a queue of whole assistant messages (``replies``): each
request takes the next one (text, ``tool_calls`` or both); when none is
queued it answers as FakeOpenAI does. ADK reaches it through its own
OpenAI-compatible model class, ``ApigeeLlm`` with an ``apigee/openai/``
model (chat completions over httpx, no key, no network beyond loopback).
"""

from __future__ import annotations

import json
import time
from collections import deque
from typing import Any

from google.adk.models.apigee_llm import ApigeeLlm

from tests.support.fake_openai import FakeOpenAI


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


class ToolCallingOpenAI(FakeOpenAI):
    def __init__(self) -> None:
        super().__init__()
        self.replies: deque[dict[str, Any]] = deque()

    def _respond(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict, dict]:
        with self._lock:
            reply = self.replies.popleft() if self.replies else None
        if reply is None:
            return super()._respond(body, headers)
        with self._lock:
            self.requests.append(_recorded(body, headers))
        finish = "tool_calls" if reply.get("tool_calls") else "stop"
        return (
            200,
            {},
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", ""),
                "choices": [{"index": 0, "message": reply, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            },
        )


def _recorded(body, headers):
    from tests.support.fake_openai import Recorded

    return Recorded(body, headers)


def model(server: FakeOpenAI) -> ApigeeLlm:
    """ADK's OpenAI-compatible model (chat completions) on the fake server."""
    return ApigeeLlm(
        model="apigee/openai/fake-model",
        proxy_url=server.base_url,
        api_type=ApigeeLlm.ApiType.CHAT_COMPLETIONS,
    )
