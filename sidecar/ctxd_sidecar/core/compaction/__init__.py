"""Compaction: folding the older part of a transcript into a structured summary.

Pure domain code (no gRPC, no storage). The contexts record calls it:

* :func:`plan_cut` — where to cut (``Cut`` or ``Decline`` with a reason);
  :func:`open_calls`, :func:`abandoned_calls` — tool calls that pin the cut;
  :func:`summary_placement` — where the summary goes in a provider's shape;
* :func:`build_system_prompt`, :func:`build_excerpt`, :data:`ANSWER_SCHEMA_JSON`
  — what ``PlanCompaction`` hands a runtime;
* :func:`parse_answer`, :func:`merge` — reading an answer and merging it
  into the stored :class:`Summary`;
* :func:`extract_ledger`, :class:`Ledger` — the verbatim artifacts of folded
  messages, merged into the summary (``merge(..., folded=...)``);
* :mod:`.fidelity` — how many of a folded span's artifacts a fold still
  carries; :mod:`.guard` — no empty, placeholder or low-fidelity summary;
* :func:`skills_to_evict` — loaded skills the kept window no longer needs;
* :func:`summarise` — running a summariser plugin (``Compact`` and the
  automatic trigger), in several passes when its window needs them;
* :class:`Backoff` — when the automatic trigger may try again.

Messages are read through :class:`MessageView` (see :mod:`.view`).
"""

from ctxd_sidecar.core.compaction.backoff import Backoff, BackoffPolicy, BackoffStatus
from ctxd_sidecar.core.compaction.cut import (
    DEFAULT_KEEP_LAST,
    Cut,
    Decline,
    abandoned_calls,
    open_calls,
    place_summary,
    plan_cut,
    summary_placement,
)
from ctxd_sidecar.core.compaction.errors import MalformedAnswer, SummariserError
from ctxd_sidecar.core.compaction.excerpt import (
    ANSWER_SCHEMA,
    ANSWER_SCHEMA_JSON,
    CLIP_CHARS,
    SYSTEM_PROMPT,
    build_excerpt,
    build_system_prompt,
    clip,
    render_message,
)
from ctxd_sidecar.core.compaction.ledger import DEFAULT_LEDGER_CAP, Artifact, Ledger, LedgerCap
from ctxd_sidecar.core.compaction.ledger import extract as extract_ledger
from ctxd_sidecar.core.compaction.skills import skill_references, skills_to_evict
from ctxd_sidecar.core.compaction.summarise import (
    Summariser,
    SummariseResult,
    SummaryRequest,
    summarise,
)
from ctxd_sidecar.core.compaction.summary import DEFAULT_CAP, Summary, merge, parse_answer
from ctxd_sidecar.core.compaction.view import MessageData, MessageView, ToolCallData, ToolCallView
from ctxd_sidecar.core.estimate import estimate_message, estimate_text

__all__ = [
    "ANSWER_SCHEMA",
    "ANSWER_SCHEMA_JSON",
    "CLIP_CHARS",
    "DEFAULT_CAP",
    "DEFAULT_KEEP_LAST",
    "DEFAULT_LEDGER_CAP",
    "SYSTEM_PROMPT",
    "Artifact",
    "Backoff",
    "BackoffPolicy",
    "BackoffStatus",
    "Cut",
    "Decline",
    "Ledger",
    "LedgerCap",
    "MalformedAnswer",
    "MessageData",
    "MessageView",
    "SummariseResult",
    "Summariser",
    "SummariserError",
    "Summary",
    "SummaryRequest",
    "ToolCallData",
    "ToolCallView",
    "abandoned_calls",
    "build_excerpt",
    "build_system_prompt",
    "clip",
    "estimate_message",
    "estimate_text",
    "extract_ledger",
    "merge",
    "open_calls",
    "parse_answer",
    "place_summary",
    "plan_cut",
    "render_message",
    "skill_references",
    "skills_to_evict",
    "summarise",
    "summary_placement",
]
