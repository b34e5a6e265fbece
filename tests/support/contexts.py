"""Building ctxd messages and calling ContextService the way a runtime does:
the helpers the RPC tests of every room share."""

from __future__ import annotations

import math

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb

ROOT = "root"


# -- helpers (also used by the other context test modules) -------------------------------
def user(text: str, principal: str = "") -> pb.Message:
    return pb.Message(user=pb.UserMessage(text=text, principal=principal))


def assistant(text: str = "", *calls: tuple[str, str, str]) -> pb.Message:
    return pb.Message(
        assistant=pb.AssistantMessage(
            text=text,
            tool_calls=[pb.ToolCall(id=i, name=n, arguments_json=a) for i, n, a in calls],
        )
    )


def tool_json(call_id: str, name: str, content: str, is_error: bool = False) -> pb.Message:
    return pb.Message(
        tool=pb.ToolResult(call_id=call_id, name=name, json=content, is_error=is_error)
    )


def tool_text(call_id: str, name: str, content: str) -> pb.Message:
    return pb.Message(tool=pb.ToolResult(call_id=call_id, name=name, text=content))


def system(text: str) -> pb.Message:
    return pb.Message(system=pb.SystemMessage(text=text))


def note(text: str) -> pb.Message:
    return pb.Message(note=pb.NoteMessage(text=text))


def append(stub, cid: str, *messages: pb.Message, **kw) -> pb.AppendTurnResponse:
    return stub.AppendTurn(pb.AppendTurnRequest(context_id=cid, messages=list(messages), **kw))


def full(stub, cid: str) -> pb.Context:
    """The whole record, every page of its messages (as a client reads it)."""
    resp = stub.GetContext(pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_FULL))
    ctx = resp.context
    while resp.next_page_token:
        resp = stub.GetContext(
            pb.GetContextRequest(
                context_id=cid, view=pb.CONTEXT_VIEW_FULL, page_token=resp.next_page_token
            )
        )
        ctx.messages.extend(resp.context.messages)
    return ctx


def info(stub, cid: str) -> pb.ContextInfo:
    return stub.GetContext(pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_INFO)).info


def list_all(stub, **kw) -> list[pb.ContextInfo]:
    out, token = [], ""
    while True:
        resp = stub.ListContexts(pb.ListContextsRequest(page_token=token, **kw))
        out.extend(resp.contexts)
        token = resp.next_page_token
        if not token:
            return out


def rpc_error(fn, *args, **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info_:
        fn(*args, **kw)
    return info_.value


def bad_field(err: grpc.RpcError) -> str:
    """The field named in the error's google.rpc.BadRequest."""
    status = rpc_status.from_call(err)
    assert status is not None, "no rich status"
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            br = error_details_pb2.BadRequest()
            detail.Unpack(br)
            return br.field_violations[0].field
    raise AssertionError("no BadRequest detail")


def estimate(text: str) -> int:
    return math.ceil(len(text) / 4)


def texts(ctx: pb.Context) -> list[str]:
    out = []
    for m in ctx.messages:
        kind = m.WhichOneof("kind")
        body = getattr(m, kind)
        out.append(body.json or body.text if kind == "tool" else body.text)
    return out


# -- append / get ------------------------------------------------------------------------------
