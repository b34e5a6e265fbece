"""The artifact ledger: verbatim artifacts of folded messages.

Summaries keep few file paths and almost no commands, so ctxd itself —
never the summariser — pulls the artifacts out of the messages it folds and
keeps them verbatim in a bounded part of the summary:

========= =================================================================
kind      what is extracted
========= =================================================================
path      absolute and relative file paths, bare file names with a known
          extension (``/etc/app.toml``, ``src/db.py``, ``Dockerfile``)
command   shell commands from tool arguments (``cmd``, ``command``,
          ``script``, ``args: [...]``, …) and from text (fenced shell
          blocks, ``$ `` lines, backticked spans starting with a program or
          reading as a program with flags)
url       ``scheme://…`` addresses
id        ticket ids (``ABC-123``), UUIDs, hex hashes, prefixed ids
          (``call_ab12``, ``cus_9Zk2``), ``#123`` references
number    digit runs of 5 or more (order numbers …), kept as text
error     error codes (``E1234``, ``TS2345``), HTTP 4xx/5xx statuses, errno
          names (``ENOENT``), exception names, signals, exit codes
tool      a tool name with its key arguments: ``read_file(path, start=10)``;
          values that are artifacts themselves (paths, URLs, commands) are
          listed under their kind and named here by key only
========= =================================================================

A :class:`Ledger` is deduplicated by (kind, normalised text) and bounded by
a :class:`LedgerCap` (default 256 items and 8 KiB of rendered UTF-8 text);
past either bound the oldest entries (lowest message ``seq``) are dropped.
An entry whose text already appears verbatim inside a newer kept entry (an
order number inside a URL, a path inside a command) is not listed again, so
the cap holds more distinct artifacts.
Each entry keeps its latest verbatim text and the ``seq`` of the last message
it was seen in. :meth:`Ledger.merged` folds a newer ledger into an older one
(a compaction adds its folded slice's artifacts to the previous ledger).

Input is untrusted and may be huge: messages are read newest first until
the cap is full (at most :data:`EXTRACT_MAX_CHARS` characters, 1 MiB); each text field is
scanned in at most :data:`SCAN_HEAD_CHARS` + :data:`SCAN_TAIL_CHARS` characters
(see :mod:`.ledger_scan` for how text is scanned); JSON is parsed
only below :data:`PARSE_MAX_CHARS` with numbers kept as text (no ``int()`` of
5000-digit runs) and walked with an explicit stack; JSON the parser cannot
take (too deep, invalid) is scanned as text. Extraction is deterministic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ctxd_sidecar.core.compaction.ledger_scan import text_artifacts
from ctxd_sidecar.core.compaction.view import MessageView

KINDS = ("path", "url", "command", "tool", "id", "number", "error")
_TITLES = {
    "path": "paths",
    "url": "urls",
    "command": "commands",
    "tool": "tool calls",
    "id": "ids",
    "number": "numbers",
    "error": "errors",
}
#: Kinds rendered one entry per line (their text may contain ", ").
_LINE_KINDS = frozenset({"command", "tool"})
HEADER = "Artifacts (verbatim from folded messages):"

#: The byte cap bounds the prompt cost; the item cap only bounds the count of
#: short entries (ids, numbers) and is set so the byte cap usually binds first.
DEFAULT_MAX_ITEMS = 256
DEFAULT_MAX_BYTES = 8 * 1024
#: Longest entry kept, in characters (longer ones keep their beginning + "…").
ENTRY_MAX_CHARS = 240
SCAN_HEAD_CHARS = 32 * 1024
SCAN_TAIL_CHARS = 8 * 1024
PARSE_MAX_CHARS = 256 * 1024
#: Most characters one :func:`extract` reads by default (newest messages
#: first): bounds the cost of folding a huge prefix inside an apply.
EXTRACT_MAX_CHARS = 1024 * 1024
#: Most JSON nodes walked in one value.
WALK_MAX_NODES = 20_000
#: Tool-call arguments shown per ``tool`` entry, and their longest value.
TOOL_ARGS = 3
TOOL_ARG_CHARS = 80


@dataclass(frozen=True, slots=True)
class LedgerCap:
    items: int = DEFAULT_MAX_ITEMS
    bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.items < 1 or self.bytes < 256:
            raise ValueError("a ledger cap needs at least 1 item and 256 bytes")


DEFAULT_LEDGER_CAP = LedgerCap()


@dataclass(frozen=True, slots=True)
class Artifact:
    kind: str
    text: str
    #: ``seq`` of the last message the artifact was seen in.
    seq: int

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, normalise(self.kind, self.text)


@dataclass(frozen=True, slots=True)
class Ledger:
    """Artifacts, oldest first (by ``seq``, then first appearance)."""

    entries: tuple[Artifact, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def texts(self, kind: str | None = None) -> list[str]:
        return [a.text for a in self.entries if kind is None or a.kind == kind]

    def merged(self, other: Ledger, cap: LedgerCap = DEFAULT_LEDGER_CAP) -> Ledger:
        """``self`` extended by the newer ``other``: deduplicated, recency
        updated (the later text and seq win), capped oldest-first."""
        return _build((*self.entries, *other.entries), cap)

    def capped(self, cap: LedgerCap = DEFAULT_LEDGER_CAP) -> Ledger:
        return _build(self.entries, cap)

    def render(self) -> str:
        """The "Artifacts" section, grouped by kind; ``""`` when empty."""
        if not self.entries:
            return ""
        lines = [HEADER]
        for kind in KINDS:
            items = [a.text for a in self.entries if a.kind == kind]
            if not items:
                continue
            if kind in _LINE_KINDS:
                lines.append(f"{_TITLES[kind]}:")
                lines.extend(f"  {t}" for t in items)
            else:
                lines.append(f"{_TITLES[kind]}: " + ", ".join(items))
        return "\n".join(lines)

    def byte_size(self) -> int:
        """UTF-8 bytes of :meth:`render` (computed without rendering)."""
        return _size(self.entries)

    def to_list(self) -> list[list[Any]]:
        return [[a.kind, a.text, a.seq] for a in self.entries]

    @classmethod
    def from_list(cls, data: Any) -> Ledger:
        """Rebuild a stored ledger; entries that do not fit the shape are skipped."""
        if not isinstance(data, list):
            return cls()
        out = []
        for row in data:
            if (
                isinstance(row, list | tuple)
                and len(row) == 3
                and row[0] in _TITLES
                and isinstance(row[1], str)
                and row[1]
                and isinstance(row[2], int)
            ):
                out.append(Artifact(row[0], row[1], row[2]))
        return cls(tuple(out))


def _entry_bytes(a: Artifact) -> int:
    # inline kinds: ", " + text; line kinds: "\n  " + text
    return len(a.text.encode("utf-8")) + (3 if a.kind in _LINE_KINDS else 2)


def _kind_bytes(kind: str) -> int:
    # "\n" + title + ":" (+ " " for inline kinds, whose first item has no ", ")
    return len(_TITLES[kind]) + 2 - (0 if kind in _LINE_KINDS else 1)


def _size(entries: Iterable[Artifact]) -> int:
    total, kinds = 0, set()
    for a in entries:
        total += _entry_bytes(a)
        kinds.add(a.kind)
    if not kinds:
        return 0
    return len(HEADER) + total + sum(_kind_bytes(k) for k in kinds)


class _Greedy:
    """Keeps artifacts offered newest first until the cap is full."""

    def __init__(self, cap: LedgerCap) -> None:
        self.cap = cap
        self.kept: list[Artifact] = []
        self.keys: set[tuple[str, str]] = set()
        self.kinds: set[str] = set()
        self.total = len(HEADER)
        self.full = False

    def offer(self, a: Artifact) -> bool:
        """Keep ``a`` unless seen (a newer sighting won) or covered; ``False`` once full."""
        if self.full:
            return False
        key = a.key
        if key in self.keys:
            return True
        if any(len(k.text) > len(a.text) and a.text in k.text for k in self.kept):
            return True  # already verbatim inside a newer entry
        cost = _entry_bytes(a) + (0 if a.kind in self.kinds else _kind_bytes(a.kind))
        if len(self.kept) == self.cap.items or self.total + cost > self.cap.bytes:
            self.full = True
            return False
        self.total += cost
        self.kinds.add(a.kind)
        self.keys.add(key)
        self.kept.append(a)
        return True

    def ledger(self) -> Ledger:
        return Ledger(tuple(reversed(self.kept)))


def _build(entries: Iterable[Artifact], cap: LedgerCap) -> Ledger:
    latest: dict[tuple[str, str], Artifact] = {}
    for a in entries:
        key = a.key
        seen = latest.pop(key, None)  # re-insert: the later sighting's position
        if seen is not None and seen.seq > a.seq:
            a = Artifact(a.kind, a.text, seen.seq)
        latest[key] = a
    greedy = _Greedy(cap)
    for a in reversed(sorted(latest.values(), key=lambda a: a.seq)):  # stable sort
        if not greedy.offer(a):
            break
    return greedy.ledger()


# -- normalising ------------------------------------------------------------------------

_WS = re.compile(r"\s+")
_HTTP = re.compile(r"(?i)(?:http(?:/\d(?:\.\d)?)?|status(?: code)?)\s*[:=]?\s*([1-5]\d\d)\b")
_HTTP_REASON = re.compile(r"^([1-5]\d\d) [A-Za-z ]+$")


def normalise(kind: str, text: str) -> str:
    """The dedupe key of an artifact's text within its kind."""
    text = _WS.sub(" ", text).strip().rstrip(".,;:")
    if kind == "error":
        m = _HTTP.fullmatch(text) or _HTTP_REASON.match(text)
        if m:
            return f"http {m.group(1)}"
        return text.casefold()
    if kind in ("id", "url"):
        return text.casefold() if kind == "id" else text.rstrip("/")
    return text


def _clip(text: str) -> str:
    text = text.strip()
    if len(text) > ENTRY_MAX_CHARS:
        return text[: ENTRY_MAX_CHARS - 1] + "…"
    return text


# -- extraction -------------------------------------------------------------------------


def extract(
    messages: Sequence[MessageView],
    cap: LedgerCap = DEFAULT_LEDGER_CAP,
    max_chars: int = EXTRACT_MAX_CHARS,
) -> Ledger:
    """The ledger of ``messages``. A message's ``seq`` attribute orders
    recency; without one its position in ``messages`` is used.

    Messages are read newest first and reading stops once the cap is full
    (older artifacts could not be kept) or after ``max_chars`` characters
    (default :data:`EXTRACT_MAX_CHARS`), so the cost does not grow with the
    folded prefix.
    """
    greedy = _Greedy(cap)
    budget = max_chars
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        chars = _chars(m)
        if chars > budget and i < len(messages) - 1:
            break  # the newest message is always read (its fields are bounded)
        budget -= chars
        seq = getattr(m, "seq", None)
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            seq = i
        found = [Artifact(k, _clip(t), seq) for k, t in message_artifacts(m) if t.strip()]
        for a in reversed(found):
            if not greedy.offer(a):
                return greedy.ledger()
    return greedy.ledger()


def _chars(m: MessageView) -> int:
    n = len(m.text) + len(m.content)
    for call in m.tool_calls:
        n += len(call.arguments_json)
    return min(n, 3 * (SCAN_HEAD_CHARS + SCAN_TAIL_CHARS))


def message_artifacts(m: MessageView) -> Iterator[tuple[str, str]]:
    """(kind, text) of one message, in order of appearance."""
    if m.kind == "tool":
        yield from _json_or_text(m.content)
        return
    yield from text_artifacts(m.text, commands=m.kind in ("user", "assistant"))
    for call in m.tool_calls:
        yield from _call_artifacts(call.name, call.arguments_json)


def _bounded(text: str) -> str:
    if len(text) <= SCAN_HEAD_CHARS + SCAN_TAIL_CHARS:
        return text
    return text[:SCAN_HEAD_CHARS] + "\n" + text[-SCAN_TAIL_CHARS:]


def _loads(text: str) -> Any:
    """Parsed JSON with numbers as text, or ``None`` (not JSON, too deep, too big)."""
    s = text.strip()
    if not s or s[0] not in "{[" or len(s) > PARSE_MAX_CHARS:
        return None
    try:
        return json.loads(s, parse_int=str, parse_float=str, parse_constant=str)
    except (ValueError, RecursionError):
        return None


def _walk(value: Any) -> Iterator[Any]:
    """Every node of a JSON value, depth first, with an explicit stack (values
    may nest ~1000 levels; recursion would overflow)."""
    stack: list[Any] = [value]
    nodes = 0
    while stack and nodes < WALK_MAX_NODES:
        v = stack.pop()
        nodes += 1
        yield v
        if isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))


def _strings(value: Any) -> Iterator[str]:
    budget = SCAN_HEAD_CHARS + SCAN_TAIL_CHARS
    for v in _walk(value):
        if isinstance(v, str) and budget > 0:
            budget -= len(v)
            yield v


def _json_or_text(text: str) -> Iterator[tuple[str, str]]:
    value = _loads(text)
    if value is None:
        yield from text_artifacts(_bounded(text), commands=False)
        return
    for s in _strings(value):
        yield from text_artifacts(s, commands=False)


# Tuples, not sets: their order is the extraction order (deterministic).
_COMMAND_KEYS = (
    "cmd", "command", "commands", "script", "shell", "bash", "sh", "commandline", "command_line",
)  # fmt: skip
_ARGV_KEYS = ("args", "argv", "arguments")
_PROGRAM_KEYS = ("cmd", "command", "program", "executable", "bin")


def _call_artifacts(name: str, arguments_json: str) -> Iterator[tuple[str, str]]:
    value = _loads(arguments_json)
    if value is None:
        if name:
            yield "tool", f"{name}()"
        yield from text_artifacts(_bounded(arguments_json), commands=False)
        return
    if name:
        yield "tool", _tool_entry(name, value)
    for v in _walk(value):
        if isinstance(v, dict):
            yield from (("command", c) for c in _commands_of(v))
    for s in _strings(value):
        yield from text_artifacts(s, commands=False)


def _commands_of(obj: dict) -> Iterator[str]:
    keys = {k.casefold(): k for k in obj if isinstance(k, str)}
    argv = next((obj[keys[k]] for k in _ARGV_KEYS if k in keys), None)
    if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        program = next(
            (obj[keys[k]] for k in _PROGRAM_KEYS if k in keys and isinstance(obj[keys[k]], str)),
            None,
        )
        yield " ".join([program, *argv] if program else argv)
        return
    for k in _COMMAND_KEYS:
        if k not in keys:
            continue
        v = obj[keys[k]]
        if isinstance(v, list) and v and all(isinstance(a, str) for a in v):
            yield " ".join(v)
        elif isinstance(v, str):
            yield from _script_lines(v)


def _script_lines(script: str, most: int = 8) -> Iterator[str]:
    n = 0
    for line in script.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and n < most:
            n += 1
            yield line


def _tool_entry(name: str, value: Any) -> str:
    args = []
    if isinstance(value, dict):
        for k, v in value.items():
            if len(args) == TOOL_ARGS:
                break
            if isinstance(v, bool):  # JSON numbers arrive as text (parse_int=str)
                args.append(f"{k}={'true' if v else 'false'}")
            elif isinstance(v, str) and v and "\n" not in v and len(v) <= TOOL_ARG_CHARS:
                plain = v.strip()
                is_artifact = str(k).casefold() in _COMMAND_KEYS or any(
                    t == plain for _, t in text_artifacts(plain, commands=False)
                )
                args.append(str(k) if is_artifact else f"{k}={v}")
            else:  # long text, objects, lists, null: named only
                args.append(str(k))
    return f"{name}({', '.join(args)})"
