"""Memory records in the sidecar's store: caps, TTL sweeping and listing.

Caps and their accounting: ``max_value_bytes`` is checked per request;
``max_keys`` and ``max_total_bytes`` are checked against counters of the
records in the store (count and value bytes). The counters are computed by
one scan at start-up (retried in the background if the store is down;
writes answer UNAVAILABLE until then) and then kept exact by this process's
own writes: every write is conditional on the version it read, so the delta
it applies is the true one even under concurrent writes (on a store without
conditional writes, writes to one key are serialised in the process
instead). A write reserves its delta before it is sent, so concurrent
writes cannot jointly overshoot a cap. On a store that several sidecars
share, the counters are the store-wide ones of the ``memory/_count`` record
(:mod:`ctxd_sidecar.core.memory.tally`), so the caps hold for the instance
whichever replica writes. Expired records count until swept; a write that would exceed a cap
first sweeps whatever has expired. Expiry is scheduled from the same scan
and from this process's writes (:class:`ExpirySchedule`), so a sweep costs
nothing when nothing is due.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ctxd_sidecar.config import MemoryConfig
from ctxd_sidecar.core.errors import Conflict, LimitExceeded, NotFound, Unavailable
from ctxd_sidecar.core.keyindex import KeyIndex
from ctxd_sidecar.core.memory.expiry import ExpirySchedule
from ctxd_sidecar.core.memory.records import (
    NAMESPACE,
    MemoryPage,
    MemoryRecord,
    SetRequest,
    StoredRecord,
    decode_record,
    encode_record,
    issue_page_token,
    token_after,
)
from ctxd_sidecar.core.memory.search import StoreSearch
from ctxd_sidecar.core.memory.service import MemoryBackend
from ctxd_sidecar.core.memory.tally import Tally
from ctxd_sidecar.core.observe import MemoryObserver, NullObserver
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.store import Item

log = logging.getLogger(__name__)

#: A page ends early rather than carry more bytes than this, values, keys and
#: metadata counted, so it always fits a client's default 4 MiB message limit;
#: at least one record is always returned.
MAX_PAGE_VALUE_BYTES = 3 * 1024 * 1024
#: What a record costs in a reply beyond its key and value (version, times, by).
RECORD_FRAME_BYTES = 96
#: Retries when a concurrent write changes a record between read and write.
MAX_WRITE_ATTEMPTS = 20

_NOT_COUNTED = "memory is not ready for writes: the store could not be read at start-up (retrying)"


class StoreMemory(MemoryBackend):
    """Memory records in the sidecar's store, with caps, TTL sweeping and listing.

    On a store with LIST a Set is one store write and a Get one read; on a
    store without LIST, creating or deleting a key also updates the
    ``memory/_index`` record (see :mod:`ctxd_sidecar.core.keyindex`).
    """

    def __init__(
        self,
        config: MemoryConfig,
        storage: Storage,
        *,
        clock: Callable[[], float] = time.time,
        observer: MemoryObserver | None = None,
    ) -> None:
        #: Told the counters after every change.
        self.observer: MemoryObserver = observer or NullObserver()
        self.config = config
        self.storage = storage
        #: Wall clock in seconds; replaceable (tests move time forward).
        self.clock = clock
        self.index = KeyIndex(storage, NAMESPACE, clock=lambda: self.clock())
        self._prefix = NAMESPACE + "/"
        #: Records in the store and the bytes of their values (see module doc).
        self.keys = 0
        self.total_bytes = 0
        self._expiry = ExpirySchedule()
        # Writes are conditional on the version read, where the store can do that.
        self._cas = storage.can_cas
        #: Store-wide counts, where other sidecars may write the same records.
        self.tally = (
            Tally(storage, NAMESPACE + "/_count", clock=lambda: self.clock())
            if storage.shared and storage.can_cas
            else None
        )
        # Writes to one key are serialised in this process where the index
        # protocol needs it, or where the store cannot check versions itself.
        self._serialise = self.index.active or not self._cas
        self._key_locks: dict[str, list] = {}
        self._tasks: list[asyncio.Task] = []
        #: False until the counters were computed (writes wait for them).
        self.counted = False
        self.search_index = StoreSearch(config, storage, self._prefix, self._now_ms)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _if(self, item: Item) -> str | None:
        return item.version if self._cas else None

    # -- lifecycle ---------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self.recount()
        except Unavailable as exc:
            # Serve anyway (reads fail or succeed on their own); writes wait
            # for the counters, which a background task retries.
            log.warning("memory cannot count its records yet", extra={"error": exc.message})
            self._tasks.append(asyncio.create_task(self._recount_until_done(), name="memory-count"))
        if self.config.sweep_interval > 0:
            self._tasks.append(asyncio.create_task(self._sweep_forever(), name="memory-sweeper"))
        self._tasks.extend(self.search_index.follow(self.index.scan))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _recount_until_done(self) -> None:
        delay = 0.5
        while True:
            await asyncio.sleep(delay)
            try:
                await self.recount()
                return
            except Unavailable:
                delay = min(delay * 2, 30.0)

    async def recount(self) -> None:
        """Rebuild the key/byte counters and the expiry schedule from the store."""
        keys = total = 0
        expiry: dict[str, int] = {}
        began = self.clock()
        for name, item in await self.index.scan():
            keys += 1
            rec = decode_record(item.value)
            if rec is None:
                continue  # not written by ctxd: a key, but no value bytes to count
            total += len(rec.value)
            if rec.expires_at:
                expiry[name] = rec.expires_at
            self.search_index.seen(name, item.version, rec)
        await self.search_index.loaded()
        if self.tally is not None:
            await self.tally.reconcile(keys, total, began)
            keys, total = self.tally.keys, self.tally.bytes
        self.keys, self.total_bytes = keys, total
        self.observer.memory_counts(self.keys, self.total_bytes)
        self.counted = True
        self._expiry.reset(expiry)
        log.info("memory counted", extra={"keys": keys, "bytes": total, "expiring": len(expiry)})

    # -- operations ----------------------------------------------------------------
    async def get(self, key: str) -> MemoryRecord:
        item = await self.storage.get(self._prefix + key)
        rec = None if item is None else decode_record(item.value)
        if rec is None or rec.expired(self._now_ms()):
            raise NotFound(f"memory key {key!r} not found")
        return MemoryRecord(key, rec.value.decode(), item.version, rec.ts, rec.expires_at, rec.by)

    async def set(self, request: SetRequest) -> MemoryRecord:
        if not self.counted:
            raise Unavailable(_NOT_COUNTED)
        if self._serialise:
            async with self._key_lock(request.key):
                return await self._set(request)
        return await self._set(request)

    async def _set(self, request: SetRequest) -> MemoryRecord:
        key = request.key
        expected_version = request.expected_version
        create_only = request.create_only
        value = request.value_json.encode()
        full = self._prefix + key
        size = len(value)
        for _ in range(MAX_WRITE_ATTEMPTS):
            now = self._now_ms()
            old_item = await self.storage.get(full)
            old = None if old_item is None else decode_record(old_item.value)
            live = old is not None and not old.expired(now)
            if create_only and live:
                raise Conflict(f"memory key {key!r} already exists (create_only)")
            if expected_version and (not live or old_item.version != expected_version):
                raise Conflict(
                    f"memory key {key!r} is not at version {expected_version!r}; re-read and retry"
                    if live
                    else f"memory key {key!r} does not exist (expected_version was given)"
                )
            new_keys = 0 if old_item is not None else 1
            new_bytes = size - (len(old.value) if old is not None else 0)
            await self._reserve(key, new_keys, new_bytes)
            expires_at = now + request.ttl_seconds * 1000 if request.ttl_seconds else 0
            record = encode_record(value, now, expires_at, request.by, request.vectors)
            try:
                if old_item is None:
                    await self.index.add(key)
                    version = await self.storage.put(full, record, if_absent=self._cas)
                else:
                    version = await self.storage.put(full, record, if_version=self._if(old_item))
            except Conflict:
                await self._release(new_keys, new_bytes)
                if expected_version or create_only:
                    raise Conflict(
                        f"memory key {key!r} changed concurrently; re-read and retry"
                    ) from None
                continue  # a concurrent write won: re-read and apply on top of it
            except BaseException:
                await asyncio.shield(self._release(new_keys, new_bytes))
                raise
            self._expiry.schedule(key, expires_at)
            self.search_index.written(key, version, request.vectors)
            return MemoryRecord(key, request.value_json, version, now, expires_at, request.by)
        raise Unavailable(f"memory key {key!r} is changing too often; retry")

    async def delete(self, key: str, *, expected_version: str) -> bool:
        if not self.counted:
            raise Unavailable(_NOT_COUNTED)
        if self._serialise:
            async with self._key_lock(key):
                return await self._delete(key, expected_version)
        return await self._delete(key, expected_version)

    async def _delete(self, key: str, expected_version: str) -> bool:
        full = self._prefix + key
        for _ in range(MAX_WRITE_ATTEMPTS):
            item = await self.storage.get(full)
            rec = None if item is None else decode_record(item.value)
            live = rec is not None and not rec.expired(self._now_ms())
            if expected_version and (not live or item.version != expected_version):
                raise Conflict(
                    f"memory key {key!r} is not at version {expected_version!r}; re-read and retry"
                    if live
                    else f"memory key {key!r} does not exist (expected_version was given)"
                )
            if item is None:
                return False
            try:
                await self.storage.delete(full, if_version=self._if(item))
            except Conflict:
                if expected_version:
                    raise Conflict(
                        f"memory key {key!r} changed concurrently; re-read and retry"
                    ) from None
                continue
            await self._forget(key, rec)
            await self.index.remove(key)
            return live
        raise Unavailable(f"memory key {key!r} is changing too often; retry")

    async def list(
        self, prefix: str, *, limit: int, page_token: str, include_values: bool
    ) -> MemoryPage:
        after = token_after(prefix, page_token)
        now = self._now_ms()
        out: list[MemoryRecord] = []
        value_bytes = 0
        more = False  # a live record exists beyond this page
        while not more:
            # One more than the page needs, to learn whether a next page exists.
            want = limit + 1 - len(out)
            batch = await self.index.scan(prefix, start_after=after, limit=want)
            for name, item in batch:
                rec = decode_record(item.value)
                if rec is None or rec.expired(now):
                    continue
                size = (len(rec.value) if include_values else 0) + len(name.encode())
                size += len(rec.by.encode()) + RECORD_FRAME_BYTES
                if len(out) == limit or (out and value_bytes + size > MAX_PAGE_VALUE_BYTES):
                    more = True
                    break
                value_bytes += size
                value = rec.value.decode() if include_values else None
                out.append(MemoryRecord(name, value, item.version, rec.ts, rec.expires_at, rec.by))
            if len(batch) < want:
                break
            after = batch[-1][0]
        return MemoryPage(out, issue_page_token(prefix, out[-1].key) if more else "")

    # -- expiry --------------------------------------------------------------------
    async def sweep(self, *, skip_busy: bool = False) -> int:
        """Delete every record that has expired; return how many were removed.

        With ``skip_busy``, keys being written right now are left for later
        (a write that sweeps to make room must not wait on itself).
        """
        now = self._now_ms()
        removed = 0
        later: list[tuple[int, str]] = []
        try:
            while (due := self._expiry.pop_due(now)) is not None:
                expires_at, key = due
                if skip_busy and key in self._key_locks:
                    later.append((expires_at, key))
                    continue
                try:
                    if await self._expire(key, now):
                        removed += 1
                except Unavailable:
                    later.append((expires_at, key))  # try again next sweep
                    raise
        finally:
            self._expiry.defer(later)
        if removed:
            log.info("memory swept", extra={"removed": removed})
        return removed

    async def _expire(self, key: str, now: int) -> bool:
        async with self._key_lock(key):
            full = self._prefix + key
            item = await self.storage.get(full)
            rec = None if item is None else decode_record(item.value)
            if rec is None or not rec.expired(now):
                if item is None:
                    self._expiry.forget(key)
                return False
            try:
                await self.storage.delete(full, if_version=self._if(item))
            except Conflict:
                return False  # rewritten meanwhile; its new expiry is scheduled
            await self._forget(key, rec)
            await self.index.remove(key)
            return True

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep sweeping; the store may come back
                log.warning("memory sweep failed; retrying later", exc_info=True)

    async def _forget(self, key: str, rec: StoredRecord | None) -> None:
        self._expiry.forget(key)
        self.search_index.dropped(key)
        await self._release(1, len(rec.value) if rec is not None else 0)

    # -- caps -------------------------------------------------------------------------
    async def _reserve(self, key: str, new_keys: int, new_bytes: int) -> None:
        """Count a write against the caps before it happens (so concurrent
        writes cannot jointly overshoot); sweeps expired records first if
        the write would not fit."""
        if self.tally is not None:
            if new_keys or new_bytes:
                try:
                    await self.tally.change(new_keys, new_bytes, self._checker(new_keys, new_bytes))
                except LimitExceeded:
                    if not self._expiry.has_due(self._now_ms()):
                        raise
                    await self.sweep(skip_busy=True)
                    await self.tally.change(new_keys, new_bytes, self._checker(new_keys, new_bytes))
                self._counts(self.tally.keys, self.tally.bytes)
            return
        check = self._checker(new_keys, new_bytes)
        try:
            check(self.keys, self.total_bytes)
        except LimitExceeded:
            if self._expiry.has_due(self._now_ms()):
                await self.sweep(skip_busy=True)
            check(self.keys, self.total_bytes)
        self._counts(self.keys + new_keys, self.total_bytes + new_bytes)

    def _checker(self, new_keys: int, new_bytes: int) -> Callable[[int, int], None]:
        return cap_checker(self.config, new_keys, new_bytes)

    async def _release(self, new_keys: int, new_bytes: int) -> None:
        if self.tally is None:
            self._counts(self.keys - new_keys, self.total_bytes - new_bytes)
            return
        try:
            await self.tally.change(-new_keys, -new_bytes)
        except Unavailable as exc:
            # The count stays high (caps refuse early) until the next start corrects it.
            log.warning("memory count not lowered", extra={"error": exc.message})
        self._counts(self.tally.keys, self.tally.bytes)

    def _counts(self, keys: int, total: int) -> None:
        self.keys, self.total_bytes = keys, total
        self.observer.memory_counts(keys, total)

    @asynccontextmanager
    async def _key_lock(self, key: str) -> AsyncIterator[None]:
        slot = self._key_locks.get(key)
        if slot is None:
            slot = self._key_locks[key] = [asyncio.Lock(), 0]
        slot[1] += 1
        try:
            async with slot[0]:
                yield
        finally:
            slot[1] -= 1
            if not slot[1]:
                del self._key_locks[key]


def cap_checker(cfg: MemoryConfig, new_keys: int, new_bytes: int) -> Callable[[int, int], None]:
    """Checks that a write adding ``new_keys`` and ``new_bytes`` fits the caps."""

    def check(keys: int, total: int) -> None:
        if new_keys > 0 and keys + new_keys > cfg.max_keys:
            raise LimitExceeded(
                "memory.max_keys",
                cfg.max_keys,
                f"memory holds {keys} keys; memory.max_keys is {cfg.max_keys}",
            )
        if new_bytes > 0 and total + new_bytes > cfg.max_total_bytes:
            raise LimitExceeded(
                "memory.max_total_bytes",
                cfg.max_total_bytes,
                f"memory holds {total} bytes of values and this write adds "
                f"{new_bytes}; memory.max_total_bytes is {cfg.max_total_bytes}",
            )

    return check
