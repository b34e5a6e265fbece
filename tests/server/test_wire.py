"""GetContext replies assembled from cached message bytes parse to exactly
what building them object by object gives, whether a read encoded them or a
restore found them in the sealed segments."""

from __future__ import annotations

from ctxd_plugins.memory_store import MemoryStore
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
    Native,
    ToolCall,
)
from ctxd_sidecar.core.contexts.persistence import ContextStore
from ctxd_sidecar.core.contexts.segments import SegmentCodec
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.server import wire
from ctxd_sidecar.server.context_convert import (
    context_meta_pb,
    fill_context_pb,
    fill_slice_pb,
    info_to_pb,
    msg_to_pb,
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


async def restored(framing: wire.ReplyFraming) -> tuple[list[Msg], ContextState]:
    """The messages of :func:`state` plus one with a large native payload,
    sealed with ``framing`` and restored in a fresh store object."""
    storage = Storage(MemoryStore())
    store = ContextStore(storage, idem_cap=16, framing=framing)
    st = ContextState(id="w", kind="conversation", gen="g")
    await store.create_head(st)
    big = Msg(ASSISTANT, text="see", native=Native("responses", b'{"pad": "' + b"x" * 4000 + b'"}'))
    msgs = [m.assigned(m.seq, m.ts, m.ver) for m in state().messages]
    msgs.append(big.assigned(len(msgs) + 1, 2000, 5))
    for m in msgs:
        st.add_message(m)
    st.version = 5
    await store.checkpoint(st)
    back = await ContextStore(storage, idem_cap=16, framing=wire.ReplyFraming()).restore("w")
    return msgs, back


def encoded(m: Msg) -> bytes:
    body = msg_to_pb(m).SerializeToString()
    return wire._varint(len(body)) + body


def assert_slice_reads_alike(st: ContextState) -> None:
    """The slice of ``st`` from its messages' bytes parses as built object by object."""
    page = views.read(st, views.SLICE)
    head = pb.GetContextResponse(info=info_to_pb(st.info()))
    built = pb.GetContextResponse()
    built.CopyFrom(head)
    fill_slice_pb(built.slice, st, page)
    assert pb.GetContextResponse.FromString(wire.slice_reply(head, [], page.messages)) == built


async def test_a_restored_context_replies_with_the_bytes_its_segments_kept():
    msgs, back = await restored(wire.ReplyFraming())
    got = back.messages
    # Every message kept its bytes but the one whose native payload is large.
    assert [m.wire is not None for m in got] == [True] * (len(msgs) - 1) + [False]
    assert [bytes(m.wire) for m in got[:-1]] == [encoded(m) for m in msgs[:-1]]
    assert_slice_reads_alike(back)
    # Sealed again (an archive rewrites a segment), restored messages split alike.
    again = SegmentCodec(wire.ReplyFraming()).encode("w", "g", got)
    assert [bytes(m.wire) for m in SegmentCodec(wire.ReplyFraming()).parse(again).build()[:-1]] == [
        encoded(m) for m in msgs[:-1]
    ]


async def test_bytes_kept_under_another_schema_are_encoded_again():
    class Older(wire.ReplyFraming):
        VERSION = 0

    msgs, back = await restored(Older())
    assert all(m.wire is None for m in back.messages)
    assert_slice_reads_alike(back)


def test_a_page_read_again_reuses_its_bytes_only_while_it_holds_the_same_messages():
    st = state()
    bodies = wire.Bodies(1 << 20)
    msgs = st.messages
    first = bodies.body(3, msgs[:4])
    assert bodies.body(3, list(msgs[:4])) is first  # the same messages, another list
    other = [*msgs[:3], msgs[5]]  # the same first message and length, another last
    assert bodies.body(3, other) != first
    reply = pb.GetContextResponse.FromString(bodies.body(3, other))
    assert [m.id for m in reply.slice] == ["m1", "m2", "m3", "m6"]


def test_kept_pages_stay_within_their_bound():
    msgs = [Msg(USER, text="x" * 100).assigned(i, 1000, ver=1) for i in range(1, 10)]
    one = len(wire.Bodies(1 << 20).body(3, msgs[:1]))
    bodies = wire.Bodies(4 * one)  # four pages of one message
    for i in range(len(msgs)):
        bodies.body(3, msgs[i : i + 1])
        assert bodies.size <= bodies.max_bytes
    assert bodies.size == 4 * one
    assert bodies.body(3, msgs[-1:]) is bodies.body(3, msgs[-1:])  # the latest stayed
    small = wire.Bodies(2 * one)  # a page over a quarter of the bound is not kept
    assert small.body(3, msgs[:1]) is not small.body(3, msgs[:1])
    assert small.size == 0
