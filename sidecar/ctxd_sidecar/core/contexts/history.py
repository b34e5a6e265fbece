"""Earlier versions of a context: read one (GetContextRequest.at_version)
and list them (ListVersions).

Every checkpoint also writes a copy of the head it writes,
``context-hist/<id>/<gen>/<version>`` (and the creation of a context one at
version 0). A copy stays ``contexts.history_ttl``; while it does, the log
records after it stay unsealed and no segment it names is deleted (a
dropped segment is *held* as long, see :func:`.head.kept_history`). So the
state at any version ``V`` from the oldest kept copy on is that copy's
head, its segments and the log records up to ``V``: a restore, bounded by
``contexts.checkpoint_every`` records, not a replay of the whole log.
Rebuilt states are cached (a paged read of an old version rebuilds once).

A version before the oldest kept copy answers FAILED_PRECONDITION naming
the oldest kept; one after the latest, OUT_OF_RANGE. Versions belong to the
current incarnation of a context.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ctxd_sidecar.core.contexts.head import state_from_head
from ctxd_sidecar.core.contexts.model import ContextState
from ctxd_sidecar.core.contexts.ops import SEALED, DamagedRecord, apply_record, needs_messages
from ctxd_sidecar.core.contexts.persistence import (
    Damaged,
    HeadMoved,
    decode,
    hist_key,
    log_key,
    without_cut,
)
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.errors import FailedPrecondition, InvalidArgument, OutOfRange

#: Rebuilt earlier states kept in memory (a paged read rebuilds once), and
#: the largest kept (a bigger one is rebuilt for each page).
CACHED_STATES = 8
CACHED_BYTES = 16 * 1024 * 1024
DEFAULT_PAGE = 100
MAX_PAGE = 1000
#: The kind a log record's op is listed as.
KINDS = {"append": "turn", "compact": "compaction"}


@dataclass(frozen=True, slots=True)
class VersionInfo:
    version: int
    kind: str
    created_ms: int
    message_count: int
    est_tokens: int


class _Gone(Exception):
    """A key a kept version needs is gone (expired meanwhile)."""


class History:
    """Reads of earlier versions over the record keeper's store."""

    def __init__(self, contexts: ContextService) -> None:
        self.contexts = contexts
        self.store = contexts.store
        self._cache: OrderedDict[tuple[str, str, int], ContextState] = OrderedDict()

    @staticmethod
    def oldest_kept(st: ContextState) -> int:
        """The oldest version readable with ``at_version`` (the latest when none is kept)."""
        if not st.hist:
            return st.version
        return min(max(st.hist[0][0], 1), st.version)

    def check(self, st: ContextState, version: int, field: str = "at_version") -> None:
        if version < 0:
            raise InvalidArgument(field, "must not be negative (0 reads the latest)")
        if version > st.version:
            raise OutOfRange(
                f"{field}: context {st.id} is at version {st.version}; version {version} "
                "is not written yet"
            )
        oldest = self.oldest_kept(st)
        if version < oldest:
            raise self._not_kept(st, version, oldest)

    def _not_kept(self, st: ContextState, version: int, oldest: int) -> FailedPrecondition:
        return FailedPrecondition(
            f"version {version} of context {st.id} is no longer kept; the oldest kept is "
            f"{oldest} (contexts.history_ttl)"
        )

    async def at(self, st: ContextState, version: int) -> ContextState:
        """``st`` (the latest) as it was at ``version`` (0: ``st`` itself)."""
        if version == 0:
            return st
        self.check(st, version)
        if version == st.version:
            return st
        key = (st.id, st.gen, version)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        try:
            old, _ = await self._rebuild(st, version, version)
        except _Gone:
            raise self._not_kept(st, version, self.oldest_kept(st)) from None
        if old.memory_bytes <= CACHED_BYTES:
            self._cache[key] = old
        while len(self._cache) > CACHED_STATES:
            self._cache.popitem(last=False)
        return old

    async def rebuild(self, st: ContextState, version: int, *, light: bool) -> ContextState:
        """A fresh copy of ``st`` as of ``version`` (checked; not cached).
        ``light``: the sealed messages are not read unless a record needs
        them (enough to write a head: a fork's)."""
        try:
            return (await self._rebuild(st, version, version, light=light))[0]
        except _Gone:
            raise self._not_kept(st, version, self.oldest_kept(st)) from None

    async def _rebuild(
        self, st: ContextState, version: int, upto: int, each=None, *, light: bool = False
    ) -> tuple[ContextState, list[dict[str, Any]]]:
        """The state at ``upto`` from the kept copy at or before ``version``;
        ``each(state, record)`` after every record applied."""
        base = max(h[0] for h in st.hist if h[0] <= version)
        store, cid, gen = self.store, st.id, st.gen
        item = await store.storage.get(hist_key(cid, gen, base))
        if item is None:
            raise _Gone()
        old = state_from_head(store.parse_head(cid, item), idem_cap=st.idem_cap)
        records = await self._records(cid, gen, base + 1, upto)
        # Light: messages appended after the copy are applied, sealed ones not read.
        whole = not light or any(needs_messages(r) for r in records)
        try:
            segments = old.segments if whole else []
            runs = await store._bounded((lambda s=s: store.read_run(old, s)) for s in segments)
        except HeadMoved:
            raise _Gone() from None
        for ref, run in zip(segments, runs, strict=True):
            old.load_sealed(without_cut(old, ref, run.since(old.live_from)))
        try:
            for rec in records:
                apply_record(old, rec)
                if each is not None:
                    each(old, rec)
        except DamagedRecord:
            raise Damaged(f"a log record of context {cid} cannot be applied") from None
        old.head_etag = None
        return old, records

    async def _records(self, cid: str, gen: str, first: int, last: int) -> list[dict[str, Any]]:
        store = self.store
        items = await store._bounded(
            (lambda v=v: store.storage.get(log_key(cid, gen, v))) for v in range(first, last + 1)
        )
        out = []
        for v, item in zip(range(first, last + 1), items, strict=True):
            if item is None:
                raise _Gone()
            rec = decode(item.value, f"log record {v} of context {cid}")
            if rec.get("op") == SEALED:
                raise _Gone()
            out.append(rec)
        return out

    async def versions(
        self, st: ContextState, page_size: int, token: str
    ) -> tuple[list[VersionInfo], str, int]:
        """One page of ``st``'s kept versions, newest first: ``(versions,
        next token, oldest kept)``."""
        if page_size < 0:
            raise InvalidArgument("page_size", "must not be negative")
        size = min(page_size or DEFAULT_PAGE, MAX_PAGE)
        oldest = self.oldest_kept(st)
        start = self._start(st, token)
        if start < oldest or st.version == 0:
            return [], "", oldest
        end = max(oldest, start - size + 1)
        infos: list[VersionInfo] = []

        def note(s: ContextState, rec: dict[str, Any]) -> None:
            if s.version >= end:
                op = rec.get("op", "")
                infos.append(
                    VersionInfo(
                        s.version,
                        KINDS.get(op, op),
                        int(rec.get("ts", 0)),
                        s.msg_count,
                        s.est_tokens,
                    )
                )

        try:
            if st.hist and end > st.hist[0][0]:
                await self._rebuild(st, end - 1, start, note)
            else:
                if st.hist:
                    await self._rebuild(st, end, start, note)
                infos.append(await self._first(st, end))
        except _Gone:
            raise self._not_kept(st, end, self.oldest_kept(st)) from None
        infos.sort(key=lambda i: -i.version)
        nxt = f"{st.gen}:{end - 1}" if end > oldest else ""
        return infos, nxt, oldest

    async def _first(self, st: ContextState, version: int) -> VersionInfo:
        """The oldest kept version (its copy's base: no record applied after it)."""
        old = await self.at(st, version)
        item = await self.store.storage.get(log_key(st.id, st.gen, version))
        rec = decode(item.value, f"log record {version} of context {st.id}") if item else {}
        op = rec.get("op", "")
        if not item and st.lineage and version == st.lineage[0][2] + 1:
            op, rec = "fork", {"ts": st.created}
        if op == SEALED:
            op, rec = "", {"ts": st.updated if version == st.version else 0}
        return VersionInfo(
            version, KINDS.get(op, op), int(rec.get("ts", 0)), old.msg_count, old.est_tokens
        )

    @staticmethod
    def _start(st: ContextState, token: str) -> int:
        if not token:
            return st.version
        gen, _, v = token.partition(":")
        if gen != st.gen or not v.isdigit():
            raise InvalidArgument(
                "page_token", "is not one this context's ListVersions returned; start again"
            )
        return int(v)
