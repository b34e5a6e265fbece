"""What a compaction folded: its record, the archive, and ExpandCompaction.

A compaction is lossless. Its ``compact`` log record carries a *record*
(what it folded, tokens before and after, artifacts kept, summariser, time),
kept on the context (the last ``compaction.records_kept``), listed with it
and sent to watchers. The folded messages stay in the store: segments that
hold only folded messages move to the head's ``archive`` list instead of
being deleted, and folded messages that never reached a segment are written
to one by the next checkpoint. Archived segments go once
``compaction.archive_ttl`` passes, or with the context. Until then
:func:`expand` pages through them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ctxd_sidecar.core.compaction.fidelity import Fidelity
from ctxd_sidecar.core.contexts.model import ContextState, Msg, SegmentRef, message_id
from ctxd_sidecar.core.contexts.persistence import ContextStore
from ctxd_sidecar.core.contexts.views import message_bytes, page_size
from ctxd_sidecar.core.errors import InvalidArgument, NotFound


def new_record(
    *,
    first: int,
    through: int,
    folded: int,
    before: int,
    after: int,
    artifacts: int,
    by: str,
    fidelity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The record a ``compact`` log record carries (id, version and time are
    filled in from the log record when it is applied)."""
    out = {
        "first": first,
        "through": through,
        "folded": folded,
        "before": before,
        "after": after,
        "artifacts": artifacts,
        "by": by,
    }
    if fidelity is not None:
        out["fid"] = fidelity
    return out


@dataclass(frozen=True)
class CompactionInfo:
    """A compaction record, as readers see it."""

    id: str
    version: int
    first_id: str
    last_id: str
    folded: int
    tokens_before: int
    tokens_after: int
    artifacts: int
    summariser: str
    ts: int
    expandable: bool
    #: What the compaction kept of its span's verbatim artifacts (None for
    #: records written before ctxd measured it).
    fidelity: Fidelity | None = None


def info(d: dict[str, Any], expandable: bool) -> CompactionInfo:
    return CompactionInfo(
        id=str(d["id"]),
        version=int(d["v"]),
        first_id=message_id(int(d["first"])),
        last_id=message_id(int(d["through"])),
        folded=int(d["folded"]),
        tokens_before=int(d.get("before", 0)),
        tokens_after=int(d.get("after", 0)),
        artifacts=int(d.get("artifacts", 0)),
        summariser=str(d.get("by", "")),
        ts=int(d.get("ts", 0)),
        expandable=expandable,
        fidelity=Fidelity.from_dict(d.get("fid")),
    )


def records(st: ContextState, ttl_ms: int, now_ms: int) -> list[CompactionInfo]:
    return [info(d, expandable(d, ttl_ms, now_ms)) for d in st.compactions]


def expandable(d: dict[str, Any], ttl_ms: int, now_ms: int) -> bool:
    return ttl_ms > 0 and now_ms - int(d.get("ts", 0)) < ttl_ms


def sources(st: ContextState, first: int, through: int) -> list[SegmentRef]:
    """Stored segments that may hold messages ``first..through``."""
    segs = [s for s, _ in st.archive] + list(st.segments)
    return sorted((s for s in segs if s.first <= through and s.last >= first), key=_first)


def _first(s: SegmentRef) -> int:
    return s.first


#: An ExpandCompaction page token: "e" and the last seq returned (ASCII digits).
_EXPAND_TOKEN = re.compile(r"e[0-9]{1,18}")


def _decode_token(token: str, first: int) -> int:
    if not token:
        return first - 1
    if not _EXPAND_TOKEN.fullmatch(token):
        raise InvalidArgument("page_token", "is not a token this call returned; omit it")
    return int(token[1:])


async def expand(
    store: ContextStore,
    st: ContextState,
    compaction_id: str,
    *,
    ttl_ms: int,
    now_ms: int,
    size: int = 0,
    token: str = "",
) -> tuple[CompactionInfo, list[Msg], str]:
    """One page of the messages compaction ``compaction_id`` folded."""
    found = next((d for d in st.compactions if d["id"] == compaction_id), None)
    if found is None:
        raise NotFound(f"context {st.id} has no compaction {compaction_id!r} (see its compactions)")
    rec = info(found, expandable(found, ttl_ms, now_ms))
    if not rec.expandable:
        raise NotFound(
            f"the messages compaction {compaction_id} folded are no longer stored "
            "(compaction.archive_ttl)"
        )
    first, through = int(found["first"]), int(found["through"])
    after = _decode_token(token, first)
    limit = page_size(size)
    wanted: dict[int, Msg] = {
        m.seq: m for m in st.unarchived if after < m.seq <= through and m.seq >= first
    }
    for seg in sources(st, max(first, after + 1), through):
        if len(wanted) >= limit and min(wanted) <= seg.first:
            break
        for m in await store.read_segment(st, seg):
            if after < m.seq <= through and m.seq >= first and not st.is_cut(m.seq):
                wanted.setdefault(m.seq, m)
    ordered = [wanted[s] for s in sorted(wanted)]
    out: list[Msg] = []
    budget = 3 * 1024 * 1024
    for m in ordered:
        cost = message_bytes(m)
        if len(out) >= limit or (out and cost > budget):
            break
        budget -= cost
        out.append(m)
    # Folded messages are contiguous: first..through.
    more = bool(out) and out[-1].seq < through
    return rec, out, f"e{out[-1].seq}" if more else ""
