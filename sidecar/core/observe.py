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


class NullObserver:
    """Observes nothing."""

    def compaction(self, trigger: str, result: str) -> None:
        pass
