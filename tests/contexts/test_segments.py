"""Sealed segments: the columns-and-blob format round-trips every message
field and keeps a framing's parts of each message's reply bytes, and
segments stored in the earlier formats (a JSON document; columns without
the framing) still restore."""

from __future__ import annotations

import json
import sys
from array import array

import pytest

from ctxd_plugins.memory_store import MemoryStore
from ctxd_sidecar.core.contexts.calls import CallBook
from ctxd_sidecar.core.contexts.model import (
    ASSISTANT,
    CONVERSATION,
    NOTE,
    SYSTEM,
    TOOL,
    USER,
    ContextState,
    Msg,
    ToolCall,
)
from ctxd_sidecar.core.contexts.persistence import ContextStore, Damaged, seg_key
from ctxd_sidecar.core.contexts.segments import (
    MAGIC,
    MAGIC_2,
    SegmentCodec,
    SegmentDamaged,
    decode_segment,
    encode_segment,
)
from ctxd_sidecar.core.storage import Storage


def sample_messages() -> list[Msg]:
    """One of every kind and field, with text JSON and slicing must not mangle."""
    raw = [
        Msg(SYSTEM, text="be brief"),
        Msg(USER, text='naïve — 🤖 "quoted"\nnext line\\', principal="bob"),
        Msg(ASSISTANT, text="", tool_calls=(ToolCall("c1", "lookup", '{"q": "ü"}'),)),
        Msg(TOOL, call_id="c1", name="lookup", content='{"r": [1, 2]}', content_json=True),
        Msg(ASSISTANT, text="two", tool_calls=(ToolCall("c2", "a", ""), ToolCall("c3", "b", "{}"))),
        Msg(TOOL, call_id="c2", name="a", content="failed: 𝄞", is_error=True),
        Msg(TOOL, call_id="c3", name="b", content=""),
        Msg(NOTE, text="compacted"),
        Msg(USER, text=""),
        Msg(ASSISTANT, text="x" * 5000),
    ]
    return [m.assigned(10 + i, 1_700_000_000_000 + i, 3 + i // 4) for i, m in enumerate(raw)]


def fields(m: Msg) -> tuple:
    return (m.kind, m.text, m.principal, m.tool_calls, m.call_id, m.name, m.content,
            m.content_json, m.is_error, m.seq, m.ts, m.tokens, m.ver)  # fmt: skip


def format_1(cid: str, gen: str, msgs: list[Msg]) -> bytes:
    """A segment as the first format wrote it."""
    doc = {"id": cid, "gen": gen, "msgs": [m.to_dict() for m in msgs]}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def format_2(cid: str, gen: str, msgs: list[Msg]) -> bytes:
    """A segment as the second format wrote it: five columns, then the texts."""
    extra = {str(i): x for i, m in enumerate(msgs) if (x := _rare(m))}
    header = {"id": cid, "gen": gen, "n": len(msgs), "x": extra}
    numbers = array("q", [m.seq for m in msgs] + [m.ts for m in msgs] + [m.ver for m in msgs])
    numbers.extend([len(m.text) for m in msgs] + [len(m.content) for m in msgs])
    if sys.byteorder != "little":
        numbers.byteswap()
    codes = "".join(
        {SYSTEM: "s", USER: "u", ASSISTANT: "a", TOOL: "t", NOTE: "n"}[m.kind] for m in msgs
    )
    texts = "".join(m.text + m.content for m in msgs)
    body = json.dumps(header, separators=(",", ":"), ensure_ascii=False)
    return b"".join(
        [MAGIC_2, body.encode(), b"\n", codes.encode(), numbers.tobytes(), texts.encode()]
    )


def _rare(m: Msg) -> dict:
    d = m.to_dict()
    return {
        k: d[k] for k in ("principal", "calls", "call_id", "name", "json", "error", "nat") if k in d
    }


class Reprs:
    """A framing for the tests: a message's "reply bytes" are its repr around
    its texts; messages with an odd seq keep nothing."""

    def __init__(self, stamp: str = "reprs/1") -> None:
        self.stamp = stamp

    def split(self, m: Msg) -> tuple[bytes, bytes] | None:
        if m.seq % 2:
            return None
        return f"<{m.kind} {m.seq}>".encode(), f"</{m.seq}>".encode()

    def whole(self, m: Msg) -> bytes:
        head, tail = self.split(m)
        return head + (m.text + m.content).encode() + tail


def test_every_field_round_trips() -> None:
    msgs = sample_messages()
    raw = encode_segment("c", "g", msgs)
    assert raw.startswith(MAGIC)
    assert [fields(m) for m in decode_segment(raw)] == [fields(m) for m in msgs]


def test_the_first_format_is_still_read() -> None:
    msgs = sample_messages()
    back = decode_segment(format_1("c", "g", msgs))
    assert [fields(m) for m in back] == [fields(m) for m in msgs]


def test_the_second_format_is_still_read() -> None:
    msgs = sample_messages()
    raw = format_2("c", "g", msgs)
    back = SegmentCodec(Reprs()).parse(raw).build()
    assert [fields(m) for m in back] == [fields(m) for m in msgs]
    assert all(m.wire is None for m in back)


def test_a_framing_keeps_each_messages_reply_bytes() -> None:
    msgs, framing = sample_messages(), Reprs()
    raw = SegmentCodec(framing).encode("c", "g", msgs)
    back = SegmentCodec(framing).parse(raw).build()
    assert [fields(m) for m in back] == [fields(m) for m in msgs]
    kept = [m for m in back if m.wire is not None]
    assert [m.seq for m in kept] == [m.seq for m in msgs if m.seq % 2 == 0]
    assert [bytes(m.wire) for m in kept] == [framing.whole(m) for m in kept]
    # Sizes come from the columns where a message has no rare fields.
    assert [m.nbytes for m in back if m.nbytes >= 0] == [
        m.size_bytes for m, b in zip(msgs, back, strict=True) if b.nbytes >= 0
    ]
    assert [m.nbytes >= 0 for m in back] == [not _rare(m) for m in msgs]
    # A cut run keeps its messages' parts.
    tail = SegmentCodec(framing).parse(raw).since(msgs[4].seq).build()
    assert [bytes(m.wire) for m in tail if m.wire] == [
        framing.whole(m) for m in tail if m.seq % 2 == 0
    ]


@pytest.mark.parametrize("reader", [None, Reprs("reprs/2")])
def test_parts_framed_otherwise_are_not_used(reader) -> None:
    msgs = sample_messages()
    raw = SegmentCodec(Reprs()).encode("c", "g", msgs)
    back = SegmentCodec(reader).parse(raw).build()
    assert [fields(m) for m in back] == [fields(m) for m in msgs]
    assert all(m.wire is None for m in back)


def test_an_empty_segment_round_trips() -> None:
    assert decode_segment(encode_segment("c", "g", [])) == []


def _negative_head(raw: bytes) -> bytes:
    """The first message's tail length made -5 and the next head 10 longer:
    every text stays where it was, so only the sign gives it away."""
    at = raw.index(b"\n", len(MAGIC)) + 1 + 10  # after the header and the ten kind letters
    numbers = array("q")
    numbers.frombytes(raw[at : at + 8 * 8 * 10])
    assert numbers[7 * 10] == len(b"</10>")
    numbers[7 * 10] = -5
    numbers[6 * 10 + 1] += 10
    return raw[:at] + numbers.tobytes() + raw[at + 8 * 8 * 10 :]


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:-1],  # texts cut short
        lambda raw: raw + b"x",  # texts too long
        lambda raw: raw[: len(MAGIC) + 5],  # header cut short
        lambda raw: raw.replace(b'"n":10', b'"n":11', 1),  # columns out of step
        lambda raw: raw.replace(b"}\nsu", b"}\nqu", 1),  # an unknown kind
        lambda raw: MAGIC + b"[]\n",  # not a header
        lambda raw: raw.replace(b'"c2","a",""', b'"c2","a"', 1),  # a tool call cut short
        lambda raw: b"{not json",
        lambda raw: raw.replace(b"<system 10>", b"<system 10", 1),  # a head shorter than its length
        lambda raw: raw.replace(b"\xf0\x9f\xa4\x96", b"\xf0\x9f\xa4\x00", 1),  # not UTF-8
        _negative_head,
    ],
)
def test_damaged_bytes_are_refused(damage) -> None:
    raw = encode_segment("c", "g", sample_messages(), Reprs())
    with pytest.raises(SegmentDamaged):
        decode_segment(damage(raw))


async def checkpointed(fmt: str = "columns") -> tuple[ContextStore, ContextState, list[Msg]]:
    """A context with the sample messages sealed in one segment (rewritten
    in the first format, as an earlier build stored it, with ``fmt="json"``)."""
    store = ContextStore(Storage(MemoryStore()), idem_cap=16)
    st = ContextState(id="c", kind=CONVERSATION, gen="g1")
    await store.create_head(st)
    msgs = sample_messages()
    st.next_seq = st.live_from = msgs[0].seq
    for m in msgs:
        st.add_message(m)
    st.version = msgs[-1].ver
    await store.checkpoint(st)
    assert len(st.segments) == 1
    if fmt == "json":
        key = seg_key(st.id, st.gen, st.segments[0])
        await store.storage.put(key, format_1(st.id, st.gen, msgs))
    return store, st, msgs


async def test_a_context_sealed_in_the_first_format_restores() -> None:
    store, st, msgs = await checkpointed()
    key = seg_key(st.id, st.gen, st.segments[0])
    assert (await store.storage.get_value(key)).startswith(MAGIC)
    await store.storage.put(key, format_1(st.id, st.gen, msgs))
    back = await store.restore("c")
    assert [fields(m) for m in back.messages] == [fields(m) for m in msgs]
    assert back.calls == st.calls
    assert back.calls.ids == back.calls.answered == {"c1", "c2", "c3"}
    assert back.memory_bytes == st.memory_bytes


async def test_a_context_sealed_in_the_second_format_restores() -> None:
    store, st, msgs = await checkpointed()
    back = await store.restore("c")
    assert [fields(m) for m in back.messages] == [fields(m) for m in msgs]
    assert (back.msg_count, back.msg_tokens) == (st.msg_count, st.msg_tokens)


@pytest.mark.parametrize("fmt", ["columns", "json"])
@pytest.mark.parametrize("live_from", [10, 13, 16])
async def test_a_restore_builds_the_messages_on_first_read(fmt, live_from) -> None:
    # A fresh replica's first calls need the counts and call ids, not the
    # message objects; what it builds later is what an eager restore built.
    store, st, msgs = await checkpointed(fmt)
    live = [m for m in msgs if m.seq >= live_from]
    st.fold_messages(live_from - 1)
    st.version += 1  # the compaction's change
    await store.checkpoint(st)
    assert st.live_from == live_from
    back = await store.restore("c")
    assert back.unbuilt if fmt == "columns" else True
    assert back.memory_bytes == st.memory_bytes == sum(m.memory_bytes for m in live)
    assert back.calls == st.calls == CallBook.of(live)
    assert back.calls.ids == {c.id for m in live for c in m.tool_calls}
    assert [fields(m) for m in back.messages] == [fields(m) for m in live]
    assert not back.unbuilt


async def test_turns_appended_before_the_first_read_follow_the_sealed_ones() -> None:
    store, st, msgs = await checkpointed()
    back = await store.restore("c")
    new = Msg(USER, text="after the restore").assigned(back.next_seq, 1, back.version + 1)
    back.add_message(new)
    back.version = new.ver
    await store.checkpoint(back)  # seals the new message without building the old
    assert back.unbuilt
    assert [m.seq for m in back.messages] == [m.seq for m in msgs] + [new.seq]
    again = await store.restore("c")
    assert [fields(m) for m in again.messages] == [fields(m) for m in [*msgs, new]]


async def test_a_damaged_segment_makes_the_restore_unavailable() -> None:
    store, st, _ = await checkpointed()
    await store.storage.put(seg_key(st.id, st.gen, st.segments[0]), MAGIC + b"{}\n")
    with pytest.raises(Damaged):
        await store.restore("c")


def test_segments_are_written_in_one_format() -> None:
    from ctxd_sidecar.config import ConfigError
    from ctxd_sidecar.config.loader import load_config

    with pytest.raises(ConfigError, match="segment_format"):
        load_config(env={}, overrides={"contexts.segment_format": "json"})
