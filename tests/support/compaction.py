"""Compaction through the API (plan, apply, compact, watch), as the RPC tests
of compaction, replicas and crash loops drive it."""

from __future__ import annotations

import json
import queue
import threading
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.support.fake_openai import FakeOpenAI


def user(text: str) -> pb.Message:
    return pb.Message(user=pb.UserMessage(text=text))


def assistant(text: str = "", *calls: tuple[str, str]) -> pb.Message:
    return pb.Message(
        assistant=pb.AssistantMessage(
            text=text,
            tool_calls=[pb.ToolCall(id=cid, name=name, arguments_json="{}") for cid, name in calls],
        )
    )


def tool(call_id: str, name: str, result: dict) -> pb.Message:
    return pb.Message(tool=pb.ToolResult(call_id=call_id, name=name, json=json.dumps(result)))


def append(sc, cid: str, *msgs: pb.Message, **kw) -> pb.AppendTurnResponse:
    return sc.contexts.AppendTurn(pb.AppendTurnRequest(context_id=cid, messages=msgs, **kw))


def tool_turn(sc, cid: str, i: int, size: int = 0) -> None:
    """user → assistant with a call → tool result → assistant: 4 messages."""
    pad = " lorem" * size
    append(
        sc,
        cid,
        user(f"task {i}{pad}"),
        assistant("", (f"c{i}", "square")),
        tool(f"c{i}", "square", {"n": i, "sq": i * i}),
        assistant(f"{i} squared is {i * i}{pad}"),
    )


def plan(sc, cid: str, **kw) -> pb.PlanCompactionResponse:
    return sc.contexts.PlanCompaction(pb.PlanCompactionRequest(context_id=cid, **kw))


def apply(sc, cid: str, ref: str, answer) -> pb.ApplyCompactionResponse:
    if not isinstance(answer, str):
        answer = json.dumps(answer)
    return sc.contexts.ApplyCompaction(
        pb.ApplyCompactionRequest(context_id=cid, plan_ref=ref, answer=answer)
    )


def get(sc, cid: str, view=pb.CONTEXT_VIEW_FULL) -> pb.GetContextResponse:
    return sc.contexts.GetContext(pb.GetContextRequest(context_id=cid, view=view))


def ids(sc, cid: str) -> list[str]:
    return [m.id for m in get(sc, cid).context.messages]


def rpc_error(fn, *args) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn(*args)
    return info.value


# -- cut rules ------------------------------------------------------------------------------


def openai_settings(server: FakeOpenAI, **extra) -> dict:
    return {
        "compaction__summariser": "openai",
        "summariser__openai__base_url": server.base_url,
        "summariser__openai__model": "fake-model",
        "summariser__openai__max_retries": 0,
        "summariser__openai__timeout": 1.0,
        **extra,
    }


class Watcher:
    """Reads a WatchContext stream in a thread."""

    def __init__(self, sc, cid: str) -> None:
        self.events: queue.Queue = queue.Queue()
        feed = sc.extra["sidecar"].domain.contexts.feed
        known = feed.watchers(cid)
        self.call = sc.contexts.WatchContext(pb.WatchContextRequest(context_id=cid))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while feed.watchers(cid) <= known:
            assert time.monotonic() < deadline, "watch did not start"
            time.sleep(0.01)

    def _read(self) -> None:
        try:
            for ev in self.call:
                self.events.put(ev)
        except grpc.RpcError as exc:
            self.events.put(exc)
        self.events.put(None)

    def next(self, kind=None, timeout: float = 20):
        """The next event (of ``kind``, skipping others)."""
        deadline = time.monotonic() + timeout
        while True:
            ev = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            if ev is None or isinstance(ev, Exception) or kind is None or ev.kind == kind:
                return ev

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(5)
