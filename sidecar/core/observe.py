"""What the domain reports about itself, without knowing who listens.

The domain calls these observers; the server wires implementations (the
Prometheus one is :mod:`sidecar.metrics`). The defaults do nothing, so the
domain runs, and is tested, without any metrics library.
"""

from __future__ import annotations

from typing import Protocol


class CompactionObserver(Protocol):
    def compaction(self, trigger: str, result: str) -> None:
        """A compaction ended: ``trigger`` manual, auto or runtime; ``result``
        ok, failed or declined."""


class MemoryObserver(Protocol):
    def memory_counts(self, keys: int, value_bytes: int) -> None:
        """The agent-memory counters changed (live keys, bytes of values)."""


class ContextsObserver(Protocol):
    def contexts_resident(self, count: int) -> None:
        """The number of contexts held in memory changed."""

    def context_tokens(self, tokens: int) -> None:
        """A turn was committed; the context's token estimate is now ``tokens``."""


class NullObserver:
    """Observes nothing."""

    def compaction(self, trigger: str, result: str) -> None:
        pass

    def memory_counts(self, keys: int, value_bytes: int) -> None:
        pass

    def contexts_resident(self, count: int) -> None:
        pass

    def context_tokens(self, tokens: int) -> None:
        pass
