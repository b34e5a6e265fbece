"""No empty summary is ever written.

A summariser's answer (from a plugin, or given to ApplyCompaction) that
parses but says nothing — every field empty, or only placeholder text such
as ``"..."``, ``"N/A"``, ``"TODO"``, ``"<summary>"`` or ``"Summary goes
here"`` — is refused with :class:`SummaryRefused`: the compaction is declined,
the context is unchanged, and the refusal is counted by reason. Answers that
do not parse at all (truncated JSON, ``"{}"``) are refused before this, as
:class:`~.errors.MalformedAnswer` (reason ``malformed_answer``).

Reasons: ``empty_summary`` (nothing in any field), ``placeholder_summary``
(only placeholder text). A fold that would carry less than
``compaction.min_fidelity`` of its span's artifacts (see :mod:`.fidelity`)
is declined the same way, reason ``low_fidelity``.
"""

from __future__ import annotations

import re

from ctxd_sidecar.core.compaction.errors import SummariserError
from ctxd_sidecar.core.compaction.summary import LIST_FIELDS, Summary, parse_answer
from ctxd_sidecar.core.errors import InvalidArgument

#: Reasons a compaction is declined because of its summary.
REASONS = ("malformed_answer", "empty_summary", "placeholder_summary", "low_fidelity")

_NOT_WORD = re.compile(r"[\W_]+")
_PLACEHOLDERS = frozenset(
    {
        "",
        "summary",
        "the summary",
        "no summary",
        "empty",
        "empty summary",
        "none",
        "null",
        "nil",
        "na",
        "n a",
        "tbd",
        "todo",
        "placeholder",
        "nothing",
        "nothing to summarise",
        "nothing to summarize",
        "no content",
        "lorem ipsum",
        "summary here",
        "summary goes here",
        "insert summary here",
        "your summary here",
        "text",
        "string",
    }
)


class SummaryRefused(SummariserError):
    """The summary is refused (nothing was folded); ``reason`` is one of :data:`REASONS`."""


class RefusedAnswer(InvalidArgument):
    """ApplyCompaction's ``answer`` is refused; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__("answer", message)
        self.reason = reason


def read(answer: str, source: str = "the answer") -> Summary:
    """``answer`` read and checked (:func:`check`).

    :raise SummariserError: reason ``malformed_answer``, ``empty_summary``
        or ``placeholder_summary``.
    """
    if not answer.strip():
        raise SummaryRefused("empty_summary", f"{source} is empty; nothing was folded")
    summary = parse_answer(answer)
    check(summary, source)
    return summary


def check_fidelity(score: float, least: float, detail: str) -> None:
    """:raise SummaryRefused: reason ``low_fidelity`` when ``score < least``."""
    if score < least:
        raise SummaryRefused(
            "low_fidelity",
            f"this fold would carry {score:.1%} of the folded messages' verbatim artifacts "
            f"({detail}), below compaction.min_fidelity = {least:.1%}; nothing was folded "
            "(fold fewer messages, or raise compaction.ledger_max_items / ledger_max_bytes)",
        )


def placeholder(text: str) -> bool:
    """``text`` says nothing: punctuation only, or a known placeholder."""
    return _NOT_WORD.sub(" ", text).strip().casefold() in _PLACEHOLDERS


def check(summary: Summary, source: str) -> None:
    """Refuse an answer that would write an empty summary.

    :raise SummaryRefused: no field has content, or all of it is placeholder text.
    """
    if summary.closed:
        return  # closing open items is news
    items = [i for name in LIST_FIELDS for i in getattr(summary, name)]
    if summary.narrative:
        items.append(summary.narrative)
    if not any(i.strip() for i in items):
        raise SummaryRefused(
            "empty_summary",
            f"{source} is an empty summary (no goals, decisions, open items, facts or "
            "narrative); nothing was folded",
        )
    if all(placeholder(i) for i in items):
        shown = ", ".join(repr(i[:40]) for i in items[:3])
        raise SummaryRefused(
            "placeholder_summary",
            f"{source} holds only placeholder text ({shown}); nothing was folded",
        )
