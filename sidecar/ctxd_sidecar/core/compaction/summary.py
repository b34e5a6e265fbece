"""The structured summary block, how answers are read, and how they merge.

A compaction does not summarise the previous summary again: the summariser
sees it (to extend it and avoid repeats) and its answer is **merged** into it
field by field:

* ``goals``, ``decisions``, ``open``, ``facts``: new items are appended
  unless an equal item is already there (compared case-insensitively, with
  whitespace collapsed and trailing punctuation ignored) or a near
  duplicate (:func:`redundant`: its three or more content words are all in
  a kept item's, or it adds at most two words to a kept item of three or
  more; the first wording is kept); each list is then capped at ``cap``
  items (default 32) by dropping the **oldest** items.
* ``narrative`` (free text, used when the summariser could not fill the
  fields): the new narrative's paragraphs are appended after the old ones,
  skipping paragraphs already present; the whole is capped at
  ``narrative_max_chars`` by dropping the oldest paragraphs (a single
  paragraph longer than the cap keeps its beginning). Appending rather than
  replacing keeps what an earlier plain-text answer said about messages the
  later answer never saw.
* ``closed`` (items of ``open`` the new messages answered or finished; in
  an answer, not stored): matching items leave ``open`` (old and new),
  compared as above, an item also matching when it ends with the closed
  text (``asked: which db?`` is closed by ``which db?``). A merge can
  close items, not only add them.
* ``covers_messages`` adds up; ``updated_ms`` becomes the merge time.
* ``ledger`` (the verbatim artifacts of folded messages, computed by ctxd
  from the messages, never taken from a summariser's answer; see
  :mod:`.ledger`): the new ledger — plus the artifacts of ``folded``, when
  given — is merged into the old one (dedupe, recency, cap). A summariser's
  answer carries no ledger, so merging it can never drop one.

Items are cleaned on the way in: whitespace collapsed, list bullets
stripped, each clipped to :data:`ITEM_MAX_CHARS`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ctxd_sidecar.core.compaction.errors import MalformedAnswer
from ctxd_sidecar.core.compaction.ledger import DEFAULT_LEDGER_CAP, Ledger, LedgerCap, extract
from ctxd_sidecar.core.compaction.view import MessageView
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.core.jsonvalue import loads_bounded

LIST_FIELDS = ("goals", "decisions", "open", "facts")
#: Default per-list cap.
DEFAULT_CAP = 32
#: Default cap on the narrative, in characters.
NARRATIVE_MAX_CHARS = 4000
#: Longest single list item kept, in characters (longer ones are clipped).
ITEM_MAX_CHARS = 400

_SECTION_TITLES = {
    "goals": "Goals",
    "decisions": "Decisions",
    "open": "Open items",
    "facts": "Facts",
}
#: Field names small models use instead of the schema's.
_ALIASES = {
    "goal": "goals",
    "decision": "decisions",
    "open_items": "open",
    "open_questions": "open",
    "fact": "facts",
    "summary": "narrative",
    "resolved": "closed",
    "answered": "closed",
    "done": "closed",
}


@dataclass
class Summary:
    goals: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    open: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    narrative: str = ""
    covers_messages: int = 0
    updated_ms: int = 0
    ledger: Ledger = field(default_factory=Ledger)
    #: Open items this answer closes (applied by :func:`merge`, never stored).
    closed: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (
            self.goals or self.decisions or self.open or self.facts or self.narrative or self.ledger
        )

    def render(self) -> str:
        """The block as text (for prompts and token estimates); ``""`` when empty."""
        if self.is_empty():
            return ""
        parts = ["Summary of earlier conversation:"]
        for name in LIST_FIELDS:
            items = getattr(self, name)
            if items:
                parts.append(f"{_SECTION_TITLES[name]}:")
                parts.extend(f"- {item}" for item in items)
        if self.narrative:
            parts.append(self.narrative)
        if self.ledger:
            parts.append(self.ledger.render())
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("ledger", "closed")
        }
        if self.ledger:
            out["ledger"] = self.ledger.to_list()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Summary:
        """Rebuild a stored summary (as written by :meth:`to_dict`)."""
        return cls(
            **{name: list(data.get(name) or []) for name in LIST_FIELDS},
            narrative=str(data.get("narrative") or ""),
            covers_messages=int(data.get("covers_messages") or 0),
            updated_ms=int(data.get("updated_ms") or 0),
            ledger=Ledger.from_list(data.get("ledger")),
        )


# -- reading answers ----------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_SPACE = re.compile(r"\s+")


def parse_answer(text: str) -> Summary:
    """Read a summariser's answer.

    Accepted: a JSON object with the answer schema's fields (optionally in a
    Markdown code fence, or after a line of prose; a few common field-name
    variants are understood), a JSON string, or plain text, which becomes the
    narrative. Reasoning blocks (``<think>…</think>``) are ignored.

    :raise MalformedAnswer: empty answer, JSON that does not parse, a JSON
        value that is not an object or string, an object with none of the
        schema's fields, or a field of the wrong type.
    """
    text = _THINK.sub("", text or "").strip()
    if not text:
        raise MalformedAnswer("the summariser's answer is empty")
    for fence in _FENCE.finditer(text):
        lang, body = fence.group(1).lower(), fence.group(2).strip()
        if lang == "json" or body[:1] in ("{", "["):
            if not body:
                raise MalformedAnswer("the summariser's answer is an empty JSON code block")
            return _from_json_text(body)
    if text[0] in "{[":
        return _from_json_text(text)
    if text[0] == '"':
        try:
            value = _loads(text)
        except ValueError:
            value = None
        if isinstance(value, str):
            return _from_value(value)
    # Prose around a JSON object: use the object if it is a summary.
    start, end = text.find("{"), text.rfind("}")
    if 0 < start < end:
        try:
            value = _loads(text[start : end + 1])
        except ValueError:
            value = None
        if isinstance(value, dict) and _known_keys(value):
            return _from_value(value)
    return Summary(narrative=_clean_narrative(text))


def _loads(text: str) -> Any:
    """JSON of an answer: nesting bounded, strings valid Unicode."""
    try:
        return loads_bounded(text, field="answer")
    except InvalidArgument as exc:
        raise MalformedAnswer(f"the summariser's answer {exc.description}") from None


def _from_json_text(body: str) -> Summary:
    try:
        value = _loads(body)
    except ValueError as exc:
        raise MalformedAnswer(
            f"the summariser's answer is not valid JSON ({exc.msg} at line {exc.lineno} "
            f"column {exc.colno}); expected an object with goals, decisions, open, facts"
        ) from None
    return _from_value(value)


def _known_keys(obj: dict) -> set[str]:
    return {_ALIASES.get(k, k) for k in obj} & {*LIST_FIELDS, "narrative", "closed"}


def _from_value(value: Any) -> Summary:
    if isinstance(value, str):
        if not value.strip():
            raise MalformedAnswer("the summariser's answer is an empty string")
        return Summary(narrative=_clean_narrative(value))
    if not isinstance(value, dict):
        raise MalformedAnswer(
            f"the summariser's answer is a JSON {type(value).__name__}; expected an object "
            "with goals, decisions, open, facts (lists of strings) and optional narrative"
        )
    if len(value) == 1:
        ((key, inner),) = value.items()  # {"summary": {...}} and similar wrappers
        if isinstance(inner, dict) and _ALIASES.get(key, key) not in LIST_FIELDS:
            value = inner
    if not _known_keys(value):
        raise MalformedAnswer(
            "the summariser's answer has none of the fields goals, decisions, open, facts, "
            f"narrative (got {', '.join(sorted(map(str, value))[:8]) or 'an empty object'})"
        )
    out = Summary()
    for key, raw in value.items():
        name = _ALIASES.get(key, key)
        if name == "narrative":
            if raw is None:
                continue
            if not isinstance(raw, str):
                raise MalformedAnswer("the summariser's answer: narrative must be a string")
            out.narrative = _clean_narrative(raw)
        elif name in LIST_FIELDS or name == "closed":
            getattr(out, name).extend(_items(name, raw))
    return out


def _items(name: str, raw: Any) -> list[str]:
    if raw is None:
        return []
    if isinstance(raw, str):
        raw = raw.splitlines()
    elif not isinstance(raw, list):
        raise MalformedAnswer(
            f"the summariser's answer: {name} must be a list of strings, got a {type(raw).__name__}"
        )
    out = []
    for item in raw:
        if item is None:
            continue
        if isinstance(item, dict) and len(item) == 1 and isinstance(next(iter(item.values())), str):
            item = next(iter(item.values()))
        elif isinstance(item, dict | list):
            item = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
        cleaned = clean_item(str(item))
        if cleaned:
            out.append(cleaned)
    return out


def clean_item(text: str) -> str:
    """One list entry: one line, no bullet, at most :data:`ITEM_MAX_CHARS`."""
    text = _SPACE.sub(" ", _BULLET.sub("", text.strip(), count=1)).strip()
    if len(text) > ITEM_MAX_CHARS:
        text = text[: ITEM_MAX_CHARS - 1].rstrip() + "…"
    return text


def _clean_narrative(text: str) -> str:
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text.strip())]
    return "\n\n".join(p for p in paragraphs if p)


# -- merging ----------------------------------------------------------------------


def normalise(item: str) -> str:
    """The dedupe key of a list item."""
    return _SPACE.sub(" ", item).strip().rstrip(".;,:!").casefold()


#: Words that say nothing on their own: a restated item differs by them only.
STOP_WORDS = frozenset(
    "a an the to of in on for and or but we i you he she they it its is are was were be been "
    "am do does did so that this these those with as at by from then now just also our my your "
    "their me us them there here again remember reminder ok okay so yes yeah sure great noted "
    "understood thanks thank hi hello hey please well right fine alright said told mentioned "
    "already still anyway".split()
)
#: Fewest content words of an item a merge drops as a restatement.
MERGE_MIN_WORDS = 3
_WORD = re.compile(r"[^\W_]+(?:[._/:#-][^\W_]+)*|_\w+")


def content_words(item: str) -> frozenset[str]:
    """The words of an item that carry its content (case-folded, without
    :data:`STOP_WORDS`; paths, versions and ids stay one word each)."""
    return frozenset(w for w in _WORD.findall(item.casefold()) if w not in STOP_WORDS)


def redundant(words: frozenset[str], kept: frozenset[str], min_words: int = 1) -> bool:
    """An item of content ``words`` adds nothing to a kept item of ``kept``:
    all its words (``min_words`` or more) are there, or it adds at most two
    to an item of three or more."""
    if len(words) < min_words or not kept:
        return False
    if words <= kept:
        return True
    return len(kept) >= 3 and kept <= words and len(words - kept) <= 2


def merge(
    old: Summary | None,
    new: Summary,
    *,
    cap: int = DEFAULT_CAP,
    narrative_max_chars: int = NARRATIVE_MAX_CHARS,
    now_ms: int | None = None,
    folded: Sequence[MessageView] | None = None,
    ledger_cap: LedgerCap = DEFAULT_LEDGER_CAP,
) -> Summary:
    """``old`` extended by ``new`` (see the module docstring); neither is changed.

    ``folded``: the messages this compaction folds; their artifacts are
    extracted and merged into the ledger (after ``new.ledger``).
    """
    if cap < 1:
        raise ValueError("cap must be at least 1")
    old = old or Summary()
    ledger = old.ledger.merged(new.ledger, ledger_cap)
    if folded:
        ledger = ledger.merged(extract(folded, ledger_cap), ledger_cap)
    out = Summary(
        covers_messages=old.covers_messages + new.covers_messages,
        updated_ms=int(time.time() * 1000) if now_ms is None else now_ms,
        ledger=ledger,
    )
    closed = [k for k in map(normalise, new.closed) if k]
    for name in LIST_FIELDS:
        merged: list[str] = []
        seen: set[str] = set()
        kept: list[frozenset[str]] = []
        for item in (*getattr(old, name), *getattr(new, name)):
            key = normalise(item)
            if name == "open" and _closes(closed, key):
                continue
            if not key or key in seen:
                continue
            words = content_words(item)
            # Across folds a short item may be news ("tests pass" after "tests
            # pass except test_login"): only items of 3+ words count as restated.
            if any(redundant(words, k, MERGE_MIN_WORDS) for k in kept):
                continue
            seen.add(key)
            kept.append(words)
            merged.append(item)
        setattr(out, name, merged[-cap:])
    out.narrative = _merge_narrative(old.narrative, new.narrative, narrative_max_chars)
    # Carried while answers are accumulated (passes), applied again by the
    # merge into the stored summary; never stored.
    out.closed = list(dict.fromkeys((*old.closed, *new.closed)))
    return out


def _closes(closed: list[str], key: str) -> bool:
    return any(key == c or key.endswith(" " + c) or key.endswith(":" + c) for c in closed)


def _merge_narrative(old: str, new: str, max_chars: int) -> str:
    paragraphs: list[str] = []
    seen: set[str] = set()
    for p in (*_paragraphs(old), *_paragraphs(new)):
        key = normalise(p)
        if key not in seen:
            seen.add(key)
            paragraphs.append(p)
    while len(paragraphs) > 1 and len("\n\n".join(paragraphs)) > max_chars:
        paragraphs.pop(0)
    text = "\n\n".join(paragraphs)
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return text


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
