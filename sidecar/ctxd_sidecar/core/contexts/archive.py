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

Archives verify: a record carries the SHA-256 of the messages it folded
(:func:`folded_sha256`, over each message's stored JSON form less the
bookkeeping version ``v``), and :func:`expand` reads the whole span, hashes
it and answers :class:`~ctxd_sidecar.core.errors.DataLoss` when it does
not match, so a damaged or partly lost archive is never served. Records
written before the hash existed have none and are served unchecked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from ctxd_sidecar.core.compaction.fidelity import Fidelity
from ctxd_sidecar.core.contexts.model import ContextState, Msg, SegmentRef, message_id
from ctxd_sidecar.core.contexts.persistence import ContextStore
from ctxd_sidecar.core.contexts.views import message_bytes, page_size
from ctxd_sidecar.core.errors import DataLoss, InvalidArgument, NotFound

log = logging.getLogger(__name__)


def folded_sha256(msgs: list[Msg]) -> str:
    """The hash a compaction record keeps of the messages it folded: each
    message's JSON form (keys sorted, without ``v``, the version that
    appended it, which is bookkeeping), one per line."""
    h = hashlib.sha256()
    for m in msgs:
        d = m.to_dict()
        d.pop("v", None)
        h.update(json.dumps(d, sort_keys=True, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


def new_record(
    folded: list[Msg],
    *,
    before: int,
    after: int,
    artifacts: int,
    by: str,
    fidelity: dict[str, Any] | None = None,
    trigger: str = "",
    predicted_writes: int = 0,
) -> dict[str, Any]:
    """The record a ``compact`` log record carries for folding ``folded`` (id,
    version and time are filled in from the log record when it is applied)."""
    out = {
        "first": folded[0].seq,
        "through": folded[-1].seq,
        "folded": len(folded),
        "before": before,
        "after": after,
        "artifacts": artifacts,
        "by": by,
        "sha": folded_sha256(folded),
    }
    if fidelity is not None:
        out["fid"] = fidelity
    if trigger:
        out["trig"] = trigger
    out["cfx"] = predicted_writes
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
    #: SHA-256 of the folded messages ("" on records from before it was kept).
    folded_sha256: str = ""
    #: manual, auto or runtime ("" on older records).
    trigger: str = ""
    #: CacheEffect.tokens_rewritten when it compacted.
    predicted_writes: int = 0
    #: [cache writes, cached input, input] the first usage report after it gave.
    reported: tuple[int, int, int] | None = None


def info(d: dict[str, Any], expandable: bool, reported: list[int] | None = None) -> CompactionInfo:
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
        folded_sha256=str(d.get("sha", "")),
        trigger=str(d.get("trig", "")),
        predicted_writes=int(d.get("cfx", 0)),
        reported=(int(reported[0]), int(reported[1]), int(reported[2])) if reported else None,
    )


def records(st: ContextState, ttl_ms: int, now_ms: int) -> list[CompactionInfo]:
    after = st.calibration.cache.after
    return [info(d, expandable(d, ttl_ms, now_ms), after.get(d["id"])) for d in st.compactions]


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
    sha = str(found.get("sha", ""))
    if sha:
        wanted = await _span(store, st, first, through, first - 1, 0)
        _verify(st, rec, sha, [wanted[s] for s in sorted(wanted)])
    else:
        wanted = await _span(store, st, first, through, after, limit)
    ordered = [wanted[s] for s in sorted(wanted) if s > after]
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


async def _span(
    store: ContextStore, st: ContextState, first: int, through: int, after: int, limit: int
) -> dict[int, Msg]:
    """The stored messages ``first..through`` after seq ``after``: all of them
    when ``limit`` is 0, else at least the first ``limit``."""
    wanted: dict[int, Msg] = {
        m.seq: m for m in st.unarchived if after < m.seq <= through and m.seq >= first
    }
    for seg in sources(st, max(first, after + 1), through):
        if limit and len(wanted) >= limit and min(wanted) <= seg.first:
            break
        for m in await store.read_segment(st, seg):
            if after < m.seq <= through and m.seq >= first and not st.is_cut(m.seq):
                wanted.setdefault(m.seq, m)
    return wanted


def _verify(st: ContextState, rec: CompactionInfo, sha: str, msgs: list[Msg]) -> None:
    found = folded_sha256(msgs)
    if found == sha:
        return
    log.error(
        "compaction archive does not verify",
        extra={"context": st.id, "compaction": rec.id, "expected": sha, "found": found},
    )
    raise DataLoss(
        f"context {st.id}: the messages compaction {rec.id} folded do not match the "
        f"SHA-256 it recorded ({len(msgs)} of {rec.folded} messages found, hash "
        f"{found[:12]}… instead of {sha[:12]}…): the store's archive was changed or lost "
        "part of it, so ctxd will not serve it. Restore the context from a backup or an "
        "export of the store taken before the damage (`ctxd contexts export`)"
    )
