"""ForkContext: a new conversation holding a context's state as of a
version, independent afterwards, written copy-on-write.

A fork is one checkpoint under the new id (:meth:`ContextStore.checkpoint`):
a head holding the state at version ``V`` (summary, ledger, plan, skills,
compaction records, counters), its first version ``V + 1``, a segment of the
few messages the source had not sealed yet, and nothing else. Every sealed
segment and archived segment stays where the source (or one of its own
ancestors) wrote it: the fork's head names it, and its *lineage* (the
ancestors, nearest first, each with the version forked at) says whose keys
hold a segment written at or before that version
(:func:`~.persistence.seg_owner`). So a fork costs about an AppendTurn
however long the source is.

Keys beside the context's own::

    context-ref/<ancestor>/<gen>/<fork>~<gen>   a fork reads this ancestor's segments
    context-fork/<fork>/<gen>                   the fork's lineage (for its purge)
    context-forked/<ancestor>/<gen>             it was forked (stores that cannot list)

A fork never deletes an inherited segment (:mod:`.retention` leaves them out
of what a checkpoint drops). The purge of a deleted incarnation
(:func:`.lineage.purge_keys`) keeps its segments while a fork refers to them; the
purge of the last fork referring to a deleted ancestor removes that
ancestor's segments. On a store that cannot list, a deleted context that
was ever forked keeps its segments.
"""

from __future__ import annotations

import json
import secrets
from collections import OrderedDict

from ctxd_sidecar.core.contexts import validate
from ctxd_sidecar.core.contexts.history import History
from ctxd_sidecar.core.contexts.lineage import FORKED, FORKS, REFS
from ctxd_sidecar.core.contexts.model import CONVERSATION, ROOT_ID, ContextInfo, ContextState
from ctxd_sidecar.core.contexts.persistence import NeedsFullRestore
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.errors import AlreadyExists, Conflict, InvalidArgument, Unavailable


class Forks:
    """ForkContext over the record keeper and its history."""

    def __init__(self, contexts: ContextService, history: History) -> None:
        self.contexts = contexts
        self.history = history

    async def fork(
        self, source_id: str, at_version: int, new_id: str, key: str = ""
    ) -> ContextInfo:
        """The new context ``new_id`` holding ``source_id`` as of ``at_version``
        (0: its latest). A retry with the same ``key`` answers the same fork."""
        svc = self.contexts
        new_id = validate.context_id(new_id)
        if new_id == ROOT_ID:
            raise InvalidArgument("context_id", "the root context cannot be a fork")
        if new_id == source_id:
            raise InvalidArgument("context_id", "must differ from source_id")
        src = await svc.get(validate.context_id(source_id, "source_id"), latest=True)
        existing = await svc.read(new_id, latest=True)
        if existing is not None and existing.exists:
            return self._replayed(existing, key)
        st = await self._state_at(src, at_version)
        self._make_fork(st, src, new_id, key, existing)
        await self._write(st)
        svc.invalidate(new_id)  # read it from the store from now on
        return st.info()

    def _replayed(self, existing: ContextState, key: str) -> ContextInfo:
        if key and key in existing.idem:
            return existing.info()
        raise AlreadyExists(
            f"context {existing.id!r} already exists; fork into a new id (or delete it first)"
        )

    async def _state_at(self, src: ContextState, at_version: int) -> ContextState:
        """A fresh copy of ``src`` as of ``at_version`` (never the live object)."""
        version = at_version or src.version
        self.history.check(src, version)
        if version == src.version:
            await self._seal(src)
        if src.hist:
            return await self.history.rebuild(src, version, light=True)
        store = self.contexts.store
        try:
            st = await store.restore(src.id, loaded=False)
        except NeedsFullRestore:
            st = await store.restore(src.id)
        if st is None or st.gen != src.gen or st.version != version:
            raise Unavailable(f"context {src.id} changed while it was forked; retry")
        return st

    async def _seal(self, src: ContextState) -> None:
        """A fork of the latest version: checkpoint the source first (once per
        version), so that its head at V covers every message and the fork
        names segments instead of copying the source's unsealed tail. If
        that checkpoint cannot be written here, the fork copies the tail."""
        if src.head_version == src.version and not src.dirty:
            return
        await self.contexts.checkpoint_now(src.id, held=src)

    def _make_fork(
        self,
        st: ContextState,
        src: ContextState,
        new_id: str,
        key: str,
        existing: ContextState | None,
    ) -> None:
        """Turn ``st`` (the source at V) into the fork's state at V + 1."""
        now, v = self.contexts.now(), st.version
        st.lineage = [[src.id, src.gen, v], *st.lineage]
        st.id, st.kind, st.gen = new_id, CONVERSATION, secrets.token_hex(4)
        st.version, st.created, st.updated, st.archived = v + 1, now, now, False
        st.idem = OrderedDict({key: {"fork": src.id, "at": v}} if key else {})
        st.head_etag, st.head_version, st.dirty, st.deleted = None, 0, True, False
        st.replaces_head = existing.head_etag if existing is not None else None
        st.dropped, st.held, st.hist, st.hist_gone, st.drop_queued = [], [], [], [], set()
        # Its versions start after V: there is no log record to seal before them.
        st.swept_through = st.sweep_queued = v + 1
        st.reshaped_at = v + 1

    async def _write(self, st: ContextState) -> None:
        """The references and the fork's one checkpoint, its head written
        if absent and last (a purge of an ancestor then keeps its segments);
        one commit where the store groups writes."""
        svc = self.contexts
        fid = f"{st.id}~{st.gen}"
        refs = {f"{FORKS}/{st.id}/{st.gen}": json.dumps(st.lineage).encode()}
        for aid, agen, _ in st.lineage:
            refs[f"{REFS}/{aid}/{agen}/{fid}"] = b"1"
            if not svc.storage.can_list:
                refs[f"{FORKED}/{aid}/{agen}"] = b"1"
        try:
            # The references go with the fork's head copy, ahead of its head.
            await svc.create(st, whole=True, before=refs)
        except Conflict:
            existing = await svc.read(st.id, latest=True)
            if existing is not None and existing.exists:
                self._replayed(existing, next(iter(st.idem), ""))
            raise Unavailable(f"context {st.id} was created meanwhile; retry") from None
