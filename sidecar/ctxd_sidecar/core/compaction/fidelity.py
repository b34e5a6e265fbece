"""The fidelity of a compaction: how many verbatim artifacts survive a fold.

Of the artifacts the ledger extracts from the folded span (paths, commands,
URLs, ids, numbers, errors, tool calls; see :mod:`.ledger`), a compaction's
:class:`Fidelity` counts, by kind, those still **carried** after it: in the
merged summary's ledger (by the ledger's dedupe key), or verbatim in the
rendered summary (its lists, narrative, or inside a longer ledger entry
such as an order number inside a URL). The others are **dropped**; the first
few (oldest first) are kept for a person to read.

The span is read as the ledger reads it (the redacted view of the messages,
newest first, at most :data:`~.ledger.EXTRACT_MAX_CHARS` characters) but
without the ledger's cap, so artifacts the cap evicts count as dropped; at
most :data:`MAX_COUNTED` distinct artifacts are counted.

``carried_since_start`` estimates the decay over successive folds: ``seen``
adds, at each compaction, the span's artifacts the previous summary did not
already carry (an artifact evicted and seen again counts again), and
``carried_since_start`` is the ledger's size after the fold (every ledger
entry comes from a folded span), at least this fold's carried count and at
most ``seen``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxd_sidecar.core.compaction.ledger import (
    EXTRACT_MAX_CHARS,
    KINDS,
    Artifact,
    _chars,
    _clip,
    message_artifacts,
)
from ctxd_sidecar.core.compaction.view import MessageView

#: Most distinct artifacts of one span counted.
MAX_COUNTED = 4096
#: Dropped artifacts kept in the report, and their longest text.
DROPPED_SHOWN = 5
DROPPED_CHARS = 120
#: Kinds whose dedupe key ignores case.
_CASELESS = frozenset({"id", "error"})


@dataclass(frozen=True)
class KindCount:
    kind: str
    total: int
    carried: int


@dataclass(frozen=True)
class Fidelity:
    """What one compaction kept of its folded span's verbatim artifacts."""

    total: int
    carried: int
    kinds: tuple[KindCount, ...] = ()
    #: The first dropped artifacts, oldest first: (kind, text).
    dropped: tuple[tuple[str, str], ...] = ()
    #: Distinct artifacts folded by this and every earlier compaction (estimate).
    seen_since_start: int = 0
    #: Of those, still carried after this compaction (estimate).
    carried_since_start: int = 0

    @property
    def score(self) -> float:
        """Share of the span's artifacts carried (1.0 when it had none)."""
        return self.carried / self.total if self.total else 1.0

    @property
    def since_start_score(self) -> float:
        seen = self.seen_since_start
        return self.carried_since_start / seen if seen else 1.0

    def dropped_by_kind(self) -> dict[str, int]:
        return {k.kind: k.total - k.carried for k in self.kinds if k.total > k.carried}

    def to_dict(self) -> dict[str, Any]:
        return {
            "t": self.total,
            "c": self.carried,
            "k": {k.kind: [k.total, k.carried] for k in self.kinds},
            "d": [list(d) for d in self.dropped],
            "s": self.seen_since_start,
            "cs": self.carried_since_start,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Fidelity | None:
        """A stored report, or ``None`` (older records have none)."""
        if not isinstance(data, dict):
            return None
        kinds = []
        for kind, pair in (data.get("k") or {}).items():
            if kind in KINDS and isinstance(pair, list) and len(pair) == 2:
                kinds.append(KindCount(kind, int(pair[0]), int(pair[1])))
        dropped = tuple(
            (str(d[0]), str(d[1]))
            for d in data.get("d") or ()
            if isinstance(d, list) and len(d) == 2
        )
        return cls(
            total=int(data.get("t", 0)),
            carried=int(data.get("c", 0)),
            kinds=tuple(kinds),
            dropped=dropped,
            seen_since_start=int(data.get("s", 0)),
            carried_since_start=int(data.get("cs", 0)),
        )


def span_artifacts(
    folded: Sequence[MessageView], max_chars: int = EXTRACT_MAX_CHARS
) -> list[Artifact]:
    """The distinct artifacts of ``folded``, oldest first (read newest first
    within ``max_chars``, at most :data:`MAX_COUNTED`)."""
    found: dict[tuple[str, str], Artifact] = {}
    budget = max_chars
    for i in range(len(folded) - 1, -1, -1):
        m = folded[i]
        chars = _chars(m)
        if chars > budget and i < len(folded) - 1:
            break
        budget -= chars
        for kind, text in reversed(list(message_artifacts(m))):
            if not text.strip():
                continue
            a = Artifact(kind, _clip(text), i)
            found.setdefault(a.key, a)
            if len(found) >= MAX_COUNTED:
                return list(reversed(found.values()))
    return list(reversed(found.values()))


class _Carrier:
    """Tells whether a summary carries an artifact."""

    def __init__(self, summary) -> None:
        self.keys = {a.key for a in summary.ledger.entries}
        self.text = summary.render()
        self._folded: str | None = None

    def carries(self, a: Artifact) -> bool:
        if a.key in self.keys or a.text in self.text:
            return True
        if a.kind in _CASELESS:
            if self._folded is None:
                self._folded = self.text.casefold()
            return a.text.casefold() in self._folded
        return False


def measure(
    folded: Sequence[MessageView], previous, merged, *, previous_seen: int | None = None
) -> Fidelity:
    """The fidelity of folding ``folded`` into ``merged`` (a :class:`Summary`;
    ``previous`` is the summary before). ``previous_seen``: the last
    compaction's ``seen_since_start`` (``None``: unknown, the previous
    ledger's size is used)."""
    artifacts = span_artifacts(folded)
    after, before = _Carrier(merged), _Carrier(previous)
    totals = dict.fromkeys(KINDS, 0)
    carried = dict.fromkeys(KINDS, 0)
    dropped: list[tuple[str, str]] = []
    new = 0
    for a in artifacts:
        totals[a.kind] += 1
        if not before.carries(a):
            new += 1
        if after.carries(a):
            carried[a.kind] += 1
        elif len(dropped) < DROPPED_SHOWN:
            text = a.text if len(a.text) <= DROPPED_CHARS else a.text[: DROPPED_CHARS - 1] + "…"
            dropped.append((a.kind, text))
    kept = sum(carried.values())
    seen = (len(previous.ledger) if previous_seen is None else previous_seen) + new
    since = min(seen, max(len(merged.ledger), kept))
    return Fidelity(
        total=len(artifacts),
        carried=kept,
        kinds=tuple(KindCount(k, totals[k], carried[k]) for k in KINDS if totals[k]),
        dropped=tuple(dropped),
        seen_since_start=seen,
        carried_since_start=since,
    )
