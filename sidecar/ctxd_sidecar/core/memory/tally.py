"""Store-wide memory counts, for stores that several sidecars share.

On a shared store (S3, PostgreSQL) the caps ``memory.max_keys`` and
``memory.max_total_bytes`` hold for the instance as a whole, whichever
replica writes. The counts live in one record, ``memory/_count``
(``{"keys":…,"bytes":…,"ts":…}``), changed only by conditional writes: a
write that adds a key or bytes first moves the count (refused if that would
pass a cap), then writes its record; a record write that fails moves the
count back, and a delete moves it back after the record is gone. Two
replicas adding the last free key at the same instant cannot both succeed:
the loser's count update fails its condition, re-reads, and is refused.

So the count is never below the records in the store, only above it while
writes are in flight, or for good after a process died between its two
writes (caps then refuse a little early, never late). A sidecar corrects the
count at start from a scan of the records: upwards always, downwards only
when the count was last changed more than :data:`QUIET_SECONDS` before the
scan began (a younger change may be a write whose record is still on its way).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable

from ctxd_sidecar.core.errors import Conflict, LimitExceeded, Unavailable
from ctxd_sidecar.core.storage import Storage

log = logging.getLogger(__name__)

#: Conditional updates tried before a count update gives up (UNAVAILABLE).
MAX_ATTEMPTS = 100
#: A count unchanged this long has no write in flight (see the module doc).
QUIET_SECONDS = 60.0

Check = Callable[[int, int], None]


class Tally:
    """The ``memory/_count`` record: read, moved by deltas, corrected at start."""

    def __init__(self, storage: Storage, key: str, *, clock: Callable[[], float] = time.time):
        self.storage = storage
        self.key = key
        self.clock = clock
        #: The counts as last read or written by this process.
        self.keys = 0
        self.bytes = 0
        self._ts = 0
        self._version: str | None = None
        self._lock = asyncio.Lock()

    async def read(self) -> None:
        item = await self.storage.get(self.key)
        if item is None:
            self.keys = self.bytes = self._ts = 0
            self._version = None
            return
        try:
            doc = json.loads(item.value)
            keys, total, ts = int(doc["keys"]), int(doc["bytes"]), int(doc.get("ts", 0))
        except (ValueError, KeyError, TypeError):
            log.warning("memory count record is not readable; it is rewritten")
            keys = total = ts = 0
        self.keys, self.bytes, self._ts, self._version = keys, total, ts, item.version

    async def change(self, keys: int, total: int, check: Check | None = None) -> None:
        """Move the counts by ``keys``/``total``; ``check(keys, bytes)`` may refuse
        (raise) given the store-wide counts before the change."""
        async with self._lock:
            # The cached counts are tried first (one conditional write when no
            # other replica wrote meanwhile); a refusal is only final once the
            # counts were read from the store within this call.
            fresh = False
            if self._version is None:
                await self.read()
                fresh = True
            for attempt in range(MAX_ATTEMPTS):
                if check is not None:
                    try:
                        check(self.keys, self.bytes)
                    except LimitExceeded:
                        if fresh:
                            raise
                        await self.read()  # another replica may have made room
                        fresh = True
                        continue
                if await self._write(self.keys + keys, self.bytes + total):
                    return
                await asyncio.sleep(random.uniform(0, 0.002 * min(attempt + 1, 25)))
                await self.read()
                fresh = True
        raise Unavailable("memory counts keep changing under concurrent writes; retry")

    async def reconcile(self, keys: int, total: int, scan_began: float) -> None:
        """Correct the counts to a scan's ``keys``/``total`` (see the module doc)."""
        async with self._lock:
            await self.read()
            if (self.keys, self.bytes) == (keys, total) and self._version is not None:
                return
            quiet = self._ts <= (scan_began - QUIET_SECONDS) * 1000
            if self._version is not None and (keys < self.keys or total < self.bytes):
                if not quiet:
                    log.info(
                        "memory count kept: records are being written",
                        extra={"count": self.keys, "scanned": keys},
                    )
                    return
            old = self.keys
            if await self._write(keys, total):
                if self._version is not None and old != keys:
                    log.info("memory count corrected", extra={"count": old, "scanned": keys})
            else:
                await self.read()  # changed meanwhile: keep the other writer's count

    async def _write(self, keys: int, total: int) -> bool:
        now = int(self.clock() * 1000)
        doc = {"keys": max(keys, 0), "bytes": max(total, 0), "ts": now}
        raw = json.dumps(doc, separators=(",", ":")).encode()
        try:
            if self._version is None:
                version = await self.storage.put(self.key, raw, if_absent=True)
            else:
                version = await self.storage.put(self.key, raw, if_version=self._version)
        except Conflict:
            return False
        self.keys, self.bytes, self._ts, self._version = doc["keys"], doc["bytes"], now, version
        return True
