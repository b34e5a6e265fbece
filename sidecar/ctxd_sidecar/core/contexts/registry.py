"""The in-memory registry: a bounded LRU cache of contexts over the store.

Each context in use has one :class:`Entry`: its state (``None`` until
restored, or when the context does not exist), the lock that serialises
its writes, and a pin count. Entries in use (pinned or locked) are never
evicted, so there is never more than one live copy of a context in the
process. When the cache exceeds ``max_contexts`` or ``max_bytes`` the least
recently used idle entries are evicted; ``on_evict`` gets each one (the
service seals what is not yet checkpointed). An evicted context is restored
from the store on its next use.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ctxd_sidecar.core.contexts.model import ContextState
from ctxd_sidecar.core.observe import ContextsObserver, NullObserver


class Entry:
    __slots__ = (
        "id",
        "state",
        "lock",
        "pins",
        "charged",
        "stale",
        "ckpt_lock",
        "ckpt_task",
        "ckpt_again",
        "verified",
    )

    def __init__(self, cid: str) -> None:
        self.id = cid
        self.state: ContextState | None = None
        #: Serialises changes to this context (and its restore).
        self.lock = asyncio.Lock()
        self.pins = 0
        #: Bytes this entry counts for in the registry total.
        self.charged = 0
        #: The stored record moved under us (another writer): restore before use.
        self.stale = False
        #: One checkpoint at a time per context.
        self.ckpt_lock = asyncio.Lock()
        self.ckpt_task: asyncio.Task | None = None
        self.ckpt_again = False
        #: Monotonic time the state was last confirmed against the store.
        self.verified = 0.0

    @property
    def busy(self) -> bool:
        return self.pins > 0 or self.lock.locked()


class Registry:
    def __init__(
        self,
        max_contexts: int,
        max_bytes: int,
        on_evict: Callable[[Entry], None] = lambda e: None,
        observer: ContextsObserver | None = None,
    ) -> None:
        #: Told the resident count after it may have changed.
        self.observer: ContextsObserver = observer or NullObserver()
        self.max_contexts = max_contexts
        self.max_bytes = max_bytes
        self.on_evict = on_evict
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self.bytes = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, cid: str) -> bool:
        return cid in self._entries

    def peek(self, cid: str) -> Entry | None:
        """The entry if resident, without touching recency."""
        return self._entries.get(cid)

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    @asynccontextmanager
    async def use(self, cid: str) -> AsyncIterator[Entry]:
        """Pin the context's entry (creating it) for the duration of a call."""
        entry = self._entries.get(cid)
        if entry is None:
            entry = Entry(cid)
            self._entries[cid] = entry
        else:
            self._entries.move_to_end(cid)
        entry.pins += 1
        try:
            yield entry
        finally:
            entry.pins -= 1
            self._settle(entry)
            self.observer.contexts_resident(len(self._entries))

    def drop(self, entry: Entry) -> None:
        """Forget an entry now (deleted or archived context); no on_evict."""
        if self._entries.get(entry.id) is entry:
            del self._entries[entry.id]
            self.bytes -= entry.charged
            entry.charged = 0
            self.observer.contexts_resident(len(self._entries))

    def _settle(self, entry: Entry) -> None:
        if self._entries.get(entry.id) is not entry:
            return
        if entry.state is None and not entry.busy:
            # Nothing cached (unknown context or a failed restore).
            del self._entries[entry.id]
            self.bytes -= entry.charged
            entry.charged = 0
            return
        size = entry.state.memory_bytes if entry.state is not None else 0
        self.bytes += size - entry.charged
        entry.charged = size
        self.evict()

    def evict(self) -> None:
        """Evict idle least-recently-used entries until within both caps."""
        if len(self._entries) <= self.max_contexts and self.bytes <= self.max_bytes:
            return
        for entry in list(self._entries.values()):
            if len(self._entries) <= self.max_contexts and self.bytes <= self.max_bytes:
                break
            if entry.busy:
                continue
            del self._entries[entry.id]
            self.bytes -= entry.charged
            entry.charged = 0
            self.evictions += 1
            self.on_evict(entry)
