"""Telling of a compaction: its log line and what observers hear.

Every committed compaction (manual, automatic, plan/apply) logs one
``context compacted`` line with its fidelity (see
:mod:`ctxd_sidecar.core.compaction.fidelity`: artifacts of the folded span,
how many are still carried, the score, the decay since the first fold) and
reports the score and the dropped artifacts by kind to the observer. Texts of
dropped artifacts stay out of the log (they are in the compaction record).
A summary refused by the guard (:mod:`ctxd_sidecar.core.compaction.guard`) is
counted as a declined compaction and by reason.
"""

from __future__ import annotations

import logging
from typing import Any

from ctxd_sidecar.core.compaction import guard
from ctxd_sidecar.core.compaction.fidelity import Fidelity, measure
from ctxd_sidecar.core.observe import CompactionObserver

log = logging.getLogger("ctxd_sidecar.core.contexts.compaction")


def measure_fold(st: Any, folded: list, merged: Any, least: float = 0.0) -> Fidelity:
    """The fidelity of folding ``folded`` (redacted) of context ``st`` into
    ``merged``, continuing the decay estimate of its last compaction record.

    :raise SummaryRefused: reason ``low_fidelity``, the score is below ``least``.
    """
    last = st.compactions[-1].get("fid") if st.compactions else None
    seen = last.get("s") if isinstance(last, dict) else None
    if not isinstance(seen, int):
        seen = None
    fid = measure(folded, st.summary, merged, previous_seen=seen)
    guard.check_fidelity(fid.score, least, f"{fid.carried} of {fid.total}")
    return fid


def compacted(
    observer: CompactionObserver,
    context_id: str,
    trigger: str,
    summariser: str,
    applied: Any,
) -> None:
    """Log and observe ``applied`` (an :class:`~.compaction.ApplyResult`)."""
    fid: Fidelity | None = applied.fidelity
    extra: dict[str, Any] = {
        "context": context_id,
        "trigger": trigger,
        "summariser": summariser,
        "folded": applied.folded,
        "tokens_before": applied.tokens_before,
        "tokens_after": applied.tokens_after,
    }
    if fid is not None:
        extra.update(
            fidelity=round(fid.score, 4),
            artifacts_folded=fid.total,
            artifacts_carried=fid.carried,
            artifacts_dropped=fid.dropped_by_kind(),
            carried_since_start=round(fid.since_start_score, 4),
        )
        observer.compaction_fidelity(trigger, fid.score, fid.dropped_by_kind())
    log.info("context compacted", extra=extra)


def refused(observer: CompactionObserver, context_id: str, trigger: str, exc: Any) -> None:
    """A summary the guard refused: counted, logged, nothing written."""
    observer.compaction(trigger, "declined")
    observer.summary_refused(trigger, exc.reason)
    log.warning(
        "compaction declined: summary refused",
        extra={"context": context_id, "trigger": trigger, "reason": exc.reason},
    )
