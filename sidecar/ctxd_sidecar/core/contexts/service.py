"""The record keeper of contexts: load, commit, read.

:class:`ContextService` owns the registry (the in-memory LRU) and the durable
layout, and keeps both to itself: the use cases beside it call its methods
(:meth:`ContextService.heads` pages the listed ids, :meth:`ContextService.listed`
summarises one) and :mod:`.trash` holds the deletion layout. Every change
of a context commits through one protocol, :meth:`ContextService.transaction`
(:mod:`.transaction`);
:meth:`ContextService.change` is its short form for a change decided from
the state alone (declare the record's op in :mod:`ctxd_sidecar.core.contexts.ops`).
Committed changes are announced on :attr:`ContextService.feed`.

The use cases built on it live beside it, one responsibility each:
:mod:`.turns` (AppendTurn), :mod:`.listing`, :mod:`.deletion`,
:mod:`.expiry`, :mod:`.checkpoints`, :mod:`.compaction`, :mod:`.planning`,
:mod:`.skillset`. It knows nothing of gRPC.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any

from ctxd_sidecar.config import ContextsConfig
from ctxd_sidecar.core.contexts import archive, validate
from ctxd_sidecar.core.contexts.checkpoints import Checkpointer
from ctxd_sidecar.core.contexts.events import ContextEvent, EventFeed, Subscription
from ctxd_sidecar.core.contexts.follow import Followers
from ctxd_sidecar.core.contexts.janitor import Janitor
from ctxd_sidecar.core.contexts.model import CONVERSATION, ROOT, ROOT_ID, ContextState, Msg
from ctxd_sidecar.core.contexts.ops import DamagedRecord, apply_record, event_of
from ctxd_sidecar.core.contexts.persistence import (
    HEADS,
    ContextStore,
    HeadMoved,
    NeedsFullRestore,
    cleanup_for,
    log_key,
    not_found,
)
from ctxd_sidecar.core.contexts.registry import Entry, Registry
from ctxd_sidecar.core.contexts.segments import Framing
from ctxd_sidecar.core.contexts.transaction import COMMIT_ATTEMPTS, Missing, Transaction
from ctxd_sidecar.core.contexts.trash import Trash
from ctxd_sidecar.core.errors import Conflict, CtxdError, InvalidArgument
from ctxd_sidecar.core.keyindex import KeyIndex
from ctxd_sidecar.core.observe import ContextsObserver, NullObserver
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.store import Item

log = logging.getLogger(__name__)

#: Builds the record of a change from the current state (None: no change).
Builder = Callable[[ContextState], dict[str, Any] | None]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class ContextService:
    def __init__(
        self,
        config: ContextsConfig,
        storage: Storage,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        archive_ttl: float = 0.0,
        observer: ContextsObserver | None = None,
        framing: Framing | None = None,
    ) -> None:
        self.config, self.storage = config, storage
        #: Other sidecars may write the same store.
        self.shared = storage.shared
        #: Seconds folded messages stay stored for ExpandCompaction (0: not kept).
        self.archive_ttl = archive_ttl
        #: Wall-clock milliseconds; replaceable (tests move time forward).
        self.clock = clock
        self.store = ContextStore(
            storage,
            idem_cap=config.idempotency_keys,
            archive_ttl_ms=int(archive_ttl * 1000),
            history_ttl_ms=int(config.history_ttl * 1000),
            framing=framing,
        )
        self._index = KeyIndex(storage, HEADS)
        self.janitor = Janitor(batch=8 if self.store.remote else 1)
        self.feed = EventFeed()
        self.checkpoints = Checkpointer(
            self.store,
            self.janitor,
            self.spawn,
            every=config.checkpoint_every,
            every_bytes=config.checkpoint_bytes,
        )
        self._registry = Registry(
            config.cache_max_contexts, config.cache_max_bytes, self.checkpoints.on_evict, observer
        )
        self.usage_observer: ContextsObserver = observer or NullObserver()
        self._tasks: set[asyncio.Task] = set()
        self.root_ready = False
        #: Reads check the store for other replicas' writes (shared stores,
        #: unless ``contexts.read_consistency = "cached"``).
        self.check_reads = storage.shared and config.read_consistency != "cached"
        #: Seconds a deletion's fence is held: only replicas need it.
        self.fence_hold = config.fence_hold if storage.shared else 0.0
        self.reverify_after = self.fence_hold / 2
        #: The deletion layout and purge (:mod:`.trash`), for :mod:`.deletion`.
        self.trash = Trash(
            storage, self.store, self._index, self.janitor, self.now, self.fence_hold
        )
        self._followers = Followers(storage, self.feed, self.read, config.watch_poll_interval)

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self.ensure_root()
        except CtxdError as exc:
            log.warning("root context not ready yet", extra={"error": str(exc)})

    async def stop(self, timeout: float = 10.0) -> None:
        """Checkpoint what is resident (so a restart restores quickly) and
        finish background work, within ``timeout`` seconds."""
        self._followers.stop()
        self.checkpoints.all_dirty(self._registry.entries())
        deadline = asyncio.get_running_loop().time() + timeout
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            _, late = await asyncio.wait(pending, timeout=timeout)
            for t in late:
                t.cancel()
        await self.janitor.stop(max(0.1, deadline - asyncio.get_running_loop().time()))

    def now(self) -> int:
        return int(self.clock())

    def spawn(self, coro: Coroutine) -> asyncio.Task:
        """Run background work that :meth:`stop` waits for."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def emit(self, kind: str, st: ContextState | None, cid: str, version: int, **detail) -> None:
        ts = st.updated if st is not None else self.now()
        self.feed.emit(ContextEvent(cid, kind, version, ts, detail), st)

    # -- loading -----------------------------------------------------------------------------------
    def new_state(self, cid: str, replacing: ContextState | None = None) -> ContextState:
        """A fresh incarnation of ``cid`` (taking the place of ``replacing``,
        a deleted one whose head may still be stored)."""
        now = self.now()
        st = ContextState(
            id=cid,
            kind=ROOT if cid == ROOT_ID else CONVERSATION,
            gen=secrets.token_hex(4),
            created=now,
            updated=now,
            model_window=self.config.default_model_window,
            idem_cap=self.config.idempotency_keys,
        )
        if replacing is not None and replacing.deleted:
            st.replaces_head = replacing.head_etag
        return st

    async def load(self, e: Entry) -> ContextState | None:
        """The entry's state, restored if needed. Call with ``e.lock`` held.

        On a shared store a copy not confirmed against the store for
        ``reverify_after`` seconds is restored again (a deletion's fence may
        be gone by then, see :mod:`.deletion`)."""
        if e.state is not None and not e.stale:
            if not self.storage.shared or time.monotonic() - e.verified < self.reverify_after:
                return e.state
        await self.checkpoints.wait_flushed(e.id)
        async with e.ckpt_lock:
            st = await self.store.restore(e.id)
        if st is None and e.id == ROOT_ID:
            st = self.new_state(ROOT_ID)
        elif st is not None:
            self.checkpoints.sweep(cleanup_for(st))
        if st is not None and st.deleted:
            st.forget_messages()
        e.state, e.stale = st, False
        e.verified = time.monotonic()
        return st

    async def read(self, cid: str, *, latest: bool = False) -> ContextState | None:
        """The context's state; with ``latest`` on a shared store, first
        checked against the store (one small read: the next log record)."""
        latest = latest and self.storage.shared
        async with self._registry.use(cid) as e:
            if e.state is None or e.stale or latest:
                async with e.lock:
                    # Decided under the lock: a restore that finished while
                    # this call waited may have read the store before a
                    # write this call must reflect, so its copy is checked too.
                    if e.state is None or e.stale:
                        await self.load(e)
                    elif latest:
                        await self.catch_up(e)
            return e.state

    async def catch_up(self, e: Entry) -> None:
        """Apply what other replicas committed since our copy (lock held)."""
        st = await self.load(e)
        if st is None:
            return
        if st.deleted or st.head_etag is None:
            # Deleted, or not durable here: another replica may have created
            # it (again) since.
            e.stale = True
            await self.load(e)
            return
        item = await self.storage.get(log_key(st.id, st.gen, st.version + 1))
        if item is not None:
            await self.refresh(e, first=item)
            if e.state is not None and e.state.deleted:
                e.stale = True  # met a fence: the id may have been created again since
            if e.stale:
                await self.load(e)
        e.verified = time.monotonic()

    async def create(self, st: ContextState, *, whole: bool = False, before=None) -> None:
        """Make a new context durable and listed (``whole``: a fork's, ``before`` first)."""
        await self._index.add(st.id)
        await (self.store.checkpoint(st, before) if whole else self.store.create_head(st))

    async def ensure_root(self) -> None:
        if self.root_ready:
            return
        async with self._registry.use(ROOT_ID) as e, e.lock:
            st = await self.load(e)
            if st.head_etag is None:
                try:
                    await self.create(st)
                except Conflict:
                    e.stale = True
        self.root_ready = True

    # -- committing (for :mod:`.transaction`) --------------------------------------------------
    async def write(
        self, e: Entry, st: ContextState, rec: dict[str, Any], built: Sequence[Msg] | None = None
    ) -> None:
        """Write the record (the serialisation point), then apply it."""
        with self.janitor.foreground():
            await self.store.write_log(st, rec)
        e.verified = time.monotonic()
        try:
            apply_record(st, rec, built)
        except Exception:
            e.stale = True  # durable but not applied: restore before the next use
            raise

    async def archive(self, tx: Transaction) -> None:
        """Archive the transaction's context: checkpointed whole, then left
        out of memory (not a versioned change; a turn un-archives it)."""
        st = tx.state
        st.archived = True
        st.dirty = True
        async with tx.exclusive():
            self.checkpoints.sweep(await self.store.checkpoint(st))
        tx.forget()

    def resident(self, cid: str) -> ContextState | None:
        """The context's state if this replica holds it, without loading it."""
        e = self._registry.peek(cid)
        return e.state if e is not None else None

    async def heads(self, prefix: str, after: str, limit: int) -> list[tuple[str, Item]]:
        """A page of the listed contexts in id order: (id, entry for :meth:`listed`)."""
        return await self._index.scan(prefix, start_after=after, limit=limit)

    async def listed(self, cid: str, item: Item) -> ContextState | None:
        """A listed context's state for its summary: resident if fresh, else
        from its head and log tail (no segments: do not read its messages)."""
        e = self._registry.peek(cid)
        if e is not None and e.state is not None and not e.stale and not self.check_reads:
            return e.state
        head = self.store.parse_head(cid, item)
        try:
            return await self.store.restore(cid, loaded=False, head=(head, item.version))
        except NeedsFullRestore:
            return await self.read(cid)

    def invalidate(self, cid: str) -> None:
        """Read ``cid`` from the store at its next use (written elsewhere)."""
        if (e := self._registry.peek(cid)) is not None:
            e.stale = True

    def forget(self, e: Entry) -> None:
        """Drop a context from memory (deleted or archived here)."""
        e.state = None
        self._registry.drop(e)

    async def refresh(
        self, e: Entry, *, lost_race: bool = False, first: Item | None = None
    ) -> None:
        """Catch up from the log (another writer shares the store). After a
        lost race the next record must exist; if it does not, the context was
        replaced meanwhile: restore it whole."""
        st = e.state
        try:
            # Catching up means a short tail: read ahead slowly (1, 2, 4, ...).
            tail = await self.store.read_tail(st.id, st.gen, st.version, first=first, ahead=1)
            for rec in tail:
                apply_record(st, rec)
                # Another replica's change: announced here as it was there.
                gone = st.deleted
                self.feed.emit(
                    ContextEvent(st.id, event_of(rec), st.version, st.updated, {}),
                    None if gone else st,
                )
                if gone:
                    st.forget_messages()
                    break
            if lost_race and not tail:
                e.stale = True
        except (HeadMoved, DamagedRecord):
            e.stale = True

    def after_commit(self, e: Entry, st: ContextState, kind: str, detail: dict[str, Any]) -> None:
        self.checkpoints.due(e)
        self.feed.emit(ContextEvent(st.id, kind, st.version, st.updated, detail), st)

    @asynccontextmanager
    async def transaction(
        self,
        context_id: str,
        *,
        expected_version: int | None = None,
        missing: Missing = Missing.NOT_FOUND,
        idempotency_key: str = "",
        attempts: int = COMMIT_ATTEMPTS,
    ) -> AsyncIterator[Transaction]:
        """Hold the context for one change (see :mod:`.transaction`)."""
        cid = validate.context_id(context_id)
        if expected_version is not None and expected_version < 0:
            raise InvalidArgument("expected_version", "must not be negative")
        async with self._registry.use(cid) as e, e.lock:
            yield Transaction(
                self,
                e,
                expected_version=expected_version,
                missing=missing,
                idempotency_key=idempotency_key,
                attempts=attempts,
            )

    async def change(
        self,
        context_id: str,
        build: Builder,
        *,
        expected_version: int | None = None,
        event: str = "change",
    ) -> tuple[ContextState, dict[str, Any] | None]:
        """Commit the record ``build(state)`` returns (``{"op": ..., ...}``;
        ``v`` and ``ts`` are filled in), or nothing when it returns None.

        ``build`` runs under the context's lock with the current state and
        may raise domain errors (nothing is written then). The context must
        exist (root always does). Returns the state after the change and the
        committed record; the event carries the record's fields.
        """
        async with self.transaction(context_id, expected_version=expected_version) as tx:
            while await tx.next():
                st = tx.state
                body = build(st)
                if body is None:
                    return st, None
                body = {**body, "ts": self.now()}
                if await tx.commit(body, event=event):
                    return st, tx.record
        raise AssertionError("unreachable: Missing.NOT_FOUND raises")

    # -- reads -------------------------------------------------------------------------------------
    async def get(self, context_id: str, *, latest: bool | None = None) -> ContextState:
        """The context's record. Treat it as read-only and read it without
        awaiting in between (it is the live object). ``latest`` reflects
        every write any replica acknowledged before the call, on shared
        stores at the cost of one small read; ``latest=False`` may serve this
        replica's cached copy; ``None`` follows ``contexts.read_consistency``."""
        cid = validate.context_id(context_id)
        st = await self.read(cid, latest=self.check_reads if latest is None else latest)
        if st is None or not st.exists:
            raise not_found(cid)
        return st

    # -- compactions ------------------------------------------------------------------------
    def compactions(self, st: ContextState) -> list[archive.CompactionInfo]:
        """The records of ``st``'s compactions, oldest first."""
        return archive.records(st, int(self.archive_ttl * 1000), self.now())

    def compaction_info(self, record: dict[str, Any]) -> archive.CompactionInfo:
        ttl = int(self.archive_ttl * 1000)
        return archive.info(record, archive.expandable(record, ttl, self.now()))

    async def expand(
        self, context_id: str, compaction_id: str, page_size: int = 0, page_token: str = ""
    ) -> tuple[archive.CompactionInfo, list, str]:
        """One page of the messages a compaction folded (ExpandCompaction)."""
        if not isinstance(compaction_id, str) or not compaction_id:
            raise InvalidArgument("compaction_id", "must name a compaction, e.g. c12")
        st = await self.get(context_id)
        return await archive.expand(
            self.store,
            st,
            compaction_id,
            ttl_ms=int(self.archive_ttl * 1000),
            now_ms=self.now(),
            size=page_size,
            token=page_token,
        )

    # -- watching ----------------------------------------------------------------------------
    async def watch(self, context_id: str) -> Subscription:
        """Subscribe to a context's events (it must exist). On a shared store
        the context is followed while watched (:mod:`.follow`), so the
        watcher also sees what other replicas commit."""
        st = await self.get(context_id)
        sub = self.feed.subscribe(st.id)
        self._followers.follow(st.id)
        return sub

    def unwatch(self, sub: Subscription) -> None:
        self.feed.unsubscribe(sub)

    @asynccontextmanager
    async def held(self, cid: str) -> AsyncIterator[ContextState | None]:
        """The context's state under its lock, for a change that writes no record (usage)."""
        async with self._registry.use(cid) as e, e.lock:
            yield await self.load(e)

    async def checkpoint_now(self, cid: str, held: ContextState | None = None) -> bool:
        """Checkpoint a resident context now (admin, tests; a fork's source while ``held``)."""
        e = self._registry.peek(cid)
        if e is None or (held is not None and e.state is not held):
            return False
        return await self.checkpoints.checkpoint(e)
