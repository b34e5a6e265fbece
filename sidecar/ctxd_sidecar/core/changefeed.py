"""Wake a watcher when another replica writes, instead of polling.

A store declaring ``Capability.CHANGE_FEED`` reports each key any process
writes (PostgreSQL's LISTEN/NOTIFY). :func:`wait` sleeps until a key under
one of the given prefixes changed, or ``timeout`` passed; on other stores it
just sleeps ``timeout`` (the poll it replaces). A change reported while
nobody waits is remembered, so a write that lands between two waits (while
the watcher reads) still wakes the next one.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Iterable

from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.store import Capability

#: Prefixes nobody waited on for this long are forgotten.
_FORGET_AFTER_S = 60.0

_feeds: weakref.WeakKeyDictionary[Storage, asyncio.Future[ChangeFeed]] = weakref.WeakKeyDictionary()


class ChangeFeed:
    """One store subscription for a :class:`Storage`, fanned out to waiters."""

    def __init__(self, storage: Storage, loop: asyncio.AbstractEventLoop) -> None:
        self.namespace = storage.namespace
        self.loop = loop
        #: prefix -> (woken, last time someone waited on it)
        self._waiting: dict[str, tuple[asyncio.Event, float]] = {}
        self.stop = storage.store.watch(storage.namespace, self._changed)

    def _changed(self, key: str | None) -> None:
        """Called on the store's thread."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._wake, key)

    def _wake(self, key: str | None) -> None:
        relative = None if key is None else key[len(self.namespace) :]
        for prefix, (event, _) in self._waiting.items():
            if relative is None or relative.startswith(prefix):
                event.set()

    def _event(self, prefix: str, now: float) -> asyncio.Event:
        event = self._waiting.get(prefix, (asyncio.Event(), now))[0]
        self._waiting[prefix] = (event, now)
        return event

    async def wait(self, prefixes: Iterable[str], timeout: float) -> None:
        now = time.monotonic()
        events = [self._event(p, now) for p in prefixes]
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        for e in events:
            e.clear()  # before the caller reads: a write during the read wakes the next wait
        stale = [p for p, (_, used) in self._waiting.items() if now - used > _FORGET_AFTER_S]
        for p in stale:
            del self._waiting[p]


def offered(storage: Storage) -> bool:
    return Capability.CHANGE_FEED in storage.capabilities


async def wait(storage: Storage, prefixes: Iterable[str], poll: float) -> None:
    """Until a key under ``prefixes`` may have changed: at once on a change
    the store reports, else after ``poll`` seconds (or the feed's safety net)."""
    if not offered(storage):
        await asyncio.sleep(poll)
        return
    loop = asyncio.get_running_loop()
    opening = _feeds.get(storage)
    if opening is None:
        # Subscribing connects (a LISTEN): off the event loop, and never in
        # the watcher's way: until it is up, the watcher polls as before.
        opening = _feeds[storage] = loop.run_in_executor(None, ChangeFeed, storage, loop)
        opening.add_done_callback(lambda f: _opened(storage, f))
    if not opening.done():
        # Up within the poll: return at once, so the caller reads what was
        # written while it opened and then waits on the feed, not a whole poll.
        started = loop.time()
        await asyncio.wait([opening], timeout=poll)
        if _up(opening):
            return
        await asyncio.sleep(max(0.0, poll - (loop.time() - started)))
        return
    if not _up(opening):
        await asyncio.sleep(poll)
        return
    # The poll stays the safety net: a notification lost with a connection,
    # or sent before this waiter registered, delays a watcher by one poll.
    await opening.result().wait(prefixes, poll)


def _up(opening: asyncio.Future) -> bool:
    return opening.done() and not opening.cancelled() and opening.exception() is None


def _opened(storage: Storage, opening: asyncio.Future) -> None:
    """A feed that could not open (or was cancelled) is tried again by the
    next waiter; meanwhile watchers poll."""
    failed = opening.cancelled() or opening.exception() is not None
    if failed and _feeds.get(storage) is opening:
        del _feeds[storage]


def context_prefixes(cid: str) -> tuple[str, str]:
    """The keys whose change means context ``cid`` changed: its log records
    (every commit) and its head (created, replaced, deleted)."""
    from ctxd_sidecar.core.contexts.persistence import LOGS, head_key

    return (f"{LOGS}/{cid}/", head_key(cid))
