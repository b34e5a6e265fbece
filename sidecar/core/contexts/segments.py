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
from itertools import accumulate
from typing import Any

from sidecar.core.contexts.model import (
    ASSISTANT,
    NOTE,
    SYSTEM,
    TOOL,
    USER,
    Msg,
    ToolCall,
)
from sidecar.core.estimate import estimate_plain
from sidecar.core.jsonvalue import encode_compact

MAGIC = b"ctxd-seg/2\n"
#: Writable formats (``contexts.segment_format``).
COLUMNS, JSON = "columns", "json"
_CODES = {SYSTEM: "s", USER: "u", ASSISTANT: "a", TOOL: "t", NOTE: "n"}
_KINDS = {code: kind for kind, code in _CODES.items()}
#: Numbers per message in the binary columns.
_COLUMNS = 5
_SWAP = sys.byteorder != "little"


class SegmentDamaged(ValueError):
    """The bytes are not a segment this code can read."""


def encode_segment(cid: str, gen: str, msgs: list[Msg], fmt: str = COLUMNS) -> bytes:
    """The stored form of ``msgs``: format 2 (``COLUMNS``), or format 1
    (``JSON``) that ctxd 0.1 reads, while a fleet is being upgraded."""
    if fmt == JSON:
        doc = {"id": cid, "gen": gen, "msgs": [m.to_dict() for m in msgs]}
        return encode_compact(doc)
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
    try:
        if raw.startswith(MAGIC):
            return _decode_columns(raw)
        doc = json.loads(raw)
        return [Msg.from_dict(d) for d in doc["msgs"]]
    except SegmentDamaged:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise SegmentDamaged(str(exc)) from None


#: The fields most messages leave empty, named as Msg.to_dict names them.
_RARE = ("principal", "calls", "call_id", "name", "json", "error")


def _extra_of(m: Msg) -> dict[str, Any]:
    d = m.to_dict()
    return {k: d[k] for k in _RARE if k in d}


def _decode_columns(raw: bytes) -> list[Msg]:
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
    seqs, tss, vers = values[:n], values[n : 2 * n], values[2 * n : 3 * n]
    blob = str(memoryview(raw)[at + 8 * _COLUMNS * n :], "utf-8")
    # Blob offsets: text i is blob[ends[2i]:ends[2i+1]], its content runs to ends[2i+2].
    lengths = [0] * (2 * n)
    lengths[0::2], lengths[1::2] = values[3 * n : 4 * n], values[4 * n :]
    ends = [0, *accumulate(lengths)]
    if ends[-1] != len(blob):
        raise SegmentDamaged("segment texts do not match their lengths")
    extra = {int(i): x for i, x in h["x"].items()}
    kinds = _KINDS
    out: list[Msg] = []
    append = out.append
    rows = zip(codes, ends[0:-1:2], ends[1::2], ends[2::2], seqs, tss, vers, strict=True)
    for i, (code, a, b, c, seq, ts, ver) in enumerate(rows):
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
