"""What the domain reports about itself, without knowing who listens.

The domain calls these observers; the server wires implementations (the
Prometheus one is :mod:`ctxd_sidecar.server.metrics`). The defaults do nothing, so the
domain runs, and is tested, without any metrics library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class CompactionObserver(Protocol):
    def compaction(self, trigger: str, result: str) -> None:
        """A compaction ended: ``trigger`` manual, auto or runtime; ``result``
        ok, failed or declined."""

    def compaction_fidelity(self, trigger: str, score: float, dropped: dict[str, int]) -> None:
        """A compaction committed: the share of its folded span's verbatim
        artifacts still carried, and the count dropped by kind."""

    def summary_refused(self, trigger: str, reason: str) -> None:
        """A compaction was declined because its summary was malformed,
        empty or a placeholder (``reason``)."""


class MemoryObserver(Protocol):
    def memory_counts(self, keys: int, value_bytes: int) -> None:
        """The agent-memory counters changed (live keys, bytes of values)."""


class ContextsObserver(Protocol):
    def contexts_resident(self, count: int) -> None:
        """The number of contexts held in memory changed."""

    def context_tokens(self, tokens: int) -> None:
        """A turn was committed; the context's token estimate is now ``tokens``."""

    def cache_usage(self, input_tokens: int, cached: int, written: int) -> None:
        """RecordUsage reported the provider's cache counts for one call."""

    def compaction_cache(self, trigger: str, predicted: int, written: int) -> None:
        """The first usage report after a compaction: the cache writes its
        CacheEffect predicted, and those the provider reported."""


class StoreObserver(Protocol):
    """Told of every store call :class:`ctxd_sidecar.core.storage.Storage` makes."""

    def store_op(self, backend: str, op: str, seconds: float, error_kind: str | None) -> None:
        """``op`` on ``backend`` took ``seconds``; ``error_kind`` is ``"full"``,
        ``"unavailable"`` or ``"error"`` when the store failed, else ``None``
        (a failed precondition is an answer, not a failure)."""


class NullObserver:
    """Observes nothing."""

    def compaction(self, trigger: str, result: str) -> None:
        pass

    def compaction_fidelity(self, trigger: str, score: float, dropped: dict[str, int]) -> None:
        pass

    def summary_refused(self, trigger: str, reason: str) -> None:
        pass

    def memory_counts(self, keys: int, value_bytes: int) -> None:
        pass

    def contexts_resident(self, count: int) -> None:
        pass

    def context_tokens(self, tokens: int) -> None:
        pass

    def cache_usage(self, input_tokens: int, cached: int, written: int) -> None:
        pass

    def compaction_cache(self, trigger: str, predicted: int, written: int) -> None:
        pass

    def store_op(self, backend: str, op: str, seconds: float, error_kind: str | None) -> None:
        pass


class CompactionHooks(Protocol):
    """Plugin code around compaction (wired from the plugin manager)."""

    def redact(self, context_id: str, text: str) -> str:
        """``text`` as it may leave for a summariser model."""

    def compacted(self, context_id: str, compaction: object, kept: Sequence[object]) -> list[str]:
        """Notes to append after a compaction committed."""


class NoHooks:
    """No plugin acts around compaction."""

    def redact(self, context_id: str, text: str) -> str:
        return text

    def compacted(self, context_id: str, compaction: object, kept: Sequence[object]) -> list[str]:
        return []


class StoreObservers:
    """Several store observers as one (metrics and traces)."""

    def __init__(self, *observers: StoreObserver | None) -> None:
        self.observers = [o for o in observers if o is not None]

    def store_op(self, backend: str, op: str, seconds: float, error_kind: str | None) -> None:
        for o in self.observers:
            o.store_op(backend, op, seconds, error_kind)
