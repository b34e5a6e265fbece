"""``extractive``: a summariser that needs no model.

Deterministic rules over the folded messages (each entry one clipped line,
identifiers kept; each list keeps its newest ``cap`` entries):

* user messages: the first sentence that is not a question goes to
  ``goals``, questions go to ``open`` ("asked: …");
* assistant text: sentences naming pending work (todo, next, pending, still
  need, follow up, waiting, blocked) go to ``open``; sentences with a
  decision word (decided, will, going to, chose, use, switch, instead,
  agreed, plan to, …) go to ``decisions``;
* tool results go to ``facts`` as ``name#call_id: <result>`` (``failed:``
  for errors); system and note messages too (``note: …``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxd_sidecar.plugin import (
    DEFAULT_CAP,
    Config,
    MessageView,
    Summary,
    SummaryRequest,
    clean_item,
    clip,
    compact_json,
    hookimpl,
)

NAME = "extractive"
#: Characters of message content one entry keeps (before identifiers).
ENTRY_CHARS = 200
#: Most entries one message contributes to one list.
PER_MESSAGE = 2

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
#: Phrases naming pending work, and phrases naming a decision (whole words).
_OPEN = (
    "todo", "to do", "next step", "next steps", "pending", "still need", "need to", "remaining",
    "follow-up", "follow up", "waiting", "blocked",
)  # fmt: skip
_DECISION = (
    "decided", "decide", "decision", "will", "we'll", "i'll", "going to", "chose", "choose",
    "chosen", "use", "using", "switch", "switched", "instead", "agreed", "settled", "plan to",
    "opted", "prefer",
)  # fmt: skip


def _words(phrases: tuple[str, ...]) -> re.Pattern[str]:
    """Any of ``phrases`` as whole words, matched against lower-cased text (a
    case-insensitive pattern ran about 3x slower); the lookahead on their
    first letters lets most positions fail on one character class."""
    firsts = "".join(sorted({p[0] for p in phrases}))
    alternatives = "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True))
    return re.compile(rf"\b(?=[{firsts}])(?:{alternatives})\b")


_OPEN_WORDS, _DECISION_WORDS = _words(_OPEN), _words(_DECISION)


def _may_name_work(low: str) -> bool:
    """False when lower-cased ``low`` holds none of the phrases even inside
    other words: then no sentence of it needs a search."""
    return any(p in low for p in (*_OPEN, *_DECISION))


class ExtractiveSummariser:
    name = NAME
    window_tokens = None
    max_output_tokens = 0
    uses_excerpt = False

    def __init__(self, cap: int = DEFAULT_CAP) -> None:
        self.cap = cap

    async def summarise(self, request: SummaryRequest) -> Summary:
        return extract(request.messages, self.cap)


def extract(messages: Sequence[MessageView], cap: int = DEFAULT_CAP) -> Summary:
    """The extractive summary of ``messages`` (module docstring)."""
    out = Summary()
    for m in messages:
        if m.kind == "user":
            text = m.text.strip()
            who = getattr(m, "principal", "")
            prefix = f"{who}: " if who else ""
            if "?" in text:
                sentences = _sentences(text)
                asks = [s for s in sentences if not s.endswith("?")]
                questions = [s for s in sentences if s.endswith("?")]
            else:  # no question: only the first sentence is used
                asks, questions = _sentences(text, first=True), []
            if asks:
                out.goals.append(_entry(prefix + asks[0]))
            out.open.extend(_entry(f"{prefix}asked: {q}") for q in questions[:PER_MESSAGE])
        elif m.kind == "assistant":
            # Most messages name no pending work and no decision: substring
            # checks of the whole text say so without a regex.
            if not _may_name_work(m.text.lower()):
                continue
            opened = decided = 0
            for sentence in _sentences(m.text):
                low = sentence.lower()
                if _OPEN_WORDS.search(low) and opened < PER_MESSAGE:
                    out.open.append(_entry(sentence))
                    opened += 1
                elif _DECISION_WORDS.search(low) and decided < PER_MESSAGE:
                    out.decisions.append(_entry(sentence))
                    decided += 1
        elif m.kind == "tool":
            result = compact_json(m.content).strip() or "(empty)"
            verb = "failed: " if m.is_error else ""
            out.facts.append(_entry(f"{m.name}#{m.call_id}: {verb}{result}"))
        elif m.text.strip():  # system, note
            out.facts.append(_entry(f"{m.kind}: {m.text.strip()}"))
    for name in ("goals", "decisions", "open", "facts"):
        items = [item for item in getattr(out, name) if item]
        setattr(out, name, _dedupe(items)[-cap:])
    if out.is_empty():
        out.narrative = f"{len(messages)} earlier messages were folded; none had extractable text."
    return out


def _sentences(text: str, first: bool = False) -> list[str]:
    """The sentences of ``text`` (stripped, so its first piece is one), or
    with ``first`` only the first."""
    if first:
        head = _SENTENCE.split(text, maxsplit=1)[0].strip()
        return [head] if head else []
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _entry(text: str) -> str:
    return clean_item(clip(text, ENTRY_CHARS))


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        key = item.casefold()
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


@hookimpl
def ctxd_summarisers(config: Config) -> list[ExtractiveSummariser]:
    # Configured by the core table: compaction.list_cap bounds every summary list.
    return [ExtractiveSummariser(cap=config.compaction.list_cap)]
