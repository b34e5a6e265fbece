"""Replies assembled from bytes: the fast path of GetContext.

Messages never change once appended, so each is encoded once (the first
read keeps its ``ctxd.v1.Message`` bytes on the domain object) and a page is
assembled by concatenating those bytes under the reply's field tags, instead
of building one protobuf object per message on every read. The bytes parse
to exactly the message the object-by-object path builds (a test checks it),
so clients see no difference. Sealed segments keep those bytes too
(:class:`ReplyFraming`), so a restored context's first read does not
encode every message again.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from operator import attrgetter

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.contexts.model import Msg
from ctxd_sidecar.server.context_convert import msg_to_pb

#: Field numbers (ctxd.v1.GetContextResponse / Context).
_RESPONSE_CONTEXT, _RESPONSE_SLICE = 2, 3
_CONTEXT_MESSAGES = 4
_WIRE = attrgetter("wire")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, body: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(body)) + body


def framed(m: Msg) -> bytes | memoryview:
    """The message's encoding with its length prefix (cached on the message;
    a view of its segment where a restore found it there)."""
    wire = m.wire
    if wire is None:
        body = msg_to_pb(m).SerializeToString()
        wire = m.wire = _varint(len(body)) + body
    return wire


class ReplyFraming:
    """What a sealed segment keeps of each message's reply bytes
    (:class:`ctxd_sidecar.core.contexts.segments.Framing`): the bytes
    around its text, so the text is stored once."""

    #: Raise when :func:`~ctxd_sidecar.server.context_convert.fill_msg_pb`
    #: writes a message differently: parts kept under another stamp go unused.
    VERSION = 1
    #: Heads and tails longer than this together are not kept (a large
    #: native payload or tool call would be stored twice).
    MAX_PARTS = 512

    def __init__(self) -> None:
        schema = hashlib.sha256(pb.DESCRIPTOR.serialized_pb).hexdigest()[:16]
        self.stamp = f"{self.VERSION}.{schema}"

    def split(self, m: Msg) -> tuple[bytes, bytes] | None:
        if m.text and m.content:
            return None
        whole = bytes(framed(m))  # a restored message's are a view of its segment
        texts = (m.text or m.content).encode()
        # Any place the texts stand in the bytes splits them correctly.
        at = whole.rfind(texts) if texts else len(whole)
        if at < 0 or len(whole) - len(texts) > self.MAX_PARTS:
            return None
        return whole[:at], whole[at + len(texts) :]


def _wires(messages: list[Msg]) -> list[bytes | memoryview]:
    """Each message's framed encoding; encoded now if a message has none yet."""
    wires = list(map(_WIRE, messages))
    if not all(wires):  # one is None (an encoding is never empty)
        wires = [framed(m) for m in messages]
    return wires


class Bodies:
    """The assembled messages of recently read pages, up to ``max_bytes``
    (least recently used first out). A long context read again page by page
    (a runtime that re-reads its whole slice every turn, the web page) then
    pays one copy a page instead of a join of every message's bytes, which
    touches each message object again. A page is found by its first message
    object and length and used only if it holds the very same messages
    (compared by identity first, so a hit costs a pass over pointers);
    messages never change once appended, so the bytes are still theirs."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._pages: OrderedDict[tuple[int, int, int], tuple[list[Msg], bytes]] = OrderedDict()

    def body(self, number: int, messages: list[Msg]) -> bytes:
        """``messages`` as repeated field ``number``: the tag before each."""
        key = (id(messages[0]), len(messages), number)
        hit = self._pages.get(key)
        if hit is not None and hit[0] == messages:
            self._pages.move_to_end(key)
            return hit[1]
        tag = _varint(number << 3 | 2)
        body = tag + tag.join(_wires(messages))
        if len(body) <= self.max_bytes // 4:  # one page never empties the cache
            self._keep(key, messages, body)
        return body

    def _keep(self, key: tuple[int, int, int], messages: list[Msg], body: bytes) -> None:
        old = self._pages.pop(key, None)
        if old is not None:
            self.size -= len(old[1])
        # The list is copied: a caller's list may change; the messages may not.
        self._pages[key] = (list(messages), body)
        self.size += len(body)
        while self.size > self.max_bytes:
            _, (_, gone) = self._pages.popitem(last=False)
            self.size -= len(gone)


#: Pages of every context share this bound (the RSS it adds at most, beside
#: the messages it keeps alive until it lets them go).
BODIES = Bodies(32 * 1024 * 1024)


def _after(prefix: bytes, number: int, messages: list[Msg]) -> bytes:
    """``prefix`` followed by ``messages`` as repeated field ``number``."""
    if not messages:
        return prefix
    return prefix + BODIES.body(number, messages)


def slice_reply(
    head: pb.GetContextResponse, blocks: list[pb.Message], messages: list[Msg]
) -> bytes:
    """``head`` (info, token, change) plus the slice: ``blocks`` then ``messages``."""
    prefix = b"".join(
        [
            head.SerializeToString(),
            *(_field(_RESPONSE_SLICE, b.SerializeToString()) for b in blocks),
        ]
    )
    return _after(prefix, _RESPONSE_SLICE, messages)


def embed(head: bytes, number: int, body: bytes) -> bytes:
    """Encoded ``head`` with the encoded message ``body`` as its field ``number``
    (a field appended to an encoding merges into the message it ends)."""
    return head + _field(number, body)


def full_reply(head: pb.GetContextResponse, context: pb.Context, messages: list[Msg]) -> bytes:
    """``head`` plus ``context`` (the record without messages) holding ``messages``."""
    body = _after(context.SerializeToString(), _CONTEXT_MESSAGES, messages)
    return head.SerializeToString() + _field(_RESPONSE_CONTEXT, body)
