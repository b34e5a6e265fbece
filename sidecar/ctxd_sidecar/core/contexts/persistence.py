"""The durable layout of contexts (see the package docstring for the why).

Keys, relative to the instance namespace (``<id>`` is the context id,
``<gen>`` the incarnation, numbers zero-padded to 12 digits)::

    contexts/<id>                      head: all non-message state at version V
    context-log/<id>/<gen>/<version>   one record per versioned change
    context-seg/<id>/<gen>/<first>.<v> sealed messages first..last (written at v)
    context-trash/<id>~<gen>           a deletion in progress (resumed on start)
    context-hist/<id>/<gen>/<version>  a copy of the head written at that version
                                       (kept contexts.history_ttl; see .history)

:class:`ContextStore` reads and writes them; it holds no state of its own
beyond the storage handle and never decides *when* to write.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from ctxd_sidecar.core.contexts.head import head_of, state_from_head
from ctxd_sidecar.core.contexts.model import ContextState, Msg, SegmentRef
from ctxd_sidecar.core.contexts.ops import SEALED, DamagedRecord, apply_record, needs_messages
from ctxd_sidecar.core.contexts.retention import retain
from ctxd_sidecar.core.contexts.segments import (
    BuiltRun,
    Framing,
    SealedRun,
    SegmentCodec,
    SegmentDamaged,
)
from ctxd_sidecar.core.errors import Conflict, NotFound, Unavailable
from ctxd_sidecar.core.jsonvalue import encode_compact
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.store import Item, Write

log = logging.getLogger(__name__)

T = TypeVar("T")

HEADS = "contexts"
LOGS = "context-log"
SEGMENTS = "context-seg"
TRASH = "context-trash"
HISTORY = "context-hist"

#: Log records read ahead at once while replaying a tail on remote stores.
TAIL_BATCH = 8
#: Segments (or deletions) in flight at once on remote stores.
IO_CONCURRENCY = 8
#: Attempts at a consistent restore while another writer keeps moving the head.
RESTORE_ATTEMPTS = 5

_SEALED_MARKER = json.dumps({"op": SEALED}).encode()


def decode(raw: bytes, what: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise Damaged(f"{what} is not valid JSON") from None


class Damaged(Unavailable):
    """A stored record of a context cannot be read back. Logged with detail;
    the caller sees UNAVAILABLE (nothing it sent is at fault)."""


class HeadMoved(Exception):
    """A log record was already sealed: a newer head exists. Re-read it."""


def head_key(cid: str) -> str:
    return f"{HEADS}/{cid}"


def log_prefix(cid: str, gen: str) -> str:
    return f"{LOGS}/{cid}/{gen}/"


def log_key(cid: str, gen: str, version: int) -> str:
    return f"{LOGS}/{cid}/{gen}/{version:012d}"


def seg_prefix(cid: str, gen: str) -> str:
    return f"{SEGMENTS}/{cid}/{gen}/"


def seg_key(cid: str, gen: str, seg: SegmentRef) -> str:
    return f"{SEGMENTS}/{cid}/{gen}/{seg.first:012d}.{seg.version:012d}"


def hist_prefix(cid: str, gen: str) -> str:
    return f"{HISTORY}/{cid}/{gen}/"


def hist_key(cid: str, gen: str, version: int) -> str:
    return f"{HISTORY}/{cid}/{gen}/{version:012d}"


def seg_owner(st: ContextState, seg: SegmentRef) -> tuple[str, str]:
    """Whose keys hold ``seg``: a fork reads the segments it inherited
    (written at or before the version it was forked at) from its ancestors'."""
    owner = (st.id, st.gen)
    for aid, agen, upto in st.lineage:
        if seg.version > upto:
            break
        owner = (aid, agen)
    return owner


def trash_name(cid: str, gen: str) -> str:
    return f"{cid}~{gen}"


class ContextStore:
    """Reads and writes one context's keys."""

    def __init__(
        self,
        storage: Storage,
        *,
        idem_cap: int,
        archive_ttl_ms: int = 0,
        history_ttl_ms: int = 0,
        framing: Framing | None = None,
    ) -> None:
        self.storage = storage
        self.idem_cap = idem_cap
        self.segments = SegmentCodec(framing)
        #: How long folded messages stay stored (0: deleted with their segment).
        self.archive_ttl_ms = archive_ttl_ms
        #: How long earlier versions stay readable (0: only the latest).
        self.history_ttl_ms = history_ttl_ms
        self.remote = not storage.inline_reads

    # -- helpers -------------------------------------------------------------------
    async def _bounded(self, jobs: Iterable[Callable[[], Awaitable[T]]]) -> list[T]:
        jobs = list(jobs)
        if not self.remote:
            return [await job() for job in jobs]
        sem = asyncio.Semaphore(IO_CONCURRENCY)

        async def one(job):
            async with sem:
                return await job()

        return list(await asyncio.gather(*(one(j) for j in jobs)))

    # -- head ------------------------------------------------------------------------
    async def read_head(self, cid: str) -> tuple[dict[str, Any], str] | None:
        item = await self.storage.get(head_key(cid))
        if item is None:
            return None
        return self.parse_head(cid, item), item.version

    def parse_head(self, cid: str, item: Item) -> dict[str, Any]:
        head = decode(item.value, f"head of context {cid}")
        if not isinstance(head, dict) or head.get("format") != 1 or head.get("id") != cid:
            raise Damaged(f"head of context {cid} has an unknown format")
        return head

    async def create_head(self, st: ContextState) -> None:
        """Write the head of a new context (version 0); Conflict if one exists
        (other than the deleted incarnation ``st.replaces_head`` names)."""
        if self.history_ttl_ms > 0:
            st.hist = [[0, int(time.time() * 1000)]]
        body = encode_compact(head_of(st, [], 0, [], []))
        if self.history_ttl_ms > 0:
            await self.storage.put(hist_key(st.id, st.gen, 0), body)
        if st.replaces_head is not None:
            # The head of a deleted incarnation is still stored: take its place.
            etag = await self.storage.put(head_key(st.id), body, if_version=st.replaces_head)
        else:
            etag = await self.storage.put(head_key(st.id), body, if_absent=True)
        st.head_etag, st.replaces_head = etag, None
        st.head_version = st.version

    # -- log -------------------------------------------------------------------------
    async def write_log(self, st: ContextState, rec: dict[str, Any]) -> None:
        """Create the record of version ``rec["v"]``. This create-only write is
        where concurrent writers are serialised: Conflict means another
        writer already made that version."""
        key = log_key(st.id, st.gen, rec["v"])
        await self.storage.put(key, encode_compact(rec), if_absent=True)

    async def read_tail(
        self,
        cid: str,
        gen: str,
        after: int,
        *,
        first: Item | None = None,
        ahead: int = TAIL_BATCH,
    ) -> list[dict[str, Any]]:
        """Log records after version ``after``, in order, up to the first gap.
        Raises :class:`HeadMoved` on a sealed record.

        ``first`` is record ``after + 1`` when the caller already read it (a
        replica's probe); ``ahead`` how fast reads ahead grow on remote stores
        (a restore expects a long tail, a replica catching up a short one)."""
        out: list[dict[str, Any]] = []
        v = after + 1
        batch = 1  # usually the tail is empty: one read says so
        pending: list[Item | None] | None = [first] if first is not None else None
        while True:
            items = pending or await asyncio.gather(
                *(self.storage.get(log_key(cid, gen, v + i)) for i in range(batch))
            )
            pending = None
            for item in items:
                if item is None:
                    return out
                rec = decode(item.value, f"log record {v} of context {cid}")
                if rec.get("op") == SEALED:
                    raise HeadMoved()
                if rec.get("v") != v:
                    raise Damaged(f"log record {v} of context {cid} says version {rec.get('v')}")
                out.append(rec)
                v += 1
            batch = min(max(batch * 2, ahead), 64) if self.remote else 1

    # -- restore ----------------------------------------------------------------------
    async def restore(
        self, cid: str, *, loaded: bool = True, head: tuple | None = None
    ) -> ContextState | None:
        """The context as of its latest durable record, or None if it has no head.

        With ``loaded=False`` only the head and the log tail are read (enough
        for listing); :class:`NeedsFullRestore` if the tail holds an op that
        needs the messages.
        """
        seen: str | None = None
        for _ in range(RESTORE_ATTEMPTS):
            if head is None:
                head = await self.read_head(cid)
            if head is None:
                return None
            doc, etag = head
            head = None
            if etag == seen:
                # A record the head relies on is missing, yet no newer head exists.
                log.error("context head names records that are missing", extra={"context": cid})
                raise Damaged(f"context {cid} cannot be restored; see the sidecar log")
            st = state_from_head(doc, idem_cap=self.idem_cap)
            st.head_etag = etag
            st.loaded = loaded
            try:
                if loaded:
                    tail_task = asyncio.ensure_future(self.read_tail(cid, st.gen, st.version))
                    try:
                        segments = await self._bounded(
                            (lambda s=s, st=st: self.read_run(st, s)) for s in st.segments
                        )
                    except BaseException:
                        tail_task.cancel()
                        raise
                    tail = await tail_task
                    for ref, run in zip(st.segments, segments, strict=True):
                        st.load_sealed(without_cut(st, ref, run.since(st.live_from)))
                else:
                    tail = await self.read_tail(cid, st.gen, st.version)
                    if any(needs_messages(r) for r in tail):
                        raise NeedsFullRestore()
            except HeadMoved:
                seen = etag
                continue
            try:
                for rec in tail:
                    apply_record(st, rec)
            except DamagedRecord as exc:
                log.error(
                    "context record cannot be applied", extra={"context": cid, "error": str(exc)}
                )
                raise Damaged(f"context {cid} cannot be restored; see the sidecar log") from None
            return st
        raise Unavailable(f"context {cid} kept changing while it was restored; retry")

    async def read_segment(self, st: ContextState, seg: SegmentRef) -> list[Msg]:
        return (await self.read_run(st, seg)).build()

    async def read_run(self, st: ContextState, seg: SegmentRef) -> SealedRun | BuiltRun:
        """A sealed segment, checked against the head, its messages not yet built."""
        raw = await self.storage.get_value(seg_key(*seg_owner(st, seg), seg))
        if raw is None:
            # The head only names segments written before it, and segments
            # are never deleted while a head names them: a newer head exists.
            raise HeadMoved()
        try:
            run = self.segments.parse(raw)
        except SegmentDamaged:
            raise Damaged(f"segment {seg.first} of context {st.id} cannot be read") from None
        seqs = run.seqs
        if len(seqs) != seg.count or seqs[0] != seg.first or seqs[-1] != seg.last:
            raise Damaged(f"segment {seg.first} of context {st.id} does not match its head")
        return run

    # -- checkpoint -----------------------------------------------------------------------
    async def checkpoint(self, st: ContextState, before: dict | None = None) -> Cleanup | None:
        """Seal the messages appended since the last checkpoint into a segment,
        then write the head at the current version (conditional on the head
        read or written last). Returns the clean-up the new head allows (log
        records to seal, segments to delete), or None when there was nothing
        to do. ``before``: more keys written with the segment (a fork's refs).

        Everything the head and segment hold is captured before the first
        write, so turns may be committed meanwhile (they stay in the log).
        Conflict: another writer replaced the head; the caller must restore.
        """
        version = st.version
        if version == st.head_version and not st.dirty:
            return None
        pending: list[Msg] = []
        if st.next_seq - 1 > st.sealed_through:
            pending = st.unsealed()
        now = int(time.time() * 1000)
        kept = retain(st, version, now, self.archive_ttl_ms, self.history_ttl_ms)
        keep, archive, dropped, archived_now = kept.keep, kept.archive, kept.dropped, kept.archived
        unarchived = kept.unarchived
        sealed_through = st.sealed_through
        segment = None
        if pending:
            segment = SegmentRef(pending[0].seq, pending[-1].seq, len(pending), version)
            keep.append(segment)
            sealed_through = segment.last
        elif st.next_seq - 1 > sealed_through:
            sealed_through = st.next_seq - 1  # appended and folded before sealing
        if st.cut:
            # Truncated ranges below every segment the head names filter nothing.
            firsts = [x.first for x in keep] + [x.first for x, _ in archive]
            lowest = min(firsts, default=st.next_seq)
            st.cut = [r for r in st.cut if r[1] >= lowest]
        head = encode_compact(
            head_of(st, keep, sealed_through, dropped, archive, hist=kept.hist, held=kept.held)
        )
        pending_bytes = sum(m.size_bytes for m in pending)
        st.dirty = False
        puts = dict(before or {})
        try:
            if segment is not None:
                puts[seg_key(st.id, st.gen, segment)] = self.segments.encode(st.id, st.gen, pending)
            if archived_now is not None:
                body = self.segments.encode(st.id, st.gen, unarchived)
                puts[seg_key(st.id, st.gen, archived_now)] = body
            if kept.hist:
                puts[hist_key(st.id, st.gen, version)] = head
            # (no head yet: a fork's first, in place of a deleted incarnation's or new)
            prev = st.head_etag or st.replaces_head
            # All before the head naming them; one commit where writes group.
            etag = await self.storage.put_many(
                puts, then=Write(head_key(st.id), head, if_version=prev, if_absent=not prev)
            )
        except BaseException:
            st.dirty = True
            raise
        st.head_etag, st.replaces_head = etag, None
        st.head_version = version
        st.segments = keep
        st.dropped = dropped
        st.archive = archive
        st.hist, st.held, st.hist_gone = kept.hist, kept.held, st.hist_gone + kept.gone
        del st.unarchived[: len(unarchived)]
        st.sealed_through = sealed_through
        st.unsealed_bytes -= pending_bytes
        return cleanup_for(st)

    async def seal_log(self, cid: str, gen: str, version: int) -> None:
        """Overwrite a log record the head covers with the small sealed marker."""
        await self.storage.put(log_key(cid, gen, version), _SEALED_MARKER)

    async def delete_segment(self, cid: str, gen: str, seg: SegmentRef) -> None:
        await self.storage.delete(seg_key(cid, gen, seg))

    # -- deletion ---------------------------------------------------------------------------
    async def keys_of(
        self, cid: str, gen: str, last_version: int, segments: list[SegmentRef]
    ) -> list[str]:
        """Every log record and segment key of one incarnation."""
        if self.storage.can_list:
            return (
                await self.storage.list(log_prefix(cid, gen))
                + await self.storage.list(seg_prefix(cid, gen))
                + await self.storage.list(hist_prefix(cid, gen))
            )
        keys = [log_key(cid, gen, v) for v in range(1, last_version + 1)]
        if self.history_ttl_ms > 0:
            keys += [hist_key(cid, gen, v) for v in range(0, last_version + 1)]
        return keys + [seg_key(cid, gen, s) for s in segments]

    async def delete_hist(self, cid: str, gen: str, version: int) -> None:
        await self.storage.delete(hist_key(cid, gen, version))


def without_cut(st: ContextState, ref: SegmentRef, run: SealedRun | BuiltRun):
    """``run`` without the messages truncation removed (a sealed segment
    keeps them until its context is compacted or deleted)."""
    if not any(a <= ref.last and ref.first <= b for a, b in st.cut):
        return run
    return BuiltRun([m for m in run.build() if not st.is_cut(m.seq)])


def cleanup_for(st: ContextState) -> Cleanup | None:
    """What the stored head allows to clean up (after a checkpoint or a
    restore): log records older than the oldest kept version are sealed."""
    first = max(st.swept_through, st.sweep_queued) + 1
    last = st.head_version
    if st.hist:
        last = min(last, st.hist[0][0] - 1)
    segments = [s for s in st.dropped if s not in st.drop_queued]
    hist, st.hist_gone = st.hist_gone, []
    if first > last and not segments and not hist:
        return None
    st.sweep_queued = max(st.sweep_queued, last)
    st.drop_queued.update(segments)
    return Cleanup(st, first, last, segments, hist)


class Cleanup:
    """Work a head allows once written: seal log records ``first..last`` and
    delete ``segments`` (no head names them any more).

    It holds its context weakly: queued clean-up must never keep an evicted
    context's messages in memory. If the context left memory meanwhile, the
    progress is not recorded; the next restore finds the work again."""

    __slots__ = ("_state", "cid", "gen", "first", "last", "segments", "hist")

    def __init__(
        self,
        state: ContextState,
        first: int,
        last: int,
        segments: list[SegmentRef],
        hist: list[int] | None = None,
    ):
        self._state = weakref.ref(state)
        self.cid, self.gen = state.id, state.gen
        self.first = first
        self.last = last
        self.segments = segments
        #: Versions whose head copy expired (see ContextStore._history).
        self.hist = hist or []

    def forget(self) -> None:
        """Not queued after all: the next checkpoint offers this work again."""
        st = self._state()
        if st is not None:
            st.sweep_queued = min(st.sweep_queued, self.first - 1)
            st.drop_queued.difference_update(self.segments)
            st.hist_gone = sorted(set(st.hist_gone) | set(self.hist))

    def done(self) -> None:
        """Record the progress on the state; the next head carries it."""
        st = self._state()
        if st is None:
            return
        if self.first <= st.swept_through + 1:
            st.swept_through = max(st.swept_through, self.last)
        st.dropped = [s for s in st.dropped if s not in self.segments]
        st.drop_queued.difference_update(self.segments)


class NeedsFullRestore(Exception):
    """A listing peek met a log record it cannot apply without the messages."""


def not_found(cid: str) -> NotFound:
    return NotFound(f"context {cid!r} does not exist")


__all__ = [
    "Cleanup",
    "cleanup_for",
    "Conflict",
    "ContextStore",
    "Damaged",
    "HeadMoved",
    "NeedsFullRestore",
    "decode",
    "head_key",
    "hist_key",
    "log_key",
    "seg_key",
    "trash_name",
    "not_found",
]
