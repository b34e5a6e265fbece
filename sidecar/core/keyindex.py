"""Listing keys on every store, including stores that cannot LIST.

A namespace (``memory``, ``contexts``…) keeps its records under
``<namespace>/<name>``. On a store that declares LIST, :meth:`KeyIndex.list`
asks the store. On a store without LIST, ctxd keeps one index record,
``<namespace>/_index``: a JSON map ``name -> entry``, updated with conditional
puts in a compare-and-set loop, so sidecars sharing one bucket never lose each
other's additions. Names starting with ``_`` are reserved for this
bookkeeping and are never listed.

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

If the index record is ever lost or corrupted, :meth:`KeyIndex.rebuild`
restores it from a listing (a Storage that can LIST the same bucket, e.g.
opened with ``list=true`` by an operator) or from a given set of names.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sidecar.core import faults
from sidecar.core.errors import Conflict, FailedPrecondition, Unavailable
from sidecar.core.storage import Storage
from sidecar.store import Item

log = logging.getLogger(__name__)

INDEX_NAME = "_index"
#: Seconds an index entry without a value is presumed to be a write in flight.
DEFAULT_GRACE_SECONDS = 300.0
#: Attempts of the compare-and-set loop before giving up (UNAVAILABLE).
MAX_CAS_ATTEMPTS = 50
#: Values read concurrently while verifying index entries on remote stores.
READ_CONCURRENCY = 16


class KeyIndex:
    """Names of the records in one namespace, listable on every store.

    Public API: :meth:`add`, :meth:`remove`, :meth:`list`, :meth:`scan`,
    :meth:`rebuild`. ``add``/``remove`` are no-ops on stores with LIST, so
    callers may call them unconditionally; check :attr:`active` to skip the
    work of computing ``meta`` when it would be thrown away.
    """

    def __init__(
        self,
        storage: Storage,
        namespace: str,
        *,
        clock: Callable[[], float] = time.time,
        grace: float = DEFAULT_GRACE_SECONDS,
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
        self._lock = asyncio.Lock()
        self._pending: list[tuple[Callable[[dict[str, Any], int], Any], asyncio.Future]] = []
        # Last index record seen: its version, entries and (lazily) sorted names.
        self._version: str | None = None
        self._entries: dict[str, Any] = {}
        self._sorted: list[str] | None = []
        self._loaded = False

    # -- writes ----------------------------------------------------------------
    async def add(self, name: str, meta: Any = None) -> None:
        """Record ``name`` (with optional JSON-able ``meta``) before its value is written."""
        if not self.active:
            return
        writer = self.writer

        def op(entries: dict[str, Any], now: int) -> bool:
            entry = entries.get(name)
            adds = _fresh_adds(entry, now, self._grace_ms)
            adds[writer] = now
            new: dict[str, Any] = {"a": adds}
            if meta is not None:
                new["m"] = meta
            entries[name] = new
            return True

        await self._apply(op)
        faults.crash_point(f"{self.namespace}.after_index_add")

    async def remove(self, name: str) -> None:
        """Drop ``name`` after its value was deleted (kept while another
        process may still be writing it; readers drop it later)."""
        if not self.active:
            return
        faults.crash_point(f"{self.namespace}.before_index_remove")
        writer = self.writer

        def op(entries: dict[str, Any], now: int) -> bool:
            entry = entries.get(name)
            if entry is None:
                return False
            adds = _fresh_adds(entry, now, self._grace_ms)
            adds.pop(writer, None)
            if adds:  # another writer added it recently: its value may be in flight
                entries[name] = {**entry, "a": adds}
            else:
                del entries[name]
            return True

        await self._apply(op)

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
        loaded = await self._load()
        present_set = set(present)
        stale = [n for n in loaded if n not in present_set]
        stale_items = await self._read_many(stale)
        gone = {n for n, item in zip(stale, stale_items, strict=True) if item is None}

        def op(entries: dict[str, Any], now: int) -> bool:
            for n in present:
                entries.setdefault(n, {})
            for n in gone:
                entry = entries.get(n)
                if entry is not None and not _fresh_adds(entry, now, self._grace_ms):
                    del entries[n]
            return True

        await self._apply(op, force=True)
        return len(self._entries)

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
        loaded = await self._load()
        return {name: entry.get("m") for name, entry in loaded.items()}

    # -- internals -------------------------------------------------------------------
    @property
    def _grace_ms(self) -> int:
        return int(self.grace * 1000)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

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
        await self._load()
        if self._sorted is None:
            self._sorted = sorted(self._entries)
        names = self._sorted
        lo = max(prefix, after)
        i = bisect.bisect_right(names, lo) if lo == after else bisect.bisect_left(names, lo)
        out = []
        for name in names[i:]:
            if not name.startswith(prefix) or (limit is not None and len(out) >= limit):
                break
            out.append(name)
        return out

    async def _read_many(self, names: list[str]) -> list[Item | None]:
        keys = [self.prefix + n for n in names]
        if self.storage.store.inline_reads:
            return [await self.storage.get(k) for k in keys]
        sem = asyncio.Semaphore(READ_CONCURRENCY)

        async def one(k: str) -> Item | None:
            async with sem:
                return await self.storage.get(k)

        return list(await asyncio.gather(*(one(k) for k in keys)))

    async def _repair(self, names: list[str]) -> None:
        """Drop entries whose value is absent and that no writer added recently."""
        names_set = set(names)

        def op(entries: dict[str, Any], now: int) -> bool:
            changed = False
            for name in names_set:
                entry = entries.get(name)
                if entry is not None and not _fresh_adds(entry, now, self._grace_ms):
                    del entries[name]
                    changed = True
            return changed

        # Re-check the values right before dropping: a write may have landed.
        items = await self._read_many(names)
        names_set = {n for n, item in zip(names, items, strict=True) if item is None}
        if not names_set:
            return
        try:
            await self._apply(op)
            log.info("index repaired", extra={"index": self.record_key, "dropped": len(names_set)})
        except Unavailable:
            pass  # best effort; the next reader retries

    async def _load(self) -> dict[str, Any]:
        """Read the index record (reusing the parsed copy when unchanged)."""
        item = await self.storage.get(self.record_key)
        self._adopt(item)
        return self._entries

    def _adopt(self, item: Item | None) -> None:
        if item is None:
            version, entries = None, {}
        elif self._loaded and item.version == self._version:
            return
        else:
            version, entries = item.version, _decode(item.value, self.record_key)
        self._version, self._entries = version, entries
        self._sorted = None
        self._loaded = True

    async def _apply(
        self, op: Callable[[dict[str, Any], int], Any], *, force: bool = False
    ) -> None:
        """Apply ``op`` to the index with every other pending op in one write.

        Ops queue up while a write is in flight; whichever caller holds the
        lock next writes them all (group commit), so concurrent adds cost one
        store write, not one each.
        """
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending.append((op, fut))
        async with self._lock:
            if fut.done():
                return fut.result()
            batch, self._pending = self._pending, []
            try:
                await self._write(batch, force)
            except BaseException as exc:
                for queued_op, f in batch:
                    if not f.done() and f is not fut:
                        if isinstance(exc, Exception):
                            f.set_exception(exc)
                        else:  # cancelled: leave the others' ops for the next holder
                            self._pending.append((queued_op, f))
                raise
            for _, f in batch:
                if not f.done():
                    f.set_result(None)
        return fut.result()

    def _pruned(self, now: int) -> dict[str, Any]:
        """A copy of the entries without add-markers older than the grace period."""
        grace = self._grace_ms
        return {n: _without_stale_adds(e, now, grace) for n, e in self._entries.items()}

    async def _write(self, batch: list, force: bool) -> None:
        if not self._loaded:
            await self._load()
        for attempt in range(MAX_CAS_ATTEMPTS):
            now = self._now_ms()
            entries = self._pruned(now)  # a copy: ops replace entries, never mutate them
            changed = force
            for op, _ in batch:
                changed = bool(op(entries, now)) or changed
            if not changed:
                return
            body = _encode(entries)
            try:
                if not self.storage.can_cas:  # single process only: the lock is enough
                    version = await self.storage.put(self.record_key, body)
                elif self._version is None:
                    version = await self.storage.put(self.record_key, body, if_absent=True)
                else:
                    version = await self.storage.put(
                        self.record_key, body, if_version=self._version
                    )
            except Conflict:
                # Someone else wrote the index: re-read and re-apply our ops.
                await asyncio.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))
                await self._load()
                continue
            self._version, self._entries = version, entries
            self._sorted = None
            return
        raise Unavailable(f"the {self.namespace} index is too contended; retry")


def _without_stale_adds(entry: dict[str, Any], now: int, grace_ms: int) -> dict[str, Any]:
    if "a" not in entry or _fresh_adds(entry, now, grace_ms):
        return entry
    return {k: v for k, v in entry.items() if k != "a"}


def _fresh_adds(entry: Mapping[str, Any] | None, now: int, grace_ms: int) -> dict[str, int]:
    if not entry:
        return {}
    adds = entry.get("a") or {}
    return {w: t for w, t in adds.items() if isinstance(t, int) and now - t < grace_ms}


def _encode(entries: dict[str, Any]) -> bytes:
    return json.dumps(
        {"v": 1, "keys": entries}, separators=(",", ":"), ensure_ascii=False, sort_keys=True
    ).encode()


def _decode(raw: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
        keys = doc["keys"]
        if not isinstance(keys, dict):
            raise TypeError
        return {k: v if isinstance(v, dict) else {} for k, v in keys.items()}
    except (ValueError, KeyError, TypeError):
        # A corrupted index lists nothing until rebuilt; values are untouched.
        log.error("index record is corrupted; run a rebuild", extra={"index": where})
        return {}
