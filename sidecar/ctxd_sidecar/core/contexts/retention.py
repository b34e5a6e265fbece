"""What a checkpoint's head keeps and what it lets go: live segments, the
archive of folded messages (``compaction.archive_ttl``), the copies of
earlier heads and the segments they need (``contexts.history_ttl``, see
:mod:`.history`), and the segments no head needs any more (deleted by the
janitor)."""

from __future__ import annotations

from dataclasses import dataclass

from ctxd_sidecar.core.contexts.model import ContextState, Msg, SegmentRef


@dataclass(slots=True)
class Retained:
    keep: list[SegmentRef]
    archive: list[tuple[SegmentRef, int]]
    dropped: list[SegmentRef]
    #: The segment of folded messages not in any segment yet (None: none).
    archived: SegmentRef | None
    unarchived: list[Msg]
    hist: list[list[int]]
    held: list[tuple[SegmentRef, int]]
    #: Versions whose head copy expired.
    gone: list[int]


def retain(
    st: ContextState, version: int, now: int, archive_ttl: int, history_ttl: int
) -> Retained:
    """What the head written at ``version`` (at ``now`` ms) names."""
    keep = [s for s in st.segments if s.last >= st.live_from]
    folded_segments = [s for s in st.segments if s.last < st.live_from]
    archive, dropped = list(st.archive), list(st.dropped)
    if archive_ttl > 0:
        archive += [(s, now) for s in folded_segments]
        expired = [a for a in archive if now - a[1] >= archive_ttl]
        archive = [a for a in archive if a not in expired]
        dropped += [s for s, _ in expired]
    else:
        dropped += folded_segments + [s for s, _ in archive]
        archive = []
    # A fork's inherited segments are its ancestors' to delete (see .forks).
    dropped = [s for s in dropped if not st.lineage or s.version > st.lineage[0][2]]
    hist, held, dropped, gone = kept_history(st, history_ttl, version, now, dropped)
    unarchived = list(st.unarchived)
    archived = None
    if unarchived and archive_ttl > 0:
        archived = SegmentRef(unarchived[0].seq, unarchived[-1].seq, len(unarchived), version)
        archive.append((archived, now))
    return Retained(keep, archive, dropped, archived, unarchived, hist, held, gone)


def kept_history(
    st: ContextState, ttl: int, version: int, now: int, dropped: list[SegmentRef]
) -> tuple[list[list[int]], list[tuple[SegmentRef, int]], list[SegmentRef], list[int]]:
    """History the head written at ``version`` keeps: a copy of each head
    stays ``ttl`` ms (versions from it on stay readable), and a segment no
    head needs any more is held as long, as copies written before it was
    dropped may name it. ``dropped``: what the checkpoint drops. Returns
    ``(hist, held, dropped, versions whose copy to delete)``."""
    if ttl <= 0:
        return [], [], dropped + [s for s, _ in st.held], [h[0] for h in st.hist]
    kept = [h for h in st.hist if now - h[1] < ttl and h[0] != version]
    gone = [h[0] for h in st.hist if h not in kept and h[0] != version]
    new = [s for s in dropped if s not in st.dropped]
    held = [(s, t) for s, t in st.held if now - t < ttl] + [(s, now) for s in new]
    released = [s for s, t in st.held if now - t >= ttl]
    old = [s for s in dropped if s in st.dropped]
    return kept + [[version, now]], held, old + released, gone
