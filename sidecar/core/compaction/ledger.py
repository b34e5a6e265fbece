"""The artifact ledger: verbatim artifacts of folded messages (SPEC §8).

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
          blocks, ``$ `` lines, backticked spans starting with a program)
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

Input is untrusted and may be huge: each text field is scanned in at most
:data:`SCAN_HEAD_CHARS` + :data:`SCAN_TAIL_CHARS` characters; JSON is parsed
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

from sidecar.core.compaction.view import MessageView

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


def _build(entries: Iterable[Artifact], cap: LedgerCap) -> Ledger:
    latest: dict[tuple[str, str], Artifact] = {}
    for a in entries:
        key = a.key
        seen = latest.pop(key, None)  # re-insert: the later sighting's position
        if seen is not None and seen.seq > a.seq:
            a = Artifact(a.kind, a.text, seen.seq)
        latest[key] = a
    ordered = sorted(latest.values(), key=lambda a: a.seq)  # stable: appearance order
    kept: list[Artifact] = []
    total, kinds = len(HEADER), set()
    for a in reversed(ordered):  # newest first
        if len(kept) == cap.items:
            break
        if any(len(k.text) > len(a.text) and a.text in k.text for k in kept):
            continue  # already verbatim inside a newer entry
        cost = _entry_bytes(a) + (0 if a.kind in kinds else _kind_bytes(a.kind))
        if total + cost > cap.bytes:
            break
        total += cost
        kinds.add(a.kind)
        kept.append(a)
    kept.reverse()
    return Ledger(tuple(kept))


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


def extract(messages: Sequence[MessageView], cap: LedgerCap = DEFAULT_LEDGER_CAP) -> Ledger:
    """The ledger of ``messages``. A message's ``seq`` attribute orders
    recency; without one its position in ``messages`` is used."""
    found: list[Artifact] = []
    for i, m in enumerate(messages):
        seq = getattr(m, "seq", None)
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            seq = i
        found.extend(Artifact(k, _clip(t), seq) for k, t in message_artifacts(m) if t.strip())
    return _build(found, cap)


def message_artifacts(m: MessageView) -> Iterator[tuple[str, str]]:
    """(kind, text) of one message, in order of appearance."""
    if m.kind == "tool":
        yield from _json_or_text(m.content)
        return
    yield from _text_artifacts(m.text, commands=m.kind in ("user", "assistant"))
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
        yield from _text_artifacts(_bounded(text), commands=False)
        return
    for s in _strings(value):
        yield from _text_artifacts(s, commands=False)


_COMMAND_KEYS = frozenset(
    {"cmd", "command", "commands", "script", "shell", "bash", "sh", "commandline", "command_line"}
)
_ARGV_KEYS = frozenset({"args", "argv", "arguments"})
_PROGRAM_KEYS = ("cmd", "command", "program", "executable", "bin")


def _call_artifacts(name: str, arguments_json: str) -> Iterator[tuple[str, str]]:
    value = _loads(arguments_json)
    if value is None:
        if name:
            yield "tool", f"{name}()"
        yield from _text_artifacts(_bounded(arguments_json), commands=False)
        return
    if name:
        yield "tool", _tool_entry(name, value)
    for v in _walk(value):
        if isinstance(v, dict):
            yield from (("command", c) for c in _commands_of(v))
    for s in _strings(value):
        yield from _text_artifacts(s, commands=False)


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
            if isinstance(v, str) and v and "\n" not in v and len(v) <= TOOL_ARG_CHARS:
                plain = v.strip()
                is_artifact = str(k).casefold() in _COMMAND_KEYS or any(
                    t == plain for _, t in _text_artifacts(plain, commands=False)
                )
                args.append(str(k) if is_artifact else f"{k}={v}")
            elif isinstance(v, bool | int | float) or (isinstance(v, str) and v.isdigit()):
                args.append(f"{k}={v}")
            else:
                args.append(str(k))
    return f"{name}({', '.join(args)})"


# -- text patterns --------------------------------------------------------------------

_URL = re.compile(r"\b(?:https?|ftp|s3|gs|wss?|ssh|git|file)://[^\s<>\"'`\\\[\](){}|]+")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\b")
_EXT = (
    r"py|pyi|js|mjs|cjs|ts|tsx|jsx|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|sh|bash|zsh|ps1|yaml|"
    r"yml|json|jsonl|toml|ini|cfg|conf|md|rst|txt|csv|tsv|sql|html|css|scss|lock|log|env|xml|"
    r"proto|tf|tfvars|gradle|mk|vue|svelte|swift|lua|pl|ex|exs|erl|scala|dart|ipynb|pem|crt|"
    r"key|service|timer|patch|diff|gz|tgz|zip|tar|whl|db|sqlite|parquet"
)
_PATH = re.compile(
    r"(?<![\w/.~@:-])(?:"
    r"(?:~|\.{1,2})?/(?:[\w.@+%-]+/)*[\w.@+%-]*[A-Za-z_][\w.@+%-]*/?"  # absolute, ~/, ./
    r"|[\w.@+-]*[A-Za-z][\w.@+-]*(?:/[\w.@+-]+)+/?"  # relative with a slash
    rf"|[\w-]+(?:\.[\w-]+)*\.(?:{_EXT})"  # bare file name with a known extension
    r"|(?:Dockerfile|Makefile|Jenkinsfile|Procfile|Gemfile|Vagrantfile)"
    r")(?![\w/])"
)
_HTTP_STATUS = re.compile(
    r"(?i)\b(?:HTTP(?:/\d(?:\.\d)?)?|status(?: code)?)\s*[:=]?\s*[45]\d\d\b"
    r"|\b[45]\d\d (?:Internal Server Error|Bad Gateway|Service Unavailable|Gateway Timeout|"
    r"Not Found|Forbidden|Unauthorized|Bad Request|Too Many Requests|Conflict|Not Implemented)\b"
)
_ERRNO = (
    "ENOENT|EACCES|EPERM|EEXIST|ENOTDIR|EISDIR|EINVAL|ENOSPC|EROFS|EMFILE|ENFILE|EPIPE|EAGAIN|"
    "EWOULDBLOCK|EINTR|EBADF|EBUSY|EADDRINUSE|EADDRNOTAVAIL|ECONNREFUSED|ECONNRESET|"
    "ECONNABORTED|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTCONN|ENOMEM|E2BIG|ENOTEMPTY|EXDEV|"
    "ELOOP|ENAMETOOLONG|ENOEXEC|ECHILD|ESRCH|EIO|ENXIO|EFAULT|ENOTSUP|EOPNOTSUPP|EPROTO|EDQUOT|"
    "ERANGE|EDEADLK|ENOSYS|ESTALE"
)
_ERROR = re.compile(
    rf"\b(?:{_ERRNO})\b"
    r"|\bE\d{3,5}\b|\b[A-Z]{2,4}\d{4}\b"  # E0308, E1234, TS2345
    r"|\b[A-Z][A-Za-z0-9]+(?:Error|Exception)\b"
    r"|\bSIG(?:KILL|TERM|SEGV|ABRT|INT|HUP|PIPE|BUS|ILL|FPE|QUIT)\b"
    r"|\b(?:OOMKilled|CrashLoopBackOff|ImagePullBackOff|ErrImagePull)\b"
    r"|(?i:\bexit (?:code|status) \d{1,3}\b)"
)
_TICKET = re.compile(r"\b[A-Z][A-Z0-9]{1,9}(?:-[A-Z0-9]{1,12})*-\d{2,12}\b")
_NOT_TICKETS = frozenset({"UTF-16", "UTF-32", "SHA-256", "SHA-512", "ISO-8601", "ISO-8859"})
_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b")
_PREFIXED = re.compile(r"\b(?=[A-Za-z_]*\d)[a-z][a-z0-9]*_[A-Za-z0-9_]{3,}\b")
_REF = re.compile(r"(?<![\w&])#\d{2,12}\b")
_NUMBER = re.compile(r"(?<![\w.,#-])\d{5,}(?![\w])")
_CONTEXT_NUMBER = re.compile(
    r"(?i)\b(?:order|ticket|invoice|issue|case|incident|build|job|run|pr|account|customer)"
    r"\s*(?:no\.?|number|id)?\s*[:=]?\s*(\d{3,4})\b"
)

_PROGRAMS = frozenset(
    "git python python3 pip pip3 uv poetry npm npx yarn pnpm node deno bun go cargo rustc make "
    "cmake docker podman kubectl helm terraform ansible ls cd cat grep rg sed awk curl wget ssh "
    "scp rsync tar unzip psql mysql redis-cli sqlite3 systemctl journalctl sudo apt apt-get brew "
    "pytest ruff mypy black tox chmod chown mkdir rm cp mv ln find tail head less echo export "
    "aws gcloud az ps kill pkill top du df jq yq nc ping dig nslookup openssl gh java mvn "
    "gradle dotnet bash sh zsh env source touch diff patch".split()
)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_SHELL_LANGS = frozenset({"sh", "bash", "shell", "console", "zsh", "terminal", "shell-session"})
_TICK = re.compile(r"`([^`\n]{2,400})`")
_PROMPT_LINE = re.compile(r"(?m)^[ \t]*\$ (.+)$")

#: Extraction order: earlier patterns blank their matches for later ones.
_ORDERED: tuple[tuple[str, re.Pattern], ...] = (
    ("url", _URL),
    ("id", _UUID),
    ("error", _HTTP_STATUS),
    ("path", _PATH),
    ("error", _ERROR),
    ("id", _TICKET),
    ("id", _HASH),
    ("id", _PREFIXED),
    ("id", _REF),
    ("number", _CONTEXT_NUMBER),
    ("number", _NUMBER),
)


def _text_artifacts(text: str, commands: bool) -> Iterator[tuple[str, str]]:
    if not text:
        return
    text = _bounded(text)
    if commands:
        yield from (("command", c) for c in _text_commands(text))
    found: list[tuple[int, str, str]] = []
    work = text
    for kind, pattern in _ORDERED:
        spans = []
        for m in pattern.finditer(work):
            group = 1 if pattern.groups else 0
            token = m.group(group)
            if kind == "url":
                token = token.rstrip(".,;:!?")
            elif kind == "path":
                token = token.rstrip(".:")
                if not _path_like(token):
                    continue
            elif kind == "id" and pattern is _TICKET and token in _NOT_TICKETS:
                continue
            found.append((m.start(group), kind, token))
            spans.append(m.span())
        if spans:
            work = _blank(work, spans)
    found.sort(key=lambda f: f[0])
    for _, kind, token in found:
        yield kind, token


def _path_like(token: str) -> bool:
    if "/" not in token:
        return True  # a bare file name: matched by extension or well-known name
    if token.startswith(("/", "~", "./", "../")):
        return len(token) > 1 and any(c.isalpha() for c in token)
    last = token.rstrip("/").rsplit("/", 1)[-1]
    ext = last[1:].rsplit(".", 1)[1] if "." in last[1:] else ""
    return any(c.isalpha() for c in ext) or token.count("/") >= 2


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    parts, pos = [], 0
    for a, b in spans:
        parts.append(text[pos:a])
        parts.append(" " * (b - a))
        pos = b
    parts.append(text[pos:])
    return "".join(parts)


def _text_commands(text: str) -> Iterator[str]:
    for m in _FENCE.finditer(text):
        lang, body = m.group(1).lower(), m.group(2)
        for line in body.splitlines():
            line = line.strip()
            if line.startswith(("$ ", "> ")):
                yield line[2:].strip()
            elif (lang in _SHELL_LANGS and lang != "console") or (not lang and _program(line)):
                if line and not line.startswith("#"):
                    yield line
    outside = _FENCE.sub(" ", text)
    for m in _PROMPT_LINE.finditer(outside):
        yield m.group(1).strip()
    for m in _TICK.finditer(outside):
        span = m.group(1).strip()
        if span.startswith("$ "):
            yield span[2:].strip()
        elif " " in span and _program(span):
            yield span


def _program(line: str) -> bool:
    first = line.split(None, 1)[0] if line.strip() else ""
    return first.rsplit("/", 1)[-1] in _PROGRAMS
