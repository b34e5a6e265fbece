"""The stored form of a sealed segment: messages as columns plus one text blob.

A restore reads every sealed message of a context, so how fast a segment
decodes sets how fast a context comes back. The first format was one JSON
document with a dict per message: decoding it parsed every message's text
as a JSON string and built a dict per message before the message itself.
Formats 2 and 3 build no object per message before the message itself: the
numbers are binary columns, the texts one UTF-8 blob decoded once and
sliced, and only what most messages leave empty goes through JSON::

    b"ctxd-seg/3\n"
    header JSON, then b"\n"     id, gen, n (messages), x (rare fields), w (framing)
    n bytes                     kind of each message, one letter
    8 x n int64, little-endian  columns: seq, ts, version, the code points of
                                each text and of each content, the UTF-8 bytes
                                of both, the framing's head and tail bytes
                                (a head of 0: nothing kept)
    bytes                       head 0, text 0, content 0 (UTF-8), tail 0,
                                head 1, text 1, content 1, tail 1, ...

``x`` maps a message's index to the fields most messages leave empty
(principal, tool calls, tool result name and call id, the JSON and error
flags, a writer's native form). A compact JSON header never holds a raw
newline, so the first newline after the marker ends it.

Format 3 also keeps how replies encode each message (a :class:`Framing`,
named by ``w``): that encoding is the head, the message's UTF-8 text and
content, then the tail, stored in that order, so the first read after a
restore takes each message's reply bytes from the segment (a view, not a
copy) instead of encoding 10,000 messages one by one. Not every message
keeps them (a large native payload is not stored twice), and a segment
framed otherwise than the reader's framing is read without them.

Segments written in format 2 (the first five columns, then the texts
alone) or format 1 (a JSON document starting with ``{``) are still read:
they stay in the store until their context is compacted or deleted.
"""

from __future__ import annotations

import json
import sys
from array import array
from bisect import bisect_left
from itertools import accumulate
from operator import add
from typing import Any, Protocol

from ctxd_sidecar.core.contexts.model import (
    ASSISTANT,
    MSG_MEMORY_OVERHEAD,
    NOTE,
    SYSTEM,
    TOOL,
    USER,
    Msg,
    Native,
    ToolCall,
)
from ctxd_sidecar.core.estimate import estimate_plain
from ctxd_sidecar.core.jsonvalue import encode_compact

MAGIC = b"ctxd-seg/3\n"
MAGIC_2 = b"ctxd-seg/2\n"
_CODES = {SYSTEM: "s", USER: "u", ASSISTANT: "a", TOOL: "t", NOTE: "n"}
_KINDS = {code: kind for kind, code in _CODES.items()}
#: Numbers per message in the binary columns, by format.
_COLUMNS = {MAGIC_2: 5, MAGIC: 8}
_SWAP = sys.byteorder != "little"


class SegmentDamaged(ValueError):
    """The bytes are not a segment this code can read."""


class Framing(Protocol):
    """How replies encode a message, kept with the segments it seals (see
    the module docstring); the server's, so the domain stays unaware of it."""

    #: Names the encoding: parts kept under another stamp are not used.
    stamp: str

    def split(self, m: Msg) -> tuple[bytes, bytes] | None:
        """``(head, tail)``: ``m`` encodes as ``head + (m.text +
        m.content).encode() + tail``; None (or an empty head) keeps nothing."""
        ...


def encode_segment(cid: str, gen: str, msgs: list[Msg], framing: Framing | None = None) -> bytes:
    """The stored form of ``msgs`` (format 3, the one ctxd writes), keeping
    ``framing``'s parts of every message it splits."""
    extra: dict[str, dict[str, Any]] = {}
    for i, m in enumerate(msgs):
        x = _extra_of(m)
        if x:
            extra[str(i)] = x
    cuts = [(framing and framing.split(m)) or _NONE for m in msgs]
    texts = [(m.text + m.content).encode() for m in msgs]
    header = {"id": cid, "gen": gen, "n": len(msgs), "x": extra, "w": framing and framing.stamp}
    numbers = array("q", [m.seq for m in msgs])
    numbers.extend([m.ts for m in msgs])
    numbers.extend([m.ver for m in msgs])
    numbers.extend([len(m.text) for m in msgs])
    numbers.extend([len(m.content) for m in msgs])
    numbers.extend([len(body) for body in texts])
    numbers.extend([len(head) for head, _ in cuts])
    numbers.extend([len(tail) if head else 0 for head, tail in cuts])
    if _SWAP:
        numbers.byteswap()
    parts = [MAGIC, encode_compact(header), b"\n", "".join([_CODES[m.kind] for m in msgs]).encode()]
    parts.append(numbers.tobytes())
    for (head, tail), body in zip(cuts, texts, strict=True):
        parts += (head, body, tail) if head else (body,)
    return b"".join(parts)


#: A message's framing parts when none are kept.
_NONE = (b"", b"")


class SegmentCodec:
    """Writes and reads sealed segments with one :class:`Framing` (None: keeps none)."""

    def __init__(self, framing: Framing | None = None) -> None:
        self.framing = framing
        self.stamp = framing.stamp if framing is not None else ""

    def encode(self, cid: str, gen: str, msgs: list[Msg]) -> bytes:
        return encode_segment(cid, gen, msgs, self.framing)

    def parse(self, raw: bytes) -> SealedRun | BuiltRun:
        return parse_segment(raw, self.stamp)


def decode_segment(raw: bytes, stamp: str = "") -> list[Msg]:
    """The messages of a stored segment, in any format."""
    return parse_segment(raw, stamp).build()


def parse_segment(raw: bytes, stamp: str = "") -> SealedRun | BuiltRun:
    """A stored segment, checked whole, its messages built only on first use
    (formats 2 and 3; format 1 is built at once). ``stamp``: the reader's
    :attr:`Framing.stamp`, whose kept parts become each message's ``wire``."""
    try:
        if raw.startswith((MAGIC, MAGIC_2)):
            return _parse_columns(raw, stamp)
        doc = json.loads(raw)
        return BuiltRun([Msg.from_dict(d) for d in doc["msgs"]])
    except SegmentDamaged:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise SegmentDamaged(str(exc)) from None


#: The fields most messages leave empty, named as Msg.to_dict names them.
_RARE = ("principal", "calls", "call_id", "name", "json", "error", "nat")


def _extra_of(m: Msg) -> dict[str, Any]:
    d = m.to_dict()
    return {k: d[k] for k in _RARE if k in d}


class BuiltRun:
    """Messages already built (a format 1 segment), read like a :class:`SealedRun`."""

    __slots__ = ("msgs",)

    def __init__(self, msgs: list[Msg]) -> None:
        self.msgs = msgs

    @property
    def seqs(self) -> list[int]:
        return [m.seq for m in self.msgs]

    def since(self, seq: int) -> BuiltRun:
        return BuiltRun([m for m in self.msgs if m.seq >= seq])

    def memory_bytes(self) -> int:
        return sum([m.memory_bytes for m in self.msgs])

    def tool_ids(self) -> list[tuple[str, bool]]:
        out: list[tuple[str, bool]] = []
        for m in self.msgs:
            out += [(c.id, False) for c in m.tool_calls]
            if m.call_id:
                out.append((m.call_id, True))
        return out

    def build(self) -> list[Msg]:
        return self.msgs


class SealedRun:
    """The messages of a format 2 or 3 segment from index ``start`` on,
    checked but not built. A restore reads every sealed segment, and building
    each message object was most of its time, while a fresh replica's first
    calls (an append, the context's info) need only the counts and call ids;
    the messages are built when something first reads them
    (:attr:`ContextState.messages`), with their reply bytes where the
    segment kept them (``framed``)."""

    __slots__ = ("codes", "seqs", "tss", "vers", "ends", "blob", "extra", "framed", "start")

    def __init__(self, codes, seqs, tss, vers, ends, blob, extra, framed, start=0) -> None:  # noqa: ANN001, E501
        self.codes, self.seqs, self.tss, self.vers = codes, seqs, tss, vers
        self.ends, self.blob, self.extra, self.start = ends, blob, extra, start
        #: Format 3's sizes and kept reply bytes (None: format 2).
        self.framed: Framed | None = framed

    def since(self, seq: int) -> SealedRun:
        """The messages with ``seq`` or higher (a fold may cut a segment)."""
        start = bisect_left(self.seqs, seq, self.start)
        return SealedRun(*(getattr(self, f) for f in self.__slots__[:-1]), start)

    def memory_bytes(self) -> int:
        """:attr:`Msg.memory_bytes` summed, from the lengths alone."""
        i = self.start
        n = self.ends[-1] - self.ends[2 * i] + MSG_MEMORY_OVERHEAD * (len(self.seqs) - i)
        for k, x in self.extra.items():
            if k >= i:
                for c in x.get("calls", ()):
                    n += len(c[0]) + len(c[1]) + len(c[2]) + 64
        return n

    def tool_ids(self) -> list[tuple[str, bool]]:
        """Tool call ids (False) and the ids tool results answer (True), in
        transcript order, from the rare fields alone."""
        out: list[tuple[str, bool]] = []
        for k in sorted(k for k in self.extra if k >= self.start):
            x = self.extra[k]
            out += [(c[0], False) for c in x.get("calls", ())]
            if "call_id" in x:
                out.append((x["call_id"], True))
        return out

    def build(self) -> list[Msg]:
        s, blob, ends, extra, kinds = self.start, self.blob, self.ends, self.extra, _KINDS
        n = len(self.seqs)
        framed = self.framed
        wires = framed.wires(s) if framed is not None else [None] * (n - s)
        sizes = framed.sizes(s) if framed is not None else [-1] * (n - s)
        out: list[Msg] = []
        append = out.append
        rows = zip(
            self.codes[s:],
            ends[2 * s : -1 : 2],
            ends[2 * s + 1 :: 2],
            ends[2 * s + 2 :: 2],
            self.seqs[s:],
            self.tss[s:],
            self.vers[s:],
            wires,
            sizes,
            strict=True,
        )
        for i, (code, a, b, c, seq, ts, ver, wire, size) in enumerate(rows, s):
            x = extra.get(i)
            if x is None:
                # Positional, no tool calls: the common message, built quickest
                # (its token estimate from the lengths, not the texts).
                kind = kinds[code]
                tokens = estimate_plain(kind, b - a, c - b)
                append(Msg(kind, blob[a:b], "", (), "", "", blob[b:c], False, False, seq, ts, tokens, ver, None, wire, size))  # noqa: E501  # fmt: skip
                continue
            calls = x.get("calls")
            append(
                Msg(
                    kinds[code],
                    blob[a:b],
                    x.get("principal", ""),
                    tuple(ToolCall(t[0], t[1], t[2]) for t in calls) if calls else (),
                    x.get("call_id", ""),
                    x.get("name", ""),
                    blob[b:c],
                    bool(x.get("json", False)),
                    bool(x.get("error", False)),
                    seq,
                    ts,
                    -1,
                    ver,
                    Native.from_list(x["nat"]) if "nat" in x else None,
                    wire,
                )
            )
        return out


class Framed:
    """What a format 3 segment keeps beside the texts: each message's UTF-8
    size and, where kept and framed as the reader frames, its reply bytes."""

    __slots__ = ("view", "starts", "ends", "nbytes", "heads")

    def __init__(self, view: memoryview | None, starts, ends, nbytes, heads) -> None:  # noqa: ANN001
        #: The segment's bytes (None: its parts are framed otherwise than the reader's).
        self.view = view
        self.starts, self.ends, self.nbytes, self.heads = starts, ends, nbytes, heads

    def sizes(self, start: int) -> list[int]:
        """Each message's texts in UTF-8 bytes (:attr:`Msg.size_bytes` of a
        message without rare fields)."""
        return self.nbytes[start:]

    def wires(self, start: int) -> list[memoryview | None]:
        """Each message's reply bytes (None: not kept, or framed otherwise)."""
        v = self.view
        if v is None:
            return [None] * (len(self.nbytes) - start)
        rows = zip(self.heads[start:], self.starts[start:], self.ends[start:], strict=True)
        return [v[a:b] if head else None for head, a, b in rows]


def _parse_columns(raw: bytes, stamp: str) -> SealedRun:
    magic = MAGIC if raw.startswith(MAGIC) else MAGIC_2
    columns = _COLUMNS[magic]
    end = raw.find(b"\n", len(magic))
    if end < 0:
        raise SegmentDamaged("segment header is not terminated")
    h = json.loads(raw[len(magic) : end])
    n = h["n"]
    at = end + 1 + n
    codes = raw[end + 1 : at].decode("ascii")
    numbers = array("q")
    numbers.frombytes(raw[at : at + 8 * columns * n])
    if len(codes) != n or len(numbers) != columns * n:
        raise SegmentDamaged("segment is cut short")
    if _SWAP:
        numbers.byteswap()
    values = numbers.tolist()
    at += 8 * columns * n
    framed = None
    if magic == MAGIC:
        framed, blob = _framed(raw, at, values, n, bool(stamp) and h.get("w") == stamp)
    else:
        blob = str(memoryview(raw)[at:], "utf-8")
    # Blob offsets: text i is blob[ends[2i]:ends[2i+1]], its content runs to ends[2i+2].
    lengths = [0] * (2 * n)
    lengths[0::2], lengths[1::2] = values[3 * n : 4 * n], values[4 * n : 5 * n]
    ends = [0, *accumulate(lengths)]
    if ends[-1] != len(blob):
        raise SegmentDamaged("segment texts do not match their lengths")
    if not _KINDS.keys() >= set(codes):
        raise SegmentDamaged("segment names an unknown message kind")
    extra = {int(i): x for i, x in h["x"].items()}
    for x in extra.values():
        calls = x.get("calls", ())
        if not all(len(c) == 3 and all(isinstance(v, str) for v in c) for c in calls):
            raise SegmentDamaged("segment holds a malformed tool call")
    seqs, tss, vers = values[:n], values[n : 2 * n], values[2 * n : 3 * n]
    return SealedRun(codes, seqs, tss, vers, ends, blob, extra, framed)


def _framed(raw: bytes, at: int, values: list[int], n: int, usable: bool) -> tuple[Framed, str]:
    """Format 3's messages from ``at``, checked: what they keep, and their
    texts decoded as one string (as format 2 stores them)."""
    sizes, heads, tails = values[5 * n : 6 * n], values[6 * n : 7 * n], values[7 * n :]
    if min(values[5 * n :], default=0) < 0:
        raise SegmentDamaged("segment holds a negative length")
    # Sliced, summed and joined in C: a restore pays for this, not Python per message.
    starts = list(accumulate(map(add, map(add, heads, sizes), tails), initial=at))
    if starts[-1] != len(raw):
        raise SegmentDamaged("segment texts do not match their lengths")
    view = memoryview(raw)
    firsts = list(map(add, starts, heads))
    blob = str(
        b"".join(map(view.__getitem__, map(slice, firsts, map(add, firsts, sizes)))), "utf-8"
    )
    framed = Framed(view if usable else None, starts[:-1], starts[1:], sizes, heads)
    return framed, blob
