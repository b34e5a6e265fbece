"""Following other replicas' commits for watchers (shared stores).

While a context is watched, :class:`Followers` keeps one task for it that
waits until another replica may have changed it (woken by the store's
change feed when it has one, ``CHANGE_FEED``, else every
``contexts.watch_poll_interval`` seconds) and then reads it at its latest:
the catch-up announces what it applies on the feed, so watchers see other
replicas' changes as they see this one's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ctxd_sidecar.core import changefeed
from ctxd_sidecar.core.contexts.events import EventFeed
from ctxd_sidecar.core.errors import CtxdError
from ctxd_sidecar.core.storage import Storage

log = logging.getLogger(__name__)


class Followers:
    """One follower task per watched context."""

    def __init__(
        self,
        storage: Storage,
        feed: EventFeed,
        read: Callable[..., Awaitable[object]],
        poll: float,
    ) -> None:
        self._storage, self._feed, self._read, self._poll = storage, feed, read, poll
        self._tasks: dict[str, asyncio.Task] = {}

    def follow(self, cid: str) -> None:
        """Follow ``cid`` while it has watchers (only on a shared store)."""
        if self._storage.shared and cid not in self._tasks:
            self._tasks[cid] = asyncio.create_task(self._follow(cid), name=f"follow {cid}")

    def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()

    async def _follow(self, cid: str) -> None:
        try:
            while self._feed.watchers(cid):
                await changefeed.wait(self._storage, changefeed.context_prefixes(cid), self._poll)
                try:
                    await self._read(cid, latest=True)
                except CtxdError as exc:
                    log.debug(
                        "watched context not checked", extra={"context": cid, "error": str(exc)}
                    )
        finally:
            if self._tasks.get(cid) is asyncio.current_task():
                del self._tasks[cid]
