"""The stored form of a sealed segment: messages as columns plus one text blob.

A restore reads every sealed message of a context, so how fast a segment
decodes sets how fast a context comes back. The first format was one JSON
document with a dict per message: decoding it parsed every message's text
as a JSON string and built a dict per message before the message itself.
Format 2 builds no object per message before the message itself: the
numbers are binary columns, the texts one UTF-8 blob decoded once and
sliced, and only what most messages leave empty goes through JSON::

    b"ctxd-seg/2\n"
    header JSON, then b"\n"     id, gen, n (messages), x (rare fields)
    n bytes                     kind of each message, one letter
    5 x n int64, little-endian  columns: seq, ts, version, then the code
                                points of each text and of each content
    UTF-8                       text 0, content 0, text 1, content 1, ...

``x`` maps a message's index to the fields most messages leave empty
(principal, tool calls, tool result name and call id, the JSON and error
flags). A compact JSON header never holds a raw newline, so the first
newline after the marker ends it.

Segments written in format 1 (a JSON document starting with ``{``) are
still read: they stay in the store until their context is compacted or
deleted.
"""

from __future__ import annotations

import json
import sys
from array import array
from bisect import bisect_left
from itertools import accumulate
from typing import Any

from ctxd_sidecar.core.contexts.model import (
    ASSISTANT,
    MSG_MEMORY_OVERHEAD,
    NOTE,
    SYSTEM,
    TOOL,
    USER,
    Msg,
    ToolCall,
)
from ctxd_sidecar.core.estimate import estimate_plain
from ctxd_sidecar.core.jsonvalue import encode_compact

MAGIC = b"ctxd-seg/2\n"
_CODES = {SYSTEM: "s", USER: "u", ASSISTANT: "a", TOOL: "t", NOTE: "n"}
_KINDS = {code: kind for kind, code in _CODES.items()}
#: Numbers per message in the binary columns.
_COLUMNS = 5
_SWAP = sys.byteorder != "little"


class SegmentDamaged(ValueError):
    """The bytes are not a segment this code can read."""


def encode_segment(cid: str, gen: str, msgs: list[Msg]) -> bytes:
    """The stored form of ``msgs`` (format 2, the one ctxd writes)."""
    extra: dict[str, dict[str, Any]] = {}
    for i, m in enumerate(msgs):
        x = _extra_of(m)
        if x:
            extra[str(i)] = x
    header = {"id": cid, "gen": gen, "n": len(msgs), "x": extra}
    numbers = array("q", [m.seq for m in msgs])
    numbers.extend([m.ts for m in msgs])
    numbers.extend([m.ver for m in msgs])
    numbers.extend([len(m.text) for m in msgs])
    numbers.extend([len(m.content) for m in msgs])
    if _SWAP:
        numbers.byteswap()
    parts = [
        MAGIC,
        encode_compact(header),
        b"\n",
        "".join([_CODES[m.kind] for m in msgs]).encode(),
        numbers.tobytes(),
        "".join([m.text + m.content for m in msgs]).encode(),
    ]
    return b"".join(parts)


def decode_segment(raw: bytes) -> list[Msg]:
    """The messages of a stored segment, in either format."""
    return parse_segment(raw).build()


def parse_segment(raw: bytes) -> SealedRun | BuiltRun:
    """A stored segment, checked whole, its messages built only on first use
    (format 2; format 1 is built at once)."""
    try:
        if raw.startswith(MAGIC):
            return _parse_columns(raw)
        doc = json.loads(raw)
        return BuiltRun([Msg.from_dict(d) for d in doc["msgs"]])
    except SegmentDamaged:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise SegmentDamaged(str(exc)) from None


#: The fields most messages leave empty, named as Msg.to_dict names them.
_RARE = ("principal", "calls", "call_id", "name", "json", "error")


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
    """The messages of a format 2 segment from index ``start`` on, checked
    but not built. A restore reads every sealed segment, and building each
    message object was most of its time, while a fresh replica's first calls
    (an append, the context's info) need only the counts and call ids; the
    messages are built when something first reads them
    (:attr:`ContextState.messages`)."""

    __slots__ = ("codes", "seqs", "tss", "vers", "ends", "blob", "extra", "start")

    def __init__(self, codes, seqs, tss, vers, ends, blob, extra, start=0) -> None:  # noqa: ANN001
        self.codes, self.seqs, self.tss, self.vers = codes, seqs, tss, vers
        self.ends, self.blob, self.extra, self.start = ends, blob, extra, start

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
            strict=True,
        )
        for i, (code, a, b, c, seq, ts, ver) in enumerate(rows, s):
            x = extra.get(i)
            if x is None:
                # Positional, no tool calls: the common message, built quickest
                # (its token estimate from the lengths, not the texts).
                kind = kinds[code]
                tokens = estimate_plain(kind, b - a, c - b)
                append(Msg(kind, blob[a:b], "", (), "", "", blob[b:c], False, False, seq, ts, tokens, ver))  # noqa: E501  # fmt: skip
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
                )
            )
        return out


def _parse_columns(raw: bytes) -> SealedRun:
    end = raw.find(b"\n", len(MAGIC))
    if end < 0:
        raise SegmentDamaged("segment header is not terminated")
    h = json.loads(raw[len(MAGIC) : end])
    n = h["n"]
    at = end + 1 + n
    codes = raw[end + 1 : at].decode("ascii")
    numbers = array("q")
    numbers.frombytes(raw[at : at + 8 * _COLUMNS * n])
    if len(codes) != n or len(numbers) != _COLUMNS * n:
        raise SegmentDamaged("segment is cut short")
    if _SWAP:
        numbers.byteswap()
    values = numbers.tolist()
    blob = str(memoryview(raw)[at + 8 * _COLUMNS * n :], "utf-8")
    # Blob offsets: text i is blob[ends[2i]:ends[2i+1]], its content runs to ends[2i+2].
    lengths = [0] * (2 * n)
    lengths[0::2], lengths[1::2] = values[3 * n : 4 * n], values[4 * n :]
    ends = [0, *accumulate(lengths)]
    if ends[-1] != len(blob):
        raise SegmentDamaged("segment texts do not match their lengths")
    if any(code not in _KINDS for code in codes):
        raise SegmentDamaged("segment names an unknown message kind")
    extra = {int(i): x for i, x in h["x"].items()}
    for x in extra.values():
        calls = x.get("calls", ())
        if not all(len(c) == 3 and all(isinstance(v, str) for v in c) for c in calls):
            raise SegmentDamaged("segment holds a malformed tool call")
    return SealedRun(codes, values[:n], values[n : 2 * n], values[2 * n : 3 * n], ends, blob, extra)
