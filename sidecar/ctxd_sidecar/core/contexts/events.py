"""The event feed of contexts: what changed, for listeners and watchers.

:class:`EventFeed` is the one place every committed change is announced. In
the process, listeners (the automatic compaction trigger, the prompt cache)
are called synchronously on the event loop after the commit. Watchers
(``WatchContext``) subscribe to one context and get a bounded queue each
(:data:`WATCH_QUEUE`): a watcher that falls behind loses its oldest events,
and the next event it reads says how many it missed, so a slow reader never
grows memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ctxd_sidecar.core.contexts.model import ContextState

log = logging.getLogger(__name__)

#: Events one watcher may have waiting before the oldest are dropped.
WATCH_QUEUE = 256


@dataclass(frozen=True, slots=True)
class ContextEvent:
    """Something happened to a context (``kind``: turn, compaction, plan,
    skills, preflight, deleted, archived, compaction_failed; ``detail`` holds
    the op's own figures, e.g. ``folded``/``before``/``after`` of a compaction)."""

    context_id: str
    kind: str
    version: int
    ts: int
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WatchEvent:
    """One event as a watcher sees it."""

    context_id: str
    kind: str
    version: int
    ts: int
    tokens_before: int = 0
    tokens_after: int = 0
    folded: int = 0
    detail: str = ""
    #: For compactions: the compaction's record (see :mod:`.archive`).
    compaction: dict[str, Any] | None = None


Listener = Callable[[ContextEvent, ContextState | None], None]


def watch_event(ev: ContextEvent, st: ContextState | None) -> WatchEvent:
    """What watchers are told of ``ev`` (``st``: the state after it, if any)."""
    d = ev.detail
    if ev.kind == "compaction":
        after = st.est_tokens if st is not None else int(d.get("after", 0))
        record = None
        if st is not None:
            record = next((c for c in reversed(st.compactions) if c["v"] == ev.version), None)
        return WatchEvent(
            ev.context_id,
            ev.kind,
            ev.version,
            ev.ts,
            tokens_before=int(d.get("before", 0)),
            tokens_after=after,
            folded=int(d.get("folded", 0)),
            compaction=record,
        )
    if ev.kind == "turn" and st is not None:
        return WatchEvent(
            ev.context_id,
            ev.kind,
            ev.version,
            ev.ts,
            tokens_after=st.est_tokens,
            detail="compaction due" if d.get("compaction_due") else "",
        )
    return WatchEvent(ev.context_id, ev.kind, ev.version, ev.ts, detail=str(d.get("text", "")))


class Subscription:
    """A watcher's bounded queue; iterate it for events. Ends after a
    ``deleted`` event or :meth:`close`."""

    def __init__(self, context_id: str, maxlen: int) -> None:
        self.context_id = context_id
        self._queue: deque[WatchEvent] = deque(maxlen=maxlen)
        self._ready = asyncio.Event()
        self._closed = False
        self.dropped = 0

    def push(self, ev: WatchEvent) -> None:
        if self._closed:
            return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
        self._queue.append(ev)
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[WatchEvent]:
        while True:
            while not self._queue:
                if self._closed:
                    return
                self._ready.clear()
                await self._ready.wait()
            ev = self._queue.popleft()
            if self.dropped:
                note = f"{self.dropped} earlier events dropped (watcher too slow)"
                ev = replace(ev, detail=f"{ev.detail}; {note}".lstrip("; "))
                self.dropped = 0
            yield ev
            if ev.kind == "deleted":
                return


class EventFeed:
    """Listeners and watchers of committed changes."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._subs: dict[str, set[Subscription]] = {}

    # -- listeners (in-process) ------------------------------------------------------------
    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(event, state)`` after every committed change (state is
        None for deletions). Listeners run on the event loop and must not block."""
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn) if fn in self._listeners else None

    def emit(self, ev: ContextEvent, st: ContextState | None) -> None:
        for fn in list(self._listeners):
            try:
                fn(ev, st)
            except Exception:  # noqa: BLE001 - a listener's bug must not fail the call
                log.exception("context listener failed", extra={"context": ev.context_id})
        if self._subs.get(ev.context_id):
            self.publish(watch_event(ev, st))

    # -- watchers --------------------------------------------------------------------------
    def publish(self, ev: WatchEvent) -> None:
        """Hand ``ev`` to the context's watchers (events no commit carries,
        such as a failed automatic compaction, come straight here)."""
        subs = self._subs.get(ev.context_id)
        if not subs:
            return
        for sub in list(subs):
            sub.push(ev)
        if ev.kind == "deleted":
            self._subs.pop(ev.context_id, None)

    def subscribe(self, context_id: str, maxlen: int = WATCH_QUEUE) -> Subscription:
        sub = Subscription(context_id, maxlen)
        self._subs.setdefault(context_id, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        sub.close()
        subs = self._subs.get(sub.context_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.context_id]

    @property
    def watched(self) -> int:
        """Contexts with at least one watcher."""
        return len(self._subs)

    def watchers(self, context_id: str) -> int:
        """Watchers of one context."""
        return len(self._subs.get(context_id, ()))

    def close(self) -> None:
        """End every watch (shutdown)."""
        for subs in self._subs.values():
            for sub in subs:
                sub.close()
        self._subs.clear()
