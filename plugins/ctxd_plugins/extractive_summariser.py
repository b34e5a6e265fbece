"""``extractive``: a summariser that needs no model.

Deterministic rules over the sentences of the folded messages; each entry
is one short line (leading filler such as "ok so", "remember:" dropped);
each list keeps its newest ``cap`` entries:

* a question a user asks goes to ``open`` ("asked: …") unless an assistant
  reply with text follows it in the folded span (then it was answered);
  such a reply also closes the ``asked:`` items of the summary so far
  (``closed``): the conversation went on past them;
* a sentence naming a decision (decided, agreed, settled, chose, go with,
  switch to, instead, …) goes to ``decisions``, whoever said it;
* a sentence naming pending work (todo, next step, pending, still need,
  follow up, waiting, blocked, …) goes to ``open``;
* a user's request (the first sentence of a message that is neither of the
  above nor filler such as "thanks") goes to ``goals``, one per message;
* a sentence stating a number of its own (two digits or more: a count, a
  time, a version; not only a path or id: those are the ledger's) goes to
  ``facts``;
* a tool result goes to ``facts`` as ``name#call_id: <its telling line>``
  (a JSON object's top-level values as ``key=value``, else the first line
  naming a failure, else the first line; ``failed:`` for errors), system
  and note messages as ``note: …``.

An entry that restates a kept one (the same content words, or at most two
more; see :func:`ctxd_sidecar.plugin.redundant`) is left out, across all
four lists, so one decision said five times is one line. Verbatim
artifacts (paths, commands, ids, numbers) are not copied: the ledger ctxd
adds to every summary carries them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from ctxd_sidecar.plugin import (
    DEFAULT_CAP,
    Config,
    MessageView,
    Summary,
    SummaryRequest,
    clean_item,
    compact_json,
    content_words,
    hookimpl,
    redundant,
    text_artifacts,
)

NAME = "extractive"
#: Characters of one entry from prose, and of one tool result's line.
ENTRY_CHARS = 140
RESULT_CHARS = 100
#: Largest tool result read as JSON (and searched for a failure), and most lines searched.
SCAN_JSON_CHARS = 64 * 1024
TELLING_LINES = 200
#: Most entries one message contributes to one list.
PER_MESSAGE = 2
#: Entries of one list compared for restatements (the newest); bounds the
#: cost of folding thousands of messages.
COMPARED = 4 * DEFAULT_CAP
LISTS = ("goals", "decisions", "open", "facts")

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
#: Phrases naming pending work, and phrases naming a decision (whole words).
_OPEN = (
    "todo", "to do", "next step", "next steps", "pending", "still need", "need to", "needs to",
    "remaining", "follow-up", "follow up", "waiting", "blocked", "not yet", "tbd",
)  # fmt: skip
_DECISION = (
    "decided", "decide", "decision", "chose", "choose", "chosen", "agreed", "agree", "settled",
    "opted", "go with", "going with", "went with", "switch to", "switched to", "switching to",
    "instead", "we'll use", "we will use", "will use", "let's use", "stick with", "keep using",
    "plan to", "we'll keep", "we will keep", "prefer",
)  # fmt: skip
#: Leading words of a sentence that add nothing to an entry.
_FILLER = re.compile(
    r"^(?:(?:ok(?:ay)?|so|yes|yeah|sure|great|noted|understood|thanks|thank you|hi|hello|hey|"
    r"right|alright|well|also|again|anyway|remember|reminder|as i said|as agreed|"
    r"as discussed|just to confirm|to confirm|fyi|note)\b[\s,:;!.-]*)+",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d")
_FAILURE = re.compile(
    r"(?i)\b(?:error|errors|fail|failed|failure|fatal|exception|traceback|panic|denied|"
    r"refused|timed? ?out|not found)\b"
)
#: A number of a sentence's own: two digits or more (a count, a time, a version).
_NUMBER = re.compile(r"\d\d")
#: How a request starts (after filler).
_REQUEST = re.compile(
    r"(?i)(?:please|can you|could you|would you|let's|let us|i want|i need|we want|we need|"
    r"help|make|add|fix|write|draft|create|update|remove|delete|check|run|deploy|migrate|"
    r"move|find|investigate|look|implement|refactor|rename|build|test|set up|install|change|"
    r"review|explain|summari[sz]e|compare|research|read|open|send|prepare|plan)\b"
)


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
        return extract(request.messages, self.cap, previous=request.previous)


def extract(
    messages: Sequence[MessageView], cap: int = DEFAULT_CAP, previous: Summary | None = None
) -> Summary:
    """The extractive summary of ``messages`` (module docstring); ``previous``:
    the summary so far, whose questions a reply here closes."""
    out = Summary()
    asked: list[str] = []  # questions no reply has followed yet
    replied = False
    for m in messages:
        if m.kind == "user":
            asked.extend(_user(out, m))
        elif m.kind == "assistant":
            if m.text.strip():
                asked, replied = [], True  # answered (or at least taken up)
            _assistant(out, m.text)
        elif m.kind == "tool":
            out.facts.append(_result(m))
        elif m.text.strip():  # system, note
            out.facts.append(_entry(f"{m.kind}: {_first_line(m.text)}", RESULT_CHARS))
    out.open.extend(asked)
    if replied and previous is not None:
        out.closed = [item for item in previous.open if "asked: " in item]
    _dedupe(out, cap)
    if out.is_empty():
        out.narrative = f"{len(messages)} earlier messages were folded; none had extractable text."
    return out


def _user(out: Summary, m: MessageView) -> list[str]:
    """File a user message's sentences; return its questions (``asked: …``)."""
    who = getattr(m, "principal", "")
    prefix = f"{who}: " if who else ""
    questions: list[str] = []
    first = goal = True  # the first statement may be a goal; a request always
    for sentence in _sentences(m.text):
        trimmed = _trim(sentence)
        if not content_words(trimmed):
            continue  # filler: "Hi!", "Thanks, go ahead."
        if sentence.endswith("?"):
            if len(questions) < PER_MESSAGE:
                questions.append(_entry(f"{prefix}asked: {trimmed}"))
            continue
        kind = _kind(sentence)
        if kind in (None, "facts") and goal and (first or _REQUEST.match(trimmed)):
            kind = None if _only_artifacts(trimmed) else "goals"
            goal = goal and kind is None
        if kind is not None:
            getattr(out, kind).append(_entry(prefix + trimmed))
        first = False
    return questions


def _assistant(out: Summary, text: str) -> None:
    # Most messages name no pending work, no decision and no number:
    # substring checks of the whole text say so without a regex.
    if not _may_name_work(text.lower()) and not _DIGITS.search(text):
        return
    counts = dict.fromkeys(LISTS, 0)
    for sentence in _sentences(text):
        if sentence.endswith("?"):
            continue
        kind = _kind(sentence)
        if kind is not None and counts[kind] < PER_MESSAGE:
            getattr(out, kind).append(_entry(_trim(sentence)))
            counts[kind] += 1


def _kind(sentence: str) -> str | None:
    """The list a statement belongs to (not goals), or ``None``."""
    low = sentence.lower()
    if _DECISION_WORDS.search(low):
        return "decisions"
    if _OPEN_WORDS.search(low):
        return "open"
    if _NUMBER.search(sentence) and _own_number(sentence):
        return "facts"
    return None


def _only_artifacts(sentence: str) -> bool:
    """``sentence`` says little beyond artifacts the ledger keeps ("The
    schema is in db/schema.sql.")."""
    found = {t.casefold() for _, t in text_artifacts(sentence)}
    words = content_words(sentence)
    return bool(found) and len(words - found) <= 2


def _own_number(sentence: str) -> bool:
    """``sentence`` has a digit outside the artifacts the ledger keeps."""
    rest = sentence
    for _, text in text_artifacts(sentence):
        rest = rest.replace(text, " ")
    return bool(_NUMBER.search(rest))


def _result(m: MessageView) -> str:
    body = _telling(m.content) or "(empty)"
    verb = "failed: " if m.is_error else ""
    return _entry(f"{m.name}#{m.call_id}: {verb}{body}", RESULT_CHARS + len(m.name + m.call_id))


def _telling(content: str) -> str:
    """The line of a tool result that says most: a JSON object's top-level
    values (``key=value``), else the first line naming a failure, else the
    first line."""
    text = content.strip()
    if text[:1] == "{" and len(text) <= SCAN_JSON_CHARS:
        try:
            value = json.loads(text, parse_int=str, parse_float=str, parse_constant=str)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            pairs = [
                f"{k}={'null' if v is None else v}"
                for k, v in value.items()
                if isinstance(v, str | bool) or v is None
            ]
            if pairs:
                return ", ".join(pairs)
    for line in text[:SCAN_JSON_CHARS].splitlines()[:TELLING_LINES]:
        if _FAILURE.search(line):
            return line.strip()
    return _first_line(compact_json(text))


def _first_line(text: str) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _trim(sentence: str) -> str:
    """``sentence`` without leading filler ("OK so", "Remember:"), its words
    as written (a command or name may start it: ``npm test`` stays so)."""
    return _FILLER.sub("", sentence).strip()


def _entry(text: str, limit: int = ENTRY_CHARS) -> str:
    text = clean_item(text)
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def _dedupe(out: Summary, cap: int) -> None:
    """Drop empty entries, exact repeats and restatements (first wording
    kept, across the lists), then keep each list's newest ``cap``."""
    kept: list[frozenset[str]] = []
    for name in LISTS:
        items, seen = [], set()
        for item in getattr(out, name)[-COMPARED:]:
            key = item.casefold()
            if not item or key in seen:
                continue
            words = content_words(item)
            if any(redundant(words, k) for k in kept):
                continue
            seen.add(key)
            kept.append(words)
            items.append(item)
        setattr(out, name, items[-cap:])


@hookimpl
def ctxd_summarisers(config: Config) -> list[ExtractiveSummariser]:
    # Configured by the core table: compaction.list_cap bounds every summary list.
    return [ExtractiveSummariser(cap=config.compaction.list_cap)]
