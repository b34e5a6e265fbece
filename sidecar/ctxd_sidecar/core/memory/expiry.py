"""When memory records expire: a map of key -> expiry plus a heap to find the due ones.

Filled by the start-up scan and kept current by this process's writes, so
finding what is due costs nothing when nothing is.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable


class ExpirySchedule:
    """Keys with an expiry time (ms since the epoch), earliest first."""

    def __init__(self) -> None:
        self._expiry: dict[str, int] = {}
        # (expires_at_ms, key); entries no longer matching the map are stale and skipped.
        self._heap: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def reset(self, expiry: dict[str, int]) -> None:
        """Replace the schedule with ``expiry`` (key -> expires_at_ms)."""
        self._expiry = expiry
        self._heap = [(t, k) for k, t in expiry.items()]
        heapq.heapify(self._heap)

    def schedule(self, key: str, expires_at: int) -> None:
        """``key`` was written with ``expires_at`` (0: never expires)."""
        if expires_at:
            self._expiry[key] = expires_at
            heapq.heappush(self._heap, (expires_at, key))
            if len(self._heap) > 2 * len(self._expiry) + 1024:  # drop stale heap entries
                self.reset(self._expiry)
        elif self._expiry:
            self._expiry.pop(key, None)

    def forget(self, key: str) -> None:
        self._expiry.pop(key, None)

    def has_due(self, now_ms: int) -> bool:
        return bool(self._heap) and self._heap[0][0] <= now_ms

    def pop_due(self, now_ms: int) -> tuple[int, str] | None:
        """The next ``(expires_at, key)`` due by ``now_ms`` still current, removed
        from the heap (push it back with :meth:`defer`); None when none is due."""
        while self.has_due(now_ms):
            expires_at, key = heapq.heappop(self._heap)
            if self._expiry.get(key) == expires_at:
                return expires_at, key
        return None

    def defer(self, entries: Iterable[tuple[int, str]]) -> None:
        """Put back entries taken with :meth:`pop_due` and not handled yet."""
        for entry in entries:
            heapq.heappush(self._heap, entry)
