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


def _after(prefix: bytes, number: int, messages: list[Msg]) -> bytes:
    """``prefix`` followed by ``messages`` as repeated field ``number``, in
    one copy: joining with the field tag puts it before every message."""
    if not messages:
        return prefix
    return _varint(number << 3 | 2).join([prefix, *_wires(messages)])


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
