"""GetContext replies assembled from cached message bytes parse to exactly
what building them object by object gives."""

from __future__ import annotations

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.compaction.summary import Summary
from ctxd_sidecar.core.contexts import views
from ctxd_sidecar.core.contexts.model import (
    ASSISTANT,
    NOTE,
    SYSTEM,
    TOOL,
    USER,
    ContextState,
    Msg,
    ToolCall,
)
from ctxd_sidecar.server import wire
from ctxd_sidecar.server.context_convert import (
    context_meta_pb,
    fill_context_pb,
    fill_slice_pb,
    info_to_pb,
    slice_blocks_pb,
)


def state() -> ContextState:
    st = ContextState(id="w", kind="conversation", gen="g", version=3)
    st.summary = Summary(goals=["ship"], facts=["the sky is blue"])
    msgs = [
        Msg(SYSTEM, text="be brief"),
        Msg(USER, text="héllo 😀", principal="alice"),
        Msg(ASSISTANT, text="", tool_calls=(ToolCall("c1", "calc", '{"n": 1}'),)),
        Msg(
            TOOL,
            call_id="c1",
            name="calc",
            content='{"v": 12345678901234567890}',
            content_json=True,
        ),
        Msg(TOOL, call_id="c1", name="calc", content="oops", is_error=True),
        Msg(NOTE, text="typing"),
    ]
    for i, m in enumerate(msgs, start=1):
        st.add_message(m.assigned(i, 1000 + i, ver=i // 2 + 1))
    return st


def test_slice_and_full_replies_parse_alike():
    st = state()
    page = views.read(st, views.SLICE)
    head = pb.GetContextResponse(info=info_to_pb(st.info()), next_page_token="t", change=2)
    built = pb.GetContextResponse()
    built.CopyFrom(head)
    fill_slice_pb(built.slice, st, page)
    fast = wire.slice_reply(head, slice_blocks_pb(st), page.messages)
    assert pb.GetContextResponse.FromString(fast) == built
    assert [m.id for m in built.slice][:1] == ["summary"]

    page = views.read(st, views.FULL)
    built = pb.GetContextResponse()
    built.CopyFrom(head)
    fill_context_pb(built.context, st, page)
    fast = wire.full_reply(head, context_meta_pb(st), page.messages)
    assert pb.GetContextResponse.FromString(fast) == built
    # A second read reuses each message's bytes.
    assert all(m.wire is not None for m in st.messages)
    assert wire.full_reply(head, context_meta_pb(st), page.messages) == fast
