"""Listing keys on every store, including stores that cannot LIST.

A namespace (``memory``, ``contexts``…) keeps its records under
``<namespace>/<name>``. On a store that declares LIST, :meth:`KeyIndex.list`
asks the store. On a store without LIST, ctxd keeps an index of the names in
bounded pages: a root record ``<namespace>/_index`` listing the pages by
name range, and pages ``<namespace>/_index.p/<id>`` of at most
``PAGE_MAX`` entries each (format, split and migration protocol:
:mod:`ctxd_sidecar.core.keyindex.pages`). Every index write is a conditional
put, so sidecars sharing one bucket never lose each other's additions, and a
create costs one page write however many names exist. Names starting with
``_`` are reserved for this bookkeeping and are never listed.

Write protocol (what callers must do, in this order):

* new record: ``await index.add(name, meta)`` **then** write the value;
* removed record: delete the value **then** ``await index.remove(name)``.

A crash between the two writes can therefore only leave an index entry
without a value ("dangling"), never a value missing from the index. Readers
that list from the index check each entry against its value: a dangling
entry is skipped, and dropped from the index once it is older than
``grace`` seconds (younger ones may belong to a write still in flight in
another process). Overwriting an existing record needs no index write,
provided the caller's write is conditional on the version it read: if the
record was deleted meanwhile, the write fails and the caller retries as a
new record.

Concurrent writers of the same name in different processes are safe too:
each entry remembers which writers (processes) added it recently, and
``remove`` keeps an entry another writer added less than ``grace`` ago,
because that writer's value may still be on its way; a reader drops it
later if no value arrives. Within one process, writes to one name must be
serialised by the caller (the memory and context code do).

If the index is ever lost or corrupted, :meth:`KeyIndex.rebuild` restores
it from a listing (a Storage that can LIST the same bucket, e.g. opened with
``list=true`` by an operator) or from a given set of names.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from ctxd_sidecar.core import faults
from ctxd_sidecar.core.errors import FailedPrecondition, Unavailable
from ctxd_sidecar.core.keyindex.pages import (
    MAX_CAS_ATTEMPTS,
    PAGE_MAX,
    PAGE_MAX_BYTES,
    ROOT_NAME,
    Change,
    PageStore,
    fresh_adds,
)
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.store import Item

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "MAX_CAS_ATTEMPTS",
    "PAGE_MAX",
    "PAGE_MAX_BYTES",
    "KeyIndex",
]

log = logging.getLogger(__name__)

INDEX_NAME = ROOT_NAME
#: Seconds an index entry without a value is presumed to be a write in flight.
DEFAULT_GRACE_SECONDS = 300.0
#: Values read concurrently while verifying index entries on remote stores.
READ_CONCURRENCY = 16


class KeyIndex:
    """Names of the records in one namespace, listable on every store.

    Public API: :meth:`add`, :meth:`remove`, :meth:`list`, :meth:`scan`,
    :meth:`rebuild`, :meth:`entries`. ``add``/``remove`` are no-ops on stores
    with LIST, so callers may call them unconditionally; check :attr:`active`
    to skip the work of computing ``meta`` when it would be thrown away.
    """

    def __init__(
        self,
        storage: Storage,
        namespace: str,
        *,
        clock: Callable[[], float] = time.time,
        grace: float = DEFAULT_GRACE_SECONDS,
        page_max: int | None = None,
        page_max_bytes: int | None = None,
    ) -> None:
        self.storage = storage
        self.namespace = namespace.strip("/")
        self.prefix = self.namespace + "/"
        self.record_key = self.prefix + INDEX_NAME
        #: True when this store needs the index (it cannot LIST).
        self.active = not storage.can_list
        self.clock = clock
        self.grace = grace
        #: Identifies this process's additions inside shared index entries.
        self.writer = uuid.uuid4().hex[:12]
        self.pages = PageStore(storage, self.prefix, self.namespace)
        if page_max is not None:
            self.pages.page_max = page_max
        if page_max_bytes is not None:
            self.pages.page_max_bytes = page_max_bytes
        self._lock = asyncio.Lock()
        self._pending: list[tuple[list[tuple[str, Change]], asyncio.Future]] = []

    @property
    def page_max(self) -> int:
        """Entries per page before it splits (settable, e.g. small in tests)."""
        return self.pages.page_max

    @page_max.setter
    def page_max(self, value: int) -> None:
        self.pages.page_max = value

    # -- writes ----------------------------------------------------------------
    async def add(self, name: str, meta: Any = None) -> None:
        """Record ``name`` (with optional JSON-able ``meta``) before its value is written."""
        if not self.active:
            return
        writer, grace = self.writer, self._grace_ms

        def change(entry: dict[str, Any] | None, now: int) -> dict[str, Any]:
            adds = fresh_adds(entry, now, grace)
            adds[writer] = now
            new: dict[str, Any] = {"a": adds}
            if meta is not None:
                new["m"] = meta
            return new

        await self._apply([(name, change)])
        faults.crash_point(f"{self.namespace}.after_index_add")

    async def remove(self, name: str) -> None:
        """Drop ``name`` after its value was deleted (kept while another
        process may still be writing it; readers drop it later)."""
        if not self.active:
            return
        faults.crash_point(f"{self.namespace}.before_index_remove")
        writer, grace = self.writer, self._grace_ms

        def change(entry: dict[str, Any] | None, now: int) -> dict[str, Any] | None:
            if entry is None:
                return None
            adds = fresh_adds(entry, now, grace)
            adds.pop(writer, None)
            if adds:  # another writer added it recently: its value may be in flight
                return {**entry, "a": adds}
            return None

        await self._apply([(name, change)])

    async def rebuild(self, names: Iterable[str] | None = None) -> int:
        """Repair the index from the values that exist; return how many names it lists.

        ``names`` are candidate names (e.g. known to an operator); without
        them the store must LIST (:class:`FailedPrecondition` otherwise).
        Names without a value are left out; existing entries are kept when
        their value exists or they are younger than ``grace``, so a
        concurrent ``add`` elsewhere is never undone.
        """
        if names is None:
            if not self.storage.can_list:
                raise FailedPrecondition(
                    "this store cannot list keys; rebuild the index from a store "
                    "opened with listing allowed, or pass the names"
                )
            candidates = [n for n in await self.storage.list(self.prefix) if n]
            candidates = [n[len(self.prefix) :] for n in candidates]
        else:
            candidates = list(names)
        candidates = sorted({n for n in candidates if n and not n.startswith("_")})
        items = await self._read_many(candidates)
        present = [n for n, item in zip(candidates, items, strict=True) if item is not None]

        # Entries already in the index whose value is gone are checked too.
        loaded = await self._all_entries()
        present_set = set(present)
        stale = [n for n in loaded if n not in present_set]
        stale_items = await self._read_many(stale)
        gone = [n for n, item in zip(stale, stale_items, strict=True) if item is None]

        def keep(entry: dict[str, Any] | None, now: int) -> dict[str, Any]:
            return {} if entry is None else entry

        changes = [(n, keep) for n in present] + [(n, self._drop_unless_fresh) for n in gone]
        await self._apply(changes, force=True)
        return len(await self._all_entries())

    # -- reads -------------------------------------------------------------------
    async def list(
        self, prefix: str = "", *, start_after: str = "", limit: int | None = None
    ) -> list[str]:
        """Names starting with ``prefix`` and greater than ``start_after``, in
        order (UTF-8 byte order), at most ``limit``; every name has a value."""
        if self.storage.can_list and self.storage.can_delete:
            return await self._store_names(prefix, start_after, limit)
        return [name for name, _ in await self.scan(prefix, start_after=start_after, limit=limit)]

    async def scan(
        self, prefix: str = "", *, start_after: str = "", limit: int | None = None
    ) -> list[tuple[str, Item]]:
        """Like :meth:`list`, with each name's current value."""
        out: list[tuple[str, Item]] = []
        after = start_after
        while limit is None or len(out) < limit:
            want = None if limit is None else limit - len(out)
            if self.active:
                names = await self._index_names(prefix, after, want)
            else:
                names = await self._store_names(prefix, after, want)
            if not names:
                break
            items = await self._read_many(names)
            dangling = []
            for name, item in zip(names, items, strict=True):
                if item is not None:
                    out.append((name, item))
                elif self.active:
                    dangling.append(name)
            if dangling:
                await self._repair(dangling)
            if want is None or len(names) < want:
                break
            after = names[-1]
        return out

    async def entries(self) -> dict[str, Any]:
        """The index as stored (name -> meta), without checking values. For tools and tests."""
        loaded = await self._all_entries()
        return {name: entry.get("m") for name, entry in loaded.items()}

    # -- internals -------------------------------------------------------------------
    @property
    def _grace_ms(self) -> int:
        return int(self.grace * 1000)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _drop_unless_fresh(self, entry: dict[str, Any] | None, now: int) -> dict[str, Any] | None:
        if entry is not None and fresh_adds(entry, now, self._grace_ms):
            return entry
        return None

    async def _store_names(self, prefix: str, after: str, limit: int | None) -> list[str]:
        n = len(self.prefix)
        # One extra in case the reserved index record is among them.
        fetch = None if limit is None else limit + 1
        keys = await self.storage.list(
            self.prefix + prefix,
            start_after=self.prefix + after if after else "",
            limit=fetch,
        )
        names = [k[n:] for k in keys if not k[n:].startswith("_")]
        return names if limit is None else names[:limit]

    async def _index_names(self, prefix: str, after: str, limit: int | None) -> list[str]:
        """Names from the index, reading only the pages that can hold them."""
        root = await self.pages.read_root()
        if root.legacy is not None:  # not migrated yet: one record holds everything
            return _pick(sorted(root.legacy), prefix, after, limit, [])
        out: list[str] = []
        i: int | None = None
        restarts = 0
        while restarts <= MAX_CAS_ATTEMPTS:
            cursor = out[-1] if out else after
            if i is None:
                i = root.locate(max(prefix, cursor))
            if i >= len(root.ids) or (limit is not None and len(out) >= limit):
                return out
            lower = root.lowers[i]
            if lower > prefix and not lower.startswith(prefix):
                return out  # this page and the ones after hold only greater names
            page = await self.pages.read_page(root.ids[i])
            if page is None or page.moved:
                fresh = await self.pages.read_root()
                if page is None and fresh.version == root.version:
                    i += 1  # lost page: nothing to list from it until a rebuild
                    continue
                root, i = fresh, None  # split meanwhile: continue from the new root
                restarts += 1
                if root.legacy is not None:
                    return _pick(sorted(root.legacy), prefix, cursor, limit, out)
                continue
            if _pick(page.names(), prefix, cursor, limit, out) is None:
                return out  # passed the last name with the prefix
            i += 1
        raise Unavailable(f"the {self.namespace} index keeps changing while listed; retry")

    async def _all_entries(self) -> dict[str, Any]:
        """Every entry of the index (name -> entry as stored)."""
        root = await self.pages.read_root()
        if root.legacy is not None:
            return dict(root.legacy)
        for _ in range(MAX_CAS_ATTEMPTS):
            pages = await asyncio.gather(*(self.pages.read_page(pid) for pid in root.ids))
            if all(p is None or not p.moved for p in pages):
                out: dict[str, Any] = {}
                for page in pages:
                    if page is not None:
                        out.update(page.entries)
                return out
            root = await self.pages.read_root()
            if root.legacy is not None:
                return dict(root.legacy)
        raise Unavailable(f"the {self.namespace} index keeps changing while read; retry")

    async def _read_many(self, names: list[str]) -> list[Item | None]:
        keys = [self.prefix + n for n in names]
        if self.storage.inline_reads:
            return [await self.storage.get(k) for k in keys]
        sem = asyncio.Semaphore(READ_CONCURRENCY)

        async def one(k: str) -> Item | None:
            async with sem:
                return await self.storage.get(k)

        return list(await asyncio.gather(*(one(k) for k in keys)))

    async def _repair(self, names: list[str]) -> None:
        """Drop entries whose value is absent and that no writer added recently."""
        # Re-check the values right before dropping: a write may have landed.
        items = await self._read_many(names)
        gone = [n for n, item in zip(names, items, strict=True) if item is None]
        if not gone:
            return
        try:
            await self._apply([(n, self._drop_unless_fresh) for n in gone])
            log.info("index repaired", extra={"index": self.record_key, "checked": len(gone)})
        except Unavailable:
            pass  # best effort; the next reader retries

    async def _apply(self, changes: list[tuple[str, Change]], *, force: bool = False) -> None:
        """Apply ``changes`` together with every other pending change.

        Changes queue up while a write is in flight; whichever caller holds
        the lock next writes them all (group commit), so concurrent adds to
        one page cost one store write, not one each. ``force`` migrates or
        creates the index even when no entry changes (rebuild).
        """
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending.append((changes, fut))
        async with self._lock:
            if fut.done():
                return fut.result()
            batch, self._pending = self._pending, []
            self.pages.grace_ms = self._grace_ms
            try:
                merged = [c for queued, _ in batch for c in queued]
                if merged:
                    await self.pages.apply(merged, self._now_ms)
                elif force:
                    await self.pages.ensure()
            except BaseException as exc:
                for queued, f in batch:
                    if not f.done() and f is not fut:
                        if isinstance(exc, Exception):
                            f.set_exception(exc)
                        else:  # cancelled: leave the others' changes for the next holder
                            self._pending.append((queued, f))
                raise
            for _, f in batch:
                if not f.done():
                    f.set_result(None)
        return fut.result()


def _pick(
    names: list[str], prefix: str, after: str, limit: int | None, out: list[str]
) -> list[str] | None:
    """Append to ``out`` the sorted ``names`` with ``prefix`` greater than
    ``after``, up to ``limit``; None once a greater name without the prefix
    was seen (nothing later can match)."""
    i = max(bisect.bisect_right(names, after), bisect.bisect_left(names, prefix))
    for name in names[i:]:
        if limit is not None and len(out) >= limit:
            return out
        if not name.startswith(prefix):
            return None
        out.append(name)
    return out
